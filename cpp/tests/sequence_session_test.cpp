// The sequence core without Python: admission, extension, frames, release, waiters, and
// pages through the vendor layer when the mock driver is available.
#include <atomic>
#include <cstdio>
#include <string>
#include <vector>
#include <thread>
#include <variant>

#include "lifecore/error.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "lifecore/sequence/waiter.hpp"
#include "sequence/driver_page_memory.hpp"
#include "vendor/backends.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::sequence;

namespace {

template <typename F>
ErrorKind error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::Lifecore;  // "no error" marker for these tests
}

std::shared_ptr<AdmissionCoordinator> make(std::uint64_t pages, std::shared_ptr<PageMemory> memory = nullptr) {
  CoordinatorConfig config;
  config.domains.push_back({"kv", pages * 4096, 0});
  config.page_bytes = 4096;
  config.tokens_per_page = 16;
  config.max_active_sequences = 4;
  config.memory = std::move(memory);
  return AdmissionCoordinator::create(std::move(config));
}

void lifecycle_and_release() {
  auto c = make(4);
  auto decision = c->admit({"r", 16, 64, {}});
  auto* admitted = std::get_if<Admitted>(&decision);
  CHECK(admitted != nullptr);
  auto session = admitted->resources->open_session();
  CHECK(error_of([&] { admitted->resources->open_session(); }) == ErrorKind::SessionState);
  admitted->resources.reset();
  CHECK(session->step(16) == BackingOutcome::current);
  auto frame = session->acquire_frame();
  CHECK(session->try_ensure_backing_covers(48).outcome == BackingOutcome::retry_required);
  CHECK(frame->commit() == FrameDisposition::committed);
  auto extended = session->try_ensure_backing_covers(48);
  CHECK(extended.outcome == BackingOutcome::extended && extended.snapshot->generation() == 2);
  extended.snapshot.reset();
  CHECK(c->capacity().domains[0].used_bytes == 3 * 4096);
  CHECK(session->try_complete().outcome == TerminalOutcome::completed);
  session.reset();
  CHECK(c->capacity().domains[0].used_bytes == 0 && c->capacity().active_sequences == 0);
}

void waiter_wakes_on_release() {
  auto c = make(1);
  auto held = c->admit({"a", 16, 16, {}});
  auto deferred = c->admit({"b", 16, 16, {}});
  CHECK(std::holds_alternative<AdmissionDeferred>(deferred));
  auto registration = c->register_waiter(std::get<AdmissionDeferred>(deferred));
  CHECK(!registration->should_retry());
  std::thread releaser([&] { held = AdmissionRejected{}; });
  CHECK(registration->wait(5.0));
  releaser.join();
  c->close();
  CHECK(error_of([&] { registration->wait(0.0); }) == ErrorKind::Closed);
}

void driver_pages() {
  std::shared_ptr<vendor::Driver> driver;
  try {
    driver = vendor::open_driver("mock", 0);
  } catch (const Error& e) {
    std::printf("sequence_session_test: driver pages skipped (%s)\n", e.what());
    return;
  }
  auto c = make(4, std::make_shared<DriverPageMemory>(driver));
  auto decision = c->admit({"r", 32, 64, {}});
  auto* admitted = std::get_if<Admitted>(&decision);
  CHECK(admitted != nullptr && admitted->resources->initial_backing()->extents().at(0).memory.address != 0);
}

// Many threads admitting, extending, stepping, completing and releasing at once, with a
// waiter thread: accounting must come back to zero and never pass the ceiling.
void concurrent_lifecycles() {
  CoordinatorConfig config;
  config.domains.push_back({"kv", 24 * 4096, 0});
  config.page_bytes = 4096;
  config.tokens_per_page = 16;
  config.max_active_sequences = 3;
  auto c = AdmissionCoordinator::create(std::move(config));
  std::atomic<int> admitted{0}, deferred{0};
  std::atomic<bool> over_ceiling{false};
  auto worker = [&](int id) {
    for (int i = 0; i < 300; ++i) {
      auto decision = c->admit({"w" + std::to_string(id), 16, 128, {}});
      if (auto* d = std::get_if<AdmissionDeferred>(&decision)) {
        ++deferred;
        auto registration = c->register_waiter(*d);
        registration->wait(0.001);
        continue;
      }
      ++admitted;
      if (c->capacity().active_sequences > 3) over_ceiling = true;
      auto session = std::get<Admitted>(decision).resources->open_session();
      for (std::int64_t t = 16; t <= 128; t += 16)
        if (session->step(t) == BackingOutcome::backing_deferred) break;
      if (i % 3 == 0) {
        auto frame = session->acquire_frame();
        frame->commit();
      }
      session->try_complete();
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back(worker, i);
  for (auto& t : threads) t.join();
  CHECK(!over_ceiling.load());
  CHECK(admitted.load() > 0);
  auto cap = c->capacity();
  CHECK(cap.active_sequences == 0 && cap.domains[0].used_bytes == 0);
}

}  // namespace

int main() {
  concurrent_lifecycles();
  lifecycle_and_release();
  waiter_wakes_on_release();
  driver_pages();
  return lifecore::test_support::finish("sequence_session_test");
}
