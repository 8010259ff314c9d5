// A slice of the device's memory, bound to the stream that allocated it. Freeing (explicitly
// or on the last reference) hands the slice to that stream's drop queue: it returns to the
// pool once the work queued before the free is done.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "lifecore/runtime/memory_manager.hpp"
#include "lifecore/driver/driver.hpp"

namespace lifecore::runtime {

class Device;
class Stream;

class Buffer {
 public:
  Buffer(std::shared_ptr<Stream> stream, SliceId slice, driver::DevicePtr ptr, std::size_t nbytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  std::size_t nbytes() const noexcept { return nbytes_; }
  // ClosedError once freed (or once the device closed).
  // ClosedError, naming `op` (the call that asked), once freed or its device closed.
  driver::DevicePtr ptr(const char* op = "ptr") const;
  // False once freed, once its device closed, or once it dangles (below).
  bool alive() const noexcept;
  // Freed (free(), or a discarded window's memory node): a closed device's buffer is not.
  bool freed() const noexcept { return (state_.load(std::memory_order_acquire) & freed_bit) != 0; }
  // Inside a driver capture a new allocation is a memory node of the graph being recorded: it
  // has memory only while that graph runs, so only its own stream may use it, inside the
  // window. Marked by that stream before anyone else sees the buffer.
  void mark_memory_node() noexcept { memory_node_ = true; }
  // A hold on an arena (a KV arena lent as a Buffer, on a stream of its own): its drop waits
  // for that stream's queued work and lets go at once, so a freed arena goes back when its
  // other holders have gone, not at a fence its stream may never reach. Marked before anyone
  // else sees the buffer.
  void mark_arena_hold() noexcept { arena_hold_ = true; }
  // The buffer's memory was a memory node of a capture that was never sealed: it does not
  // exist, so every later use is refused (ClosedError) rather than faulting on the device.
  // True when this marked it freed too: its slice is then the caller's to give back (the
  // destructor leaves it alone, and free() is taken once without giving it back again), so
  // memory_stats stops counting it at the stream's next sync, not when the object goes.
  bool mark_dangling() noexcept {
    dangling_.store(true, std::memory_order_release);
    return (state_.fetch_or(freed_bit, std::memory_order_acq_rel) & freed_bit) == 0;
  }
  // ClosedError when already freed; LifecoreError (nothing changed) while views of it live.
  void free();

  const std::shared_ptr<Device>& device() const noexcept { return device_; }
  const std::shared_ptr<Stream>& stream() const noexcept { return stream_; }
  SliceId slice() const noexcept { return slice_; }
  // The pointer for an operation `op` on `device`: ClosedError when freed or closed,
  // InvalidArgumentError when the buffer belongs to another device.
  driver::DevicePtr use(const Device& device, const char* op) const;
  // The same for an operation on stream `on`; CaptureStateError, naming `argument` (the
  // parameter's name; empty: the call's one buffer), when the buffer is a memory node of
  // another stream's recording. Builds no text unless it raises: every launch comes here.
  driver::DevicePtr use(const Stream& on, const char* op, std::string_view argument = {}) const;

  // Zero-copy views lent out (runtime/buffer_lease.hpp). While one lives, free() is refused:
  // the slice would go back to the pool and be handed out again under the view. The views and
  // the freed mark are one atomic word, so a view is added only to a live buffer and free()
  // goes from "live, no views" to "freed" in one step: neither can slip between the other's
  // check and its change. try_add_view is false (nothing changed) once the buffer was freed.
  bool try_add_view() noexcept;
  void drop_view() noexcept { state_.fetch_sub(1, std::memory_order_acq_rel); }
  std::size_t views() const noexcept {
    return static_cast<std::size_t>(state_.load(std::memory_order_acquire) & view_mask);
  }

 private:
  std::shared_ptr<Stream> stream_;
  std::shared_ptr<Device> device_;
  SliceId slice_;
  driver::DevicePtr ptr_;
  std::size_t nbytes_;
  static constexpr std::uint64_t freed_bit = std::uint64_t{1} << 63;
  static constexpr std::uint64_t view_mask = freed_bit - 1;

  std::atomic<std::uint64_t> state_{0};  // freed_bit | the number of live views
  std::atomic<bool> dangling_{false};
  bool memory_node_ = false;
  bool arena_hold_ = false;
  std::atomic<bool> free_called_{false};  // free() was taken (a dangling buffer takes it once)
};

}  // namespace lifecore::runtime
