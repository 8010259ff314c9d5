#include "lifecore/runtime/graph_capture.hpp"

#include <string>

#include "lifecore/error.hpp"
#include "lifecore/runtime/stream.hpp"
#include "runtime/blocking_wait.hpp"

namespace lifecore::runtime {

std::shared_ptr<Graph> capture_graph(Stream& stream, std::int64_t warmup, CaptureOwner owner,
                                     const std::function<void()>& pass) {
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
  } catch (...) {
    // A failing warmup, a refused seal, a fault: never leave the window open. An abort that
    // cannot end the driver capture leaves the stream in CAPTURE (driver_capturing), where the
    // next end or abort from this thread ends it.
    try {
      stream.abort_capture();
    } catch (...) {
    }
    throw;
  }
}

}  // namespace lifecore::runtime
