// A graph's memory nodes reserve their addresses when they are captured; the mock gives them
// back once nothing holds the graph any more (its handle, an executable graph of it, or the
// capture recording it). Before, every such reservation stayed for the driver's life: a
// window aborted or refused with a memory node in it grew the device by one region each time.
// A region's base is probed with a memory-free node, which the mock refuses for an address
// that is no region's base.
#include <cstdio>

#include "driver/mock/mock_driver.hpp"
#include "test_support.hpp"

using namespace lifecore::driver;
using namespace lifecore::test_support;

namespace {

constexpr std::size_t bytes = 4096;

// Whether `ptr` is still a region's base: a free node for it is taken inside a capture on `s`,
// which is then ended and its graph destroyed (that graph holds no memory node of its own).
bool still_reserved(MockDriver& d, StreamHandle s, DevicePtr ptr) {
  CHECK_OK(d.stream_begin_capture(s, CaptureMode::relaxed));
  const bool taken = d.mem_free_async(ptr, s).ok();
  GraphHandle g{};
  CHECK_OK(d.stream_end_capture(s, &g));
  CHECK_OK(d.graph_destroy(g));
  return taken;
}

DevicePtr capture_an_allocation(MockDriver& d, StreamHandle s, GraphHandle* g) {
  CHECK_OK(d.stream_begin_capture(s, CaptureMode::relaxed));
  DevicePtr ptr = 0;
  CHECK_OK(d.mem_alloc_async(bytes, s, &ptr));
  CHECK_OK(d.stream_end_capture(s, g));
  return ptr;
}

// A driver with a stream to capture on and one to probe from.
struct Fixture {
  MockDriver d{0};
  StreamHandle s{}, probe{};
  Fixture() {
    CHECK_OK(d.stream_create(&s));
    CHECK_OK(d.stream_create(&probe));
  }
};

void a_destroyed_graph_gives_its_addresses_back() {
  Fixture f;
  GraphHandle g{};
  const DevicePtr ptr = capture_an_allocation(f.d, f.s, &g);
  CHECK(still_reserved(f.d, f.probe, ptr));
  CHECK_OK(f.d.graph_destroy(g));
  CHECK(!still_reserved(f.d, f.probe, ptr));
}

void an_executable_graph_keeps_them_until_it_goes() {
  Fixture f;
  GraphHandle g{};
  const DevicePtr ptr = capture_an_allocation(f.d, f.s, &g);
  GraphExecHandle e{};
  CHECK_OK(f.d.graph_instantiate(g, &e));
  CHECK_OK(f.d.graph_destroy(g));
  CHECK(still_reserved(f.d, f.probe, ptr));  // the executable graph may still launch it
  CHECK_OK(f.d.graph_exec_destroy(e));
  CHECK(!still_reserved(f.d, f.probe, ptr));
}

void an_allocation_a_launch_made_outlives_the_graph_until_its_free() {
  MockDriver d{0};
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  GraphHandle g{};
  const DevicePtr ptr = capture_an_allocation(d, s, &g);
  GraphExecHandle e{};
  CHECK_OK(d.graph_instantiate(g, &e));
  CHECK_OK(d.graph_launch(e, s));
  CHECK_OK(d.stream_synchronize(s));
  CHECK_OK(d.graph_exec_destroy(e));
  CHECK_OK(d.graph_destroy(g));
  CHECK_OK(d.memset_d32(ptr, 7, bytes / 4));  // live still, as in CUDA
  CHECK_OK(d.mem_free_async(ptr, s));
  CHECK_OK(d.stream_synchronize(s));
  CHECK(!d.mem_free_async(ptr, s).ok());  // gone: not kept reserved for a graph that went
}

void a_capture_ended_invalidated_or_discarded_gives_them_back() {
  Fixture f;
  MockDriver& d = f.d;
  const StreamHandle s = f.s, probe = f.probe;
  // Invalidated: another stream synchronized inside a global capture.
  CHECK_OK(d.stream_begin_capture(s, CaptureMode::global));
  DevicePtr ptr = 0;
  CHECK_OK(d.mem_alloc_async(bytes, s, &ptr));
  CHECK(d.stream_synchronize(probe).native_code == 900);
  GraphHandle g{};
  CHECK(!d.stream_end_capture(s, &g).ok());
  CHECK(!still_reserved(d, probe, ptr));
  // Discarded with its stream.
  StreamHandle doomed{};
  CHECK_OK(d.stream_create(&doomed));
  CHECK_OK(d.stream_begin_capture(doomed, CaptureMode::relaxed));
  CHECK_OK(d.mem_alloc_async(bytes, doomed, &ptr));
  CHECK_OK(d.stream_destroy(doomed));
  CHECK(!still_reserved(d, probe, ptr));
}

}  // namespace

int main() {
  a_destroyed_graph_gives_its_addresses_back();
  an_executable_graph_keeps_them_until_it_goes();
  an_allocation_a_launch_made_outlives_the_graph_until_its_free();
  a_capture_ended_invalidated_or_discarded_gives_them_back();
  return finish("mock_graph_memory_release_test");
}
