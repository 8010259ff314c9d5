// The mock driver's fault injection: every operation passes one gate that counts calls and
// fails the chosen ones with the chosen code, doing nothing else.
#include <bit>
#include <cstdio>
#include <string>
#include <vector>

#include "driver/mock/mock_driver.hpp"
#include "lifecore/driver/registry.hpp"
#include "mock_kernels.hpp"
#include "test_support.hpp"

using namespace lifecore::driver;
using namespace lifecore::test_support;

namespace {

void test_after_and_times() {
  MockDriver d(0);
  FaultInjection* faults = d.fault_injection();
  CHECK(faults != nullptr);
  CHECK(faults->call_count(Operation::mem_alloc) == 0);
  // Calls 1 and 2 from now fail (after = 1, times = 2); 0 and 3 succeed.
  faults->inject(Operation::mem_alloc, mock::mock_native(Code::out_of_memory), 1, 2);
  DevicePtr p = 0;
  CHECK_OK(d.mem_alloc(16, &p));
  DevicePtr untouched = 0xabc;
  Status first = d.mem_alloc(16, &untouched);
  CHECK(first.code == Code::out_of_memory);
  CHECK(first.name == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(first.call == "mockMemAlloc");
  CHECK(first.message == "injected fault");
  CHECK(untouched == 0xabc);          // did nothing else
  CHECK(d.live_allocations() == 1);   // nothing allocated
  CHECK(d.mem_alloc(16, &untouched).code == Code::out_of_memory);
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
  faults->inject(Operation::launch_kernel, mock::mock_native(Code::unknown), 0, 1);
  Status launch = d.launch_kernel(axpy, {1}, {16}, 0, s, {u32(16), f32(1.0f), ptr(x), ptr(y)});
  CHECK(launch.code == Code::unknown && launch.call == "mockLaunchKernel" && !launch.sticky);
  CHECK_OK(d.launch_kernel(axpy, {1}, {16}, 0, s, {u32(16), f32(1.0f), ptr(x), ptr(y)}));
  CHECK_OK(d.stream_synchronize(s));
  float v = 0;
  CHECK_OK(d.memcpy_dtoh(&v, y, 4));
  CHECK(v == 1.0f);


  // Capture operations go through the gate too; an injected begin leaves the stream idle.
  faults->inject(Operation::stream_begin_capture, mock::mock_native(Code::capture_unsupported), 0, 1);
  CHECK(d.stream_begin_capture(s, CaptureMode::global).code == Code::capture_unsupported);
  CaptureStatus status = CaptureStatus::active;
  CHECK_OK(d.stream_capture_info(s, &status, nullptr));
  CHECK(status == CaptureStatus::none);
  CHECK_OK(d.stream_begin_capture(s, CaptureMode::global));
  CHECK_OK(d.launch_kernel(axpy, {1}, {16}, 0, s, {u32(16), f32(1.0f), ptr(x), ptr(y)}));
  // A failed end does what the driver documents: a wrong-thread end (or any other failure but
  // 901) leaves the capture running; see test_failed_ends_and_sticky_statuses for 901.
  faults->inject(Operation::stream_end_capture, mock::mock_native(Code::capture_wrong_thread), 0, 1);
  GraphHandle g{7};
  CHECK(d.stream_end_capture(s, &g).code == Code::capture_wrong_thread);
  CHECK(g == GraphHandle{0});
  CHECK_OK(d.stream_capture_info(s, &status, nullptr));
  CHECK(status == CaptureStatus::active);  // still open
  CHECK_OK(d.stream_end_capture(s, &g));
  GraphExecHandle e{};
  faults->inject(Operation::graph_instantiate, mock::mock_native(Code::out_of_memory), 0, 1);
  CHECK(d.graph_instantiate(g, &e).code == Code::out_of_memory);
  CHECK_OK(d.graph_instantiate(g, &e));
  faults->inject(Operation::graph_launch, mock::mock_native(Code::unknown), 1, 1);
  CHECK_OK(d.graph_launch(e, s));
  CHECK(d.graph_launch(e, s).code == Code::unknown);
  CHECK_OK(d.stream_synchronize(s));
  CHECK_OK(d.memcpy_dtoh(&v, y, 4));
  CHECK(v == 2.0f);  // one eager launch + exactly one replay
  CHECK(faults->call_count(Operation::graph_launch) == 2);

  // clear() drops pending faults, not counts.
  faults->inject(Operation::memcpy_dtoh, mock::mock_native(Code::illegal_address), 0, 5);
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
  CHECK(d.device_name(&name).native_code == 999 && name.empty());
  faults->inject(Operation::event_create, 999, 0, 1);
  EventHandle ev{};
  CHECK(d.event_create(&ev, EventTiming::enabled).native_code == 999);
  faults->inject(Operation::thread_exchange_capture_mode, 999, 0, 1);
  CaptureMode mode = CaptureMode::relaxed;
  CHECK(d.thread_exchange_capture_mode(&mode).native_code == 999 && mode == CaptureMode::relaxed);
  faults->inject(Operation::graph_exec_destroy, 999, 0, 1);
  CHECK(d.graph_exec_destroy(e).native_code == 999);
  CHECK_OK(d.graph_exec_destroy(e));
  // times = UINT64_MAX: every call from then on, until clear().
  faults->inject(Operation::stream_query, mock::mock_native(Code::unknown), 2, ~std::uint64_t{0});
  CHECK_OK(d.stream_query(s));
  CHECK_OK(d.stream_query(s));
  for (int i = 0; i < 5; ++i) CHECK(d.stream_query(s).code == Code::unknown);
  faults->clear();
  CHECK_OK(d.stream_query(s));
}

}  // namespace

// The mock follows the driver documentation on failures that change state: an end reporting
// 901 ends the capture sequence (null graph); a sticky status (per backend, in the status
// mapping) loses the device, and every later call returns it.
void test_failed_ends_and_sticky_statuses() {
  auto cuda_sticky = backend_descriptor("cuda").naming.sticky;
  auto hip_sticky = backend_descriptor("hip").naming.sticky;
  CHECK(cuda_sticky(719) && cuda_sticky(700) && cuda_sticky(702) && cuda_sticky(710) && cuda_sticky(714) &&
        cuda_sticky(718) && cuda_sticky(911));
  CHECK(!cuda_sticky(1) && !cuda_sticky(2) && !cuda_sticky(801) && !cuda_sticky(901) && !cuda_sticky(908) &&
        !cuda_sticky(999) && !cuda_sticky(720));
  CHECK(hip_sticky(719) && hip_sticky(700) && hip_sticky(702) && hip_sticky(710));
  CHECK(!hip_sticky(714) && !hip_sticky(2) && !hip_sticky(999));
  // The mock's stickiness is CUDA's.
  CHECK(mock::mock_native_status(719, "x").sticky && !mock::mock_native_status(999, "x").sticky);
  CHECK(mock::mock_native_status(714, "x").sticky);

  MockDriver d(0);
  FaultInjection* faults = d.fault_injection();
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  CHECK_OK(d.stream_begin_capture(s, CaptureMode::thread_local_));
  faults->inject(Operation::stream_end_capture, mock::mock_native(Code::capture_invalidated), 0, 1);
  GraphHandle g{7};
  CHECK(d.stream_end_capture(s, &g).code == Code::capture_invalidated);
  CHECK(g == GraphHandle{0});
  CaptureStatus status = CaptureStatus::active;
  CHECK_OK(d.stream_capture_info(s, &status, nullptr));
  CHECK(status == CaptureStatus::none);  // ended: a second end finds nothing to end
  CHECK(d.stream_end_capture(s, &g).code == Code::illegal_state);

  // A recoverable injected status fails one call; a sticky one loses the device.
  faults->inject(Operation::event_create, mock::mock_native(Code::unknown), 0, 1);
  EventHandle e{};
  CHECK(d.event_create(&e, EventTiming::enabled).code == Code::unknown);
  CHECK_OK(d.event_create(&e, EventTiming::enabled));
  faults->inject(Operation::event_record, mock::mock_native(Code::launch_failure), 0, 1);
  Status lost = d.event_record(e, s);
  CHECK(lost.code == Code::launch_failure && lost.sticky);
  faults->clear();  // clearing faults does not bring a lost device back
  Status later = d.stream_synchronize(s);
  CHECK(later.code == Code::launch_failure && later.sticky && contains(later.message, "lost"));
  DevicePtr p = 0;
  CHECK(d.mem_alloc(16, &p).code == Code::launch_failure && p == 0);
  CHECK(d.stream_begin_capture(s, CaptureMode::global).code == Code::launch_failure);
}

int main() {
  test_after_and_times();
  test_stream_ops_and_clear();
  test_failed_ends_and_sticky_statuses();
  return lifecore::test_support::finish("mock_fault_injection_test");
}
