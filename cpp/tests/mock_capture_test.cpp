// The mock driver's capture and graphs: CUDA's mode rules, invalidation, memory nodes,
// replay and exec update.
#include <atomic>
#include <bit>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "driver/mock/mock_driver.hpp"
#include "mock_kernels.hpp"
#include "test_support.hpp"

using namespace lifecore::driver;
using namespace lifecore::test_support;

namespace {

float read_float(MockDriver& d, DevicePtr p, std::size_t index = 0) {
  float value = -1;
  CHECK_OK(d.memcpy_dtoh(&value, p + index * 4, 4));
  return value;
}

CaptureStatus capture_status(MockDriver& d, StreamHandle s, std::uint64_t* id = nullptr) {
  CaptureStatus status = CaptureStatus::none;
  CHECK_OK(d.stream_capture_info(s, &status, id));
  return status;
}

struct Fixture {
  MockDriver d{0};
  StreamHandle s{}, other{};
  DevicePtr x = 0, y = 0;
  FunctionHandle axpy{};
  Fixture() {
    CHECK_OK(d.stream_create(&s));
    CHECK_OK(d.stream_create(&other));
    CHECK_OK(d.mem_alloc(64, &x));
    CHECK_OK(d.mem_alloc(64, &y));
    CHECK_OK(d.memset_d32(x, std::bit_cast<std::uint32_t>(1.0f), 16));
    CHECK_OK(d.memset_d32(y, 0, 16));
    axpy = get_kernel(d, "axpy_f32");
  }
  Status launch_axpy(StreamHandle on, float a = 1.0f) {
    return d.launch_kernel(axpy, {1}, {16}, 0, on, {u32(16), f32(a), ptr(x), ptr(y)});
  }
};

void test_capture_records_and_replays() {
  Fixture f;
  std::uint64_t id = 0;
  CHECK(capture_status(f.d, f.s, &id) == CaptureStatus::none);
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::global));
  CHECK(capture_status(f.d, f.s, &id) == CaptureStatus::active);
  CHECK(id != 0);
  std::vector<float> input(16, 2.0f);
  CHECK_OK(f.d.memcpy_htod_async(f.x, input.data(), 64, f.s));  // a node: reads `input` at replay
  CHECK_OK(f.launch_axpy(f.s));
  Status again = f.d.stream_begin_capture(f.s, CaptureMode::global);
  CHECK(again.native_code == 401 && contains(again.message, "already capturing"));
  GraphHandle g{};
  CHECK_OK(f.d.stream_end_capture(f.s, &g));
  CHECK(g != GraphHandle{0});
  CHECK(capture_status(f.d, f.s) == CaptureStatus::none);
  // Recorded, not executed.
  CHECK(read_float(f.d, f.x) == 1.0f);
  CHECK(read_float(f.d, f.y) == 0.0f);
  GraphNodeCounts counts;
  CHECK_OK(f.d.graph_node_counts(g, &counts));
  CHECK(counts.total == 2 && counts.mem_alloc == 0 && counts.mem_free == 0);

  GraphExecHandle e{};
  CHECK_OK(f.d.graph_instantiate(g, &e));
  CHECK_OK(f.d.graph_upload(e, f.s));
  CHECK_OK(f.d.graph_launch(e, f.s));
  CHECK_OK(f.d.stream_synchronize(f.s));
  CHECK(read_float(f.d, f.y, 15) == 2.0f);
  // The host input is read at replay time: rewrite it, replay again.
  for (float& v : input) v = 5.0f;
  CHECK_OK(f.d.graph_launch(e, f.s));
  CHECK_OK(f.d.stream_synchronize(f.s));
  CHECK(read_float(f.d, f.x, 3) == 5.0f);
  CHECK(read_float(f.d, f.y, 15) == 7.0f);
  // A replay on another stream works too; ordered by that stream.
  CHECK_OK(f.d.graph_launch(e, f.other));
  CHECK_OK(f.d.stream_synchronize(f.other));
  CHECK(read_float(f.d, f.y, 0) == 12.0f);

  // Ending a stream that is not capturing is an error, but not 901.
  GraphHandle none{};
  Status not_capturing = f.d.stream_end_capture(f.s, &none);
  CHECK(!not_capturing.ok() && not_capturing.native_code != 901);

  // Capture ids are unique across drivers in the process.
  MockDriver other_device(1);
  StreamHandle s2{};
  CHECK_OK(other_device.stream_create(&s2));
  CHECK_OK(other_device.stream_begin_capture(s2, CaptureMode::relaxed));
  std::uint64_t id2 = 0;
  capture_status(other_device, s2, &id2);
  CHECK(id2 != id && id2 != 0);
  CHECK_OK(other_device.stream_end_capture(s2, &none));

  CHECK_OK(f.d.graph_destroy(g));
  CHECK(f.d.graph_node_counts(g, &counts).native_code == 400);
  CHECK_OK(f.d.graph_launch(e, f.s));  // the exec outlives its graph
  CHECK_OK(f.d.graph_exec_destroy(e));
  CHECK(f.d.graph_launch(e, f.s).native_code == 400);
  CHECK_OK(f.d.stream_synchronize(f.s));
}

void test_info_kernel_replay_reads_buffer() {
  Fixture f;
  DevicePtr info = 0;
  CHECK_OK(f.d.mem_alloc(8, &info));
  std::uint32_t words[2] = {4, std::bit_cast<std::uint32_t>(1.0f)};
  CHECK_OK(f.d.memcpy_htod(info, words, 8));
  FunctionHandle k = get_kernel(f.d, "axpy_info_f32");
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::thread_local_));
  CHECK_OK(f.d.launch_kernel(k, {1}, {32}, 0, f.s, {ptr(info), ptr(f.x), ptr(f.y)}));
  GraphHandle g{};
  CHECK_OK(f.d.stream_end_capture(f.s, &g));
  GraphExecHandle e{};
  CHECK_OK(f.d.graph_instantiate(g, &e));
  CHECK_OK(f.d.graph_launch(e, f.s));
  CHECK_OK(f.d.stream_synchronize(f.s));
  CHECK(read_float(f.d, f.y, 3) == 1.0f && read_float(f.d, f.y, 4) == 0.0f);
  words[0] = 8;
  words[1] = std::bit_cast<std::uint32_t>(10.0f);
  CHECK_OK(f.d.memcpy_htod(info, words, 8));
  CHECK_OK(f.d.graph_launch(e, f.s));
  CHECK_OK(f.d.stream_synchronize(f.s));
  CHECK(read_float(f.d, f.y, 3) == 11.0f && read_float(f.d, f.y, 7) == 10.0f && read_float(f.d, f.y, 8) == 0.0f);
}

// A conflicting call fails with 900 and invalidates; the stream then refuses work with 901
// and end capture returns 901 with a null graph, leaving the stream usable.
void expect_invalidated_and_recover(Fixture& f, const char* what) {
  CHECK(capture_status(f.d, f.s) == CaptureStatus::invalidated);
  Status refused = f.launch_axpy(f.s);
  if (refused.native_code != 901) std::fprintf(stderr, "  (%s)\n", what);
  CHECK(refused.native_code == 901);
  GraphHandle g{1};
  Status end = f.d.stream_end_capture(f.s, &g);
  CHECK(end.native_code == 901 && end.name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
  CHECK(g == GraphHandle{0});
  CHECK(capture_status(f.d, f.s) == CaptureStatus::none);
  CHECK_OK(f.launch_axpy(f.s));
  CHECK_OK(f.d.stream_synchronize(f.s));
}

void test_global_mode() {
  Fixture f;
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::global));
  // Same thread, another stream: a potentially unsafe call conflicts with a global capture.
  Status sync = f.d.stream_synchronize(f.other);
  CHECK(sync.native_code == 900 && sync.name == "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED" &&
        contains(sync.message, "invalidated"));
  expect_invalidated_and_recover(f, "global, same thread");

  // Another thread (default global mode) is refused too, and kills the capture.
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::global));
  Status from_thread;
  std::thread([&] { from_thread = f.d.stream_query(f.other); }).join();
  CHECK(from_thread.native_code == 900);
  expect_invalidated_and_recover(f, "global, other thread");

  // ... but not from a thread that switched itself to relaxed.
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::global));
  Status relaxed_sync, copy;
  std::thread([&] {
    CaptureMode mode = CaptureMode::relaxed;
    CHECK_OK(f.d.thread_exchange_capture_mode(&mode));
    CHECK(mode == CaptureMode::global);
    relaxed_sync = f.d.stream_synchronize(f.other);
    float v = 0;
    copy = f.d.memcpy_dtoh(&v, f.x, 4);
  }).join();
  CHECK_OK(relaxed_sync);
  CHECK_OK(copy);
  CHECK(capture_status(f.d, f.s) == CaptureStatus::active);
  // Synchronous copies, memsets, allocations and frees are potentially unsafe.
  float v = 0;
  CHECK(f.d.memcpy_dtoh(&v, f.x, 4).native_code == 900);
  expect_invalidated_and_recover(f, "global, memcpy");
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::global));
  DevicePtr p = 0;
  CHECK(f.d.mem_alloc(16, &p).native_code == 900);
  CHECK(f.d.mem_free(f.x).native_code == 900);
  CHECK(f.d.memset_d32(f.x, 0, 1).native_code == 900);
  ModuleHandle module{};
  CHECK(f.d.module_load(ModuleImage{}, &module).native_code == 900);  // as cuModuleLoadDataEx
  expect_invalidated_and_recover(f, "global, alloc");
  CHECK(read_float(f.d, f.x) == 1.0f);  // the refused memset did nothing
}

void test_thread_local_mode() {
  Fixture f;
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::thread_local_));
  // Other threads are not affected by a thread-local capture, whatever their mode.
  Status other_sync, other_alloc;
  std::thread([&] {
    other_sync = f.d.stream_synchronize(f.other);
    DevicePtr p = 0;
    other_alloc = f.d.mem_alloc(16, &p);
    if (other_alloc.ok()) f.d.mem_free(p);
  }).join();
  CHECK_OK(other_sync);
  CHECK_OK(other_alloc);
  CHECK(capture_status(f.d, f.s) == CaptureStatus::active);
  // Ending it from another thread: 908, and the capture stays.
  Status wrong_thread;
  std::thread([&] {
    GraphHandle g{};
    wrong_thread = f.d.stream_end_capture(f.s, &g);
  }).join();
  CHECK(wrong_thread.native_code == 908 && wrong_thread.name == "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD");
  CHECK(capture_status(f.d, f.s) == CaptureStatus::active);
  // The capturing thread itself conflicts.
  EventHandle ev{};
  CHECK_OK(f.d.event_create(&ev, EventTiming::enabled));
  CHECK(f.d.event_query(ev).native_code == 900);
  expect_invalidated_and_recover(f, "thread_local, same thread");

  // A thread_local capture does not conflict with its own thread once that thread is relaxed.
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::thread_local_));
  CaptureMode mode = CaptureMode::relaxed;
  CHECK_OK(f.d.thread_exchange_capture_mode(&mode));
  CHECK_OK(f.d.stream_synchronize(f.other));
  CHECK_OK(f.d.event_synchronize(ev));
  CHECK(capture_status(f.d, f.s) == CaptureStatus::active);
  CHECK_OK(f.d.thread_exchange_capture_mode(&mode));  // back to global
  CHECK(mode == CaptureMode::relaxed);
  GraphHandle g{};
  CHECK_OK(f.d.stream_end_capture(f.s, &g));
  mode = static_cast<CaptureMode>(7);
  CHECK(f.d.thread_exchange_capture_mode(&mode).code == Code::invalid_value);
}

void test_relaxed_mode() {
  Fixture f;
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::relaxed));
  // Nothing potentially unsafe conflicts with a relaxed capture...
  CHECK_OK(f.d.stream_synchronize(f.other));
  DevicePtr p = 0;
  CHECK_OK(f.d.mem_alloc(16, &p));
  CHECK_OK(f.d.mem_free(p));
  EventHandle ev{};
  CHECK_OK(f.d.event_create(&ev, EventTiming::enabled));
  CHECK_OK(f.d.event_record(ev, f.s));  // recorded into the capture
  CHECK(capture_status(f.d, f.s) == CaptureStatus::active);
  // ... but querying an event last recorded in the capture is necessarily illegal (907),
  Status captured = f.d.event_query(ev);
  CHECK(captured.native_code == 907 && captured.name == "CUDA_ERROR_CAPTURED_EVENT");
  CHECK(f.d.event_synchronize(ev).native_code == 907);
  // and so is synchronizing or querying the capturing stream itself (900, invalidates).
  Status own = f.d.stream_synchronize(f.s);
  CHECK(own.native_code == 900 && contains(own.message, "the stream this call acts on"));
  CHECK(capture_status(f.d, f.s) == CaptureStatus::invalidated);
  // A relaxed capture may be ended from another thread.
  Status end;
  GraphHandle g{1};
  std::thread([&] { end = f.d.stream_end_capture(f.s, &g); }).join();
  CHECK(end.native_code == 901 && g == GraphHandle{0});
  // Once the capture is gone the event is an ordinary event again.
  CHECK_OK(f.d.event_query(ev));
  // An eager stream waiting for an event last recorded in a live capture would join that
  // capture in CUDA: refused, not taken as an ordinary wait.
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::relaxed));
  CHECK_OK(f.d.event_record(ev, f.s));
  Status fork = f.d.stream_wait_event(f.d.stream_native_handle(f.other), ev);
  CHECK(fork.code == Code::not_supported && contains(fork.message, "join"));
  CHECK(capture_status(f.d, f.s) == CaptureStatus::active);
  CHECK_OK(f.d.stream_end_capture(f.s, &g));
  CHECK_OK(f.d.graph_destroy(g));
  CHECK_OK(f.d.stream_wait_event(f.d.stream_native_handle(f.other), ev));

  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::relaxed));
  CHECK(f.d.stream_query(f.s).native_code == 900);
  expect_invalidated_and_recover(f, "relaxed, own stream query");

  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::relaxed));
  CHECK_OK(f.launch_axpy(f.s));
  std::thread([&] { end = f.d.stream_end_capture(f.s, &g); }).join();
  CHECK_OK(end);
  CHECK(g != GraphHandle{0});
  CHECK(f.d.stream_begin_capture(f.s, static_cast<CaptureMode>(5)).code == Code::invalid_value);
}

void test_memory_nodes() {
  Fixture f;
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::thread_local_));
  DevicePtr scratch = 0;
  CHECK_OK(f.d.mem_alloc_async(64, f.s, &scratch));
  CHECK(scratch != 0 && scratch % 256 == 0);
  CHECK_OK(f.d.memcpy_dtod_async(scratch, f.x, 64, f.s));
  CHECK_OK(f.d.launch_kernel(f.axpy, {1}, {16}, 0, f.s, {u32(16), f32(3.0f), ptr(scratch), ptr(f.y)}));
  CHECK_OK(f.d.mem_free_async(scratch, f.s));
  GraphHandle g{};
  CHECK_OK(f.d.stream_end_capture(f.s, &g));
  GraphNodeCounts counts;
  CHECK_OK(f.d.graph_node_counts(g, &counts));
  CHECK(counts.total == 4 && counts.mem_alloc == 1 && counts.mem_free == 1);
  // Not backed until a launch runs the node.
  float v = 0;
  CHECK(f.d.memcpy_dtoh(&v, scratch, 4).code == Code::invalid_value);
  GraphExecHandle e{}, e2{};
  CHECK_OK(f.d.graph_instantiate(g, &e));
  CHECK(f.d.graph_instantiate(g, &e2).code == Code::invalid_value);  // one at a time
  CHECK_OK(f.d.graph_launch(e, f.s));
  CHECK_OK(f.d.graph_launch(e, f.s));  // the graph frees what it allocates: relaunch is fine
  CHECK_OK(f.d.stream_synchronize(f.s));
  CHECK(read_float(f.d, f.y, 9) == 6.0f);
  CHECK(f.d.live_allocations() == 2);
  CHECK_OK(f.d.graph_exec_destroy(e));
  CHECK_OK(f.d.graph_instantiate(g, &e2));
  CHECK_OK(f.d.graph_exec_destroy(e2));

  // A graph whose allocation outlives the launch: relaunch while it is live -> invalid_value.
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::global));
  DevicePtr kept = 0;
  CHECK_OK(f.d.mem_alloc_async(32, f.s, &kept));
  CHECK_OK(f.d.memset_d32_async(kept, 7, 8, f.s));
  CHECK_OK(f.d.stream_end_capture(f.s, &g));
  CHECK_OK(f.d.graph_node_counts(g, &counts));
  CHECK(counts.total == 2 && counts.mem_alloc == 1 && counts.mem_free == 0);
  CHECK_OK(f.d.graph_instantiate(g, &e));
  CHECK_OK(f.d.graph_launch(e, f.s));
  CHECK(f.d.graph_launch(e, f.s).code == Code::invalid_value);
  CHECK_OK(f.d.stream_synchronize(f.s));
  std::uint32_t word = 0;
  CHECK_OK(f.d.memcpy_dtoh(&word, kept + 28, 4));
  CHECK(word == 7);
  CHECK_OK(f.d.mem_free(kept));
  CHECK(f.d.mem_free(kept).code == Code::invalid_value);
  CHECK_OK(f.d.graph_launch(e, f.s));
  CHECK_OK(f.d.stream_synchronize(f.s));
  // Destroying the exec and graph does not free an allocation still live.
  CHECK_OK(f.d.graph_exec_destroy(e));
  CHECK_OK(f.d.graph_destroy(g));
  CHECK_OK(f.d.memcpy_dtoh(&word, kept, 4));
  CHECK_OK(f.d.mem_free(kept));

  // A memory node over the limit fails at replay, as an asynchronous error of the stream.
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::global));
  DevicePtr huge = 0;
  CHECK(f.d.mem_alloc_async(~std::size_t{0}, f.s, &huge).code == Code::out_of_memory);
  CHECK_OK(f.d.mem_alloc_async(1 << 20, f.s, &huge));
  CHECK_OK(f.d.mem_free_async(huge, f.s));
  CHECK_OK(f.d.stream_end_capture(f.s, &g));
  CHECK_OK(f.d.graph_instantiate(g, &e));
  f.d.set_memory_limit(4096);
  CHECK_OK(f.d.graph_launch(e, f.s));
  Status oom = f.d.stream_synchronize(f.s);
  CHECK(oom.code == Code::out_of_memory && contains(oom.message, "graph node 0"));
  f.d.set_memory_limit(MockDriver::default_memory_limit);
  CHECK_OK(f.d.graph_launch(e, f.s));  // the failed launch gave its claim back
  CHECK_OK(f.d.stream_synchronize(f.s));
}

void test_exec_update() {
  Fixture f;
  auto capture_axpy = [&](float a, int launches) {
    CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::global));
    for (int i = 0; i < launches; ++i) CHECK_OK(f.launch_axpy(f.s, a));
    GraphHandle g{};
    CHECK_OK(f.d.stream_end_capture(f.s, &g));
    return g;
  };
  GraphHandle g1 = capture_axpy(1.0f, 1);
  GraphHandle g2 = capture_axpy(10.0f, 1);
  GraphHandle g3 = capture_axpy(1.0f, 2);
  GraphExecHandle e{};
  CHECK_OK(f.d.graph_instantiate(g1, &e));
  GraphUpdateResult result = GraphUpdateResult::error;
  CHECK_OK(f.d.graph_exec_update(e, g2, &result));
  CHECK(result == GraphUpdateResult::success);
  CHECK_OK(f.d.graph_launch(e, f.s));
  CHECK_OK(f.d.stream_synchronize(f.s));
  CHECK(read_float(f.d, f.y) == 10.0f);  // the updated parameter

  // A refused update is an answer, as the backends report CUDA's and HIP's refusals.
  CHECK_OK(f.d.graph_exec_update(e, g3, &result));
  CHECK(result == GraphUpdateResult::topology_changed);

  const FunctionHandle scale = get_kernel(f.d, "scale_f32");  // a module load inside a capture is refused
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::global));
  CHECK_OK(f.d.launch_kernel(scale, {1}, {16}, 0, f.s, {u32(16), f32(1), ptr(f.x), ptr(f.y)}));
  GraphHandle other_kernel{};
  CHECK_OK(f.d.stream_end_capture(f.s, &other_kernel));
  // Another kernel function in a kernel node updates (CUDA 11.2+); then back to axpy.
  CHECK_OK(f.d.graph_exec_update(e, other_kernel, &result));
  CHECK(result == GraphUpdateResult::success);
  CHECK_OK(f.d.graph_exec_update(e, g2, &result));
  CHECK(result == GraphUpdateResult::success);

  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::global));
  CHECK_OK(f.d.memset_d32_async(f.y, 0, 16, f.s));
  GraphHandle memset_graph{};
  CHECK_OK(f.d.stream_end_capture(f.s, &memset_graph));
  CHECK_OK(f.d.graph_exec_update(e, memset_graph, &result));
  CHECK(result == GraphUpdateResult::node_type_changed);
  // A failed update changes nothing.
  CHECK_OK(f.d.graph_launch(e, f.s));
  CHECK_OK(f.d.stream_synchronize(f.s));
  CHECK(read_float(f.d, f.y) == 20.0f);
  CHECK(f.d.graph_exec_update(GraphExecHandle{424242}, g1, &result).native_code == 400);
}

void test_no_event_nodes_and_exec_destroy_waits() {
  Fixture f;
  EventHandle ev{};
  CHECK_OK(f.d.event_create(&ev, EventTiming::enabled));
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::global));
  CHECK_OK(f.launch_axpy(f.s));
  CHECK_OK(f.d.event_record(ev, f.s));
  GraphHandle g{};
  CHECK_OK(f.d.stream_end_capture(f.s, &g));
  GraphExecHandle e{};
  CHECK_OK(f.d.graph_instantiate(g, &e));
  GraphNodeCounts counts;
  CHECK_OK(f.d.graph_node_counts(g, &counts));
  CHECK(counts.total == 1);  // a plain record inside a capture makes no node, as in CUDA
  f.d.pause_streams();
  CHECK_OK(f.d.graph_launch(e, f.s));
  CHECK_OK(f.d.event_query(ev));  // the replay does not record it: it is still never recorded
  f.d.resume_streams();
  CHECK_OK(f.d.stream_synchronize(f.s));
  CHECK(read_float(f.d, f.y) == 1.0f);
  // exec destroy waits for queued launches of it.
  for (int i = 0; i < 20; ++i) CHECK_OK(f.d.graph_launch(e, f.s));
  CHECK_OK(f.d.graph_exec_destroy(e));
  CHECK(read_float(f.d, f.y) == 21.0f);
  // Destroying the driver with a capture still open is clean.
  CHECK_OK(f.d.stream_begin_capture(f.other, CaptureMode::relaxed));
  CHECK_OK(f.launch_axpy(f.other));
}

// Thread-local captures on several threads at once, with another thread polling its own
// stream in the default global mode: no capture conflicts with another thread's calls.
void test_concurrent_thread_local_captures() {
  MockDriver d(0);
  FunctionHandle axpy = get_kernel(d, "axpy_f32");
  std::vector<int> good(4, 0);
  std::atomic<bool> stop{false};
  Status poll_status;
  std::thread poller([&] {
    StreamHandle mine{};
    if (!d.stream_create(&mine).ok()) return;
    while (!stop.load()) {
      std::size_t free_bytes = 0, total = 0;
      Status s = d.stream_query(mine);
      if (s.ok()) s = d.mem_info(&free_bytes, &total);
      if (!s.ok() && poll_status.ok()) poll_status = s;
    }
    d.stream_destroy(mine);
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      StreamHandle s{};
      DevicePtr x = 0, y = 0;
      if (!d.stream_create(&s).ok() || !d.mem_alloc(64, &x).ok() || !d.mem_alloc(64, &y).ok()) return;
      std::vector<float> ones(16, 1.0f), zeros(16, 0.0f), back(16);
      bool ok = d.memcpy_htod(x, ones.data(), 64).ok() && d.memcpy_htod(y, zeros.data(), 64).ok();
      for (int round = 0; round < 20 && ok; ++round) {
        GraphHandle g{};
        GraphExecHandle e{};
        ok = d.stream_begin_capture(s, CaptureMode::thread_local_).ok() &&
             d.launch_kernel(axpy, {1}, {16}, 0, s, {u32(16), f32(float(t + 1)), ptr(x), ptr(y)}).ok() &&
             d.stream_end_capture(s, &g).ok() && d.graph_instantiate(g, &e).ok() && d.graph_launch(e, s).ok() &&
             d.stream_synchronize(s).ok() && d.graph_exec_destroy(e).ok() && d.graph_destroy(g).ok();
      }
      ok = ok && d.memcpy_dtoh_async(back.data(), y, 64, s).ok() && d.stream_synchronize(s).ok();
      good[t] = ok && back[15] == 20.0f * float(t + 1);
      d.stream_destroy(s);
    });
  }
  for (auto& w : workers) w.join();
  stop.store(true);
  poller.join();
  CHECK((good == std::vector<int>{1, 1, 1, 1}));
  CHECK_OK(poll_status);
}

}  // namespace

// stream_capture_status_native: a stream named by its native handle, as another library's
// would be, answers its capture state; an unknown stream is refused; a fault can be injected.
void test_capture_status_of_a_native_stream() {
  Fixture f;
  const std::uintptr_t native = f.d.stream_native_handle(f.s);
  CaptureStatus status = CaptureStatus::active;
  CHECK_OK(f.d.stream_capture_status_native(native, &status));
  CHECK(status == CaptureStatus::none);
  CHECK_OK(f.d.stream_begin_capture(f.s, CaptureMode::relaxed));
  CHECK_OK(f.d.stream_capture_status_native(native, &status));
  CHECK(status == CaptureStatus::active);
  CHECK_OK(f.d.stream_capture_status_native(f.d.stream_native_handle(f.other), &status));
  CHECK(status == CaptureStatus::none);
  GraphHandle g{};
  CHECK_OK(f.d.stream_end_capture(f.s, &g));
  CHECK_OK(f.d.graph_destroy(g));
  CHECK_OK(f.d.stream_capture_status_native(native, &status));
  CHECK(status == CaptureStatus::none);
  CHECK(f.d.stream_capture_status_native(999, &status).native_code == 400);
  CHECK(f.d.stream_capture_status_native(native, nullptr).native_code == 1);
  f.d.fault_injection()->inject(Operation::stream_capture_status_native, 999, 0, 1);
  CHECK(f.d.stream_capture_status_native(native, &status).native_code == 999);
  CHECK_OK(f.d.stream_capture_status_native(native, &status));
  CHECK(f.d.fault_injection()->call_count(Operation::stream_capture_status_native) == 8);
  CHECK(f.d.fault_injection()->call_count(Operation::stream_capture_info) == 0);  // an operation of its own
}

int main() {
  test_capture_status_of_a_native_stream();
  test_capture_records_and_replays();
  test_info_kernel_replay_reads_buffer();
  test_global_mode();
  test_thread_local_mode();
  test_relaxed_mode();
  test_memory_nodes();
  test_exec_update();
  test_no_event_nodes_and_exec_destroy_waits();
  test_concurrent_thread_local_captures();
  return lifecore::test_support::finish("mock_capture_test");
}
