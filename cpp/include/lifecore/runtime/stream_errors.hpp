// Asynchronous failures of a stream's work (a launch or a copy the driver refused after the
// call returned control, a write a software window cannot record) wait here, tagged with the
// capture window they happened in, until the next sync / read / flush, graph_prepare or
// end_capture reports them. Not thread-safe on its own: the owning Stream serialises calls.
#pragma once

#include <cstdint>

#include <optional>
#include <string>
#include <vector>

#include "lifecore/error.hpp"
#include "lifecore/runtime/stream_capture_state.hpp"
#include "lifecore/runtime/memory_manager.hpp"

namespace lifecore::runtime {

struct QueuedError {
  Error error;
  WindowId window = 0;                  // 0: outside any window
  std::optional<CaptureOwner> owner;    // the owner of that window
};

class StreamErrors {
 public:
  void push(Error error, WindowId window, std::optional<CaptureOwner> owner);
  bool empty() const noexcept { return errors_.empty(); }
  // Errors ever queued (never decreases): a caller that mirrors memory asynchronously compares
  // it across calls to learn that some work of the stream failed since.
  std::uint64_t pushed() const noexcept { return pushed_; }
  std::size_t size() const noexcept { return errors_.size(); }
  // Throws the oldest error (its kind and attributes kept, the count of the others noted) and
  // clears the queue; does nothing when empty.
  void surface(const std::string& where);
  // Removes and returns the errors of one window.
  std::vector<QueuedError> take_window(WindowId window);

 private:
  std::vector<QueuedError> errors_;
  std::uint64_t pushed_ = 0;
};

// "the write of owner 3's capture window" style suffix for messages.
std::string describe_origin(const QueuedError& error);

}  // namespace lifecore::runtime
