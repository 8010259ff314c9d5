// The mock refuses to free an address range that is not live, as the driver does: an unknown
// address, a pointer inside an allocation, one already freed, and a graph allocation whose
// address is fixed but not backed (before its graph runs, after the memory was freed). Each
// refusal is invalid_value and changes nothing: the accounting and the live memory stay.
#include <bit>
#include <cstdio>
#include <vector>

#include "driver/mock/mock_driver.hpp"
#include "mock_kernels.hpp"
#include "test_support.hpp"

using namespace lifecore::driver;
using namespace lifecore::test_support;

namespace {

struct Snapshot {
  std::size_t in_use = 0;
  std::size_t live = 0;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(MockDriver& d) { return {d.memory_in_use(), d.live_allocations()}; }

// Both ways to free (synchronous, stream-ordered) refuse `ptr` and change nothing.
void refused_both_ways(MockDriver& d, StreamHandle s, DevicePtr ptr, const char* what) {
  const Snapshot before = snapshot(d);
  Status now = d.mem_free(ptr);
  Status ordered = d.mem_free_async(ptr, s);
  if (now.code != Code::invalid_value || ordered.code != Code::invalid_value)
    std::fprintf(stderr, "freeing %s: mem_free -> %d, mem_free_async -> %d\n", what, now.code, ordered.code);
  CHECK(now.code == Code::invalid_value);
  CHECK(ordered.code == Code::invalid_value);
  CHECK_OK(d.stream_synchronize(s));  // no asynchronous error was queued either
  CHECK(snapshot(d) == before);
}

void eager_ranges_that_are_not_live() {
  MockDriver d(0);
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  DevicePtr a = 0, b = 0;
  CHECK_OK(d.mem_alloc(1024, &a));
  CHECK_OK(d.mem_alloc(512, &b));
  CHECK_OK(d.memset_d32(a, 0x01020304, 256));
  refused_both_ways(d, s, 0, "null");
  refused_both_ways(d, s, 0x42, "an unknown address");
  refused_both_ways(d, s, a + 4, "an interior pointer");
  refused_both_ways(d, s, a + 256, "an interior pointer on an alignment boundary");
  refused_both_ways(d, s, a + 1024, "one past the end of an allocation");
  refused_both_ways(d, s, b + 512 + 256, "past the last allocation");
  // a is untouched by all that.
  std::uint32_t word = 0;
  CHECK_OK(d.memcpy_dtoh(&word, a + 1020, 4));
  CHECK(word == 0x01020304);
  // A stream-ordered free of a live allocation is accepted, and then the range is not live.
  CHECK_OK(d.mem_free_async(a, s));
  CHECK_OK(d.stream_synchronize(s));
  CHECK(d.live_allocations() == 1);
  refused_both_ways(d, s, a, "an allocation already freed (stream-ordered)");
  CHECK_OK(d.mem_free(b));
  refused_both_ways(d, s, b, "an allocation already freed");
  CHECK(d.memory_in_use() == 0 && d.live_allocations() == 0);
}

void graph_allocations_that_are_not_backed() {
  MockDriver d(0);
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  CHECK_OK(d.stream_begin_capture(s, CaptureMode::global));
  DevicePtr kept = 0;
  CHECK_OK(d.mem_alloc_async(64, s, &kept));  // a memory node the graph does not free
  CHECK_OK(d.memset_d32_async(kept, 5, 16, s));
  GraphHandle g{};
  CHECK_OK(d.stream_end_capture(s, &g));
  GraphExecHandle e{};
  CHECK_OK(d.graph_instantiate(g, &e));
  // The address is fixed but nothing backs it until a launch runs the node.
  refused_both_ways(d, s, kept, "a graph allocation before its graph ran");
  CHECK_OK(d.graph_launch(e, s));
  CHECK_OK(d.stream_synchronize(s));
  CHECK(d.live_allocations() == 1);
  refused_both_ways(d, s, kept + 4, "inside a backed graph allocation");
  CHECK_OK(d.mem_free(kept));
  CHECK(d.live_allocations() == 0 && d.memory_in_use() == 0);
  // Freed again: the graph keeps the address for its next launch, but it is not live.
  refused_both_ways(d, s, kept, "a graph allocation already freed");
  CHECK_OK(d.graph_launch(e, s));  // the node backs it again
  CHECK_OK(d.stream_synchronize(s));
  CHECK_OK(d.mem_free_async(kept, s));
  CHECK_OK(d.stream_synchronize(s));
  CHECK(d.live_allocations() == 0);
  CHECK_OK(d.graph_exec_destroy(e));
  CHECK_OK(d.graph_destroy(g));
}

}  // namespace

int main() {
  eager_ranges_that_are_not_live();
  graph_allocations_that_are_not_backed();
  return lifecore::test_support::finish("mock_free_not_live_test");
}
