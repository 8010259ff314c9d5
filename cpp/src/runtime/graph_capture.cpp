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
void abort_quietly(Stream& stream) noexcept {
  try {
    stream.abort_capture();
  } catch (...) {
  }
}

}  // namespace

std::shared_ptr<Graph> capture_graph(Stream& stream, std::int64_t warmup, CaptureOwner owner,
                                     const std::function<void()>& pass, bool* aborted) {
  if (warmup < 0) raise(ErrorKind::InvalidArgument, "capture: warmup must be >= 0, got " + std::to_string(warmup));
  stream.graph_prepare(owner);
  try {
    for (std::int64_t i = 0; i < warmup; ++i) pass();
    {
      BlockingWait blocking;  // begin waits for the warmup's work
      stream.begin_capture();
    }
    pass();
    return stream.end_capture(owner);
  } catch (const Error& failure) {
    if (aborted) *aborted = true;
    abort_quietly(stream);
    // An end that left the driver capturing said "stays in CAPTURE": the abort may have ended it.
    if (!stream.driver_capturing()) throw Stream::after_capture_ended(failure, "capture");
    throw;
  } catch (...) {
    if (aborted) *aborted = true;
    abort_quietly(stream);
    throw;
  }
}

}  // namespace lifecore::runtime
