#include "lifecore/runtime/graph_capture.hpp"

#include <string>

#include "lifecore/error.hpp"
#include "lifecore/runtime/stream.hpp"
#include "runtime/blocking_wait.hpp"

namespace lifecore::runtime {

namespace {

// A failing warmup, a refused seal, a fault: never leave the window open. An abort that
// cannot end the driver capture leaves the stream in CAPTURE (driver_capturing), where the
// next end or abort from this thread ends it.
void abort_quietly(Stream& stream, std::optional<WindowId> cycle) noexcept {
  try {
    stream.abort_capture(cycle);
  } catch (...) {
  }
}

}  // namespace

std::shared_ptr<Graph> capture_graph(Stream& stream, std::int64_t warmup, CaptureOwner owner,
                                     const std::function<void()>& pass, bool* still_capturing) {
  if (warmup < 0) raise(ErrorKind::InvalidArgument, "capture: warmup must be >= 0, got " + std::to_string(warmup));
  // Every later call names this capture: one another thread put in its place while a pass ran
  // (relaxed mode lets any thread abort it) is refused, never begun, sealed or aborted here.
  const WindowId cycle = stream.graph_prepare(owner);
  try {
    for (std::int64_t i = 0; i < warmup; ++i) pass();
    {
      BlockingWait blocking;  // begin waits for the warmup's work
      stream.begin_capture(cycle);
    }
    pass();
    return stream.end_capture(owner, cycle);
  } catch (const Error& failure) {
    abort_quietly(stream, cycle);
    const bool held = stream.holds_capture(cycle);
    if (still_capturing) *still_capturing = held;
    // An end that left the driver capturing said "stays in CAPTURE": the abort may have ended it.
    if (!held) throw Stream::after_capture_ended(failure, "capture");
    throw;
  } catch (...) {
    abort_quietly(stream, cycle);
    if (still_capturing) *still_capturing = stream.holds_capture(cycle);
    throw;
  }
}

}  // namespace lifecore::runtime
