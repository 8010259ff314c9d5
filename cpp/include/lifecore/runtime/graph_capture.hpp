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
// warmup < 0: InvalidArgumentError, nothing changed. `still_capturing`, when given, is set on
// a failure after its prepare: whether the stream still holds this call's capture after the
// abort (the driver's capture could not be ended either). A refused prepare, or a capture
// another thread put in this call's place, is never aborted here: it is not this call's to end.
std::shared_ptr<Graph> capture_graph(Stream& stream, std::int64_t warmup, CaptureOwner owner,
                                     const std::function<void()>& pass, bool* still_capturing = nullptr);

}  // namespace lifecore::runtime
