// A graph remembers every stream it was replayed on, so destroying it waits for that work
// before its retained slices go back to the pool. Pinned for a stream the graph did not know
// yet (not the one that captured it) and for the capturing stream replayed after another:
// forgetting either would let destroy() return while a replay still writes the slices.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/graph.hpp"
#include "lifecore/runtime/stream.hpp"
#include "driver/mock/mock_driver.hpp"
#include "test_support.hpp"

using namespace lifecore::runtime;

namespace {

constexpr std::int64_t bytes = 256;

std::shared_ptr<Graph> capture_fill(Stream& stream, Buffer& buffer, std::uint32_t value) {
  stream.graph_prepare(0);
  stream.fill(buffer, value);  // the warmup pass
  stream.begin_capture();
  stream.fill(buffer, value);  // the recorded pass
  return stream.end_capture(0);
}

// Destroys `graph` on another thread while the device holds every stream's work: it must not
// return until the device is resumed (it waits for the replays it remembers).
bool destroy_waits_for_paused_work(lifecore::driver::MockDriver& mock, Graph& graph) {
  std::atomic<bool> returned{false};
  std::thread destroyer([&] {
    graph.destroy();
    returned.store(true);
  });
  // Ample time for a destroy that (wrongly) does not wait to return.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const bool waited = !returned.load();
  mock.resume_streams();
  destroyer.join();
  CHECK(returned.load());
  return waited;
}

bool all_words(Stream& stream, const Buffer& buffer, std::uint32_t value) {
  std::vector<std::uint8_t> data = stream.read(buffer);
  for (std::size_t i = 0; i + 4 <= data.size(); i += 4) {
    std::uint32_t word;
    std::memcpy(&word, data.data() + i, 4);
    if (word != value) return false;
  }
  return !data.empty();
}

void destroy_waits_for_a_stream_the_graph_did_not_know(const char* graphs) {
  auto device = Device::open(lifecore::test_support::emulated_backend(), 0, graphs, "thread_local");
  auto* mock = lifecore::driver::MockDriver::from(&device->vendor_driver());
  CHECK(mock != nullptr);
  if (mock == nullptr) return;
  auto a = device->stream();
  auto b = device->stream();
  auto x = a->alloc(bytes);
  a->fill(*x, 0);
  auto graph = capture_fill(*a, *x, 7);
  a->sync();
  mock->pause_streams();
  graph->replay(b.get());  // b never saw this graph before
  CHECK(destroy_waits_for_paused_work(*mock, *graph));
  CHECK(all_words(*b, *x, 7));
  device->close();
}

void destroy_waits_for_the_capturing_stream_replayed_after_another(const char* graphs) {
  auto device = Device::open(lifecore::test_support::emulated_backend(), 0, graphs, "thread_local");
  auto* mock = lifecore::driver::MockDriver::from(&device->vendor_driver());
  CHECK(mock != nullptr);
  if (mock == nullptr) return;
  auto a = device->stream();
  auto b = device->stream();
  auto x = a->alloc(bytes);
  a->fill(*x, 0);
  auto graph = capture_fill(*a, *x, 9);
  graph->replay(b.get());  // b is known now; a (the origin) is not yet
  b->sync();
  a->sync();
  mock->pause_streams();
  graph->replay(nullptr);  // on the capturing stream
  CHECK(destroy_waits_for_paused_work(*mock, *graph));
  CHECK(all_words(*a, *x, 9));
  device->close();
}

// Replayed once on each of many short-lived streams, the graph keeps remembering only the
// streams still alive: it used to keep one entry per stream ever used and scan them all on
// every replay, so replays grew slower (and the dead streams' memory stayed allocated) for the
// graph's whole life.
void forgets_streams_that_are_gone(const char* graphs) {
  auto device = Device::open(lifecore::test_support::emulated_backend(), 0, graphs, "thread_local");
  auto a = device->stream();
  auto x = a->alloc(bytes);
  a->fill(*x, 0);
  auto graph = capture_fill(*a, *x, 5);
  graph->replay(nullptr);
  for (int i = 0; i < 64; ++i) {
    auto temporary = device->stream();
    graph->replay(temporary.get());
    temporary->sync();
  }
  graph->replay(nullptr);  // the last temporary stream is gone by now
  CHECK(graph->streams_remembered() == 1);
  CHECK(all_words(*a, *x, 5));
  device->close();
}

}  // namespace

int main() {
  // Software graphs: destroy has no driver exec to tear down, so only the remembered streams
  // make it wait. Hardware graphs: the same rule, checked as well.
  for (const char* graphs : {"software", "hardware"}) {
    destroy_waits_for_a_stream_the_graph_did_not_know(graphs);
    destroy_waits_for_the_capturing_stream_replayed_after_another(graphs);
    forgets_streams_that_are_gone(graphs);
  }
  return lifecore::test_support::finish("runtime_graph_replay_streams_test");
}
