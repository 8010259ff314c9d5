// The mock driver's eager behaviour: memory, streams, copies, kernels, events, handles.
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "lifecore/driver/backends.hpp"
#include "lifecore/driver/registry.hpp"
#include "driver/mock/mock_driver.hpp"
#include "mock_kernels.hpp"
#include "test_support.hpp"

using namespace lifecore::driver;
using namespace lifecore::test_support;

namespace {

DevicePtr alloc_floats(MockDriver& d, const std::vector<float>& values) {
  DevicePtr p = 0;
  CHECK_OK(d.mem_alloc(values.size() * 4, &p));
  CHECK_OK(d.memcpy_htod(p, values.data(), values.size() * 4));
  return p;
}

std::vector<float> read_floats(MockDriver& d, DevicePtr p, std::size_t n) {
  std::vector<float> out(n, -1.0f);
  CHECK_OK(d.memcpy_dtoh(out.data(), p, n * 4));
  return out;
}

void test_backend_entry_points() {
  const BackendDescriptor& mock = backend_descriptor("mock");
  CHECK(mock.emulated);  // the role the tests ask the registry for
  BackendInfo info = mock.probe();
  CHECK(info.available);
  CHECK(info.driver_version == 12080);
  CHECK(info.device_count == 2);
  CHECK(info.device_name == "lifecore mock device");
  bool threw = false;
  try {
    mock.open(2);
  } catch (const lifecore::Error& e) {
    threw = e.kind() == lifecore::ErrorKind::InvalidArgument;
  }
  CHECK(threw);
  auto a = mock.open(0);
  auto b = mock.open(1);
  CHECK(&a->backend() == &mock);
  CHECK(b->ordinal() == 1);
  CHECK(a->hardware_graphs());
  CHECK(MockDriver::from(a.get()) != nullptr);
  // Two opens are independent devices: a pointer of one is unknown to the other.
  auto c = mock.open(0);
  DevicePtr p = 0;
  CHECK_OK(a->mem_alloc(64, &p));
  CHECK(c->mem_free(p).code == Code::invalid_value);
  CHECK_OK(a->mem_free(p));
  std::string name;
  CHECK_OK(a->device_name(&name));
  CHECK(name == "lifecore mock device");
  int version = 0;
  CHECK_OK(a->driver_version(&version));
  CHECK(version == 12080);
}

void test_memory() {
  MockDriver d(0);
  std::size_t free_bytes = 0, total = 0;
  CHECK_OK(d.mem_info(&free_bytes, &total));
  CHECK(total == (std::size_t{8} << 30));
  CHECK(free_bytes == total);

  DevicePtr a = 0, b = 0;
  CHECK_OK(d.mem_alloc(100, &a));
  CHECK_OK(d.mem_alloc(1, &b));
  CHECK(a != 0 && a % 256 == 0 && b % 256 == 0 && a != b);
  CHECK(d.live_allocations() == 2);
  CHECK(d.mem_alloc(0, &a).code == Code::invalid_value);

  // Range checks of synchronous calls: invalid_value, nothing copied.
  std::vector<std::uint8_t> host(200, 7);
  CHECK(d.memcpy_htod(a, host.data(), 101).code == Code::invalid_value);
  CHECK(d.memcpy_htod(a + 50, host.data(), 51).code == Code::invalid_value);
  CHECK_OK(d.memcpy_htod(a + 50, host.data(), 50));
  CHECK(d.memcpy_dtoh(host.data(), 0x1234, 4).code == Code::invalid_value);
  CHECK(d.memset_d32(a + 2, 0, 1).code == Code::invalid_value);  // unaligned

  // memset then read back.
  CHECK_OK(d.memset_d32(a, 0xdeadbeef, 25));
  std::vector<std::uint32_t> words(25);
  CHECK_OK(d.memcpy_dtoh(words.data(), a, 100));
  CHECK(words[0] == 0xdeadbeef && words[24] == 0xdeadbeef);
  CHECK(d.memset_d32(a, 0, 26).code == Code::invalid_value);

  // dtod
  CHECK_OK(d.memcpy_dtod(b, a, 1));
  std::uint8_t byte = 0;
  CHECK_OK(d.memcpy_dtoh(&byte, b, 1));
  CHECK(byte == 0xef);

  // Frees: unknown, interior, double.
  CHECK(d.mem_free(0x42).code == Code::invalid_value);
  CHECK(d.mem_free(a + 4).code == Code::invalid_value);
  CHECK_OK(d.mem_free(a));
  Status twice = d.mem_free(a);
  CHECK(twice.code == Code::invalid_value);
  CHECK(twice.call == "mockMemFree");
  CHECK(d.memcpy_dtoh(words.data(), a, 4).code == Code::invalid_value);  // freed
  CHECK(d.live_allocations() == 1);

  // The memory limit: mem_info reports it, mem_alloc enforces it.
  d.set_memory_limit(4096);
  CHECK_OK(d.mem_info(&free_bytes, &total));
  CHECK(total == 4096);
  CHECK(free_bytes == 4096 - 256);  // b is charged one 256-byte granule
  DevicePtr big = 0;
  Status oom = d.mem_alloc(4096, &big);
  CHECK(oom.code == Code::out_of_memory);
  CHECK(oom.name == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(d.mem_alloc(~std::size_t{0}, &big).code == Code::out_of_memory);
  CHECK(d.memset_d32(b, 0, ~std::size_t{0} / 2).code == Code::invalid_value);
  CHECK_OK(d.mem_alloc(3840, &big));
  CHECK_OK(d.mem_free(big));
  CHECK_OK(d.mem_free(b));
  CHECK(d.memory_in_use() == 0);
}

void test_kernels_eager() {
  MockDriver d(0);
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  const std::size_t n = 1000;
  std::vector<float> xs(n), ys(n);
  for (std::size_t i = 0; i < n; ++i) {
    xs[i] = float(i);
    ys[i] = 1.0f;
  }
  DevicePtr x = alloc_floats(d, xs), y = alloc_floats(d, ys), out = alloc_floats(d, std::vector<float>(n, 0));

  FunctionHandle axpy = get_kernel(d, "axpy_f32");
  std::vector<std::size_t> sizes;
  CHECK_OK(d.function_param_sizes(axpy, &sizes));
  CHECK((sizes == std::vector<std::size_t>{4, 4, 8, 8}));

  CHECK_OK(d.launch_kernel(axpy, {4}, {256}, 0, s, {u32(n), f32(2.0f), ptr(x), ptr(y)}));
  CHECK_OK(d.stream_synchronize(s));
  auto got = read_floats(d, y, n);
  CHECK(got[0] == 1.0f && got[10] == 21.0f && got[999] == 1999.0f);

  // i is bounded by grid.x * block.x: 2 * 64 threads touch only 128 elements.
  CHECK_OK(d.launch_kernel(get_kernel(d, "scale_f32"), {2}, {64}, 0, s, {u32(n), f32(3.0f), ptr(x), ptr(out)}));
  CHECK_OK(d.stream_synchronize(s));
  got = read_floats(d, out, n);
  CHECK(got[127] == 381.0f && got[128] == 0.0f);

  CHECK_OK(d.launch_kernel(get_kernel(d, "add_f32"), {8}, {128}, 0, s, {u32(n), ptr(x), ptr(x), ptr(out)}));
  CHECK_OK(d.stream_synchronize(s));
  got = read_floats(d, out, n);
  CHECK(got[500] == 1000.0f);

  // axpy_info_f32 reads n and the bits of a from a u32 device buffer.
  DevicePtr info = 0;
  CHECK_OK(d.mem_alloc(8, &info));
  const std::uint32_t words[2] = {3, std::bit_cast<std::uint32_t>(10.0f)};
  CHECK_OK(d.memcpy_htod(info, words, 8));
  CHECK_OK(d.memcpy_htod(y, ys.data(), n * 4));
  CHECK_OK(d.launch_kernel(get_kernel(d, "axpy_info_f32"), {4}, {256}, 0, s, {ptr(info), ptr(x), ptr(y)}));
  CHECK_OK(d.stream_synchronize(s));
  got = read_floats(d, y, n);
  CHECK(got[2] == 21.0f && got[3] == 1.0f);

  // Validation: count, kinds, grid, names in messages.
  Status wrong_count = d.launch_kernel(axpy, {1}, {1}, 0, s, {u32(n), f32(1), ptr(x)});
  CHECK(wrong_count.code == Code::invalid_value);
  CHECK(contains(wrong_count.message, "axpy_f32") && contains(wrong_count.message, "expects 4") &&
        contains(wrong_count.message, "got 3"));
  Status wrong_kind = d.launch_kernel(axpy, {1}, {1}, 0, s, {u32(n), u32(1), ptr(x), ptr(y)});
  CHECK(wrong_kind.code == Code::invalid_value && contains(wrong_kind.message, "expects f32, got u32"));
  CHECK(d.launch_kernel(axpy, {0}, {1}, 0, s, {u32(n), f32(1), ptr(x), ptr(y)}).code == Code::invalid_value);
  CHECK(d.launch_kernel(axpy, {1}, {2048}, 0, s, {u32(n), f32(1), ptr(x), ptr(y)}).code ==
        Code::invalid_value);
  CHECK(d.launch_kernel(axpy, {1}, {1}, 0, s, {KernelArg{ArgKind::u32, 1ull << 33}, f32(1), ptr(x), ptr(y)}).code ==
        Code::invalid_value);

  // Modules: only built-in images; unknown names.
  ModuleHandle module{};
  Status ptx = d.module_load(ModuleImage{ImageKind::ptx, ".version 6.0"}, &module);
  CHECK(ptx.code == Code::not_supported && contains(ptx.message, "built-in kernels only"));
  CHECK_OK(d.module_load(ModuleImage{}, &module));
  FunctionHandle f{};
  CHECK(d.module_get_function(module, "gemm", &f).code == Code::not_found);
  FunctionHandle again{};
  CHECK_OK(d.module_get_function(module, "axpy_f32", &f));
  CHECK_OK(d.module_get_function(module, "axpy_f32", &again));
  CHECK(f == again);
  CHECK_OK(d.module_unload(module));
  CHECK(d.launch_kernel(f, {1}, {1}, 0, s, {u32(1), f32(1), ptr(x), ptr(y)}).native_code == 400);
  CHECK_OK(d.stream_destroy(s));
}

void test_async_errors_and_order() {
  MockDriver d(0);
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  DevicePtr p = 0;
  CHECK_OK(d.mem_alloc(64, &p));
  std::vector<float> host(16, 5.0f), back(16, 0.0f);

  // FIFO: write, scale in place, read back, all async; one sync.
  FunctionHandle scale = get_kernel(d, "scale_f32");
  CHECK_OK(d.memcpy_htod_async(p, host.data(), 64, s));
  CHECK_OK(d.launch_kernel(scale, {1}, {32}, 0, s, {u32(16), f32(2.0f), ptr(p), ptr(p)}));
  CHECK_OK(d.memcpy_dtoh_async(back.data(), p, 64, s));
  CHECK_OK(d.stream_synchronize(s));
  CHECK(back[0] == 10.0f && back[15] == 10.0f);

  // An out-of-range access is an asynchronous error of the stream: accepted now, reported
  // by the next sync. Sticky, it loses the device when the copy runs, so the launch queued
  // after it fails with it too once the stream's worker got there first (as a CUDA call
  // after a fault may): either answer is right.
  CHECK_OK(d.memcpy_htod_async(p + 32, host.data(), 64, s));
  Status launched = d.launch_kernel(scale, {1}, {32}, 0, s, {u32(17), f32(2.0f), ptr(p), ptr(p)});
  CHECK(launched.ok() || (launched.code == Code::illegal_address && contains(launched.message, "lost")));
  Status err = d.stream_synchronize(s);
  CHECK(err.code == Code::illegal_address);
  CHECK(err.call == "mockStreamSynchronize");
  CHECK(contains(err.message, "mockMemcpyHtodAsync"));  // the first error wins
  CHECK(err.sticky);
  // 700 is sticky, as in CUDA ("any further work returns the same error"): the device is lost.
  err = d.stream_synchronize(s);
  CHECK(err.code == Code::illegal_address && contains(err.message, "lost"));
  DevicePtr gone = 0;
  CHECK(d.mem_alloc(64, &gone).code == Code::illegal_address && gone == 0);
}

void test_a_freed_pointer_is_an_illegal_address() {
  MockDriver d(0);
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  DevicePtr p = 0, gone = 0;
  CHECK_OK(d.mem_alloc(64, &p));
  CHECK_OK(d.mem_alloc(64, &gone));
  CHECK_OK(d.mem_free(gone));
  FunctionHandle scale = get_kernel(d, "scale_f32");
  CHECK_OK(d.launch_kernel(scale, {1}, {32}, 0, s, {u32(16), f32(2.0f), ptr(gone), ptr(p)}));
  Status err = d.stream_synchronize(s);
  CHECK(err.code == Code::illegal_address && contains(err.message, "scale_f32"));
}

// A kernel fault poisons the device when it happens, as it does a CUDA context: a call on
// another stream fails with it without the faulting stream ever being synchronized.
void test_a_kernel_fault_loses_the_device_at_once() {
  MockDriver d(0);
  StreamHandle faulting{}, other{};
  CHECK_OK(d.stream_create(&faulting));
  CHECK_OK(d.stream_create(&other));
  DevicePtr p = 0, gone = 0;
  CHECK_OK(d.mem_alloc(64, &p));
  CHECK_OK(d.mem_alloc(64, &gone));
  CHECK_OK(d.mem_free(gone));
  FunctionHandle scale = get_kernel(d, "scale_f32");
  CHECK_OK(d.launch_kernel(scale, {1}, {32}, 0, faulting, {u32(16), f32(2.0f), ptr(gone), ptr(p)}));
  Status seen;
  for (int i = 0; i < 2000 && seen.ok(); ++i) {  // the worker runs the kernel on its own thread
    seen = d.stream_query(other);
    if (seen.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(seen.code == Code::illegal_address && seen.sticky);
  CHECK(contains(seen.message, "the device is lost") && contains(seen.message, "scale_f32"));
  CHECK(d.memset_d32(p, 0, 16).code == Code::illegal_address);
}

void test_stream_order_and_synchronous_copies() {
  MockDriver d(0);
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  DevicePtr p = 0;
  CHECK_OK(d.mem_alloc(64, &p));
  FunctionHandle scale = get_kernel(d, "scale_f32");

  // stream_query: not_ready while work is pending (workers held), ok once drained.
  d.pause_streams();
  CHECK_OK(d.memset_d32_async(p, 0, 16, s));
  CHECK(d.stream_query(s).code == Code::not_ready);
  d.resume_streams();
  CHECK_OK(d.stream_synchronize(s));
  CHECK_OK(d.stream_query(s));

  // Synchronous copies wait for every stream of the device (legacy default stream).
  StreamHandle s2{};
  CHECK_OK(d.stream_create(&s2));
  for (int i = 0; i < 50; ++i) CHECK_OK(d.launch_kernel(scale, {1}, {32}, 0, s2, {u32(16), f32(1.0f), ptr(p), ptr(p)}));
  CHECK_OK(d.memset_d32_async(p, std::bit_cast<std::uint32_t>(4.0f), 16, s2));
  float first = 0;
  CHECK_OK(d.memcpy_dtoh(&first, p, 4));
  CHECK(first == 4.0f);

  // Destroying a stream drains it first.
  CHECK_OK(d.memset_d32_async(p, std::bit_cast<std::uint32_t>(9.0f), 16, s2));
  CHECK_OK(d.stream_destroy(s2));
  CHECK_OK(d.memcpy_dtoh(&first, p, 4));
  CHECK(first == 9.0f);

  // Stream-ordered allocation and free.
  DevicePtr q = 0;
  CHECK_OK(d.mem_alloc_async(32, s, &q));
  CHECK_OK(d.memset_d32_async(q, 1, 8, s));
  CHECK_OK(d.mem_free_async(q, s));
  CHECK_OK(d.stream_synchronize(s));
  CHECK(d.mem_free_async(q, s).code == Code::invalid_value);
  CHECK_OK(d.mem_free(p));
  CHECK(d.live_allocations() == 0);
}

// A device with a producer and a consumer stream and an event (with timing), for the tests of
// ordering one stream after another's work.
struct ProducerConsumer {
  MockDriver d{0};
  StreamHandle producer{}, consumer{};
  EventHandle e{};
  DevicePtr p = 0;  // what slow_fill writes

  ProducerConsumer() {
    CHECK_OK(d.stream_create(&producer));
    CHECK_OK(d.stream_create(&consumer));
    CHECK_OK(d.event_create(&e, EventTiming::enabled));
  }
  // Slow work on the producer: 64 fills of a 1 MiB buffer, the last one writing `last`, so a
  // consumer reading `last` ran after all of it.
  void slow_fill(std::uint32_t value, std::uint32_t last) {
    constexpr std::size_t words = std::size_t{1} << 18;
    if (p == 0) CHECK_OK(d.mem_alloc(words * 4, &p));
    for (int i = 0; i < 64; ++i) CHECK_OK(d.memset_d32_async(p, i == 63 ? last : value, words, producer));
  }
};

void test_events() {
  MockDriver d(0);
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  EventHandle a{}, b{};
  CHECK_OK(d.event_create(&a, EventTiming::enabled));
  CHECK_OK(d.event_create(&b, EventTiming::enabled));
  float ms = -1;
  CHECK(d.event_elapsed(a, b, &ms).native_code == 400);  // never recorded
  CHECK_OK(d.event_query(a));                     // never recorded: complete, as CUDA
  d.pause_streams();
  CHECK_OK(d.event_record(a, s));
  CHECK(d.event_query(a).code == Code::not_ready);
  CHECK(d.event_elapsed(a, a, &ms).code == Code::not_ready);
  d.resume_streams();
  CHECK_OK(d.event_synchronize(a));
  CHECK_OK(d.event_query(a));
  CHECK_OK(d.event_record(b, s));
  CHECK_OK(d.event_synchronize(b));
  CHECK_OK(d.event_elapsed(a, b, &ms));
  CHECK(ms >= 0.0f);
  CHECK_OK(d.event_destroy(a));
  CHECK(d.event_query(a).native_code == 400);
  CHECK(d.event_destroy(a).native_code == 400);
  CHECK(d.event_record(b, StreamHandle{999}).native_code == 400);
}

// An event created without timing orders work as any event does; only elapsed time is refused.
void test_an_ordering_event_orders_work_but_measures_no_time() {
  ProducerConsumer fixture;
  auto& [d, s, t, timed, p] = fixture;
  EventHandle ordering{};
  CHECK_OK(d.event_create(&ordering, EventTiming::disabled));
  d.pause_streams();
  CHECK_OK(d.event_record(timed, s));
  CHECK_OK(d.event_record(ordering, s));
  CHECK_OK(d.stream_wait_event(d.stream_native_handle(t), ordering));
  CHECK(d.event_query(ordering).code == Code::not_ready);
  d.resume_streams();
  CHECK_OK(d.stream_synchronize(t));
  CHECK_OK(d.event_query(ordering));  // the waiting stream finished after it
  float ms = -1;
  const Status refused = d.event_elapsed(timed, ordering, &ms);
  CHECK(refused.code == Code::invalid_handle && refused.native_code == 400);
  CHECK(d.event_elapsed(ordering, timed, &ms).code == Code::invalid_handle);
  CHECK(ms == -1);
  CHECK_OK(d.event_elapsed(timed, timed, &ms));
  CHECK_OK(d.event_destroy(timed));
  CHECK_OK(d.event_destroy(ordering));
}

void test_handles_after_destroy() {
  MockDriver d(1);
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  CHECK(d.stream_native_handle(s) != 0);
  CHECK_OK(d.stream_destroy(s));
  CHECK(d.stream_native_handle(s) == 0);
  Status bad = d.stream_synchronize(s);
  CHECK(bad.native_code == 400 && bad.name == "CUDA_ERROR_INVALID_HANDLE" && bad.call == "mockStreamSynchronize");
  CHECK(d.stream_query(s).native_code == 400);
  CHECK(d.stream_destroy(s).native_code == 400);
  CHECK(d.memset_d32_async(0, 0, 0, s).native_code == 400);
  CHECK(d.stream_begin_capture(s, CaptureMode::global).native_code == 400);
  CHECK(d.stream_synchronize(StreamHandle{0}).native_code == 400);
  ModuleHandle m{};
  CHECK_OK(d.module_load(ModuleImage{}, &m));
  CHECK_OK(d.module_unload(m));
  CHECK(d.module_unload(m).native_code == 400);
  FunctionHandle f{};
  CHECK(d.module_get_function(m, "axpy_f32", &f).native_code == 400);
  CHECK(d.graph_destroy(GraphHandle{12345}).native_code == 400);
  CHECK(d.graph_exec_destroy(GraphExecHandle{12345}).native_code == 400);
  GraphNodeCounts counts;
  CHECK(d.graph_node_counts(GraphHandle{1}, &counts).native_code == 400);
}

void test_many_threads() {
  // Each thread drives its own stream; the driver's tables are shared.
  MockDriver d(0);
  FunctionHandle axpy = get_kernel(d, "axpy_f32");
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      StreamHandle s{};
      if (!d.stream_create(&s).ok()) return;
      DevicePtr x = 0, y = 0;
      if (!d.mem_alloc(256, &x).ok() || !d.mem_alloc(256, &y).ok()) return;
      std::vector<float> ones(64, 1.0f), zeros(64, 0.0f), back(64);
      d.memcpy_htod_async(x, ones.data(), 256, s);
      d.memcpy_htod_async(y, zeros.data(), 256, s);
      for (int i = 0; i < 100; ++i) d.launch_kernel(axpy, {1}, {64}, 0, s, {u32(64), f32(1.0f), ptr(x), ptr(y)});
      d.memcpy_dtoh_async(back.data(), y, 256, s);
      if (d.stream_synchronize(s).ok() && back[63] == 100.0f) ok[t] = 1;
      d.mem_free(x);
      d.mem_free(y);
      d.stream_destroy(s);
    });
  }
  for (auto& th : threads) th.join();
  CHECK((ok == std::vector<int>{1, 1, 1, 1}));
  // Destroying a driver with streams that still hold work joins them (no hang, no leak).
  StreamHandle s{};
  CHECK_OK(d.stream_create(&s));
  DevicePtr p = 0;
  CHECK_OK(d.mem_alloc(256, &p));
  for (int i = 0; i < 10; ++i) CHECK_OK(d.memset_d32_async(p, 1, 64, s));
}

// A stream waits, on the device, for an event another stream records; an unknown stream or
// event is refused.
void test_stream_wait_event() {
  ProducerConsumer fixture;
  auto& [d, producer, consumer, e, p] = fixture;
  CHECK_OK(d.stream_wait_event(d.stream_native_handle(consumer), e));  // never recorded: no wait
  fixture.slow_fill(7, 7);
  CHECK_OK(d.event_record(e, producer));
  CHECK_OK(d.stream_wait_event(d.stream_native_handle(consumer), e));
  std::uint32_t first = 0;
  CHECK_OK(d.memcpy_dtoh_async(&first, p, 4, consumer));
  CHECK_OK(d.stream_synchronize(consumer));
  CHECK_OK(d.event_query(e));  // the consumer ran past the wait only once the event completed
  CHECK(first == 7);
  CHECK(d.stream_wait_event(999, e).native_code == 400);
  CHECK(d.stream_wait_event(d.stream_native_handle(consumer), EventHandle{999}).native_code == 400);
}

// host_view: the host bytes behind a live range, held past the allocation's free.
void test_host_view() {
  MockDriver d(0);
  DevicePtr p = 0;
  CHECK_OK(d.mem_alloc(256, &p));
  const std::uint32_t value = 0x01020304;
  CHECK_OK(d.memcpy_htod(p + 4, &value, 4));
  HostView view;
  CHECK_OK(d.host_view(p, 256, &view));
  CHECK(view.data != nullptr && view.keep_alive != nullptr);
  std::uint32_t seen = 0;
  std::memcpy(&seen, static_cast<const std::byte*>(view.data) + 4, 4);
  CHECK(seen == value);
  HostView inner;
  CHECK_OK(d.host_view(p + 4, 4, &inner));
  CHECK(inner.data == static_cast<std::byte*>(view.data) + 4);
  CHECK(d.host_view(p, 257, &inner).code == Code::invalid_value);  // past the allocation
  CHECK(d.host_view(p, 0, &inner).code == Code::invalid_value);
  CHECK(d.host_view(p, 4, nullptr).code == Code::invalid_value);
  CHECK_OK(d.mem_free(p));
  CHECK(d.host_view(p, 4, &inner).code == Code::invalid_value);  // freed
  std::memset(view.data, 0, 256);  // still this view's storage, never unmapped under it
  d.fault_injection()->inject(Operation::host_view, 999, 0, 1);
  DevicePtr q = 0;
  CHECK_OK(d.mem_alloc(64, &q));
  CHECK(d.host_view(q, 64, &inner).native_code == 999);
  CHECK_OK(d.host_view(q, 64, &inner));
}

// map_host: another owner's host bytes under a device address of their own, reached by
// copies and fills, never charged as device memory, never freed by mem_free, gone at unmap.
void test_map_host() {
  MockDriver d(0);
  std::uint32_t host[64] = {};
  const std::size_t live = d.live_allocations();
  const std::size_t in_use = d.memory_in_use();
  DevicePtr mapped = 0;
  CHECK_OK(d.map_host(host, sizeof host, &mapped));
  CHECK(mapped != 0);
  CHECK(d.live_allocations() == live && d.memory_in_use() == in_use);
  CHECK_OK(d.memset_d32(mapped + 8, 7u, 4));
  CHECK(host[1] == 0 && host[2] == 7u && host[5] == 7u && host[6] == 0);
  DevicePtr p = 0;
  CHECK_OK(d.mem_alloc(256, &p));
  const std::uint32_t value = 0x01020304;
  CHECK_OK(d.memcpy_htod(p, &value, 4));
  CHECK_OK(d.memcpy_dtod(mapped, p, 4));
  CHECK(host[0] == value);
  CHECK(d.memset_d32(mapped, 0, 65).code == Code::invalid_value);  // past the mapping
  CHECK(d.mem_free(mapped).code != Code::success);                 // not an allocation
  CHECK_OK(d.unmap_host(mapped));
  CHECK(d.memset_d32(mapped, 0, 1).code == Code::invalid_value);  // gone
  CHECK(d.unmap_host(mapped).code == Code::invalid_value);
  CHECK(d.unmap_host(p).code == Code::invalid_value);  // an allocation is not a mapping
  CHECK(d.map_host(nullptr, 4, &mapped).code == Code::invalid_value);
  CHECK(d.map_host(host, 0, &mapped).code == Code::invalid_value);
  CHECK(d.map_host(host, 4, nullptr).code == Code::invalid_value);
  d.fault_injection()->inject(Operation::map_host, 999, 0, 1);
  CHECK(d.map_host(host, 4, &mapped).native_code == 999);
  CHECK_OK(d.map_host(host, 4, &mapped));
  d.fault_injection()->inject(Operation::unmap_host, 999, 0, 1);
  CHECK(d.unmap_host(mapped).native_code == 999);
  CHECK_OK(d.unmap_host(mapped));
  CHECK_OK(d.mem_free(p));
}

// event_record_native: an event recorded on a stream named by its native handle (as another
// library's stream would be) orders a consumer that waits for it; unknown streams and events
// are refused.
void test_event_record_native() {
  ProducerConsumer fixture;
  auto& [d, producer, consumer, e, p] = fixture;
  fixture.slow_fill(9, 10);  // the consumer sees 10 only after all of it
  CHECK_OK(d.event_record_native(e, d.stream_native_handle(producer)));
  CHECK_OK(d.stream_wait_event(d.stream_native_handle(consumer), e));
  CHECK_OK(d.event_destroy(e));  // a pending wait outlives the event
  std::uint32_t first = 0;
  CHECK_OK(d.memcpy_dtoh_async(&first, p, 4, consumer));
  CHECK_OK(d.stream_synchronize(consumer));
  CHECK(first == 10);
  CHECK(d.fault_injection()->call_count(Operation::event_record_native) == 1);
  CHECK(d.fault_injection()->call_count(Operation::event_record) == 0);  // an operation of its own
  EventHandle f{};
  CHECK_OK(d.event_create(&f, EventTiming::enabled));
  CHECK(d.event_record_native(f, 999).native_code == 400);
  CHECK(d.event_record_native(f, static_cast<std::uintptr_t>(f)).native_code == 400);  // an event, not a stream
  CHECK(d.event_record_native(EventHandle{999}, d.stream_native_handle(producer)).native_code == 400);
  d.fault_injection()->inject(Operation::event_record_native, 999, 0, 1);
  CHECK(d.event_record_native(f, d.stream_native_handle(producer)).native_code == 999);
  CHECK_OK(d.event_record_native(f, d.stream_native_handle(producer)));
  CHECK_OK(d.event_synchronize(f));
  CHECK_OK(d.event_destroy(f));
}

// pointer_device: this device's ordinal for an address inside a live allocation or mapping;
// invalid_value for anything else (another device's memory, a freed range, host memory).
void test_pointer_device() {
  MockDriver d(0), other(1);
  DevicePtr p = 0, q = 0;
  CHECK_OK(d.mem_alloc(256, &p));
  CHECK_OK(other.mem_alloc(256, &q));
  int ordinal = -1;
  CHECK_OK(d.pointer_device(p, &ordinal));
  CHECK(ordinal == 0);
  ordinal = -1;
  CHECK_OK(d.pointer_device(p + 255, &ordinal));  // inside
  CHECK(ordinal == 0);
  CHECK_OK(other.pointer_device(q, &ordinal));
  CHECK(ordinal == 1);
  CHECK(d.pointer_device(q, &ordinal).code == Code::invalid_value);  // device 1's address
  CHECK(d.pointer_device(p + 256, &ordinal).code == Code::invalid_value);  // past the end
  std::uint32_t host[4] = {};
  CHECK(d.pointer_device(reinterpret_cast<std::uintptr_t>(host), &ordinal).code == Code::invalid_value);
  DevicePtr mapped = 0;
  CHECK_OK(d.map_host(host, sizeof host, &mapped));
  ordinal = -1;
  CHECK_OK(d.pointer_device(mapped, &ordinal));
  CHECK(ordinal == 0);
  CHECK_OK(d.unmap_host(mapped));
  CHECK(d.pointer_device(mapped, &ordinal).code == Code::invalid_value);
  CHECK(d.pointer_device(p, nullptr).code == Code::invalid_value);
  d.fault_injection()->inject(Operation::pointer_device, 999, 0, 1);
  CHECK(d.pointer_device(p, &ordinal).native_code == 999);
  CHECK_OK(d.pointer_device(p, &ordinal));
  CHECK_OK(d.mem_free(p));
  CHECK(d.pointer_device(p, &ordinal).code == Code::invalid_value);  // freed
  CHECK_OK(other.mem_free(q));
}

}  // namespace

// A thread that opens device after device, and restores each capture mode it changes (as a
// relaxed scope does), keeps no per-device mode behind: it kept one per device it ever touched.
void test_restored_capture_modes_leave_nothing_per_device() {
  const std::size_t before = MockDriver::thread_capture_modes_kept();
  for (int i = 0; i < 100; ++i) {
    MockDriver driver(0);
    CaptureMode mode = CaptureMode::relaxed;
    CHECK(driver.thread_exchange_capture_mode(&mode).ok() && mode == CaptureMode::global);
    CHECK(MockDriver::thread_capture_modes_kept() == before + 1);
    CHECK(driver.thread_exchange_capture_mode(&mode).ok() && mode == CaptureMode::relaxed);
    CHECK(mode == CaptureMode::relaxed && MockDriver::thread_capture_modes_kept() == before);
  }
  // The mode stays the thread's and the device's while it is not global.
  MockDriver a(0), b(0);
  CaptureMode mode = CaptureMode::thread_local_;
  CHECK(a.thread_exchange_capture_mode(&mode).ok() && mode == CaptureMode::global);
  mode = CaptureMode::global;
  CHECK(b.thread_exchange_capture_mode(&mode).ok() && mode == CaptureMode::global);  // b's own: global
  CHECK(a.thread_exchange_capture_mode(&mode).ok() && mode == CaptureMode::thread_local_);
  CHECK(MockDriver::thread_capture_modes_kept() == before);
}

int main() {
  test_restored_capture_modes_leave_nothing_per_device();
  test_backend_entry_points();
  test_memory();
  test_kernels_eager();
  test_async_errors_and_order();
  test_a_freed_pointer_is_an_illegal_address();
  test_a_kernel_fault_loses_the_device_at_once();
  test_stream_order_and_synchronous_copies();
  test_events();
  test_an_ordering_event_orders_work_but_measures_no_time();
  test_handles_after_destroy();
  test_many_threads();
  test_stream_wait_event();
  test_host_view();
  test_map_host();
  test_event_record_native();
  test_pointer_device();
  return lifecore::test_support::finish("mock_driver_test");
}
