// A view taken and a free() racing on one buffer: exactly one of them wins. A lease taken
// means the free was refused (the buffer stays live under the view); a free that went through
// means the lease was refused. Never both: the freed slice would go back to the pool and be
// handed out again under the view.
#include <atomic>
#include <memory>
#include <thread>

#include "lifecore/error.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/buffer_lease.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/stream.hpp"
#include "test_support.hpp"

using namespace lifecore::runtime;
using lifecore::Error;

namespace {

constexpr int rounds = 2000;

void a_view_and_a_free_never_both_succeed() {
  auto device = Device::open(lifecore::test_support::emulated_backend(), 0, "hardware", "thread_local");
  auto stream = device->stream();
  int both = 0, leased = 0, freed = 0;
  for (int round = 0; round < rounds; ++round) {
    std::shared_ptr<Buffer> buffer = stream->alloc(256);
    std::atomic<int> ready{0};
    std::shared_ptr<BufferLease> lease;
    bool free_went_through = false;
    std::thread viewer([&] {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      try {
        lease = BufferLease::take(buffer, nullptr);
      } catch (const Error&) {
      }
    });
    std::thread freer([&] {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      try {
        buffer->free();
        free_went_through = true;
      } catch (const Error&) {
      }
    });
    viewer.join();
    freer.join();
    if (lease && free_went_through) ++both;
    if (lease) {
      ++leased;
      CHECK(buffer->alive() && buffer->views() == 1);
      lease.reset();
      CHECK(buffer->views() == 0);
    }
    if (free_went_through) {
      ++freed;
      CHECK(!buffer->alive() && buffer->views() == 0);
    }
    CHECK(lease || free_went_through || buffer->alive());
  }
  CHECK(both == 0);
  CHECK(leased + freed >= rounds);  // one of them always wins
  stream->sync();
}

// The single-threaded edges of the same rule: a freed buffer takes no view, and a buffer with
// a view is not freed (nothing changes on either refusal).
void refusals_change_nothing() {
  auto device = Device::open(lifecore::test_support::emulated_backend(), 0, "hardware", "thread_local");
  auto stream = device->stream();
  std::shared_ptr<Buffer> buffer = stream->alloc(256);
  CHECK(buffer->try_add_view() && buffer->views() == 1);
  bool refused = false;
  try {
    buffer->free();
  } catch (const Error&) {
    refused = true;
  }
  CHECK(refused && buffer->alive() && buffer->views() == 1);
  buffer->drop_view();
  buffer->free();
  CHECK(!buffer->try_add_view() && buffer->views() == 0 && !buffer->alive());
  CHECK(lifecore::test_support::error_of([&] { BufferLease::take(buffer, nullptr); }) == lifecore::ErrorKind::Closed);
  CHECK(buffer->views() == 0);
}

}  // namespace

int main() {
  a_view_and_a_free_never_both_succeed();
  refusals_change_nothing();
  return lifecore::test_support::finish("runtime_buffer_view_free_threads_test");
}
