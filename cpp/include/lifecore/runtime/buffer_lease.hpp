// A buffer's memory lent out as a zero-copy tensor view (DLPack, the CUDA array interface).
// A lease holds the buffer (so a view keeps it alive), counts as one of its views (free() is
// refused while it lives) and, on a device whose memory is host memory (the mock), holds the
// host storage the view points at. The export's device is the registry's fact for the backend.
// Each device keeps a table of its live leases, so a tensor passed back in (launch, copy, fill)
// is recognised, by address, as the buffer it views (runtime/foreign_memory.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "lifecore/runtime/buffer.hpp"

namespace lifecore::runtime {

class BufferLease {
 public:
  // Makes the memory ready for the consumer (Stream::lend) and lends it. `consumer_stream`
  // null: the buffer's stream is waited for on the host (the only choice on a CPU export);
  // `no_order`: the consumer orders its own work (DLPack's -1), so nothing waits.
  // `op` names the call in its errors (__dlpack__, view).
  static std::shared_ptr<BufferLease> take(std::shared_ptr<Buffer> buffer, const std::uintptr_t* consumer_stream,
                                           bool no_order = false, const char* op = "view");
  ~BufferLease();
  BufferLease(const BufferLease&) = delete;
  BufferLease& operator=(const BufferLease&) = delete;

  // The host address on a CPU export, else the device address.
  void* data() const noexcept { return data_; }
  std::size_t nbytes() const noexcept { return buffer_->nbytes(); }
  // DLPack's DLDeviceType and device id of the memory.
  int device_type() const noexcept { return device_type_; }
  int device_id() const noexcept { return device_id_; }
  const std::shared_ptr<Buffer>& buffer() const noexcept { return buffer_; }

 private:
  BufferLease() = default;
  std::shared_ptr<Buffer> buffer_;
  std::shared_ptr<void> keep_alive_;
  void* data_ = nullptr;
  int device_type_ = 0;
  int device_id_ = 0;
};

// A device's live leases, looked up by the addresses they lent. Thread-safe.
class LeaseTable {
 public:
  // Every device's table is known to the others (a host-memory device checks a range against
  // all of them: its memory is host memory, which another device's view can reach).
  LeaseTable();
  ~LeaseTable();
  LeaseTable(const LeaseTable&) = delete;
  LeaseTable& operator=(const LeaseTable&) = delete;
  void add(const BufferLease* lease);
  void remove(const BufferLease* lease) noexcept;
  // The buffer whose lent bytes hold [address, address + bytes), and the offset of `address`
  // in it; null when no live lease lent those bytes.
  std::shared_ptr<Buffer> find(std::uintptr_t address, std::size_t bytes, std::size_t* offset) const;
  // Whether [address, address + bytes) shares a byte with memory this table's leases lent.
  bool overlaps(std::uintptr_t address, std::size_t bytes) const;
  // find() over every device's table: a host array may view any host-memory device's buffer.
  static std::shared_ptr<Buffer> find_anywhere(std::uintptr_t address, std::size_t bytes, std::size_t* offset);
  // Whether another device's table lent a byte of [address, address + bytes).
  bool overlaps_elsewhere(std::uintptr_t address, std::size_t bytes) const;

 private:
  mutable std::mutex mutex_;
  std::vector<const BufferLease*> leases_;  // few live at once: a scan is cheaper than an index
};

}  // namespace lifecore::runtime
