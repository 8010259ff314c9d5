// A step whose extension runs out of memory changes nothing: every allocation on the way (the
// new snapshot, the grown id storage) is made to fail in turn, through operator new, and each
// failure leaves the session's frontier, ids and frames and the coordinator's counts as they
// were, with the step retried after it extending as if nothing had happened. Both ways a step
// extends are swept: in place under the session's lock, and the general path (taken while a
// test's pause point is armed).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <variant>
#include <vector>

#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/pause_points.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "sequence_test_support.hpp"
#include "test_support.hpp"

using namespace lifecore::sequence;

namespace {

// Allocations left before one fails; negative: none fails.
std::atomic<long> allocations_before_failure{-1};

struct Seen {
  std::uint64_t generation, tokens, pages, retired, used, blocks, takes;
  std::vector<std::int32_t> ids;
  bool operator==(const Seen&) const = default;
};

Seen seen(const SequenceSession& session, const AdmissionCoordinator& c) {
  const auto snapshot = session.backing();
  const BlockIds ids = snapshot->block_ids(0);
  return {snapshot->generation(), snapshot->tokens(), snapshot->pages(), session.retired_frames(),
          c.capacity().domains[0].used_bytes, c.live_blocks(), c.live_takes(),
          std::vector<std::int32_t>(ids.data.get(), ids.data.get() + ids.count)};
}

// Steps a session to the end of its 4th page (its id storage's room), then makes the 5th
// page's step fail at each of its allocations in turn. Returns how many failed.
int sweep(bool general_path) {
  auto c = lifecore::test_support::kv_coordinator(64);
  auto decision = c->admit({"r", 16, 16 * 32, {}});
  auto session = std::get<Admitted>(decision).resources->open_session();
  std::get<Admitted>(decision).resources.reset();
  for (std::int64_t t = 16; t <= 64; ++t) CHECK(session->step(t) != BackingOutcome::backing_deferred);
  const Seen before = seen(*session, *c);
  CHECK(before.pages == 4);
  int failures = 0;
  for (long n = 0;; ++n) {
    if (general_path) pause_points::arm(pause_points::Point::candidate_looked_at);  // never reached by a step
    allocations_before_failure = n;
    bool failed = false;
    try {
      CHECK(session->step(65) == BackingOutcome::extended);
    } catch (const std::bad_alloc&) {
      failed = true;
    }
    allocations_before_failure = -1;
    pause_points::disarm();
    if (!failed) break;
    ++failures;
    CHECK(seen(*session, *c) == before);  // nothing changed, nothing leaked
  }
  const Seen after = seen(*session, *c);
  CHECK(after.pages == 5 && after.generation == before.generation + 1 && after.retired == before.retired + 1);
  CHECK(std::equal(before.ids.begin(), before.ids.end(), after.ids.begin()));
  CHECK(after.used == before.used + 4096 && after.blocks == before.blocks + 1);
  session.reset();
  CHECK(c->live_blocks() == 0 && c->live_takes() == 0 && c->capacity().domains[0].used_bytes == 0);
  return failures;
}

}  // namespace

void* operator new(std::size_t size) {
  if (allocations_before_failure.load(std::memory_order_relaxed) >= 0 &&
      allocations_before_failure.fetch_sub(1, std::memory_order_relaxed) == 0)
    throw std::bad_alloc();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

int main() {
  const int in_place = sweep(false), general = sweep(true);
  std::printf("allocation failures swept: %d in place, %d on the general path\n", in_place, general);
  // At least the grown id storage fails on each path (a snapshot may come from a kept block).
  CHECK(in_place >= 1 && general >= 1);
  return lifecore::test_support::finish("sequence_step_allocation_failure_test");
}
