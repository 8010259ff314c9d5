// A graph captured from a pass of work in one call (Stream.capture): prepare the window, run the
// pass eagerly `warmup` times (priming the pools and the info cache), begin, run it once more
// into the recording, end. On any failure the window is aborted, so the stream is left out of
// capture and can capture again; the first failure is the one that propagates.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "lifecore/runtime/graph.hpp"
#include "lifecore/runtime/stream_capture_state.hpp"

namespace lifecore::runtime {

class Stream;

// `pass` issues the work on the stream; whatever it throws propagates (after the abort).
// warmup < 0: InvalidArgumentError, nothing changed. `aborted`, when given, is set when a
// failure after this call's graph_prepare made it abort the window (a refused prepare, as on a
// stream another capture holds, aborts nothing: that capture is not this call's to end).
std::shared_ptr<Graph> capture_graph(Stream& stream, std::int64_t warmup, CaptureOwner owner,
                                     const std::function<void()>& pass, bool* aborted = nullptr);

}  // namespace lifecore::runtime
