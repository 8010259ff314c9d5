// A buffer's memory lent out as a zero-copy tensor view (DLPack, the CUDA array interface).
// A lease holds the buffer (so a view keeps it alive), counts as one of its views (free() is
// refused while it lives) and, on a device whose memory is host memory (the mock), holds the
// host storage the view points at. The export's device is the registry's fact for the backend.
#pragma once

#include <cstdint>
#include <memory>

#include "lifecore/runtime/buffer.hpp"

namespace lifecore::runtime {

class BufferLease {
 public:
  // Makes the memory ready for the consumer (Stream::lend) and lends it. `consumer_stream`
  // null: the buffer's stream is waited for on the host (the only choice on a CPU export).
  static std::shared_ptr<BufferLease> take(std::shared_ptr<Buffer> buffer, const std::uintptr_t* consumer_stream);
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

}  // namespace lifecore::runtime
