#include "lifecore/runtime/buffer_lease.hpp"

#include "common/address_range.hpp"
#include "lifecore/driver/registry.hpp"
#include "lifecore/error.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/stream.hpp"

namespace lifecore::runtime {

std::shared_ptr<BufferLease> BufferLease::take(std::shared_ptr<Buffer> buffer, const std::uintptr_t* consumer_stream,
                                               bool no_order, const char* op) {
  if (!buffer) raise(ErrorKind::InvalidArgument, std::string(op) + ": no buffer");
  Device& device = *buffer->device();
  driver::Driver& driver = device.driver();
  const driver::BackendDescriptor& backend = driver.backend();
  const bool host_memory = backend.dlpack_device_type == driver::dlpack_device::cpu;
  if (host_memory && consumer_stream != nullptr)
    raise(ErrorKind::InvalidArgument,
          std::string(op) + ": this device's memory is exported as CPU memory, which takes no stream");
  // The view counts from before the wait for the stream, in the same step as the check that
  // the buffer is live: a free() from here on is refused, and a freed buffer is refused here.
  if (!buffer->try_add_view()) raise(ErrorKind::Closed, std::string(op) + ": the buffer was freed");
  struct ViewUntilLent {
    Buffer* buffer;
    ~ViewUntilLent() {
      if (buffer) buffer->drop_view();
    }
  } view{buffer.get()};
  buffer->stream()->lend(*buffer, consumer_stream, no_order, op);
  std::shared_ptr<BufferLease> lease(new BufferLease());
  lease->device_type_ = backend.dlpack_device_type;
  lease->device_id_ = host_memory ? 0 : driver.ordinal();  // DLPack numbers the host as CPU device 0
  const driver::DevicePtr ptr = buffer->use(device, op);
  if (host_memory) {
    driver::HostView view;
    driver::Status status = driver.host_view(ptr, buffer->nbytes(), &view);
    // A close() on another thread since use() gave the memory back: the call lost that race.
    if (!status.ok() && device.closed()) raise(ErrorKind::Closed, std::string(op) + ": the device was closed");
    device.note_status(status);
    driver::check(status);
    lease->data_ = view.data;
    lease->keep_alive_ = std::move(view.keep_alive);
  } else {
    lease->data_ = reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr));
  }
  view.buffer = nullptr;  // the lease holds the view from here
  lease->buffer_ = std::move(buffer);
  device.leases().add(lease.get());
  return lease;
}

BufferLease::~BufferLease() {
  if (!buffer_) return;
  buffer_->device()->leases().remove(this);
  buffer_->drop_view();
}

namespace {

// Every live table. Lock order: this registry's lock, then one table's; a table's own calls
// take only its lock. Never destroyed: a device may be destroyed during the process's exit,
// after function-local statics would be.
std::mutex& tables_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::vector<const LeaseTable*>& tables() {
  static auto* all = new std::vector<const LeaseTable*>;
  return *all;
}

}  // namespace

LeaseTable::LeaseTable() {
  std::lock_guard lock(tables_mutex());
  tables().push_back(this);
}

LeaseTable::~LeaseTable() {
  std::lock_guard lock(tables_mutex());
  auto& all = tables();
  for (auto it = all.begin(); it != all.end(); ++it) {
    if (*it == this) {
      all.erase(it);
      break;
    }
  }
}

bool LeaseTable::overlaps(std::uintptr_t address, std::size_t bytes) const {
  std::lock_guard lock(mutex_);
  for (const BufferLease* lease : leases_)
    if (shares_a_byte(reinterpret_cast<std::uintptr_t>(lease->data()), lease->nbytes(), address, bytes)) return true;
  return false;
}

bool LeaseTable::overlaps_elsewhere(std::uintptr_t address, std::size_t bytes) const {
  std::lock_guard lock(tables_mutex());
  for (const LeaseTable* table : tables())
    if (table != this && table->overlaps(address, bytes)) return true;
  return false;
}

void LeaseTable::add(const BufferLease* lease) {
  std::lock_guard lock(mutex_);
  leases_.push_back(lease);
}

void LeaseTable::remove(const BufferLease* lease) noexcept {
  std::lock_guard lock(mutex_);
  for (auto it = leases_.begin(); it != leases_.end(); ++it) {
    if (*it == lease) {
      leases_.erase(it);
      return;
    }
  }
}

std::shared_ptr<Buffer> LeaseTable::find(std::uintptr_t address, std::size_t bytes, std::size_t* offset) const {
  std::lock_guard lock(mutex_);
  for (const BufferLease* lease : leases_) {
    const auto first = reinterpret_cast<std::uintptr_t>(lease->data());
    if (!lies_within(first, lease->nbytes(), address, bytes)) continue;
    *offset = address - first;
    return lease->buffer();
  }
  return nullptr;
}

std::shared_ptr<Buffer> LeaseTable::find_anywhere(std::uintptr_t address, std::size_t bytes, std::size_t* offset) {
  std::lock_guard lock(tables_mutex());
  for (const LeaseTable* table : tables())
    if (auto found = table->find(address, bytes, offset)) return found;
  return nullptr;
}

}  // namespace lifecore::runtime
