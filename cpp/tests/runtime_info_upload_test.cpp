// The info cache shares one buffer per metadata array with every stream of a device, so a new
// entry must hold its words on the device before any stream can see it. Regression: the upload
// was only queued on the inserting stream, and a launch on another stream that hit the entry
// could run first and read zeros (axpy_info_f32 then did nothing).
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
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

// Two streams of one emulated device, a's x holding 1.0 and b's 3.0, both ys zeros.
struct TwoStreams {
  std::shared_ptr<Device> device;
  lifecore::driver::MockDriver* mock;
  std::shared_ptr<Stream> a, b;
  std::shared_ptr<Buffer> xa, ya, xb, yb;
};

TwoStreams two_streams() {
  TwoStreams t;
  t.device = Device::open(lifecore::test_support::emulated_backend(), 0, "hardware", "thread_local");
  t.mock = lifecore::driver::MockDriver::from(&t.device->vendor_driver());
  t.a = t.device->stream();
  t.b = t.device->stream();
  t.xa = t.a->alloc(4 * n), t.ya = t.a->alloc(4 * n);
  t.xb = t.b->alloc(4 * n), t.yb = t.b->alloc(4 * n);
  write_floats(*t.a, *t.xa, 1.0f);
  t.a->fill(*t.ya, 0);
  write_floats(*t.b, *t.xb, 3.0f);
  t.b->fill(*t.yb, 0);
  return t;
}

// While the device holds every stream's work, a launch that creates an entry must not return
// (so no other stream can hit the entry) until its upload has run.
void new_entry_is_published_only_after_its_upload_ran() {
  auto [device, mock, a, b, xa, ya, xb, yb] = two_streams();
  CHECK(mock != nullptr);
  if (mock == nullptr) return;
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

// The upload's wait is the inserting stream's own: a launch on another stream, hitting words
// already cached, does not wait behind it (it waited for the whole of the first stream's queue,
// behind the device-wide cache lock the upload held). Then a stream uploading words another
// stream uploaded meanwhile uses the entry there and lets its own copy go.
void an_upload_waits_alone() {
  auto [device, mock, a, b, xa, ya, xb, yb] = two_streams();
  CHECK(mock != nullptr);
  if (mock == nullptr) return;
  const Kernel& axpy_info = Kernel::builtin("axpy_info_f32");
  const InfoWords cached{n, std::bit_cast<std::uint32_t>(1.0f)};
  const InfoWords fresh{n, std::bit_cast<std::uint32_t>(2.0f)};
  const LaunchArg args_a[] = {buffer_arg(*xa), buffer_arg(*ya)};
  const LaunchArg args_b[] = {buffer_arg(*xb), buffer_arg(*yb)};
  b->launch(axpy_info, {1, 1, 1}, {n, 1, 1}, args_b, 2, &cached);  // y_b = 3
  a->sync();
  b->sync();

  mock->pause_streams();
  std::atomic<bool> a_returned{false}, b_returned{false};
  std::thread uploader([&] {  // new words: its upload waits for a's paused queue
    a->launch(axpy_info, {1, 1, 1}, {n, 1, 1}, args_a, 2, &fresh);  // y_a = 2
    a_returned.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::thread hitter([&] {
    b->launch(axpy_info, {1, 1, 1}, {n, 1, 1}, args_b, 2, &cached);  // y_b = 6
    b_returned.store(true);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!b_returned.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(b_returned.load() && !a_returned.load());  // b went ahead while a's upload still waited
  mock->resume_streams();
  uploader.join();
  hitter.join();
  for (float v : read_floats(*a, *ya)) CHECK(v == 2.0f);
  for (float v : read_floats(*b, *yb)) CHECK(v == 6.0f);
  CHECK(device->info().entries() == 2);

  // Both streams upload the same new words at once: one entry, and whichever copy lost is
  // released after its stream's fence (the device's allocations come back to what they were).
  a->sync();
  b->sync();
  const auto allocations = mock->live_allocations();
  for (std::uint32_t i = 0; i < 32; ++i) {
    const InfoWords both{n, std::bit_cast<std::uint32_t>(10.0f + static_cast<float>(i))};
    std::thread other([&] { b->launch(axpy_info, {1, 1, 1}, {n, 1, 1}, args_b, 2, &both); });
    a->launch(axpy_info, {1, 1, 1}, {n, 1, 1}, args_a, 2, &both);
    other.join();
    CHECK(device->info().entries() == 3 + i);
  }
  a->sync();
  b->sync();
  CHECK(mock->live_allocations() == allocations + 32);  // one buffer per entry, each loser freed
  device->close();
}

}  // namespace

int main() {
  new_entry_is_published_only_after_its_upload_ran();
  an_upload_waits_alone();
  return lifecore::test_support::finish("runtime_info_upload_test");
}
