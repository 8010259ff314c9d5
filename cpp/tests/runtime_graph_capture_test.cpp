// capture_graph, the lifecycle behind Stream.capture, on both recorders: the pass runs warmup
// + 1 times, a sealed graph replays the recorded work, and every failure (a bad warmup, a pass
// that throws while warming up or while recording, a refused seal) leaves the stream out of
// capture and able to capture again, with the first failure propagated.
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/graph.hpp"
#include "lifecore/runtime/graph_capture.hpp"
#include "lifecore/runtime/stream.hpp"
#include "test_support.hpp"

using namespace lifecore::runtime;
using lifecore::ErrorKind;
using lifecore::test_support::error_of;

namespace {

bool all_words(Stream& stream, const Buffer& buffer, std::uint32_t value) {
  std::vector<std::uint8_t> data = stream.read(buffer);
  for (std::size_t i = 0; i + 4 <= data.size(); i += 4) {
    std::uint32_t word;
    std::memcpy(&word, data.data() + i, 4);
    if (word != value) return false;
  }
  return !data.empty();
}

bool out_of_capture(Stream& stream) { return !stream.capture_state().is_active() && !stream.driver_capturing(); }

void seals_and_replays(const char* graphs) {
  auto device = Device::open(lifecore::test_support::emulated_backend(), 0, graphs, "thread_local");
  auto stream = device->stream();
  auto x = stream->alloc(64);
  auto y = stream->alloc(64);
  stream->fill(*x, 0);
  int passes = 0;
  auto graph = capture_graph(*stream, 2, 0, [&] {
    ++passes;
    stream->fill(*x, 5);
    stream->copy(*y, *x);
  });
  CHECK(passes == 3);
  CHECK(graph != nullptr);
  CHECK(out_of_capture(*stream));
  CHECK(graph->is_hardware() == (std::string(graphs) == "hardware"));
  CHECK(graph->node_count() == 2);
  stream->fill(*y, 0);
  graph->replay(nullptr);
  CHECK(all_words(*stream, *y, 5));
  graph->destroy();
  device->close();
}

void failures_leave_the_stream_out_of_capture(const char* graphs) {
  auto device = Device::open(lifecore::test_support::emulated_backend(), 0, graphs, "thread_local");
  auto stream = device->stream();
  auto x = stream->alloc(64);
  int passes = 0;
  // A negative warmup: refused before anything runs, and nothing prepared.
  bool still_capturing = true;
  CHECK(error_of([&] { capture_graph(*stream, -1, 0, [&] { ++passes; }, &still_capturing); }) == ErrorKind::InvalidArgument);
  CHECK(passes == 0);
  CHECK(still_capturing);  // not reached: no capture of its own to report on
  CHECK(out_of_capture(*stream));
  // A pass that throws while warming up, then while recording: the exception is the caller's own.
  for (int failing : {1, 2}) {
    passes = 0;
    bool propagated = false;
    still_capturing = true;
    try {
      capture_graph(
          *stream, 1, 0,
          [&] {
            if (++passes == failing) throw std::runtime_error("the pass failed");
            stream->fill(*x, 1);
          },
          &still_capturing);
    } catch (const std::runtime_error& error) {
      propagated = std::string(error.what()) == "the pass failed";
    }
    CHECK(propagated);
    CHECK(!still_capturing);  // its own window, aborted and ended
    CHECK(passes == failing);
    CHECK(out_of_capture(*stream));
  }
  // A recording the seal refuses (host work inside the window): CaptureRefused, out of capture.
  passes = 0;
  CHECK(error_of([&] {
          capture_graph(*stream, 0, 0, [&] {
            ++passes;
            stream->fill(*x, 2);
            stream->sync();
          });
        }) != ErrorKind::Lifecore);
  CHECK(passes == 1);
  CHECK(out_of_capture(*stream));
  // And the stream captures again.
  auto graph = capture_graph(*stream, 1, 0, [&] { stream->fill(*x, 3); });
  CHECK(graph->node_count() == 1);
  graph->replay(nullptr);
  CHECK(all_words(*stream, *x, 3));
  device->close();
}

}  // namespace

int main() {
  for (const char* graphs : {"software", "hardware"}) {
    seals_and_replays(graphs);
    failures_leave_the_stream_out_of_capture(graphs);
  }
  return lifecore::test_support::finish("runtime_graph_capture_test");
}
