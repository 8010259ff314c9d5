// A thread about to exit with a capture still recording (thread_local or global mode) ends it
// through capture_registry::end_this_threads_recordings, as the Python binding has each
// threading thread do: only that thread could (the driver ends such a capture where it began),
// so without this the stream would stay recording for good and, in global mode, forbid every
// other thread's unsafe calls. Ended means aborted: the graph is discarded, nothing it recorded
// runs, the window's memory goes back, and the stream records again on any thread.
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "lifecore/error.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/capture_registry.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/graph.hpp"
#include "lifecore/runtime/stream.hpp"
#include "test_support.hpp"

using namespace lifecore::runtime;

namespace {

std::uint32_t first_word(Stream& stream, const Buffer& buffer) {
  const std::vector<std::uint8_t> bytes = stream.read(buffer);
  return static_cast<std::uint32_t>(bytes[0]) | static_cast<std::uint32_t>(bytes[1]) << 8 |
         static_cast<std::uint32_t>(bytes[2]) << 16 | static_cast<std::uint32_t>(bytes[3]) << 24;
}

void a_recording_ends_with_its_thread(const char* graphs, const char* mode) {
  auto device = Device::open(lifecore::test_support::emulated_backend(), 0, graphs, mode);
  auto stream = device->stream();
  auto other = device->stream();
  std::shared_ptr<Buffer> buffer = stream->alloc(256);
  stream->fill(*buffer, 5);
  stream->sync();
  std::thread([&] {
    stream->graph_prepare(0);
    stream->begin_capture();
    stream->fill(*buffer, 9);  // recorded, never run
    lifecore::runtime::capture_registry::end_this_threads_recordings();
  }).join();
  CHECK(!stream->capture_state().is_active());
  CHECK(!stream->driver_capturing());
  CHECK(device->memory().stats().windows_active == 0);
  other->sync();  // a global recording would have refused this thread's wait
  CHECK(first_word(*stream, *buffer) == 5);
  stream->graph_prepare(0);
  stream->begin_capture();
  stream->fill(*buffer, 7);
  std::shared_ptr<Graph> graph = stream->end_capture(0);
  CHECK(graph != nullptr);
  graph->replay(stream.get());
  CHECK(first_word(*stream, *buffer) == 7);
  graph->destroy();
  device->close();
  CHECK(device->abandoned_captures() == 0);
}

}  // namespace

int main() {
  for (const char* graphs : {"hardware", "software"})
    for (const char* mode : {"thread_local", "global"}) a_recording_ends_with_its_thread(graphs, mode);
  return lifecore::test_support::finish("runtime_capture_thread_exit_test");
}
