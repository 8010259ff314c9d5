// StreamCaptureState: transitions, exact refusal messages, refusals change nothing.
#include <cstdio>
#include <functional>
#include <string>

#include "lifecore/error.hpp"
#include "lifecore/runtime/stream_capture_state.hpp"
#include "test_support.hpp"

using lifecore::CacheMode;
using lifecore::CaptureVariant;
using lifecore::StreamCaptureState;

namespace {

void refused(StreamCaptureState state, const std::function<void(StreamCaptureState&)>& call, const std::string& message) {
  const StreamCaptureState before = state;
  try {
    call(state);
    CHECK(!"expected a refusal");
  } catch (const lifecore::Error& error) {
    CHECK(error.kind() == lifecore::ErrorKind::CaptureState);
    CHECK(message == error.what());
  }
  CHECK(state == before);
}

}  // namespace

int main() {
  StreamCaptureState idle;
  StreamCaptureState prepared;
  prepared.prepare(5);
  StreamCaptureState recording = prepared;
  recording.begin();

  CHECK(!idle.is_active() && !idle.owner() && idle.cache_mode() == CacheMode::normal);
  CHECK(prepared.variant() == CaptureVariant::prepare && *prepared.owner() == 5);
  CHECK(prepared.cache_mode() == CacheMode::capture && recording.cache_mode() == CacheMode::capture);
  CHECK(recording.is_recording() && recording.is_active());

  refused(prepared, [](auto& s) { s.prepare(); }, "graph_prepare: a graph capture is already prepared on this stream");
  refused(recording, [](auto& s) { s.prepare(); }, "graph_prepare: a graph capture is already recording on this stream");
  refused(idle, [](auto& s) { s.begin(); }, "begin_capture: call graph_prepare before starting a capture");
  refused(recording, [](auto& s) { s.begin(); }, "begin_capture: a graph capture is already recording on this stream");
  refused(idle, [](auto& s) { s.end(); }, "end_capture: no graph capture is recording on this stream");
  refused(prepared, [](auto& s) { s.end(); }, "end_capture: no graph capture is recording on this stream");

  StreamCaptureState owned = recording;
  auto end = owned.end(5);
  CHECK(!end.abandoned && end.owner == 5 && owned == idle);
  StreamCaptureState foreign = recording;
  auto abandoned = foreign.end(6);
  CHECK(abandoned.abandoned && abandoned.caller == 6 && foreign == idle);
  CHECK(lifecore::abandoned_capture_message(abandoned) ==
        "end_capture: the capture belongs to owner 5, not to 6; it is discarded rather than left recording on a "
        "stream both share");
  for (StreamCaptureState s : {idle, prepared, recording}) {
    s.abort();
    CHECK(s == idle);
  }
  return lifecore::test_support::finish("runtime_stream_capture_state_test");
}
