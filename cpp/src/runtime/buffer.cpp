#include "lifecore/runtime/buffer.hpp"

#include "lifecore/error.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/stream.hpp"

namespace lifecore::runtime {

Buffer::Buffer(std::shared_ptr<Stream> stream, SliceId slice, driver::DevicePtr ptr, std::size_t nbytes)
    : stream_(std::move(stream)), device_(stream_->device()), slice_(slice), ptr_(ptr), nbytes_(nbytes) {}

Buffer::~Buffer() {
  if (!freed_.exchange(true)) stream_->drop_slice(slice_);
}

bool Buffer::alive() const noexcept {
  return !freed_.load(std::memory_order_acquire) && !dangling_.load(std::memory_order_acquire) && !device_->closed();
}

namespace {
const char* dangling_reason() {
  return ": the buffer was allocated inside a capture window that was discarded (its memory was a node of a "
         "graph that was never sealed)";
}
}  // namespace

driver::DevicePtr Buffer::ptr() const {
  if (freed_.load(std::memory_order_acquire)) raise(ErrorKind::Closed, "ptr: the buffer was freed");
  if (dangling_.load(std::memory_order_acquire)) raise(ErrorKind::Closed, std::string("ptr") + dangling_reason());
  device_->check_open("ptr");
  return ptr_;
}

void Buffer::free() {
  if (std::size_t n = views(); n != 0 && !freed_.load(std::memory_order_acquire))
    raise(ErrorKind::Lifecore, "free: " + std::to_string(n) +
                                   " zero-copy view(s) of the buffer are alive (DLPack or array interface); "
                                   "free it once they are gone");
  if (freed_.exchange(true)) raise(ErrorKind::Closed, "free: the buffer was already freed");
  stream_->drop_slice(slice_);
}

driver::DevicePtr Buffer::use(const Device& device, const char* op) const {
  if (device_.get() != &device)
    raise(ErrorKind::InvalidArgument, std::string(op) + ": the buffer belongs to another device");
  if (freed_.load(std::memory_order_acquire))
    raise(ErrorKind::Closed, std::string(op) + ": the buffer was freed");
  if (dangling_.load(std::memory_order_acquire)) raise(ErrorKind::Closed, std::string(op) + dangling_reason());
  return ptr_;
}

}  // namespace lifecore::runtime
