// The pooled allocator on both recorders: a routed stream serves requests as lent slices
// (primed by the warmup, so the recording allocates nothing; retained by the graph even when
// lent before the recording), releases go back after the fence, and every refusal (unknown
// stream, bad size, a pool miss inside a driver capture, a closed device) is a null and a count.
#include <cstdint>
#include <memory>
#include <string>

#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/graph.hpp"
#include "lifecore/runtime/pooled_allocator.hpp"
#include "lifecore/runtime/stream.hpp"
#include "lifecore/driver/backends.hpp"
#include "lifecore/error.hpp"
#include "runtime/lost_watch.hpp"
#include "test_support.hpp"

using namespace lifecore::runtime;

namespace {

void serves_windows(const char* graphs) {
  auto& allocator = PooledAllocator::instance();
  auto device = Device::open(lifecore::test_support::emulated_backend(), 0, graphs, "thread_local");
  auto stream = device->stream();
  const std::uintptr_t handle = stream->native_handle();
  const auto start = allocator.stats();

  CHECK(allocator.allocate(1024, handle) == nullptr);  // not routed yet
  CHECK(allocator.stats().unknown_stream == start.unknown_stream + 1);
  allocator.route(stream);

  stream->graph_prepare(0);
  void* warm = allocator.allocate(1300, handle);
  CHECK(warm != nullptr);
  CHECK(device->memory().stats().pool_bytes == MemoryManager::exact_size(1300));  // persistent pool
  void* kept = allocator.allocate(700, handle);  // stays lent across the recording
  allocator.release(warm, handle);
  stream->sync();
  stream->begin_capture();
  const auto allocations = device->memory().stats().driver_allocations;
  void* recorded = allocator.allocate(1300, handle);
  CHECK(recorded == warm);  // the primed slice
  CHECK(device->memory().stats().driver_allocations == allocations);
  if (std::string(graphs) == "hardware") {
    const auto refused = allocator.stats().refused;
    CHECK(allocator.allocate(9000, handle) == nullptr);  // a miss would be a memory node
    CHECK(allocator.stats().refused == refused + 1);
  }
  auto graph = stream->end_capture(0);
  CHECK(graph != nullptr);
  allocator.release(recorded, handle);
  allocator.release(kept, handle);
  stream->sync();
  CHECK(device->memory().stats().slices_retained == 2);  // the graph keeps both
  graph->destroy();
  CHECK(device->memory().stats().slices_free == 2);

  for (std::size_t size : {std::size_t{0}, device->total_memory() + 1, ~std::size_t{0}})
    CHECK(allocator.allocate(size, handle) == nullptr);
  allocator.release(reinterpret_cast<void*>(0x10), handle);
  const auto end = allocator.stats();
  CHECK(end.live == start.live && end.live_bytes == start.live_bytes);
  CHECK(end.unknown_pointer == start.unknown_pointer + 1);
  CHECK(allocator.unroute(*stream));
  CHECK(!allocator.unroute(*stream));
  device->close();
}

void a_closed_device_refuses() {
  auto& allocator = PooledAllocator::instance();
  auto device = Device::open(lifecore::test_support::emulated_backend(), 0, "software", "thread_local");
  auto stream = device->stream();
  const std::uintptr_t handle = stream->native_handle();
  allocator.route(stream);
  void* lent = allocator.allocate(512, handle);
  CHECK(lent != nullptr);
  device->close();
  const auto refused = allocator.stats().refused;
  CHECK(allocator.allocate(512, handle) == nullptr);
  CHECK(allocator.stats().refused == refused + 1);
  allocator.release(lent, handle);  // the device returned its memory: only the loan goes
  CHECK(allocator.unroute(*stream));
}

// A driver that gives every stream one native handle, as no driver does for live streams (the
// emulated device's and CUDA's are unique in the process): the route of a second live stream
// under that handle is refused, and taken once the first stream's device is closed.
struct OneNativeHandle final : LostWatch {
  using LostWatch::LostWatch;
  std::uintptr_t stream_native_handle(lifecore::driver::StreamHandle) override { return 0x5eed; }
};

std::shared_ptr<Device> open_one_handle_device() {
  auto vendor = lifecore::driver::open_driver(lifecore::test_support::emulated_backend(), 0);
  auto driver = std::make_shared<OneNativeHandle>(std::move(vendor), std::make_shared<LostRecord>());
  return std::make_shared<Device>(std::move(driver), GraphsMode::software, lifecore::driver::CaptureMode::thread_local_,
                                  "thread_local");
}

void a_handle_another_live_stream_holds_is_refused() {
  auto& allocator = PooledAllocator::instance();
  auto first = open_one_handle_device();
  auto second = open_one_handle_device();
  auto a = first->stream();
  auto b = second->stream();
  CHECK(a->native_handle() == b->native_handle());
  allocator.route(a);
  allocator.route(a);  // idempotent
  bool refused = false;
  try {
    allocator.route(b);
  } catch (const lifecore::Error& error) {
    refused = error.kind() == lifecore::ErrorKind::InvalidArgument &&
              std::string(error.what()).find("already routed") != std::string::npos;
  }
  CHECK(refused);
  void* lent = allocator.allocate(512, a->native_handle());  // still a's
  CHECK(lent != nullptr && first->memory().stats().slices_in_use == 1);
  allocator.release(lent, a->native_handle());
  first->close();
  allocator.route(b);  // a's device is closed: its route is stale
  CHECK(allocator.allocate(512, b->native_handle()) != nullptr);
  CHECK(second->memory().stats().slices_in_use == 1);
  CHECK(allocator.unroute(*b));
  CHECK(!allocator.unroute(*a));
  second->close();
}

}  // namespace

int main() {
  for (const char* graphs : {"software", "hardware"}) serves_windows(graphs);
  a_closed_device_refuses();
  a_handle_another_live_stream_holds_is_refused();
  return lifecore::test_support::finish("runtime_pooled_allocator_test");
}
