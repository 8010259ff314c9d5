// Another library's global capture on another thread (a stream lifecore does not know, begun
// in the mock driver directly, as torch.cuda.graph begins one): lifecore's calls the driver
// forbids while a global capture records, made outside a recording of lifecore's own, run in
// relaxed mode. They succeed and leave that capture active, and it ends into a graph. In the
// thread's global mode the driver would refuse each of them and invalidate the capture:
// - host waits on a stream the driver does not capture (a graph's destroy, a bounded sync's
//   polls, a sync, a read);
// - driver allocations (a pool slice, an info upload, a KV arena) and frees;
// - module loads and unloads;
// - the host side of stream work: collecting a stream's fences, an info upload's wait, a profile.
// Each relaxed scope gives the thread its mode back, a lost device notwithstanding.
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "lifecore/error.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/graph.hpp"
#include "lifecore/runtime/kernel.hpp"
#include "lifecore/runtime/stream.hpp"
#include "sequence/device_arena_memory.hpp"
#include "runtime_test_support.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::runtime;
using namespace std::chrono_literals;
using test_support::error_of;
using test_support::holds;
using test_support::mock_of;
using test_support::open_mock;

namespace {

constexpr std::size_t words = 1024;

// The calling thread's capture mode is global again (the driver's default): every relaxed scope
// gave it back.
bool thread_mode_is_global(driver::Driver& raw) {
  driver::CaptureMode mode = driver::CaptureMode::global;
  const bool read = raw.thread_exchange_capture_mode(&mode).ok();
  driver::CaptureMode back = mode;
  return read && raw.thread_exchange_capture_mode(&back).ok() && mode == driver::CaptureMode::global;
}

// The other library: a stream of its own, captured in global mode by a thread of its own from
// construction until end().
class ForeignCapture {
 public:
  explicit ForeignCapture(driver::Driver& raw) : raw_(raw) {
    CHECK(raw_.stream_create(&stream_).ok());
    std::promise<void> begun;
    std::future<void> begun_future = begun.get_future();
    thread_ = std::thread([this, begun = std::move(begun)]() mutable {
      began_ = raw_.stream_begin_capture(stream_, driver::CaptureMode::global).ok();
      begun.set_value();
      finish_.get_future().wait();
      driver::GraphHandle graph{};
      ended_ = raw_.stream_end_capture(stream_, &graph).ok() && graph != driver::GraphHandle{};
      if (graph != driver::GraphHandle{}) (void)raw_.graph_destroy(graph);
    });
    begun_future.wait();
    CHECK(began_);
  }
  ForeignCapture(const ForeignCapture&) = delete;
  ForeignCapture& operator=(const ForeignCapture&) = delete;
  ~ForeignCapture() {
    if (thread_.joinable()) end();
  }

  bool active() const {
    driver::CaptureStatus status = driver::CaptureStatus::none;
    std::uint64_t id = 0;
    return raw_.stream_capture_info(stream_, &status, &id).ok() && status == driver::CaptureStatus::active;
  }
  // Ends the capture on its thread: whether it ended into a graph (an invalidated one does not).
  bool end() {
    finish_.set_value();
    thread_.join();
    CHECK(raw_.stream_destroy(stream_).ok());
    return ended_;
  }

 private:
  driver::Driver& raw_;
  driver::StreamHandle stream_{};
  std::promise<void> finish_;
  std::thread thread_;
  bool began_ = false;
  bool ended_ = false;
};

void host_waits_leave_it_alone() {
  auto device = open_mock();
  auto stream = device->stream();
  auto buffer = stream->alloc(4 * words);
  stream->graph_prepare(0);
  stream->fill(*buffer, 5);
  stream->begin_capture();
  stream->fill(*buffer, 5);
  std::shared_ptr<Graph> graph = stream->end_capture(0);
  graph->replay(stream.get());  // its destroy waits for this stream
  ForeignCapture library(device->driver());
  graph->destroy();  // noexcept: what it did shows in the capture's status
  const bool after_destroy = library.active();
  mock_of(*device).pause_streams();
  stream->fill(*buffer, 4);  // held: the bounded sync polls a busy stream first
  std::thread resume([&] {
    std::this_thread::sleep_for(20ms);
    mock_of(*device).resume_streams();
  });
  bool idle = false;
  const ErrorKind polled = error_of([&] { idle = stream->sync_for(10s); });
  resume.join();
  const ErrorKind synced = error_of([&] { stream->sync(); });
  bool read = false;
  const ErrorKind was_read = error_of([&] { read = holds(*stream, *buffer, 4); });
  const bool after_waits = library.active();
  CHECK(library.end());
  CHECK(after_destroy);
  CHECK(polled == ErrorKind::Lifecore && idle);
  CHECK(synced == ErrorKind::Lifecore);
  CHECK(was_read == ErrorKind::Lifecore && read);
  CHECK(after_waits);
  CHECK(thread_mode_is_global(device->driver()));
}

void allocations_frees_and_module_loads_leave_it_alone() {
  auto device = open_mock();
  auto stream = device->stream();
  auto& mock = mock_of(*device);
  ForeignCapture library(device->driver());
  const std::size_t before = mock.live_allocations();
  // A pool slice the pool does not hold yet: a driver allocation.
  std::shared_ptr<Buffer> buffer;
  const ErrorKind allocated = error_of([&] { buffer = stream->alloc(64 * words); });
  const bool after_allocation = library.active();
  // A fill (a memset) and its read (a host wait).
  const ErrorKind filled = error_of([&] {
    stream->fill(*buffer, 7);
    CHECK(holds(*stream, *buffer, 7));
  });
  // A KV arena: one exact-size driver allocation, then its free.
  const ErrorKind arena = error_of([&] {
    sequence::DeviceArenaMemory memory(device);
    const sequence::PageExtent extent = memory.allocate(16 * 4096);
    CHECK(extent.bytes == 16 * 4096);
    memory.release(extent);
  });
  // The pool gives its slices back to the driver.
  buffer.reset();
  stream->sync();
  const ErrorKind cleaned = error_of([&] { device->cleanup(); });
  const bool after_frees = library.active();
  // A module loaded and unloaded again.
  const ErrorKind loaded = error_of([&] {
    const driver::ModuleHandle module = device->load_module(driver::ModuleImage{driver::ImageKind::builtin, {}});
    device->release_module(module);
  });
  const bool after_module = library.active();
  CHECK(library.end());
  CHECK(allocated == ErrorKind::Lifecore && after_allocation);
  CHECK(filled == ErrorKind::Lifecore);
  CHECK(arena == ErrorKind::Lifecore);
  CHECK(cleaned == ErrorKind::Lifecore && after_frees);
  CHECK(mock.live_allocations() <= before + 1);  // at most the info cache's upload stays
  CHECK(loaded == ErrorKind::Lifecore && after_module);
  CHECK(thread_mode_is_global(device->driver()));
}

// Enough launches to collect the stream's fences (an event query each), a launch that uploads
// new info words (an allocation, then a wait for the copy), and a profile (an event wait).
void stream_work_leaves_it_alone() {
  auto device = open_mock();
  auto stream = device->stream();
  auto x = stream->alloc(4 * words), y = stream->alloc(4 * words);
  stream->fill(*x, std::bit_cast<std::uint32_t>(1.0f));
  stream->sync();
  ForeignCapture library(device->driver());
  const ErrorKind issued = error_of([&] {
    // Each write's staging copy waits in the drop queue for a fence the flush then queries.
    const std::vector<std::uint32_t> zeros(words, 0);
    for (std::size_t i = 0; i < 3 * DropQueue::flush_threshold; ++i) stream->write(*y, zeros.data(), 4 * words);
  });
  const bool after_fences = library.active();
  const ErrorKind uploaded = error_of([&] {
    LaunchArg args[2];
    args[0].kind = args[1].kind = LaunchArg::Kind::buffer;
    args[0].buffer = x.get();
    args[1].buffer = y.get();
    const InfoWords info{static_cast<std::uint32_t>(words), std::bit_cast<std::uint32_t>(2.0f)};
    stream->launch(Kernel::builtin("axpy_info_f32"), {1, 1, 1}, {static_cast<std::uint32_t>(words), 1, 1}, args,
                   2, &info);
    CHECK(holds(*stream, *y, std::bit_cast<std::uint32_t>(2.0f)));
  });
  const bool after_upload = library.active();
  float milliseconds = -1.0f;
  const ErrorKind profiled = error_of([&] {
    Stream::ProfileEvents events = stream->profile_start();
    stream->fill(*y, 3);
    milliseconds = stream->profile_stop(events);
  });
  const bool after_profile = library.active();
  CHECK(library.end());
  CHECK(issued == ErrorKind::Lifecore && after_fences);
  CHECK(uploaded == ErrorKind::Lifecore && after_upload);
  CHECK(profiled == ErrorKind::Lifecore && milliseconds >= 0.0f && after_profile);
  CHECK(thread_mode_is_global(device->driver()));
}

// A relaxed scope gives the thread its mode back even when the device was lost inside it: the
// mode is the thread's, and a thread left relaxed would make calls another library's capture
// should have refused.
void a_device_lost_inside_a_relaxed_scope_still_gives_the_mode_back() {
  auto device = open_mock();
  auto stream = device->stream();
  auto buffer = stream->alloc(4 * words);
  device->driver().fault_injection()->inject(driver::Operation::stream_synchronize, 700, 0, 1);  // sticky
  CHECK(error_of([&] { stream->sync(); }) != ErrorKind::Lifecore);
  CHECK(device->lost());
  CHECK(thread_mode_is_global(device->driver()));
}

}  // namespace

int main() {
  host_waits_leave_it_alone();
  allocations_frees_and_module_loads_leave_it_alone();
  stream_work_leaves_it_alone();
  a_device_lost_inside_a_relaxed_scope_still_gives_the_mode_back();
  return test_support::finish("runtime_foreign_capture_test");
}
