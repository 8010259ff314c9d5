// The info cache shares one buffer per metadata array with every stream of a device, so a new
// entry must hold its words on the device before any stream can see it. Regression: the upload
// was only queued on the inserting stream, and a launch on another stream that hit the entry
// could run first and read zeros (axpy_info_f32 then did nothing).
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/kernel.hpp"
#include "lifecore/runtime/stream.hpp"
#include "driver/mock/mock_driver.hpp"
#include "test_support.hpp"

using namespace lifecore::runtime;

namespace {

constexpr std::uint32_t n = 64;

LaunchArg buffer_arg(const Buffer& buffer) {
  LaunchArg arg;
  arg.kind = LaunchArg::Kind::buffer;
  arg.buffer = &buffer;
  return arg;
}

std::vector<float> read_floats(Stream& stream, const Buffer& buffer) {
  std::vector<std::uint8_t> bytes = stream.read(buffer);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

void write_floats(Stream& stream, Buffer& buffer, float value) {
  std::vector<float> data(n, value);
  stream.write(buffer, data.data(), data.size() * sizeof(float));
}

// While the device holds every stream's work, a launch that creates an entry must not return
// (so no other stream can hit the entry) until its upload has run.
void new_entry_is_published_only_after_its_upload_ran() {
  auto device = Device::open(lifecore::test_support::emulated_backend(), 0, "hardware", "thread_local");
  auto* mock = lifecore::driver::MockDriver::from(&device->driver());
  CHECK(mock != nullptr);
  if (mock == nullptr) return;
  auto a = device->stream();
  auto b = device->stream();
  auto xa = a->alloc(4 * n), ya = a->alloc(4 * n);
  auto xb = b->alloc(4 * n), yb = b->alloc(4 * n);
  write_floats(*a, *xa, 1.0f);
  a->fill(*ya, 0);
  write_floats(*b, *xb, 3.0f);
  b->fill(*yb, 0);
  a->sync();
  b->sync();

  const Kernel& axpy_info = Kernel::builtin("axpy_info_f32");
  const InfoWords info{n, std::bit_cast<std::uint32_t>(1.0f)};
  mock->pause_streams();
  std::atomic<bool> returned{false};
  std::thread inserter([&] {
    const LaunchArg args[] = {buffer_arg(*xa), buffer_arg(*ya)};
    a->launch(axpy_info, {1, 1, 1}, {n, 1, 1}, args, 2, &info);
    returned.store(true);
  });
  // The bad interleaving: the entry became visible while its copy was still queued. Give the
  // launch ample time to (wrongly) return; with the fix it waits for the paused copy.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(!returned.load());
  mock->resume_streams();
  inserter.join();
  CHECK(returned.load());
  CHECK(device->info().entries() == 1);

  // Another stream hits the entry: its launch reads the words, not zeros.
  const LaunchArg args[] = {buffer_arg(*xb), buffer_arg(*yb)};
  b->launch(axpy_info, {1, 1, 1}, {n, 1, 1}, args, 2, &info);
  for (float v : read_floats(*b, *yb)) CHECK(v == 3.0f);
  for (float v : read_floats(*a, *ya)) CHECK(v == 1.0f);
  device->close();
}

}  // namespace

int main() {
  new_entry_is_published_only_after_its_upload_ran();
  return lifecore::test_support::finish("runtime_info_upload_test");
}
