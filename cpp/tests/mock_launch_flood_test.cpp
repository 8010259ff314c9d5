// The mock stream worker under a flood of launches from several threads: every submitted item
// runs, each stream runs its items in submission order, synchronize waits for all of them, and
// an injected fault still fails exactly the chosen call. Also prints the eager launch cost.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "driver/mock/mock_driver.hpp"
#include "mock_kernels.hpp"
#include "test_support.hpp"

using namespace lifecore::driver;
using namespace lifecore::test_support;

namespace {

constexpr int kThreads = 4;
constexpr std::uint32_t kSteps = 4000;

std::vector<float> read_floats(MockDriver& d, DevicePtr p, std::size_t n) {
  std::vector<float> out(n, -1.0f);
  CHECK_OK(d.memcpy_dtoh(out.data(), p, n * 4));
  return out;
}

// Each thread floods its own stream: step i sets x to i (memset) and a launch copies x into
// slot i. Slot i holds i only when memset i ran before launch i and memset i + 1 after it.
void test_order_per_stream() {
  MockDriver d(0);
  FunctionHandle scale = get_kernel(d, "scale_f32");
  std::vector<StreamHandle> streams(kThreads);
  std::vector<DevicePtr> xs(kThreads), slots(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    CHECK_OK(d.stream_create(&streams[t]));
    CHECK_OK(d.mem_alloc(4, &xs[t]));
    CHECK_OK(d.mem_alloc(kSteps * 4, &slots[t]));
    CHECK_OK(d.memset_d32(slots[t], std::bit_cast<std::uint32_t>(-1.0f), kSteps));
  }
  std::vector<int> failed(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<KernelArg> args{u32(1), f32(1.0f), ptr(xs[t]), ptr(0)};
      for (std::uint32_t i = 0; i < kSteps; ++i) {
        if (!d.memset_d32_async(xs[t], std::bit_cast<std::uint32_t>(float(i)), 1, streams[t]).ok()) ++failed[t];
        args[3] = ptr(slots[t] + DevicePtr{i} * 4);
        if (!d.launch_kernel(scale, {1, 1, 1}, {1, 1, 1}, 0, streams[t], args).ok()) ++failed[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    CHECK(failed[t] == 0);
    CHECK_OK(d.stream_synchronize(streams[t]));
    CHECK_OK(d.stream_query(streams[t]));
    std::vector<float> got = read_floats(d, slots[t], kSteps);
    std::uint32_t wrong = 0;
    for (std::uint32_t i = 0; i < kSteps; ++i)
      if (got[i] != float(i)) ++wrong;
    if (wrong) std::fprintf(stderr, "stream %d: %u of %u slots out of order or missing\n", t, wrong, kSteps);
    CHECK(wrong == 0);
  }
}

// Several threads flood one stream: each launch adds 1 to a counter, so a lost item shows.
void test_shared_stream_counts_every_launch() {
  MockDriver d(0);
  FunctionHandle axpy = get_kernel(d, "axpy_f32");
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  DevicePtr one = 0, counter = 0;
  CHECK_OK(d.mem_alloc(4, &one));
  CHECK_OK(d.mem_alloc(4, &counter));
  CHECK_OK(d.memset_d32(one, std::bit_cast<std::uint32_t>(1.0f), 1));
  CHECK_OK(d.memset_d32(counter, 0, 1));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      const std::vector<KernelArg> args{u32(1), f32(1.0f), ptr(one), ptr(counter)};
      for (std::uint32_t i = 0; i < kSteps; ++i) CHECK_OK(d.launch_kernel(axpy, {1, 1, 1}, {1, 1, 1}, 0, s, args));
    });
  }
  // A synchronize racing the flood returns; the final one (after the joins) waits for all.
  CHECK_OK(d.stream_synchronize(s));
  for (auto& thread : threads) thread.join();
  CHECK_OK(d.stream_synchronize(s));
  CHECK(read_floats(d, counter, 1)[0] == float(kThreads * kSteps));
}

// Held workers keep a flood pending (no item runs early); releasing them runs all of it.
void test_held_flood_then_release() {
  MockDriver d(0);
  FunctionHandle axpy = get_kernel(d, "axpy_f32");
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  DevicePtr one = 0, counter = 0;
  CHECK_OK(d.mem_alloc(4, &one));
  CHECK_OK(d.mem_alloc(4, &counter));
  CHECK_OK(d.memset_d32(one, std::bit_cast<std::uint32_t>(1.0f), 1));
  CHECK_OK(d.memset_d32(counter, 0, 1));
  d.pause_streams();
  const std::vector<KernelArg> args{u32(1), f32(1.0f), ptr(one), ptr(counter)};
  for (int i = 0; i < 1000; ++i) CHECK_OK(d.launch_kernel(axpy, {1, 1, 1}, {1, 1, 1}, 0, s, args));
  CHECK(d.stream_query(s).code == Code::not_ready);
  d.resume_streams();
  CHECK_OK(d.stream_synchronize(s));
  CHECK(read_floats(d, counter, 1)[0] == 1000.0f);
}

// A fault on the n-th launch fails that call only, in the middle of a flood.
void test_fault_in_flood() {
  MockDriver d(0);
  FunctionHandle axpy = get_kernel(d, "axpy_f32");
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  DevicePtr one = 0, counter = 0;
  CHECK_OK(d.mem_alloc(4, &one));
  CHECK_OK(d.mem_alloc(4, &counter));
  CHECK_OK(d.memset_d32(one, std::bit_cast<std::uint32_t>(1.0f), 1));
  CHECK_OK(d.memset_d32(counter, 0, 1));
  d.fault_injection()->inject(Operation::launch_kernel, mock::mock_native(Code::invalid_value), 777, 1);
  const std::vector<KernelArg> args{u32(1), f32(1.0f), ptr(one), ptr(counter)};
  int failed_at = -1, failures_seen = 0;
  for (int i = 0; i < 2000; ++i) {
    if (!d.launch_kernel(axpy, {1, 1, 1}, {1, 1, 1}, 0, s, args).ok()) {
      failed_at = i;
      ++failures_seen;
    }
  }
  CHECK(failed_at == 777);
  CHECK(failures_seen == 1);
  CHECK_OK(d.stream_synchronize(s));
  CHECK(read_floats(d, counter, 1)[0] == 1999.0f);
}

// Not a check: the eager launch cost on one stream, synchronized at the end.
void report_launch_cost() {
  MockDriver d(0);
  FunctionHandle scale = get_kernel(d, "scale_f32");
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  DevicePtr x = 0;
  CHECK_OK(d.mem_alloc(64, &x));
  const std::vector<KernelArg> args{u32(16), f32(1.0f), ptr(x), ptr(x)};
  constexpr int n = 20000;
  std::vector<double> rounds;
  for (int round = 0; round < 7; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) (void)d.launch_kernel(scale, {1, 1, 1}, {16, 1, 1}, 0, s, args);
    CHECK_OK(d.stream_synchronize(s));
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / n;
    rounds.push_back(us);
  }
  std::sort(rounds.begin(), rounds.end());
  std::printf("mock eager launch: median %.3f us per launch (min %.3f, max %.3f; 7 x %d)\n", rounds[3], rounds.front(),
              rounds.back(), n);
}

}  // namespace

int main() {
  test_order_per_stream();
  test_shared_stream_counts_every_launch();
  test_held_flood_then_release();
  test_fault_in_flood();
  report_launch_cost();
  return finish("mock_launch_flood_test");
}
