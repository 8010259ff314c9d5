#include "lifecore/runtime/buffer.hpp"

#include "lifecore/error.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/stream.hpp"

namespace lifecore::runtime {

Buffer::Buffer(std::shared_ptr<Stream> stream, SliceId slice, driver::DevicePtr ptr, std::size_t nbytes)
    : stream_(std::move(stream)), device_(stream_->device()), slice_(slice), ptr_(ptr), nbytes_(nbytes) {}

Buffer::~Buffer() {
  if ((state_.fetch_or(freed_bit, std::memory_order_acq_rel) & freed_bit) == 0) stream_->drop_slice(slice_, arena_hold_);
}

bool Buffer::alive() const noexcept {
  return !freed() && !dangling_.load(std::memory_order_acquire) && !device_->closed();
}

bool Buffer::try_add_view() noexcept {
  std::uint64_t state = state_.load(std::memory_order_acquire);
  do {
    // A count that would reach the freed bit is refused too (never reached: each view is an object).
    if ((state & freed_bit) != 0 || (state & view_mask) == view_mask) return false;
  } while (!state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel, std::memory_order_acquire));
  return true;
}

namespace {
const char* dangling_reason() {
  return ": the buffer was allocated inside a capture window that was discarded (its memory was a node of a "
         "graph that was never sealed)";
}
}  // namespace

driver::DevicePtr Buffer::ptr(const char* op) const {
  // Dangling first: such a buffer is marked freed too, but "freed" would not say why.
  if (dangling_.load(std::memory_order_acquire)) raise(ErrorKind::Closed, std::string(op) + dangling_reason());
  if (freed()) raise(ErrorKind::Closed, std::string(op) + ": the buffer was freed");
  device_->check_open(op);
  return ptr_;
}

void Buffer::free() {
  stream_->device()->check_not_forked("free");
  // Claimed first, so of two calls racing a discarded window only one is taken.
  const bool first = !free_called_.exchange(true, std::memory_order_acq_rel);
  // Only "live with no views" becomes "freed": a view added meanwhile fails the exchange.
  std::uint64_t state = state_.load(std::memory_order_acquire);
  do {
    if ((state & freed_bit) != 0) {
      // A memory node's buffer gave its slice back when its window was discarded; its
      // owner's free() is still taken, once, as for any other buffer.
      if (first && dangling_.load(std::memory_order_acquire)) return;
      raise(ErrorKind::Closed, "free: the buffer was already freed");
    }
    if (state != 0) {
      if (first) free_called_.store(false, std::memory_order_release);  // refused: not taken
      raise(ErrorKind::Lifecore, "free: " + std::to_string(state) +
                                     " zero-copy DLPack view(s) of the buffer are alive; "
                                     "free it once they are gone");
    }
  } while (!state_.compare_exchange_weak(state, freed_bit, std::memory_order_acq_rel, std::memory_order_acquire));
  stream_->drop_slice(slice_, arena_hold_);
}

driver::DevicePtr Buffer::use(const Device& device, const char* op) const {
  if (device_.get() != &device)
    raise(ErrorKind::InvalidArgument, std::string(op) + ": the buffer belongs to another device");
  if (dangling_.load(std::memory_order_acquire)) raise(ErrorKind::Closed, std::string(op) + dangling_reason());
  if (freed()) raise(ErrorKind::Closed, std::string(op) + ": the buffer was freed");
  return ptr_;
}

driver::DevicePtr Buffer::use(const Stream& on, const char* op, std::string_view argument) const {
  const driver::DevicePtr ptr = use(*on.device(), op);
  // Another stream's work would run now, at an address that has memory only during a replay
  // of the graph that stream is recording: on a device, an illegal address that loses it.
  if (memory_node_ && &on != stream_.get())
    raise(ErrorKind::CaptureState,
          std::string(op) + (argument.empty() ? ": the buffer" : ": argument '" + std::string(argument) + "'") +
              " was allocated inside another stream's capture window, so its memory is a node of the graph that "
              "window records and exists only while that graph runs; use it on that stream inside the window, or "
              "allocate it before begin_capture (nothing was issued)");
  return ptr;
}

}  // namespace lifecore::runtime
