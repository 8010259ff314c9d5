#include "lifecore/runtime/foreign_memory.hpp"

#include "lifecore/driver/registry.hpp"
#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"
#include "lifecore/process_fork.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/buffer_lease.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/stream.hpp"
#include "runtime/hex_text.hpp"

namespace lifecore::runtime {
namespace {

// Host memory mapped into a device's address space for as long as work may read it. The
// mapping goes before the producer's reference: nothing can reach the bytes once unmapped.
struct HostMapping {
  std::shared_ptr<driver::Driver> driver;
  driver::DevicePtr ptr = 0;
  std::shared_ptr<void> owner;
  std::uint64_t fork_generation_at_map = fork_generation();
  ~HostMapping() {
    if (fork_generation() != fork_generation_at_map) {  // the parent's mapping, in a forked child
      keep_until_exit(std::move(driver));
      return;
    }
    (void)driver->unmap_host(ptr);  // a failure leaves an address nothing uses any more
    owner.reset();
  }
};

std::string device_text(int type, int id) {
  return dlpack_device_name(type) + (id < 0 ? std::string() : ":" + std::to_string(id));
}

// A producer that names no device (the CUDA array interface): the driver says whose memory
// the range's first and last bytes are, so a range that runs past its allocation is refused
// too. A driver that cannot tell (not_supported: its entry point is missing) leaves the
// memory's kind, checked before, as the only check.
void check_pointer_device(Device& device, int type, driver::DevicePtr ptr, std::size_t nbytes,
                          const std::string& label) {
  driver::Driver& driver = device.driver();
  const auto last = checked::add(ptr, static_cast<driver::DevicePtr>(nbytes - 1));  // nbytes > 0
  if (!last) raise(ErrorKind::InvalidArgument, label + " ends past the end of the address space");
  for (const driver::DevicePtr at : {ptr, *last}) {
    int ordinal = -1;
    driver::Status status = driver.pointer_device(at, &ordinal);
    if (status.code == driver::Code::not_supported) return;
    if (status.code == driver::Code::invalid_value)
      raise(ErrorKind::InvalidArgument,
            label +
                (at == ptr ? " points to " + hex_text(ptr) : " runs from " + hex_text(ptr) + " to " + hex_text(at)) +
                ", which is not device memory the " + driver.backend().name + " driver knows (" + status.call +
                ": " + status.name + ")");
    device.note_status(status);
    driver::check(status);
    check_foreign_device(device, type, ordinal, label);
    if (nbytes == 1) return;
  }
}

// A tensor partly over one of the device's buffers (or arenas) and partly not, on the device
// (`where`: its address) or over host memory a view of it lent.
[[noreturn]] void refuse_straddling(const std::string& label, std::size_t nbytes, const std::string& where) {
  raise(ErrorKind::InvalidArgument, label + " runs past the bytes of one of the device's buffers or KV arenas (" +
                                        std::to_string(nbytes) + " bytes at " + where +
                                        "): a tensor over the device's memory must lie within one of them");
}

}  // namespace

std::string dlpack_device_name(int device_type) {
  switch (device_type) {
    case 1: return "cpu";
    case 2: return "cuda";
    case 3: return "cuda_host";
    case 4: return "opencl";
    case 7: return "vulkan";
    case 8: return "metal";
    case 10: return "rocm";
    case 11: return "rocm_host";
    case 13: return "cuda_managed";
    case 14: return "oneapi";
    default: return "device type " + std::to_string(device_type);
  }
}

void check_foreign_device(Device& device, int type, int id, const std::string& label) {
  driver::Driver& driver = device.driver();
  const int own_type = driver.backend().dlpack_device_type;
  const bool host_memory = own_type == driver::dlpack_device::cpu;
  const int own_id = host_memory ? 0 : driver.ordinal();
  if (type != own_type || (id >= 0 && id != own_id))
    raise(ErrorKind::InvalidArgument,
          label + " lives on " + device_text(type, id) + ", but the stream's " + driver.backend().name +
              " device takes " + device_text(own_type, own_id) + " memory" +
              (host_memory ? " (its memory is host memory)" : ""));
}

ResolvedMemory resolve_memory(const Stream& on, const MemoryRef& ref, const char* op, const std::string& argument,
                              bool written) {
  Device& device = *on.device();
  ResolvedMemory out;
  if (ref.buffer != nullptr) {
    out.ptr = ref.buffer->use(on, op, argument);
    out.nbytes = ref.buffer->nbytes();
    out.pooled = true;
    out.slice = ref.buffer->slice();
    out.owner = ref.buffer->stream().get();
    return out;
  }
  const std::string label = std::string(op) + ": argument '" + argument + "'";
  if (ref.foreign == nullptr) raise(ErrorKind::InvalidArgument, label + ": no memory given");
  const ForeignRange& range = *ref.foreign;
  driver::Driver& driver = device.driver();
  const bool host_memory = driver.backend().dlpack_device_type == driver::dlpack_device::cpu;
  check_foreign_device(device, range.device_type, range.device_id, label);
  if (range.nbytes == 0) raise(ErrorKind::InvalidArgument, label + " is empty (0 bytes)");
  if (written && range.read_only)
    raise(ErrorKind::InvalidArgument, label + " is read-only, and the operation writes it");
  // A view of one of this device's buffers is that buffer.
  std::size_t offset = 0;
  if (std::shared_ptr<Buffer> buffer = device.leases().find(range.address, range.nbytes, &offset)) {
    out.ptr = buffer->use(on, op, argument) + offset;
    out.nbytes = range.nbytes;
    out.pooled = true;
    out.slice = buffer->slice();
    out.owner = buffer->stream().get();
    return out;
  }
  out.nbytes = range.nbytes;
  if (!host_memory) {
    out.ptr = static_cast<driver::DevicePtr>(range.address);
    // The device's memory reached without a lease (the CUDA array interface lends none): by
    // address.
    using Kind = MemoryManager::RangeOwner::Kind;
    const MemoryManager::RangeOwner owner = device.memory().owner_of(out.ptr, out.nbytes);
    switch (owner.kind) {
      case Kind::buffer:
        out.pooled = true;
        out.slice = owner.slice;
        return out;
      case Kind::freed:
        raise(ErrorKind::Closed, label + " points into the memory of a freed buffer");
      case Kind::straddles:
        // Part of it is a buffer's or an arena's, part is not: no window could retain it whole.
        refuse_straddling(label, range.nbytes, hex_text(out.ptr));
      case Kind::arena:
        // A coordinator's memory, never a window's: held as any producer is (a view of the
        // arena holds the arena), with no driver question to ask.
        out.hold = range.owner;
        return out;
      case Kind::none:
        break;
    }
    // Anything lifecore does not know is checked with the driver.
    if (range.device_id < 0) check_pointer_device(device, range.device_type, out.ptr, range.nbytes, label);
    out.hold = range.owner;
    return out;
  }
  // Host memory that is the device's own, or another device's, but not within one buffer's
  // view: mapped as foreign memory it would be written past that buffer, or outside the
  // other device's stream order and capture rules.
  if (device.leases().overlaps(range.address, range.nbytes))
    refuse_straddling(label, range.nbytes, "host address " + hex_text(range.address));
  if (device.leases().overlaps_elsewhere(range.address, range.nbytes))
    raise(ErrorKind::InvalidArgument,
          label + " is memory of a buffer of another device (a view of it): the buffer belongs to another device, "
                  "whose stream orders its work");
  driver::DevicePtr mapped = 0;
  driver::Status status = driver.map_host(reinterpret_cast<void*>(range.address), range.nbytes, &mapped);
  device.note_status(status);
  driver::check(status);
  auto mapping = std::make_shared<HostMapping>();
  mapping->driver = device.shared_driver();
  mapping->ptr = mapped;
  mapping->owner = range.owner;
  out.ptr = mapped;
  out.hold = std::move(mapping);
  return out;
}

}  // namespace lifecore::runtime
