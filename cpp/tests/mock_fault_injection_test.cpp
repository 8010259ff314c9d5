// The mock driver's fault injection: every operation passes one gate that counts calls and
// fails the chosen ones with the chosen code, doing nothing else.
#include <bit>
#include <cstdio>
#include <string>
#include <vector>

#include "vendor/mock/mock_driver.hpp"
#include "mock_kernels.hpp"
#include "test_support.hpp"

using namespace lifecore::vendor;
using namespace lifecore::test_support;

namespace {

void test_after_and_times() {
  MockDriver d(0);
  FaultInjection* faults = d.fault_injection();
  CHECK(faults != nullptr);
  CHECK(faults->call_count(Operation::mem_alloc) == 0);
  // Calls 1 and 2 from now fail (after = 1, times = 2); 0 and 3 succeed.
  faults->inject(Operation::mem_alloc, status_code::out_of_memory, 1, 2);
  DevicePtr p = 0;
  CHECK_OK(d.mem_alloc(16, &p));
  DevicePtr untouched = 0xabc;
  Status first = d.mem_alloc(16, &untouched);
  CHECK(first.code == status_code::out_of_memory);
  CHECK(first.name == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(first.call == "mockMemAlloc");
  CHECK(first.message == "injected fault");
  CHECK(untouched == 0xabc);          // did nothing else
  CHECK(d.live_allocations() == 1);   // nothing allocated
  CHECK(d.mem_alloc(16, &untouched).code == status_code::out_of_memory);
  CHECK_OK(d.mem_alloc(16, &untouched));
  CHECK(faults->call_count(Operation::mem_alloc) == 4);  // failed calls count too
  CHECK(d.live_allocations() == 2);
}

void test_stream_ops_and_clear() {
  MockDriver d(0);
  FaultInjection* faults = d.fault_injection();
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  DevicePtr x = 0, y = 0;
  CHECK_OK(d.mem_alloc(64, &x));
  CHECK_OK(d.mem_alloc(64, &y));
  CHECK_OK(d.memset_d32(y, 0, 16));
  CHECK_OK(d.memset_d32(x, std::bit_cast<std::uint32_t>(1.0f), 16));
  ModuleHandle m{};
  CHECK_OK(d.module_load(ModuleImage{}, &m));
  FunctionHandle axpy{};
  CHECK_OK(d.module_get_function(m, "axpy_f32", &axpy));

  // A failed launch enqueues nothing.
  faults->inject(Operation::launch_kernel, status_code::launch_failed, 0, 1);
  Status launch = d.launch_kernel(axpy, {1}, {16}, 0, s, {u32(16), f32(1.0f), ptr(x), ptr(y)});
  CHECK(launch.code == status_code::launch_failed && launch.call == "mockLaunchKernel");
  CHECK_OK(d.launch_kernel(axpy, {1}, {16}, 0, s, {u32(16), f32(1.0f), ptr(x), ptr(y)}));
  CHECK_OK(d.stream_synchronize(s));
  float v = 0;
  CHECK_OK(d.memcpy_dtoh(&v, y, 4));
  CHECK(v == 1.0f);

  // A sync that fails by injection does not consume the stream's asynchronous error.
  CHECK_OK(d.memcpy_htod_async(x + 60, &v, 8, s));  // out of range: 700 at sync
  faults->inject(Operation::stream_synchronize, status_code::unknown, 0, 1);
  Status injected = d.stream_synchronize(s);
  CHECK(injected.code == status_code::unknown && injected.call == "mockStreamSynchronize");
  CHECK(d.stream_synchronize(s).code == status_code::illegal_address);
  CHECK_OK(d.stream_synchronize(s));

  // Capture operations go through the gate too; an injected begin leaves the stream idle.
  faults->inject(Operation::stream_begin_capture, status_code::capture_unsupported, 0, 1);
  CHECK(d.stream_begin_capture(s, CaptureMode::global).code == status_code::capture_unsupported);
  CaptureStatus status = CaptureStatus::active;
  CHECK_OK(d.stream_capture_info(s, &status, nullptr));
  CHECK(status == CaptureStatus::none);
  CHECK_OK(d.stream_begin_capture(s, CaptureMode::global));
  CHECK_OK(d.launch_kernel(axpy, {1}, {16}, 0, s, {u32(16), f32(1.0f), ptr(x), ptr(y)}));
  faults->inject(Operation::stream_end_capture, status_code::capture_invalidated, 0, 1);
  GraphHandle g{7};
  CHECK(d.stream_end_capture(s, &g).code == status_code::capture_invalidated);
  CHECK(g == GraphHandle{7});  // the fault did nothing: the capture is still open
  CHECK_OK(d.stream_end_capture(s, &g));
  GraphExecHandle e{};
  faults->inject(Operation::graph_instantiate, status_code::out_of_memory, 0, 1);
  CHECK(d.graph_instantiate(g, &e).code == status_code::out_of_memory);
  CHECK_OK(d.graph_instantiate(g, &e));
  faults->inject(Operation::graph_launch, status_code::launch_failed, 1, 1);
  CHECK_OK(d.graph_launch(e, s));
  CHECK(d.graph_launch(e, s).code == status_code::launch_failed);
  CHECK_OK(d.stream_synchronize(s));
  CHECK_OK(d.memcpy_dtoh(&v, y, 4));
  CHECK(v == 2.0f);  // one eager launch + exactly one replay
  CHECK(faults->call_count(Operation::graph_launch) == 2);

  // clear() drops pending faults, not counts.
  faults->inject(Operation::memcpy_dtoh, status_code::illegal_address, 0, 5);
  faults->clear();
  CHECK_OK(d.memcpy_dtoh(&v, y, 4));
  CHECK(faults->call_count(Operation::memcpy_dtoh) == 3);
  // Code 0 or times 0 injects nothing.
  faults->inject(Operation::mem_info, 0, 0, 1);
  faults->inject(Operation::mem_info, 2, 0, 0);
  std::size_t free_bytes = 0, total = 0;
  CHECK_OK(d.mem_info(&free_bytes, &total));
  // Every operation name has a mock call name.
  for (const std::string& name : operation_names()) {
    Operation op{};
    CHECK(operation_from_name(name, &op));
    const std::string& call = mock::mock_call_name(op);
    CHECK(call.rfind("mock", 0) == 0 && call.find('_') == std::string::npos && call.size() > 4);
  }
  CHECK(mock::mock_call_name(Operation::memcpy_htod_async) == "mockMemcpyHtodAsync");
  // And every operation is gated: inject on each, call a representative few.
  faults->inject(Operation::device_name, 999, 0, 1);
  std::string name;
  CHECK(d.device_name(&name).code == 999 && name.empty());
  faults->inject(Operation::event_create, 999, 0, 1);
  EventHandle ev{};
  CHECK(d.event_create(&ev).code == 999);
  faults->inject(Operation::thread_exchange_capture_mode, 999, 0, 1);
  CaptureMode mode = CaptureMode::relaxed;
  CHECK(d.thread_exchange_capture_mode(&mode).code == 999 && mode == CaptureMode::relaxed);
  faults->inject(Operation::graph_exec_destroy, 999, 0, 1);
  CHECK(d.graph_exec_destroy(e).code == 999);
  CHECK_OK(d.graph_exec_destroy(e));
  // times = UINT64_MAX: every call from then on, until clear().
  faults->inject(Operation::stream_query, status_code::unknown, 2, ~std::uint64_t{0});
  CHECK_OK(d.stream_query(s));
  CHECK_OK(d.stream_query(s));
  for (int i = 0; i < 5; ++i) CHECK(d.stream_query(s).code == status_code::unknown);
  faults->clear();
  CHECK_OK(d.stream_query(s));
}

}  // namespace

int main() {
  test_after_and_times();
  test_stream_ops_and_clear();
  return lifecore::test_support::finish("mock_fault_injection_test");
}
