// An executable graph holding memory nodes cannot be updated in place (CUDA: not supported),
// and the mock says so before looking at anything else: even when a later node differs as
// well (another kernel), the answer is not_supported, and the executable graph is unchanged.
#include <bit>
#include <cstdio>
#include <vector>

#include "driver/mock/mock_driver.hpp"
#include "mock_kernels.hpp"
#include "test_support.hpp"

using namespace lifecore::driver;
using namespace lifecore::test_support;

namespace {

constexpr std::uint32_t n = 16;

struct Fixture {
  MockDriver d{0};
  StreamHandle s{};
  DevicePtr x = 0, y = 0;
  Fixture() {
    CHECK_OK(d.stream_create(&s));
    CHECK_OK(d.mem_alloc(4 * n, &x));
    CHECK_OK(d.mem_alloc(4 * n, &y));
    CHECK_OK(d.memset_d32(x, std::bit_cast<std::uint32_t>(1.0f), n));
    CHECK_OK(d.memset_d32(y, 0, n));
  }
  // A graph: a memory-alloc node, a free of it, then one launch of `kernel` writing y.
  GraphHandle capture(const char* kernel, float a) {
    const FunctionHandle function = get_kernel(d, kernel);  // a module load inside a capture is refused
    CHECK_OK(d.stream_begin_capture(s, CaptureMode::global));
    DevicePtr scratch = 0;
    CHECK_OK(d.mem_alloc_async(4 * n, s, &scratch));
    CHECK_OK(d.mem_free_async(scratch, s));
    CHECK_OK(d.launch_kernel(function, {1}, {n}, 0, s, {u32(n), f32(a), ptr(x), ptr(y)}));
    GraphHandle g{};
    CHECK_OK(d.stream_end_capture(s, &g));
    return g;
  }
  float y0() {
    float value = -1;
    CHECK_OK(d.memcpy_dtoh(&value, y, 4));
    return value;
  }
};

void memory_nodes_come_first_in_the_update_verdict() {
  Fixture f;
  GraphHandle g1 = f.capture("scale_f32", 2.0f);
  GraphHandle same_shape = f.capture("scale_f32", 5.0f);
  GraphHandle other_kernel = f.capture("axpy_f32", 5.0f);
  GraphExecHandle e{};
  CHECK_OK(f.d.graph_instantiate(g1, &e));
  GraphUpdateResult result = GraphUpdateResult::success;
  CHECK_OK(f.d.graph_exec_update(e, same_shape, &result));  // a refusal is an answer
  CHECK(result == GraphUpdateResult::not_supported);
  result = GraphUpdateResult::success;
  CHECK_OK(f.d.graph_exec_update(e, other_kernel, &result));
  CHECK(result == GraphUpdateResult::not_supported);
  // Nothing changed: the executable graph still scales by 2.
  CHECK_OK(f.d.graph_launch(e, f.s));
  CHECK_OK(f.d.stream_synchronize(f.s));
  CHECK(f.y0() == 2.0f);
  CHECK_OK(f.d.graph_exec_destroy(e));
  for (GraphHandle g : {g1, same_shape, other_kernel}) CHECK_OK(f.d.graph_destroy(g));
}

}  // namespace

int main() {
  memory_nodes_come_first_in_the_update_verdict();
  return lifecore::test_support::finish("mock_graph_update_memory_nodes_test");
}
