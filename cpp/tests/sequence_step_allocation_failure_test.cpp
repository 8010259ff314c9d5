// A step whose extension runs out of memory changes nothing: every allocation on the way (the
// new snapshot, the grown id storages, an arena's room) is made to fail in turn, through
// operator new, and each failure leaves the session's frontier, ids and frames and the
// coordinator's counts as they were (a block table read after it included), with the step
// retried after it extending as if nothing had happened. Both ways a step extends are swept (in
// place under the session's lock, and the general path, taken while a test's pause point is
// armed), with one domain and three, with and without views of the ids held across the step.
// A batch's acquire_frames is swept the same way: out of memory at any row, no session of the
// batch is poisoned or keeps a frame, and the batch retried gets the frame ids it would have.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "lifecore/sequence/block_table.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/pause_points.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "failing_allocations.hpp"
#include "sequence_test_support.hpp"
#include "test_support.hpp"

using namespace lifecore::sequence;

namespace {

using lifecore::test_support::allocations_before_failure;

struct Seen {
  std::uint64_t generation, tokens, pages, retired, blocks, takes;
  std::vector<std::uint64_t> used;
  std::vector<std::int32_t> ids, table;  // every domain's ids; its block table rows
  bool operator==(const Seen&) const = default;
};

Seen seen(const SequenceSession& session, const AdmissionCoordinator& c, std::size_t domain_count) {
  const auto snapshot = session.backing();
  Seen out{snapshot->generation(), snapshot->tokens(), snapshot->pages(), session.retired_frames(), c.live_blocks(),
           c.live_takes(), {}, {}, {}};
  constexpr std::size_t width = 8;
  for (std::uint32_t d = 0; d < domain_count; ++d) {
    out.used.push_back(c.capacity().domains[d].used_bytes);
    const BlockIds ids = snapshot->block_ids(d);
    out.ids.insert(out.ids.end(), ids.data.get(), ids.data.get() + ids.count);
    // The table reads the ids its session keeps beside its lock: a storage a failed growth
    // freed would be read here (and reported by the address sanitizer).
    std::vector<std::int32_t> row(width);
    build_block_table(c, {BlockTableRow{nullptr, &session}}, d, width, -1, row.data());
    out.table.insert(out.table.end(), row.begin(), row.end());
  }
  return out;
}

// Steps a fresh session to the end of its 4th page (its id storages' room), then makes the
// 5th page's step fail at its n-th allocation, for n = 0, 1, ... until the step makes fewer:
// each try starts afresh, so every allocation the step makes fails once (an arena's room made
// by one try would otherwise not be made again by the next), and the step runs on a thread of
// its own, whose record caches are empty (a snapshot's allocation would otherwise come from
// them). With `hold_views`, a view of every domain's ids lives across the step: the storage
// it reads is kept (in room made before anything changed) and still reads the same ids.
// Returns how many failed.
int sweep(bool general_path, std::size_t domain_count, bool hold_views) {
  int failures = 0;
  for (long n = 0;; ++n) {
    auto c = lifecore::test_support::kv_coordinator(64, 4, domain_count);
    auto decision = c->admit({"r", 16, 16 * 32, {}});
    auto session = std::get<Admitted>(decision).resources->open_session();
    std::get<Admitted>(decision).resources.reset();
    for (std::int64_t t = 16; t <= 64; ++t) CHECK(session->step(t) != BackingOutcome::backing_deferred);
    const Seen before = seen(*session, *c, domain_count);
    CHECK(before.pages == 4);
    std::vector<BlockIds> views;
    if (hold_views)
      for (std::uint32_t d = 0; d < domain_count; ++d) views.push_back(session->backing()->block_ids(d));
    bool failed = false, extended = false;
    std::thread stepper([&] {
      if (general_path) pause_points::arm(pause_points::Point::candidate_looked_at);  // never reached by a step
      allocations_before_failure = n;
      try {
        extended = session->step(65) == BackingOutcome::extended;
      } catch (const std::bad_alloc&) {
        failed = true;
      }
      allocations_before_failure = -1;
      pause_points::disarm();
    });
    stepper.join();
    CHECK(failed != extended);
    if (failed) {
      ++failures;
      CHECK(seen(*session, *c, domain_count) == before);  // nothing changed, nothing leaked
      if (general_path) pause_points::arm(pause_points::Point::candidate_looked_at);
      CHECK(session->step(65) == BackingOutcome::extended);  // and the step, retried, extends
      pause_points::disarm();
    }
    const Seen after = seen(*session, *c, domain_count);
    CHECK(after.pages == 5 && after.generation == before.generation + 1 && after.retired == before.retired + 1);
    for (std::size_t d = 0; d < domain_count; ++d) {
      CHECK(std::equal(before.ids.begin() + d * 4, before.ids.begin() + d * 4 + 4, after.ids.begin() + d * 5));
      CHECK(after.used[d] == before.used[d] + 4096);
      if (hold_views)
        CHECK(views[d].count == 4 && std::equal(views[d].data.get(), views[d].data.get() + 4, before.ids.begin() + d * 4));
    }
    CHECK(after.blocks == before.blocks + domain_count);
    views.clear();
    session.reset();
    CHECK(c->live_blocks() == 0 && c->live_takes() == 0 && c->capacity().domains[0].used_bytes == 0);
    if (!failed) return failures;
  }
}

// acquire_frames of three sessions, its n-th allocation made to fail for n = 0, 1, ... until
// it makes fewer. Returns how many failed.
int sweep_acquire_frames() {
  int failures = 0;
  for (long n = 0;; ++n) {
    auto c = lifecore::test_support::kv_coordinator(64, 4, 1);
    std::vector<std::unique_ptr<SequenceSession>> sessions;
    std::vector<SequenceSession*> batch;
    for (int r = 0; r < 3; ++r) {
      auto decision = c->admit({"r" + std::to_string(r), 16, 16 * 32, {}});
      sessions.push_back(std::get<Admitted>(decision).resources->open_session());
      batch.push_back(sessions.back().get());
    }
    batch.reserve(batch.size() + 1);  // nothing of the batch's own grows while counted
    std::vector<std::unique_ptr<FrameHold>> holds;
    bool failed = false;
    lifecore::test_support::counted_thread = std::this_thread::get_id();
    allocations_before_failure = n;
    try {
      holds = acquire_frames(batch);
    } catch (const std::bad_alloc&) {
      failed = true;
    }
    allocations_before_failure = -1;
    lifecore::test_support::counted_thread = std::thread::id{};
    if (failed) {
      ++failures;
      CHECK(holds.empty());
      for (auto* session : batch) CHECK(session->phase() == SessionPhase::open);  // none poisoned
      holds = acquire_frames(batch);  // none keeps a frame: the batch is taken again
    }
    CHECK(holds.size() == 3);
    for (auto& hold : holds) {
      CHECK(hold->frame_id() == 1);  // the ids a failed try took are taken again
      CHECK(hold->commit() == FrameDisposition::committed);
    }
    for (auto* session : batch) CHECK(session->phase() == SessionPhase::open);
    if (!failed) return failures;
  }
}

}  // namespace

int main() {
  const int acquire_failures = sweep_acquire_frames();
  std::printf("acquire_frames: allocation failures swept: %d\n", acquire_failures);
  CHECK(acquire_failures >= 3);  // one hold per row at least
  for (std::size_t domain_count : {std::size_t{1}, std::size_t{3}}) {
    for (bool hold_views : {false, true}) {
      const int in_place = sweep(false, domain_count, hold_views), general = sweep(true, domain_count, hold_views);
      std::printf("%zu domain(s)%s: allocation failures swept: %d in place, %d on the general path\n", domain_count,
                  hold_views ? ", views held" : "", in_place, general);
      // Each path's snapshot and every domain's grown id storage at least (and what the path
      // allocates besides: an arena's room, the prepared ids, a list of grown storages).
      CHECK(in_place >= static_cast<int>(domain_count) + 1 && general >= static_cast<int>(domain_count) + 1);
    }
  }
  return lifecore::test_support::finish("sequence_step_allocation_failure_test");
}
