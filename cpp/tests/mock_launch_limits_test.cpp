// The mock driver's launch limits at their exact boundaries, as CUDA documents them: at most
// 1024 threads per block with block z at most 64, a grid of at most (2^31 - 1, 65535, 65535)
// blocks, 48 KiB of static shared memory, and a 4-byte argument whose bits fit 32. The last
// value inside each limit is accepted (and runs), the first one outside is invalid_value.
#include <bit>
#include <cstdio>
#include <string>
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
  DevicePtr x = 0, out = 0;
  FunctionHandle scale{};
  Fixture() {
    CHECK_OK(d.stream_create(&s));
    CHECK_OK(d.mem_alloc(4 * n, &x));
    CHECK_OK(d.mem_alloc(4 * n, &out));
    CHECK_OK(d.memset_d32(x, std::bit_cast<std::uint32_t>(1.5f), n));
    scale = get_kernel(d, "scale_f32");
  }
  Status launch(Dim3 grid, Dim3 block, std::uint32_t shared = 0, KernelArg count = u32(n)) {
    return d.launch_kernel(scale, grid, block, shared, s, {count, f32(2.0f), ptr(x), ptr(out)});
  }
  // Accepted, and it ran: out holds 2 * 1.5 in every element it covered.
  void accepted(Dim3 grid, Dim3 block, std::uint32_t shared = 0, KernelArg count = u32(n)) {
    CHECK_OK(d.memset_d32(out, 0, n));
    Status status = launch(grid, block, shared, count);
    if (!status.ok())
      std::fprintf(stderr, "refused grid (%u,%u,%u) block (%u,%u,%u) shared %u: %s\n", grid.x, grid.y, grid.z,
                   block.x, block.y, block.z, shared, status.message.c_str());
    CHECK_OK(status);
    CHECK_OK(d.stream_synchronize(s));
    float value = 0;
    CHECK_OK(d.memcpy_dtoh(&value, out, 4));
    CHECK(value == 3.0f);
  }
  void refused(Dim3 grid, Dim3 block, std::uint32_t shared = 0, KernelArg count = u32(n)) {
    CHECK_OK(d.memset_d32(out, 0, n));
    Status status = launch(grid, block, shared, count);
    if (status.code != Code::invalid_value)
      std::fprintf(stderr, "not refused: grid (%u,%u,%u) block (%u,%u,%u) shared %u: %d\n", grid.x, grid.y, grid.z,
                   block.x, block.y, block.z, shared, status.code);
    CHECK(status.code == Code::invalid_value);
    CHECK_OK(d.stream_synchronize(s));  // nothing was queued
    float value = -1;
    CHECK_OK(d.memcpy_dtoh(&value, out, 4));
    CHECK(value == 0.0f);
  }
};

void block_thread_limit() {
  Fixture f;
  f.accepted({1, 1, 1}, {1024, 1, 1});
  f.refused({1, 1, 1}, {1025, 1, 1});
  f.accepted({n, 1, 1}, {1, 1024, 1});
  f.refused({n, 1, 1}, {1, 1025, 1});
  f.accepted({1, 1, 1}, {32, 32, 1});
  f.refused({1, 1, 1}, {33, 32, 1});
  f.refused({1, 1, 1}, {32, 33, 1});
  f.accepted({1, 1, 1}, {16, 1, 64});   // z at its limit, 1024 threads
  f.refused({1, 1, 1}, {17, 1, 64});    // 1088 threads
  f.refused({n, 1, 1}, {1, 1, 65});     // z past 64 with few threads
  f.accepted({n, 1, 1}, {1, 16, 64});
  f.refused({n, 1, 1}, {1, 17, 64});
  // A product that would wrap 32 bits is still refused.
  f.refused({1, 1, 1}, {65536, 65536, 1});
}

void grid_dimension_limits() {
  Fixture f;
  f.accepted({0x7fffffffu, 1, 1}, {1, 1, 1});
  f.refused({0x80000000u, 1, 1}, {1, 1, 1});
  f.accepted({n, 65535, 1}, {1, 1, 1});
  f.refused({n, 65536, 1}, {1, 1, 1});
  f.accepted({n, 1, 65535}, {1, 1, 1});
  f.refused({n, 1, 65536}, {1, 1, 1});
  // Zero in any one of the six dimensions.
  f.refused({0, 1, 1}, {n, 1, 1});
  f.refused({1, 0, 1}, {n, 1, 1});
  f.refused({1, 1, 0}, {n, 1, 1});
  f.refused({1, 1, 1}, {0, 1, 1});
  f.refused({1, 1, 1}, {n, 0, 1});
  f.refused({1, 1, 1}, {n, 1, 0});
}

void shared_memory_and_argument_width() {
  Fixture f;
  f.accepted({1, 1, 1}, {n, 1, 1}, 48 * 1024);
  f.refused({1, 1, 1}, {n, 1, 1}, 48 * 1024 + 1);
  // u32 n: every 32-bit value fits (the kernel covers min(n, threads) elements); 2^32 does not.
  f.accepted({1, 1, 1}, {n, 1, 1}, 0, KernelArg{ArgKind::u32, 0xffffffffull});
  f.refused({1, 1, 1}, {n, 1, 1}, 0, KernelArg{ArgKind::u32, 0x100000000ull});
  f.refused({1, 1, 1}, {n, 1, 1}, 0, KernelArg{ArgKind::u32, ~0ull});
}

}  // namespace

int main() {
  block_thread_limit();
  grid_dimension_limits();
  shared_memory_and_argument_width();
  return lifecore::test_support::finish("mock_launch_limits_test");
}
