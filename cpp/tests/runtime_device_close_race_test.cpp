// Nothing made or released on a device while its close() runs escapes the close. A call that
// makes a driver object either finishes before close takes the device's objects (and close
// destroys it) or is refused with ClosedError, its driver object destroyed; an object released
// while close runs is released by close or by the release, never by neither; a profile's
// events, which close does not know, go when the profile does. Each window is made
// deterministic with the runtime's pause points; the mock's counts of live driver objects show
// whether anything was left behind.
#include <bit>
#include <functional>
#include <memory>
#include <thread>

#include "lifecore/error.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/kernel.hpp"
#include "lifecore/runtime/pause_points.hpp"
#include "lifecore/runtime/stream.hpp"
#include "runtime_test_support.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::runtime;
using test_support::error_of;
using test_support::mock_of;

namespace {

std::shared_ptr<Device> open_mock() {
  return Device::open(test_support::emulated_backend(), 0, "hardware", "thread_local");
}

// Runs `stopped` on another thread until it reaches `point`, then `meanwhile` on this one, then
// lets the other thread go on and waits for it.
void while_stopped_at(pause_points::Point point, const std::function<void()>& stopped,
                      const std::function<void()>& meanwhile) {
  pause_points::arm(point);
  std::thread other(stopped);
  CHECK(pause_points::wait_until_reached(10.0));
  meanwhile();
  pause_points::resume();
  other.join();
}

// Made before close(): close destroys its driver stream though the Stream object lives on.
void a_stream_made_before_close_is_destroyed_by_it() {
  auto device = open_mock();
  auto stream = device->stream();
  CHECK(mock_of(*device).live_streams() == 1);
  device->close();
  CHECK(mock_of(*device).live_streams() == 0);
  CHECK(error_of([&] { stream->sync(); }) == ErrorKind::Closed);
}

// The driver stream is made, then the whole close() runs before the stream is registered.
void a_stream_made_while_close_runs_is_refused() {
  auto device = open_mock();
  std::shared_ptr<Stream> made;
  ErrorKind outcome = ErrorKind::Lifecore;
  while_stopped_at(
      pause_points::Point::stream_made, [&] { outcome = error_of([&] { made = device->stream(); }); },
      [&] { device->close(); });
  CHECK(outcome == ErrorKind::Closed);
  CHECK(made == nullptr);
  made.reset();
  CHECK(mock_of(*device).live_streams() == 0);
}

// close() has taken the streams it shuts down but not yet marked the device closed, so the
// new stream passes the open check: it must not join after the streams were taken.
void a_stream_made_after_close_took_the_streams_is_refused() {
  auto device = open_mock();
  auto existing = device->stream();
  std::shared_ptr<Stream> made;
  ErrorKind outcome = ErrorKind::Lifecore;
  while_stopped_at(
      pause_points::Point::close_took_streams, [&] { device->close(); },
      [&] { outcome = error_of([&] { made = device->stream(); }); });
  CHECK(outcome == ErrorKind::Closed);
  made.reset();
  CHECK(mock_of(*device).live_streams() == 0);
  CHECK(error_of([&] { device->stream(); }) == ErrorKind::Closed);
}

// The last reference to a stream goes as close() takes the streams: close cannot take it any
// more, so its own shutdown must still destroy the driver stream though the device is closed.
void a_stream_dropped_while_close_runs_is_destroyed() {
  auto device = open_mock();
  auto stream = device->stream();
  while_stopped_at(pause_points::Point::stream_dropped, [&] { stream.reset(); }, [&] { device->close(); });
  CHECK(mock_of(*device).live_streams() == 0);
}

// A profile running when close() comes: close does not know its events, so stopping or
// abandoning it afterwards must still destroy them.
void a_profile_running_at_close_destroys_its_events() {
  auto device = open_mock();
  auto stream = device->stream();
  Stream::ProfileEvents stopped = stream->profile_start();
  Stream::ProfileEvents abandoned = stream->profile_start();
  CHECK(mock_of(*device).live_events() == 4);
  device->close();
  CHECK(error_of([&] { stream->profile_stop(stopped); }) == ErrorKind::Closed);
  stream->profile_abandon(abandoned);
  CHECK(mock_of(*device).live_events() == 0);
}

// The driver module is loaded, then the whole close() runs before the device records it.
void a_module_loaded_while_close_runs_is_refused() {
  auto device = open_mock();
  driver::ModuleHandle module{};
  ErrorKind outcome = ErrorKind::Lifecore;
  while_stopped_at(
      pause_points::Point::module_loaded,
      [&] {
        outcome = error_of([&] { module = device->load_module(driver::ModuleImage{driver::ImageKind::builtin, {}}); });
      },
      [&] { device->close(); });
  CHECK(outcome == ErrorKind::Closed);
  if (module != driver::ModuleHandle{}) device->release_module(module);  // what a Module would do
  CHECK(mock_of(*device).live_modules() == 0);
}

// A module released after close() marked the device closed but before it unloaded the
// modules: close no longer finds it, so the release unloads it.
void a_module_released_while_close_runs_is_unloaded() {
  auto device = open_mock();
  const driver::ModuleHandle module = device->load_module(driver::ModuleImage{driver::ImageKind::builtin, {}});
  CHECK(mock_of(*device).live_modules() == 1);
  while_stopped_at(
      pause_points::Point::device_marked_closed, [&] { device->close(); }, [&] { device->release_module(module); });
  CHECK(mock_of(*device).live_modules() == 0);
}

// A graph whose destroy() took it just before close() ran: close finds it taken and leaves it
// to that destroy, which must still release its driver objects though the device is closed now.
void a_graph_destroyed_while_close_runs_is_released() {
  auto device = open_mock();
  auto stream = device->stream();
  auto buffer = stream->alloc(256);
  stream->graph_prepare(0);
  stream->fill(*buffer, 1);  // the warmup pass
  stream->begin_capture();
  stream->fill(*buffer, 1);  // the recorded pass
  auto graph = stream->end_capture(0);
  CHECK(mock_of(*device).live_graph_execs() == 1);
  while_stopped_at(pause_points::Point::graph_destroy_waited, [&] { graph->destroy(); }, [&] { device->close(); });
  CHECK(mock_of(*device).live_graph_execs() == 0);
}

// cleanup() took the unpinned info buffers out of the cache, then close() ran: close frees
// only what the cache still holds, so cleanup must free these though the device is closed now.
void info_buffers_cleanup_took_while_close_runs_are_freed() {
  constexpr std::uint32_t n = 64;
  auto device = open_mock();
  auto stream = device->stream();
  auto x = stream->alloc(4 * n), y = stream->alloc(4 * n);
  const InfoWords info{n, std::bit_cast<std::uint32_t>(1.0f)};
  const LaunchArg args[] = {{.kind = LaunchArg::Kind::buffer, .buffer = x.get()},
                            {.kind = LaunchArg::Kind::buffer, .buffer = y.get()}};
  stream->launch(Kernel::builtin("axpy_info_f32"), {1, 1, 1}, {n, 1, 1}, args, 2, &info);
  stream->sync();
  CHECK(device->info().entries() == 1);
  while_stopped_at(pause_points::Point::cleanup_took_info, [&] { device->cleanup(); }, [&] { device->close(); });
  CHECK(mock_of(*device).live_allocations() == 0);
}

}  // namespace

int main() {
  a_stream_made_before_close_is_destroyed_by_it();
  a_stream_made_while_close_runs_is_refused();
  a_stream_made_after_close_took_the_streams_is_refused();
  a_stream_dropped_while_close_runs_is_destroyed();
  a_profile_running_at_close_destroys_its_events();
  a_module_loaded_while_close_runs_is_refused();
  a_module_released_while_close_runs_is_unloaded();
  a_graph_destroyed_while_close_runs_is_released();
  info_buffers_cleanup_took_while_close_runs_are_freed();
  return test_support::finish("runtime_device_close_race_test");
}
