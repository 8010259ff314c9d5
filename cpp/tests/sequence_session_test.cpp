// The sequence core without Python: admission, extension, frames, release, waiters, and
// the KV arena on a device when an emulated driver is available.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
#include <thread>
#include <variant>

#include "common/sha256.hpp"
#include "lifecore/error.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/pause_points.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "lifecore/sequence/waiter.hpp"
#include "sequence/session_state.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/graph.hpp"
#include "lifecore/runtime/stream.hpp"
#include "lifecore/sequence/block_arena.hpp"
#include "sequence/device_arena_memory.hpp"
#include "driver/mock/mock_driver.hpp"
#include "lifecore/driver/backends.hpp"
#include "sequence_test_support.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::sequence;
using lifecore::test_support::error_of;

namespace {

std::shared_ptr<AdmissionCoordinator> make(std::uint64_t pages, std::shared_ptr<PageMemory> memory = nullptr) {
  return lifecore::test_support::kv_coordinator(pages, 4, 1, std::move(memory));
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

// A deferral whose wait condition names no source, or whose epochs do not match its sources
// one for one, is refused: a waiter on it would watch nothing, or read past its epochs.
void a_deferral_without_a_whole_wait_condition_is_refused() {
  auto c = make(1);
  auto held = c->admit({"a", 16, 16, {}});
  auto decision = c->admit({"b", 16, 16, {}});
  auto deferred = std::get<AdmissionDeferred>(decision);
  CHECK(deferred.wait_condition.sources.size() == deferred.wait_condition.epochs.size() &&
        !deferred.wait_condition.sources.empty());
  auto empty = deferred;
  empty.wait_condition.sources.clear();
  empty.wait_condition.epochs.clear();
  CHECK(error_of([&] { c->register_waiter(empty); }) == ErrorKind::InvalidArgument);
  auto short_epochs = deferred;
  short_epochs.wait_condition.epochs.pop_back();
  CHECK(error_of([&] { c->register_waiter(short_epochs); }) == ErrorKind::InvalidArgument);
  auto extra_epoch = deferred;
  extra_epoch.wait_condition.epochs.push_back(0);
  CHECK(error_of([&] { c->register_waiter(extra_epoch); }) == ErrorKind::InvalidArgument);
  CHECK(c->register_waiter(deferred) != nullptr);  // the whole one is taken
}

void an_arena_needs_a_device() {
  CHECK(error_of([] { DeviceArenaMemory memory(nullptr); }) == ErrorKind::InvalidArgument);
}

void notify_hook_fires_on_signal_cancel_and_close() {
  // The counters outlive the registrations: a destructor cancels, and a cancel calls the hook.
  std::atomic<int> first_calls{0}, second_calls{0}, third_calls{0};
  auto c = make(1);
  auto held = c->admit({"a", 16, 16, {}});
  auto first = c->register_waiter(std::get<AdmissionDeferred>(c->admit({"b", 16, 16, {}})));
  auto second = c->register_waiter(std::get<AdmissionDeferred>(c->admit({"c", 16, 16, {}})));
  first->add_notify([&]() noexcept { ++first_calls; });
  const auto second_key = second->add_notify([&]() noexcept { ++second_calls; });
  std::atomic<int> also_second{0};
  second->add_notify([&]() noexcept { ++also_second; });  // a second awaiter of one registration
  CHECK(first_calls == 0 && second_calls == 0);
  held = AdmissionRejected{};  // the release signals both
  CHECK(first_calls >= 1 && second_calls >= 1 && also_second == second_calls);
  const int after_signal = first_calls;
  first->cancel();  // a cancel calls the hook once, then no more signals
  CHECK(first_calls == after_signal + 1);
  const int second_before_close = second_calls;
  const int also_before_close = also_second;
  second->remove_notify(second_key);  // removed: never called again; the other hook stays
  second->remove_notify(12345);       // an unknown key is ignored
  // Signalled once, `second` left the coordinator's lists: the close calls none of its hooks
  // (every wait on it returns at once already), and it reads closed all the same.
  c->close();
  CHECK(second_calls == second_before_close && first_calls == after_signal + 1 && also_second == also_before_close);
  CHECK(second->closed() && second->wake_count() == 1);
  auto other = make(1);
  auto kept = other->admit({"a", 16, 16, {}});
  auto third = other->register_waiter(std::get<AdmissionDeferred>(other->admit({"b", 16, 16, {}})));
  third->add_notify([&]() noexcept { ++third_calls; });
  std::atomic<int> removed_calls{0};
  const auto removed_key = third->add_notify([&]() noexcept { ++removed_calls; });
  third->remove_notify(removed_key);  // removed: not called by the close; the other hook is
  other->close();
  CHECK(third_calls == 1 && removed_calls == 0 && third->closed());
}

// The emulated device, or null after saying that `what` is skipped and why.
std::shared_ptr<runtime::Device> emulated_device_or_skip(const char* what) {
  try {
    return runtime::Device::open(test_support::emulated_backend(), 0, "auto", "thread_local");
  } catch (const Error& e) {
    std::printf("sequence_session_test: %s skipped (%s)\n", what, e.what());
    return nullptr;
  }
}

void driver_pages() {
  auto device = emulated_device_or_skip("driver pages");
  if (!device) return;
  auto c = make(4, std::make_shared<DeviceArenaMemory>(device));
  const auto arena = device->memory().stats();
  CHECK(arena.arena_bytes == 4 * 4096 && arena.arenas == 1 && arena.pool_bytes == 0);
  auto decision = c->admit({"r", 32, 64, {}});
  auto* admitted = std::get_if<Admitted>(&decision);
  CHECK(admitted != nullptr && admitted->resources->initial_backing()->extents().at(0).memory.address != 0);
  // The pages are block ids of the arena: no driver allocation per admission or extension.
  auto session = admitted->resources->open_session();
  CHECK(session->try_ensure_backing_covers(64).outcome == BackingOutcome::extended);
  CHECK(device->memory().stats().driver_allocations == arena.driver_allocations);
  session.reset();
  decision = AdmissionRejected{};
  c.reset();  // the last holder: the arena goes back
  CHECK(device->memory().stats().arena_bytes == 0);
  device->close();
}

// While another stream records on this thread (thread_local mode), a new arena is a driver
// allocation the driver forbids: refused up front, nothing made. An arena freed then (its
// coordinator's last holder let go) cannot be refused: it is freed in relaxed mode, so the
// driver gets the memory back and the recording goes on. A plain free there would be refused
// by the driver, which would invalidate the recording and keep the memory.
void arena_while_a_stream_records() {
  auto device = emulated_device_or_skip("an arena while a stream records");
  if (!device) return;
  auto& mock = *driver::MockDriver::from(&device->vendor_driver());
  auto stream = device->stream();
  auto buffer = stream->alloc(64);
  stream->fill(*buffer, 1);
  stream->sync();
  const std::size_t before = mock.live_allocations();
  auto c = make(4, std::make_shared<DeviceArenaMemory>(device));
  CHECK(mock.live_allocations() == before + 1);
  stream->graph_prepare(0);
  stream->fill(*buffer, 5);  // the warmup pass
  stream->begin_capture();
  stream->fill(*buffer, 9);  // the recorded pass
  CHECK(error_of([&] { make(4, std::make_shared<DeviceArenaMemory>(device)); }) == ErrorKind::CaptureState);
  CHECK(mock.live_allocations() == before + 1 && device->memory().stats().arenas == 1);
  c.reset();
  CHECK(mock.live_allocations() == before && device->memory().stats().arenas == 0);
  auto graph = stream->end_capture(0);
  CHECK(graph != nullptr && graph->node_count() == 1);
  if (graph) graph->destroy();
  device->close();
}

// A device calls each live close watch once, after its close, and at once when already closed;
// a dropped watch is never called. A coordinator on the device closes with it and wakes its
// waiters' hooks (so an event loop needs no polling to notice).
void device_close_watches() {
  auto device = emulated_device_or_skip("close watches");
  if (!device) return;
  int kept_calls = 0, dropped_calls = 0, late_calls = 0;
  bool closed_when_called = false;
  auto kept = device->watch_close([&] {
    ++kept_calls;
    closed_when_called = device->closed() && device->memory().stats().arena_bytes == 0;
  });
  device->watch_close([&] { ++dropped_calls; });  // the token is dropped at once
  auto c = make(1, std::make_shared<DeviceArenaMemory>(device));
  auto held = c->admit({"a", 16, 16, {}});
  auto registration = c->register_waiter(std::get<AdmissionDeferred>(c->admit({"b", 16, 16, {}})));
  std::atomic<int> hook_calls{0};
  registration->add_notify([&]() noexcept { ++hook_calls; });
  device->close();
  device->close();  // idempotent: no second call
  CHECK(kept_calls == 1 && dropped_calls == 0 && closed_when_called);
  CHECK(c->closed() && registration->closed() && hook_calls == 1);
  CHECK(error_of([&] { registration->wait(std::nullopt); }) == ErrorKind::Closed);
  auto late = device->watch_close([&] { ++late_calls; });
  CHECK(late_calls == 1);
}

// Block ids are reused last-released first, and a release gives a sequence's ids back in an
// order that hands them out again as they were.
void block_ids_are_a_lifo_free_list() {
  BlockArena arena;
  arena.add_blocks(4, nullptr);
  std::int32_t a[2], b[1], c[2];
  CHECK(arena.take(2, a) && a[0] == 0 && a[1] == 1);
  CHECK(arena.take(1, b) && b[0] == 2 && arena.free_blocks() == 1);
  CHECK(!arena.take(2, c) && arena.free_blocks() == 1);  // nothing taken
  arena.give_back(a, 2);
  CHECK(arena.take(2, c) && c[0] == 0 && c[1] == 1);
  arena.give_back(b, 1);
  arena.give_back(c, 2);
  CHECK(arena.live() == 0 && arena.free_blocks() == 4);
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

// Source slots are 0 (slots), 1 + domain index, and one past the domains (physical memory):
// a domain index equal to the number of domains must never reach the physical slot.
void source_index_equal_to_domain_count_is_refused() {
  CoordinatorConfig config;
  config.domains.push_back({"kv", 4096, 0});
  config.domains.push_back({"v", 4096, 0});
  config.page_bytes = 4096;
  config.tokens_per_page = 16;
  config.max_active_sequences = 1;
  auto c = AdmissionCoordinator::create(std::move(config));
  auto held = c->admit({"a", 16, 16, {}});
  auto decision = c->admit({"b", 16, 16, {}});
  auto deferred = std::get<AdmissionDeferred>(decision);
  CHECK(!deferred.wait_condition.sources.empty());
  auto edge = deferred;
  edge.wait_condition.sources[0] = CapacitySource::domain(1, "v", c->id());  // the last domain: fine
  CHECK(error_of([&] { c->register_waiter(edge); }) == ErrorKind::Lifecore);
  CHECK(error_of([&] { c->epoch_of(CapacitySource::domain(1, "v", c->id())); }) == ErrorKind::Lifecore);
  auto past = deferred;
  past.wait_condition.sources[0] = CapacitySource::domain(2, "?", c->id());  // == domain count
  CHECK(error_of([&] { c->register_waiter(past); }) == ErrorKind::InvalidArgument);
  CHECK(error_of([&] { c->epoch_of(CapacitySource::domain(2, "?", c->id())); }) == ErrorKind::InvalidArgument);
  CHECK(error_of([&] { c->resolve_source(CapacitySource::domain(2, "?", c->id()), "test"); }) == ErrorKind::InvalidArgument);
  // A source of another coordinator is a stale authority here.
  CHECK(error_of([&] { c->epoch_of(CapacitySource::slots(c->id() + 1)); }) == ErrorKind::StaleAuthority);
}

void authorities_name_their_coordinator() {
  auto gpu0 = make(4), gpu1 = make(4);
  auto a = gpu0->admit({"r", 16, 16, {}});
  auto b = gpu1->admit({"r", 16, 16, {}});
  const auto& mine = std::get<Admitted>(a).resources->sequence_authority();
  const auto& theirs = std::get<Admitted>(b).resources->sequence_authority();
  CHECK(mine.sparse_id == theirs.sparse_id && mine.generation == theirs.generation && !(mine == theirs));
  CHECK(error_of([&] { gpu0->verify_sequence_authority(mine); }) == ErrorKind::Lifecore);
  CHECK(error_of([&] { gpu0->verify_sequence_authority(theirs); }) == ErrorKind::StaleAuthority);
}

void wait_deadlines_never_wrap() {
  using R = CapacityWaitRegistration;
  CHECK(error_of([] { R::deadline_after(std::nan("")); }) == ErrorKind::InvalidArgument);
  CHECK(error_of([] { R::deadline_after(-1e-9); }) == ErrorKind::InvalidArgument);
  CHECK(error_of([] { R::deadline_after(-std::numeric_limits<double>::infinity()); }) == ErrorKind::InvalidArgument);
  for (double huge : {std::numeric_limits<double>::infinity(), 1e10, 1e300, 18446744073709551616.0})
    CHECK(!R::deadline_after(huge).has_value());
  CHECK(!R::deadline_after(std::nullopt).has_value());
  const auto before = std::chrono::steady_clock::now();
  auto one = R::deadline_after(1.0);
  CHECK(one.has_value() && *one > before && *one <= std::chrono::steady_clock::now() + std::chrono::seconds(1));
  auto zero = R::deadline_after(0.0);
  CHECK(zero.has_value() && *zero <= std::chrono::steady_clock::now());
}

// A page memory whose device closes under the coordinator.
class ClosablePageMemory final : public PageMemory {
 public:
  PageExtent allocate(std::size_t bytes) override { return host.allocate(bytes); }
  void release(const PageExtent& extent) noexcept override { host.release(extent); }
  const char* kind() const noexcept override { return "closable"; }
  bool closed() const noexcept override { return is_closed.load(); }
  HostPageMemory host;
  std::atomic<bool> is_closed{false};
};

// Page memory whose device's last reference goes while the coordinator asks it something under
// its lock: the device's close then calls the coordinator's close watch on that same thread.
class LastReferenceMemory final : public PageMemory {
 public:
  PageExtent allocate(std::size_t bytes) override { return host.allocate(bytes); }
  void release(const PageExtent& extent) noexcept override { host.release(extent); }
  const char* kind() const noexcept override { return "last-reference"; }
  bool closed() const noexcept override {
    if (armed.exchange(false) && on_close) {
      is_closed = true;
      on_close();  // as ~Device -> close() would, with the coordinator's lock held by this thread
    }
    return is_closed;
  }
  std::shared_ptr<void> watch_close(std::function<void()> fn) override {
    on_close = std::move(fn);
    return std::make_shared<int>(0);
  }
  HostPageMemory host;
  mutable std::atomic<bool> armed{false};
  mutable bool is_closed = false;
  std::function<void()> on_close;
};

void a_device_gone_under_the_coordinators_lock_closes_it_without_deadlock() {
  auto memory = std::make_shared<LastReferenceMemory>();
  auto c = make(1, memory);
  auto held = c->admit({"a", 16, 16, {}});
  auto registration = c->register_waiter(std::get<AdmissionDeferred>(c->admit({"b", 16, 16, {}})));
  std::atomic<int> hook_calls{0};
  registration->add_notify([&]() noexcept { ++hook_calls; });
  memory->armed = true;
  CHECK(error_of([&] { c->admit({"x", 16, 16, {}}); }) == ErrorKind::Closed);  // the check that met the close
  CHECK(c->closed() && registration->closed() && hook_calls == 1);
}

void a_closed_device_closes_its_coordinator() {
  auto memory = std::make_shared<ClosablePageMemory>();
  auto c = make(4, memory);
  auto decision = c->admit({"r", 16, 64, {}});
  auto session = std::get<Admitted>(decision).resources->open_session();
  decision = AdmissionRejected{};
  CoordinatorConfig one_slot;
  one_slot.domains.push_back({"kv", 4096, 0});
  one_slot.page_bytes = 4096;
  one_slot.tokens_per_page = 16;
  one_slot.max_active_sequences = 1;
  one_slot.memory = memory;
  auto slots = AdmissionCoordinator::create(std::move(one_slot));
  auto held = slots->admit({"a", 16, 16, {}});
  auto registration = slots->register_waiter(std::get<AdmissionDeferred>(slots->admit({"b", 16, 16, {}})));
  memory->is_closed = true;
  const auto allocations = memory->host.allocations();
  CHECK(c->closed());
  CHECK(error_of([&] { c->admit({"x", 16, 16, {}}); }) == ErrorKind::Closed);
  CHECK(error_of([&] { session->try_ensure_backing_covers(48); }) == ErrorKind::Closed);
  CHECK(error_of([&] { registration->wait(std::nullopt); }) == ErrorKind::Closed);
  CHECK(memory->host.allocations() == allocations);
  session.reset();
  held = AdmissionRejected{};
  CHECK(c->live_takes() == 0 && c->live_blocks() == 0 && c->capacity().domains[0].used_bytes == 0);
}

// The prepare -> publish window of an extension, made deterministic with a pause point: a
// cancel that lands in it refuses the publish and every prepared page rolls back.
void cancel_between_prepare_and_publish() {
  auto memory = std::make_shared<HostPageMemory>();
  auto c = make(8, memory);
  auto decision = c->admit({"r", 16, 64, {}});
  auto session = std::get<Admitted>(decision).resources->open_session();
  decision = AdmissionRejected{};
  pause_points::arm(pause_points::Point::extension_prepared);
  ErrorKind outcome = ErrorKind::Lifecore;
  std::thread extender([&] { outcome = error_of([&] { session->try_ensure_backing_covers(48); }); });
  CHECK(pause_points::wait_until_reached(10.0));
  CHECK(c->capacity().domains[0].used_bytes == 3 * 4096 && c->live_takes() == 2 && c->live_blocks() == 3);
  session->request_cancel();
  pause_points::resume();
  extender.join();
  CHECK(outcome == ErrorKind::SessionState);
  CHECK(c->capacity().domains[0].used_bytes == 4096 && c->live_takes() == 1 && c->live_blocks() == 1);
  CHECK(session->backing()->generation() == 1);
  session.reset();
  CHECK(c->live_takes() == 0 && c->capacity().domains[0].used_bytes == 0);
}

// The three-call path of an extension, taken when the one-lock claim found capacity short and
// capacity came back before the check: the pages it then takes are the session's (distinct, in
// the domain, counted), and where they cannot be taken the extension is a physical deferral that
// holds nothing more, after which a retry extends.
void capacity_back_between_the_fast_claim_and_the_check() {
  for (bool physical_short : {false, true}) {
    auto memory = std::make_shared<HostPageMemory>();
    auto c = make(2, memory);
    auto resources = std::get<Admitted>(c->admit({"a", 16, 32, {}})).resources;
    auto other = std::get<Admitted>(c->admit({"b", 16, 32, {}})).resources;  // the domain is full
    auto session = resources->open_session();
    resources.reset();
    pause_points::arm(pause_points::Point::extension_found_short);
    BackingDecision decision;
    std::thread extender([&] { decision = session->try_ensure_backing_covers(17); });
    CHECK(pause_points::wait_until_reached(10.0));
    other.reset();  // a page comes back
    if (physical_short) memory->fail_next_allocations(1);
    pause_points::resume();
    extender.join();
    if (physical_short) {
      CHECK(decision.outcome == BackingOutcome::backing_deferred && decision.deferred);
      CHECK(decision.reason.rfind("physical pages could not be prepared", 0) == 0);
      CHECK(c->capacity().domains[0].used_bytes == 4096 && c->live_blocks() == 1 && c->live_takes() == 1);
      CHECK(session->backing()->pages() == 1);
      decision = session->try_ensure_backing_covers(17);  // nothing fails now: the fast claim extends
    }
    CHECK(decision.outcome == BackingOutcome::extended && decision.snapshot);
    CHECK(c->capacity().domains[0].used_bytes == 2 * 4096 && c->live_blocks() == 2);
    const BlockIds ids = decision.snapshot->block_ids(0);
    const std::int32_t* id = ids.data.get();
    CHECK(ids.count == 2 && id[0] != id[1] && id[0] >= 0 && id[0] < 2 && id[1] >= 0 && id[1] < 2);
    session.reset();
    CHECK(c->live_blocks() == 0 && c->live_takes() == 0 && c->capacity().domains[0].used_bytes == 0);
  }
}

// Host chunks get synthetic addresses that never overlap; one the address space cannot hold
// gets address 0 (there is no memory behind host pages either way).
void host_pages_never_wrap() {
  HostPageMemory memory;
  CHECK(memory.allocate(std::numeric_limits<std::size_t>::max()).address == 0);
  CHECK(memory.allocate(std::numeric_limits<std::size_t>::max() - 4094).address == 0);
  const PageExtent first = memory.allocate(std::size_t{1} << 62);
  const PageExtent second = memory.allocate(std::size_t{1} << 62);
  const PageExtent third = memory.allocate(std::size_t{1} << 62);
  CHECK(first.address != 0 && second.address > first.address && third.address > second.address);
  CHECK(memory.allocate(std::size_t{1} << 62).address == 0);  // the range would pass 2**64
  CHECK(memory.live_extents() == 6 && memory.allocations() == 6);
}

}  // namespace

// The v1 session fingerprint, hashed eagerly here from the same fields (the encoding is a
// published identity: the lazy digest must equal it bit for bit).
std::string eager_fingerprint(std::uint64_t coordinator, const Authority& request, const Authority& sequence,
                              const std::string& request_id, std::uint64_t epoch, const std::string& backing) {
  Sha256 hash;
  auto field = [&](const std::string& name, const std::string& value) {
    const std::string encoded = name + "=" + std::to_string(value.size()) + ":" + value + ";";
    hash.update(encoded.data(), encoded.size());
  };
  const std::string tag = "lifecore.sequence-session.v1";
  hash.update(tag.data(), tag.size());
  hash.update("\0", 1);
  field("coordinator", std::to_string(coordinator));
  field("request_authority", std::to_string(request.sparse_id) + "/" + std::to_string(request.generation));
  field("sequence_authority", std::to_string(sequence.sparse_id) + "/" + std::to_string(sequence.generation));
  field("request_id", request_id);
  field("epoch", std::to_string(epoch));
  field("backing", backing);
  return to_hex(hash.finish());
}

void lazy_fingerprint_matches_the_eager_one() {
  auto c = make(8);
  auto decision = c->admit({"fp", 20, 64, {}});
  auto resources = std::move(std::get<Admitted>(decision).resources);
  const Authority request = resources->request_authority(), sequence = resources->sequence_authority();
  auto session = resources->open_session();
  resources.reset();
  // The backing moves on before the first read: the digest still names the open-time backing.
  CHECK(session->step(40) == BackingOutcome::extended);
  const std::string expected = eager_fingerprint(c->id(), request, sequence, "fp", 1, "1,20,2,d0");
  std::string seen[2];
  const std::string* made[2] = {};
  std::thread first([&] { made[0] = &session->fingerprint(); seen[0] = *made[0]; });
  std::thread second([&] { made[1] = &session->fingerprint(); seen[1] = *made[1]; });
  first.join();
  second.join();
  // Both racing first reads get the one digest kept (the loser's is dropped).
  CHECK(seen[0] == expected && seen[1] == expected && made[0] == made[1] && made[0] == &session->fingerprint());
  session->verify(1, expected);
  CHECK(error_of([&] { session->verify(1, std::string(64, '0')); }) == ErrorKind::StaleAuthority);
  const auto receipt = session->try_complete();
  CHECK(receipt.fingerprint() == expected && session->receipt()->fingerprint() == expected);

  // First read after the handle closed (its resources and backing gone): the same digest.
  session->close();
  auto again = std::move(std::get<Admitted>(c->admit({"fp2", 20, 64, {}})).resources);
  const Authority request2 = again->request_authority(), sequence2 = again->sequence_authority();
  auto closed = again->open_session();
  again.reset();
  closed->close();
  CHECK(c->holders().empty());
  CHECK(closed->fingerprint() == eager_fingerprint(c->id(), request2, sequence2, "fp2", 1, "1,20,2,d0"));
}

void stale_decisions_hold_nothing() {
  auto c = make(8);
  auto decision = c->admit({"r", 16, 64, {}});
  auto resources = std::move(std::get<Admitted>(decision).resources);
  CHECK(error_of([&] { c->admit({"r", 16, 64, {}}); }) == ErrorKind::InvalidArgument);
  CHECK(c->capacity().active_sequences == 1);  // the refusal claimed nothing
  auto session = resources->open_session();
  resources.reset();
  CHECK(session->step(16) == BackingOutcome::current);
  auto kept = session->try_ensure_backing_covers(48);  // left in a variable, as a scheduler might
  CHECK(kept.outcome == BackingOutcome::extended && !kept.snapshot->released());
  auto holders = c->holders();
  CHECK(holders.size() == 1 && holders[0].request_id == "r" && holders[0].pages == 3 && holders[0].holders == 1);
  auto frame = session->acquire_frame();
  CHECK(c->holders().at(0).holders == 2);  // a live frame is a holder
  CHECK(frame->commit() == FrameDisposition::committed);
  CHECK(session->try_complete().outcome == TerminalOutcome::completed);
  session->close();
  CHECK(c->capacity().domains[0].used_bytes == 0 && c->capacity().active_sequences == 0);
  CHECK(c->holders().empty() && kept.snapshot->released());
  CHECK(error_of([&] { kept.snapshot->extents(); }) == ErrorKind::SessionState);
  CHECK(std::holds_alternative<Admitted>(c->admit({"r", 16, 64, {}})));  // the id is free again
}

// The session's close spends its resources: a decision (and the resources in it) kept after
// the sequence ended holds no pages, no slot and no request id, and says so when read.
void a_closed_session_spends_its_resources() {
  auto c = make(8);
  auto decision = c->admit({"r", 32, 64, {}});
  const auto& resources = std::get<Admitted>(decision).resources;  // kept, as a scheduler might
  auto session = resources->open_session();
  CHECK(!resources->spent() && resources->request_id().view() == "r" && resources->fit_pages() == 4);
  CHECK(c->capacity().domains[0].used_bytes == 2 * 4096 && resources->backing() != nullptr);
  session->close();
  CHECK(resources->spent() && resources->backing() == nullptr);
  CHECK(c->capacity().domains[0].used_bytes == 0 && c->capacity().active_sequences == 0 && c->holders().empty());
  CHECK(error_of([&] { resources->request_id(); }) == ErrorKind::Closed);
  CHECK(error_of([&] { resources->fit_pages(); }) == ErrorKind::Closed);
  CHECK(error_of([&] { resources->sequence_authority(); }) == ErrorKind::Closed);
  CHECK(error_of([&] { resources->open_session(); }) == ErrorKind::SessionState);  // opened once
  CHECK(resources->initial_backing()->released());
  CHECK(std::holds_alternative<Admitted>(c->admit({"r", 16, 64, {}})));  // the id is free again
}

// Spending races the reads of other holders of the resources: each read sees the backing or
// a ClosedError, never a backing being let go (run under ThreadSanitizer in CI).
void spending_races_reads_of_the_resources() {
  for (int round = 0; round < 50; ++round) {
    auto c = make(8);
    auto resources = std::get<Admitted>(c->admit({"r", 16, 64, {}})).resources;
    auto session = resources->open_session();
    std::atomic<bool> go{false};
    bool every_read_answered = true;  // read after the join
    std::thread reader([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < 200; ++i) {
        const auto kind = error_of([&] { (void)resources->request_id(); (void)resources->sequence_authority(); });
        if (kind != ErrorKind::Lifecore && kind != ErrorKind::Closed) every_read_answered = false;  // Lifecore: none thrown
      }
    });
    go = true;
    session->close();
    reader.join();
    CHECK(every_read_answered);
    CHECK(resources->spent() && c->capacity().domains[0].used_bytes == 0);
  }
}

void step_names_its_deferral() {
  auto c = make(2);
  auto resources = std::get<Admitted>(c->admit({"a", 16, 32, {}})).resources;
  auto other = std::get<Admitted>(c->admit({"b", 16, 32, {}})).resources;
  auto session = resources->open_session();
  CHECK(session->step(16) == BackingOutcome::current && !session->step_deferral());
  CHECK(session->step(17) == BackingOutcome::backing_deferred);
  auto deferred = session->step_deferral();
  CHECK(deferred && deferred->request_id == "a" && deferred->backing && deferred->backing->expected_generation == 1);
  other.reset();  // the page comes back: the deferral's source advances
  CHECK(session->step(17) == BackingOutcome::extended && !session->step_deferral());
}

// A batch refuses a session an earlier row named, whatever its mark says: a mark left by an
// earlier row of the same batch is a repeat; the same mark with no earlier row naming the
// session (a mark left 255 batches ago, the marks being one byte) refuses nothing.
void a_batch_mark_alone_never_refuses_a_row() {
  auto c = make(8);
  auto a = lifecore::test_support::open_stepped_session(c, "a");
  auto b = lifecore::test_support::open_stepped_session(c, "b");
  std::vector<SequenceSession*> rows{a.get(), b.get(), a.get()};
  const auto mark_of = [](const std::unique_ptr<SequenceSession>& s) { return s->state()->batch_mark.load(); };
  CHECK(mark_of(a) == 0);  // no batch named it yet
  {
    const BatchCheck batch;
    CHECK(batch.first_row(rows.data(), 0) == 0 && batch.first_row(rows.data(), 1) == 1);
    CHECK(mark_of(a) != 0 && mark_of(a) == mark_of(b));  // the batch's mark, never 0
    CHECK(batch.first_row(rows.data(), 2) == 0);
    const BatchCheck next;  // another batch: nothing of `batch` is a repeat in it
    CHECK(next.first_row(rows.data(), 0) == 0 && next.first_row(rows.data(), 1) == 1);
    CHECK(next.first_row(rows.data(), 2) == 0);
  }
  const BatchCheck marked;
  std::vector<SequenceSession*> alone{a.get()}, twice{a.get(), a.get()};
  CHECK(marked.first_row(alone.data(), 0) == 0);
  const auto old_mark = mark_of(a);
  for (int i = 0; i < 254; ++i) (void)BatchCheck();  // single-threaded: the 255th batch after has its mark
  const BatchCheck wrapped;
  std::vector<SequenceSession*> after_b{b.get(), a.get()};
  CHECK(wrapped.first_row(after_b.data(), 0) == 0);
  CHECK(mark_of(b) == old_mark);  // the marks wrapped: `a` carries this batch's mark already
  CHECK(wrapped.first_row(after_b.data(), 1) == 1);  // and no earlier row names it
  CHECK(wrapped.first_row(twice.data(), 1) == 0);
  std::string repeat;
  try {
    std::vector<std::int64_t> tokens{17, 17, 18};
    std::vector<BackingOutcome> outcomes(3);
    step_all(rows, tokens.data(), outcomes.data());
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::InvalidArgument);
    repeat = e.what();
  }
  CHECK(repeat.find("the session is also row 0") != std::string::npos);
  CHECK(a->backing()->pages() == 1 && b->backing()->pages() == 1);  // no row stepped
}

// Two threads step batches of the same sessions at once, each naming every session once:
// their marks overwrite each other's, and no row is ever refused as a repeat.
void concurrent_batches_of_the_same_sessions_refuse_no_row() {
  constexpr std::size_t count = 4;
  constexpr std::int64_t fit = 64 * 16;
  auto c = make(4 * 64);
  std::vector<std::unique_ptr<SequenceSession>> owned;
  std::vector<SequenceSession*> sessions;
  for (std::size_t i = 0; i < count; ++i) {
    auto resources = std::get<Admitted>(c->admit({"t" + std::to_string(i), 1, fit, {}})).resources;
    owned.push_back(resources->open_session());
    sessions.push_back(owned.back().get());
  }
  std::atomic<int> refused{0};
  auto run = [&](bool reversed) {
    std::vector<SequenceSession*> batch = sessions;
    if (reversed) std::reverse(batch.begin(), batch.end());
    std::vector<BackingOutcome> outcomes(count);
    for (std::int64_t tokens = 1; tokens <= fit; ++tokens) {
      const std::vector<std::int64_t> targets(count, tokens);
      try {
        step_all(batch, targets.data(), outcomes.data());
      } catch (const Error&) {
        refused.fetch_add(1);
      }
    }
  };
  std::thread other(run, true);
  run(false);
  other.join();
  CHECK(refused.load() == 0);
  for (auto* session : sessions) CHECK(session->backing()->tokens() == static_cast<std::uint64_t>(fit));
}

// The domain whose arena a range shares a byte with, whether the range starts inside a chunk
// or before it; none for a range that ends where a chunk starts, starts where the last ends,
// or is empty.
void a_range_is_found_in_the_arena_it_touches() {
  auto c = lifecore::test_support::kv_coordinator(4, 8, 2);
  const auto first = c->arena_state(0).chunks.at(0).memory, second = c->arena_state(1).chunks.at(0).memory;
  CHECK(first.bytes == 4 * 4096 && second.bytes == 4 * 4096);
  CHECK(c->arena_domain_sharing(first.address, 1) == std::optional<std::uint32_t>(0));
  CHECK(c->arena_domain_sharing(first.address + first.bytes - 1, 64) == std::optional<std::uint32_t>(0));
  CHECK(c->arena_domain_sharing(second.address, 1) == std::optional<std::uint32_t>(1));
  CHECK(first.address >= 8 && c->arena_domain_sharing(first.address - 8, 16) == std::optional<std::uint32_t>(0));
  CHECK(!c->arena_domain_sharing(first.address - 8, 8));  // ends right at it
  CHECK(!c->arena_domain_sharing(second.address + second.bytes, 4096));  // starts right after it
  CHECK(!c->arena_domain_sharing(first.address, 0));
}

// step() extends in place under one hold of the session's lock, and takes the general path
// (prepare, claim, publish) while a test's pause point is armed, for a step that takes more ids
// than it keeps, or when capacity is short. Both paths leave the same state: two coordinators
// with the same free lists, one session each, stepped alike (one way on each), agree on every
// answer, generation, frontier, id and count; with one domain and with three, through an
// extension of no page (the prompt's last page), of one, of many, up to the fit, and a deferral
// on logical capacity and one on physical memory.
void a_step_extends_in_place_as_the_general_path_does() {
  for (std::size_t domain_count : {std::size_t{1}, std::size_t{3}}) {
    auto memory_a = std::make_shared<HostPageMemory>(), memory_b = std::make_shared<HostPageMemory>();
    auto in_place = lifecore::test_support::kv_coordinator(40, 4, domain_count, memory_a);
    auto general = lifecore::test_support::kv_coordinator(40, 4, domain_count, memory_b);
    const auto open = [](const std::shared_ptr<AdmissionCoordinator>& c) {
      auto decision = c->admit({"r", 20, 16 * 38, {}});  // 2 pages, the second part-filled
      return std::get<Admitted>(decision).resources->open_session();
    };
    auto a = open(in_place), b = open(general);
    // Another sequence holds the last 4 pages of every domain: past 36 pages a step defers.
    auto holder_a = std::get<Admitted>(in_place->admit({"h", 64, 64, {}})).resources;
    auto holder_b = std::get<Admitted>(general->admit({"h", 64, 64, {}})).resources;
    std::vector<std::int64_t> targets;
    for (std::int64_t t = 21; t <= 16 * 6; ++t) targets.push_back(t);  // a page at a time
    targets.push_back(-1);         // (the page memory refuses the next take)
    targets.push_back(16 * 6 + 1);  // deferred on physical memory, the refusal spent
    targets.push_back(16 * 6 + 1);  // extends now
    targets.push_back(16 * 6 + 300);  // 19 pages in one step: more ids than the in-place path keeps
    for (std::int64_t t = 16 * 25 + 1; t <= 16 * 36; t += 7) targets.push_back(t);
    targets.push_back(16 * 36 + 1);  // deferred: the holder has the rest
    targets.push_back(0);            // (the holder lets go)
    targets.push_back(16 * 36 + 1);  // extends now
    targets.push_back(16 * 38);      // to the fit
    std::size_t extended = 0, deferred = 0;
    for (const std::int64_t t : targets) {
      if (t == 0) {
        holder_a.reset();
        holder_b.reset();
        continue;
      }
      if (t == -1) {
        memory_a->fail_next_allocations(1);
        memory_b->fail_next_allocations(1);
        continue;
      }
      const BackingOutcome first = a->step(t);
      pause_points::arm(pause_points::Point::candidate_looked_at);  // never reached by a step
      const BackingOutcome second = b->step(t);
      pause_points::disarm();
      CHECK(first == second);
      extended += first == BackingOutcome::extended;
      deferred += first == BackingOutcome::backing_deferred;
      // A deferral names the same wait (its source, what it asks for, the epoch observed).
      const auto da = a->step_deferral(), db = b->step_deferral();
      CHECK(bool(da) == bool(db) && bool(da) == (first == BackingOutcome::backing_deferred));
      if (da && db) {
        CHECK(da->wait_condition.sources == db->wait_condition.sources);
        CHECK(da->wait_condition.epochs == db->wait_condition.epochs && da->action == db->action);
        CHECK(da->immediate.pages == db->immediate.pages && da->immediate.tokens == db->immediate.tokens);
        CHECK(da->fit.pages == db->fit.pages && da->fit.tokens == db->fit.tokens && da->backing && db->backing);
        CHECK(da->backing->expected_generation == db->backing->expected_generation);
        CHECK(da->backing->target_tokens == db->backing->target_tokens);
        CHECK(da->backing->target_pages == db->backing->target_pages);
      }
      const auto sa = a->backing(), sb = b->backing();
      CHECK(sa->generation() == sb->generation() && sa->tokens() == sb->tokens() && sa->pages() == sb->pages());
      for (std::uint32_t d = 0; d < domain_count; ++d) {
        const BlockIds ia = sa->block_ids(d), ib = sb->block_ids(d);
        CHECK(ia.count == sb->pages() && ib.count == ia.count);
        CHECK(std::equal(ia.data.get(), ia.data.get() + ia.count, ib.data.get()));
        CHECK(in_place->capacity().domains[d].used_bytes == general->capacity().domains[d].used_bytes);
      }
      CHECK(in_place->live_blocks() == general->live_blocks() && in_place->live_takes() == general->live_takes());
      CHECK(a->retired_frames() == b->retired_frames());
    }
    CHECK(extended > 10 && deferred == 2 && a->backing()->pages() == 38 && a->backing()->tokens() == 16 * 38);
    CHECK(error_of([&] { a->step(16 * 38 + 1); }) == ErrorKind::Capacity);  // beyond the fit
    CHECK(a->backing()->pages() == 38 && in_place->live_blocks() == 38 * domain_count);
    a.reset();
    b.reset();
    // The first side extended in place (all but the large step and the deferred ones), the
    // second never did.
    CHECK(in_place->in_place_takes() + 2 >= extended && general->in_place_takes() == 0);
    CHECK(in_place->live_blocks() == 0 && in_place->live_takes() == 0);
    CHECK(in_place->capacity().domains[0].used_bytes == 0);
  }
}

// Two threads step one session (not how an engine drives one, but it must hold) while a third
// steps another of the same coordinator: each extension happens once (in place, or on the
// general path when the coordinator's lock is busy), every answered step commits one frame,
// and the ids of the two sequences stay distinct.
void threads_step_one_session() {
  auto c = make(64);
  auto shared = std::get<Admitted>(c->admit({"shared", 16, 16 * 30, {}})).resources->open_session();
  auto other = std::get<Admitted>(c->admit({"other", 16, 16 * 30, {}})).resources->open_session();
  std::atomic<std::uint64_t> committed{0}, deferred{0};  // counted by the threads, checked here
  const auto drive = [&](SequenceSession& session, bool count) {
    for (std::int64_t t = 17; t <= 16 * 30; ++t) {
      const BackingOutcome outcome = session.step(t);
      deferred += outcome == BackingOutcome::backing_deferred;
      if (count && (outcome == BackingOutcome::current || outcome == BackingOutcome::extended)) ++committed;
    }
  };
  std::thread first([&] { drive(*shared, true); }), second([&] { drive(*shared, true); }),
      third([&] { drive(*other, false); });
  first.join();
  second.join();
  third.join();
  CHECK(deferred.load() == 0);
  CHECK(shared->retired_frames() == committed.load() && committed.load() >= 16 * 30 - 16);
  const auto a = shared->backing(), b = other->backing();
  CHECK(a->pages() == 30 && b->pages() == 30 && c->live_blocks() == 60);
  std::vector<std::int32_t> ids;
  for (const auto& snapshot : {a, b}) {
    const BlockIds view = snapshot->block_ids(0);
    ids.insert(ids.end(), view.data.get(), view.data.get() + view.count);
  }
  std::sort(ids.begin(), ids.end());
  CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end() && ids.front() >= 0 && ids.back() < 64);
  shared.reset();
  other.reset();
  CHECK(c->live_blocks() == 0 && c->live_takes() == 0 && c->capacity().domains[0].used_bytes == 0);
}

// Host pages whose next chunk waits for a latch: a domain growing holds its coordinator's lock
// meanwhile, as a device's allocation may for as long as the driver takes.
class LatchedPageMemory final : public PageMemory {
 public:
  PageExtent allocate(std::size_t bytes) override {
    if (hold_next.exchange(false)) {
      std::unique_lock<std::mutex> lock(mutex_);
      holding = true;
      changed_.notify_all();
      changed_.wait(lock, [&] { return open_; });
    }
    return inner_.allocate(bytes);
  }
  void release(const PageExtent& extent) noexcept override { inner_.release(extent); }
  const char* kind() const noexcept override { return "host"; }
  bool wait_until_holding() {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] { return holding; });
  }
  void open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  std::atomic<bool> hold_next{false};

 private:
  HostPageMemory inner_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool holding = false, open_ = false;
};

// A step that must extend while another thread holds the coordinator's lock (a domain growing,
// its chunk not yet allocated) does not hold its session's lock while it waits: another thread
// reads the session meanwhile. The step then extends, on the general path.
void a_step_never_waits_for_the_coordinator_under_its_lock() {
  auto memory = std::make_shared<LatchedPageMemory>();
  CoordinatorConfig config;
  config.domains.push_back({"kv", 8 * 4096, 16 * 4096});
  config.page_bytes = 4096;
  config.tokens_per_page = 16;
  config.max_active_sequences = 4;
  config.memory = memory;
  auto c = AdmissionCoordinator::create(std::move(config));
  auto session = std::get<Admitted>(c->admit({"r", 16, 16 * 8, {}})).resources->open_session();
  memory->hold_next = true;
  std::thread grower([&] { c->grow_domain("kv", 16 * 4096); });
  CHECK(memory->wait_until_holding());
  std::atomic<BackingOutcome> outcome{BackingOutcome::retry_required};
  std::atomic<bool> started{false}, stepped{false}, read{false};
  std::thread stepper([&] {
    started = true;
    outcome = session->step(17);  // a new page: the coordinator's lock is needed
    stepped = true;
  });
  // The thread running first, then time for the step to reach the coordinator's lock: a reader
  // let in before the step began would prove nothing.
  while (!started) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::thread reader([&] {
    (void)session->phase();  // the session's lock
    read = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!read && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool read_while_waiting = read.load(), stepped_early = stepped.load();
  memory->open();
  grower.join();
  stepper.join();
  reader.join();
  CHECK(read_while_waiting && !stepped_early);
  CHECK(outcome.load() == BackingOutcome::extended && session->backing()->pages() == 2);
  CHECK(c->in_place_takes() == 0 && c->capacity().domains[0].total_bytes == 16 * 4096);
}

int main() {
  a_batch_mark_alone_never_refuses_a_row();
  a_range_is_found_in_the_arena_it_touches();
  concurrent_batches_of_the_same_sessions_refuse_no_row();
  a_step_extends_in_place_as_the_general_path_does();
  threads_step_one_session();
  a_step_never_waits_for_the_coordinator_under_its_lock();
  lazy_fingerprint_matches_the_eager_one();
  stale_decisions_hold_nothing();
  a_closed_session_spends_its_resources();
  spending_races_reads_of_the_resources();
  step_names_its_deferral();
  concurrent_lifecycles();
  lifecycle_and_release();
  waiter_wakes_on_release();
  a_deferral_without_a_whole_wait_condition_is_refused();
  an_arena_needs_a_device();
  notify_hook_fires_on_signal_cancel_and_close();
  driver_pages();
  arena_while_a_stream_records();
  device_close_watches();
  block_ids_are_a_lifo_free_list();
  source_index_equal_to_domain_count_is_refused();
  authorities_name_their_coordinator();
  wait_deadlines_never_wrap();
  a_closed_device_closes_its_coordinator();
  a_device_gone_under_the_coordinators_lock_closes_it_without_deadlock();
  cancel_between_prepare_and_publish();
  capacity_back_between_the_fast_claim_and_the_check();
  host_pages_never_wrap();
  return lifecore::test_support::finish("sequence_session_test");
}
