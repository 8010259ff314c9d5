// The memory manager without a driver: the reference's "tests worth mirroring" for priming,
// retention and cleanup, plus the pool accounting invariant.
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#include "lifecore/error.hpp"
#include "lifecore/runtime/memory_manager.hpp"
#include "fake_memory_device.hpp"
#include "test_support.hpp"

using lifecore::runtime::MemoryManager;
using lifecore::runtime::SliceAllocation;
using lifecore::runtime::SliceId;

using lifecore::test_support::check_pool_invariant;
using lifecore::test_support::error_of;
using lifecore::test_support::FakeMemoryDevice;

namespace {


void eager_reuse_by_bucket() {
  FakeMemoryDevice dev;
  MemoryManager mm(dev.free());
  auto a = mm.reserve(1000, 0, dev.allocate());
  CHECK(a.allocated && a.capacity == 1024 && !mm.is_persistent(a.id));
  mm.unbind(a.id);
  auto b = mm.reserve(700, 0, dev.allocate());  // same bucket: reused
  CHECK(!b.allocated && b.id == a.id);
  auto c = mm.reserve(2000, 0, dev.allocate());
  CHECK(c.allocated && c.capacity == 2048);
  CHECK(mm.stats().driver_allocations == 2);
  check_pool_invariant(mm);
}

// Power-of-two buckets up to 1 MiB; up to 1 GiB a quarter of the power of two; above, a
// multiple of 2 MiB, so a request near the device's size is not rounded past it (5 GiB was an
// 8 GiB bucket, and with it the whole device).
void large_requests_are_not_doubled() {
  constexpr std::size_t mib = std::size_t{1} << 20, gib = std::size_t{1} << 30;
  CHECK(MemoryManager::bucket_size(1) == 512 && MemoryManager::bucket_size(512) == 512);
  CHECK(MemoryManager::bucket_size(513) == 1024);
  CHECK(MemoryManager::bucket_size(mib) == mib);
  CHECK(MemoryManager::bucket_size(mib + 1) == mib + mib / 4);
  CHECK(MemoryManager::bucket_size(2 * mib) == 2 * mib);
  CHECK(MemoryManager::bucket_size(2 * mib + 1) == 2 * mib + mib / 2);
  CHECK(MemoryManager::bucket_size(5 * mib) == 5 * mib);
  CHECK(MemoryManager::bucket_size(5 * mib + 1) == 6 * mib);
  CHECK(MemoryManager::bucket_size(7 * mib + 1) == 8 * mib);
  CHECK(MemoryManager::bucket_size(gib) == gib);
  CHECK(MemoryManager::bucket_size(gib - 1) == gib);
  CHECK(MemoryManager::bucket_size(3 * gib / 4 + 1) == 7 * gib / 8);
  CHECK(MemoryManager::bucket_size(gib + 1) == gib + 2 * mib);
  CHECK(MemoryManager::bucket_size(6 * gib) == 6 * gib);
  CHECK(MemoryManager::bucket_size(5 * gib + 1) == 5 * gib + 2 * mib);
  constexpr std::size_t top = SIZE_MAX / (2 * mib) * (2 * mib);  // the largest multiple: kept
  CHECK(MemoryManager::bucket_size(top) == top);
  CHECK(error_of([&] { (void)MemoryManager::bucket_size(top + 1); }) == lifecore::ErrorKind::Overflow);
  FakeMemoryDevice dev;
  MemoryManager mm(dev.free());
  auto a = mm.reserve(5 * mib + 1, 0, dev.allocate());
  CHECK(a.allocated && a.capacity == 6 * mib && mm.stats().pool_bytes == 6 * mib);
  mm.unbind(a.id);
  auto b = mm.reserve(6 * mib - 100, 0, dev.allocate());  // the same bucket: reused
  CHECK(!b.allocated && b.id == a.id);
  check_pool_invariant(mm);
}

void priming_leaves_the_working_set_not_the_peak() {
  FakeMemoryDevice dev;
  MemoryManager mm(dev.free());
  mm.capture_begin(1);
  for (int i = 0; i < 3; ++i) {  // three sequential reservations, each released before the next
    auto r = mm.reserve(4096, 1, dev.allocate());
    CHECK(r.allocated && mm.is_persistent(r.id));
    mm.unbind(r.id);
  }
  CHECK(mm.stats().slices == 3);
  CHECK(mm.stats().slices_retained == 3);  // primed slices held until priming ends
  mm.capture_priming_end(1);
  CHECK(mm.stats().slices_free == 3);
  // The recording reuses them all without allocating.
  std::vector<SliceId> used;
  for (int i = 0; i < 3; ++i) {
    auto r = mm.reserve(4096, 1, dev.allocate());
    CHECK(!r.allocated);
    used.push_back(r.id);
  }
  CHECK(dev.allocations == 3);
  auto retained = mm.capture_end(1);
  CHECK(retained.size() == 3);
  for (SliceId id : used) mm.unbind(id);
  CHECK(mm.stats().slices_retained == 3);  // the graph holds them
  mm.release_retained(retained);
  CHECK(mm.stats().slices_free == 3);
  check_pool_invariant(mm);
}

void capture_end_releases_primed_slices_when_priming_never_ended() {
  FakeMemoryDevice dev;
  MemoryManager mm(dev.free());
  mm.capture_begin(1);
  auto r = mm.reserve(512, 1, dev.allocate());
  mm.unbind(r.id);
  CHECK(mm.stats().slices_retained == 1);
  auto retained = mm.capture_end(1);
  CHECK(retained.empty());
  CHECK(mm.stats().slices_free == 1 && mm.stats().windows_active == 0);
}

void capture_pins_a_reused_persistent_slice_and_not_untouched_ones() {
  FakeMemoryDevice dev;
  MemoryManager mm(dev.free());
  mm.capture_begin(1);
  auto a = mm.reserve(512, 1, dev.allocate());
  auto b = mm.reserve(1024, 1, dev.allocate());
  mm.unbind(a.id);
  mm.unbind(b.id);
  mm.capture_priming_end(1);
  auto again = mm.reserve(512, 1, dev.allocate());  // reuses a
  CHECK(!again.allocated && again.id == a.id);
  mm.unbind(again.id);
  auto retained = mm.capture_end(1);
  CHECK(retained.size() == 1 && retained[0] == a.id);  // b was untouched by the recording
  auto s = mm.stats();
  CHECK(s.slices_retained == 1 && s.slices_free == 1);
  // Touch by binding: an existing eager buffer used inside a window.
  auto eager = mm.reserve(4096, 0, dev.allocate());
  mm.capture_begin(2);
  mm.capture_priming_end(2);
  mm.touch(eager.id, 2);
  auto held = mm.capture_end(2);
  CHECK(held.size() == 1 && held[0] == eager.id);
  mm.unbind(eager.id);
  CHECK(mm.stats().slices_retained == 2);
  mm.release_retained(held);
  mm.release_retained(retained);
  CHECK(mm.stats().slices_retained == 0);
  check_pool_invariant(mm);
}

void capture_survives_explicit_cleanup_and_is_reentrant() {
  FakeMemoryDevice dev;
  MemoryManager mm(dev.free());
  auto loose = mm.reserve(512, 0, dev.allocate());
  mm.unbind(loose.id);
  mm.capture_begin(1);
  auto r = mm.reserve(512, 1, dev.allocate());
  mm.capture_begin(1);  // re-entrant: keeps what it tracks
  CHECK(mm.stats().windows_active == 1);
  CHECK(mm.cleanup() == 0);  // skipped while a window is armed
  CHECK(mm.stats().slices == 2);
  mm.unbind(r.id);
  CHECK(mm.stats().slices_retained == 1);  // still primed after the re-entrant begin
  mm.capture_priming_end(1);
  mm.release_retained(mm.capture_end(1));
  CHECK(mm.cleanup() == 512 + 512);
  CHECK(mm.stats().slices == 0 && mm.stats().pool_bytes == 0 && dev.live.empty());
}

void failed_allocation_changes_nothing() {
  FakeMemoryDevice dev;
  MemoryManager mm(dev.free());
  mm.reserve(512, 0, dev.allocate());
  auto before = mm.stats();
  dev.fail = true;
  bool threw = false;
  try {
    mm.reserve(1 << 20, 0, dev.allocate());
  } catch (const lifecore::Error&) {
    threw = true;
  }
  CHECK(threw);
  auto after = mm.stats();
  CHECK(after.slices == before.slices && after.pool_bytes == before.pool_bytes &&
        after.driver_allocations == before.driver_allocations);
  threw = false;
  try {
    mm.reserve(0, 0, dev.allocate());
  } catch (const lifecore::Error& e) {
    threw = e.kind() == lifecore::ErrorKind::InvalidArgument;
  }
  CHECK(threw);
}

void memory_node_slices_never_return_to_the_pool() {
  FakeMemoryDevice dev;
  MemoryManager mm(dev.free());
  mm.capture_begin(1);
  mm.capture_priming_end(1);
  auto node = mm.reserve(512, 1, [&](std::size_t) { return SliceAllocation{0xdead00, true}; });
  mm.release_retained(mm.capture_end(1));
  mm.unbind(node.id);
  CHECK(mm.stats().slices == 0 && mm.stats().pool_bytes == 0);
}

void primed_slices_are_kept_for_their_own_window() {
  FakeMemoryDevice dev;
  MemoryManager mm(dev.free());
  mm.capture_begin(1);
  auto a = mm.reserve(4096, 1, dev.allocate());
  mm.unbind(a.id);
  mm.capture_priming_end(1);
  CHECK(mm.stats().slices_free == 1);
  // Another stream's window must not take what window 1's warmup primed.
  mm.capture_begin(2);
  auto b = mm.reserve(4096, 2, dev.allocate());
  CHECK(b.allocated && b.id != a.id);
  auto again = mm.reserve(4096, 1, dev.allocate());
  CHECK(!again.allocated && again.id == a.id);
  mm.unbind(again.id);
  mm.release_retained(mm.capture_end(1));
  mm.unbind(b.id);
  mm.release_retained(mm.capture_end(2));
  // Back in the shared persistent pool: any later window may reuse it.
  mm.capture_begin(3);
  auto later = mm.reserve(4096, 3, dev.allocate());
  CHECK(!later.allocated);
  mm.capture_end(3);
  check_pool_invariant(mm);
}

// The interleaving of two streams capturing the same step at once (warmup tmp freed before
// priming ends; the recorded tmp's unbind deferred past capture_end by the fenced flush; a
// poller's cleanup in between): neither window, no later window and no eager allocation may
// get a slice a live graph retains.
void concurrent_windows_never_share_a_retained_slice() {
  FakeMemoryDevice dev;
  MemoryManager mm(dev.free());
  mm.capture_begin(1);
  auto warm1 = mm.reserve(1024, 1, dev.allocate());
  mm.unbind(warm1.id);
  mm.capture_priming_end(1);
  mm.capture_begin(2);
  auto warm2 = mm.reserve(1024, 2, dev.allocate());
  CHECK(warm2.id != warm1.id);
  mm.unbind(warm2.id);
  mm.capture_priming_end(2);
  auto tmp1 = mm.reserve(1024, 1, dev.allocate());
  auto tmp2 = mm.reserve(1024, 2, dev.allocate());
  CHECK(!tmp1.allocated && !tmp2.allocated && tmp1.id != tmp2.id && tmp1.ptr != tmp2.ptr);
  auto graph1 = mm.capture_end(1);
  mm.unbind(tmp1.id);  // the deferred flush runs after capture_end
  CHECK(mm.cleanup() == 0);  // window 2 is still armed
  auto graph2 = mm.capture_end(2);
  mm.unbind(tmp2.id);
  mm.cleanup();
  CHECK(dev.live.count(tmp1.ptr) == 1 && dev.live.count(tmp2.ptr) == 1);  // retained: not freed
  check_pool_invariant(mm);
  mm.capture_begin(3);
  auto next = mm.reserve(1024, 3, dev.allocate());
  auto eager = mm.reserve(1024, 0, dev.allocate());
  CHECK(next.ptr != tmp1.ptr && next.ptr != tmp2.ptr && eager.ptr != tmp1.ptr && eager.ptr != tmp2.ptr);
  mm.unbind(next.id);
  mm.unbind(eager.id);
  mm.release_retained(mm.capture_end(3));
  mm.release_retained(graph1);
  mm.release_retained(graph2);
  CHECK(mm.stats().slices_retained == 0);
  check_pool_invariant(mm);
}

}  // namespace

// A range is a Buffer's only within the Buffer's bytes (not the rest of its bucket), an arena's
// only within the arena; one that runs past either, or across two, straddles; one in a pooled
// slice with no Buffer was freed; anything else is not the device's memory as lifecore knows it.
void owner_of_names_what_a_range_lies_in() {
  using Kind = MemoryManager::RangeOwner::Kind;
  FakeMemoryDevice dev;
  MemoryManager mm(dev.free());
  auto a = mm.reserve(1000, 0, dev.allocate());
  CHECK(a.capacity > 1000);  // a bucket: bytes past the Buffer's are no one's
  auto in = mm.owner_of(a.ptr + 8, 16);
  CHECK(in.kind == Kind::buffer && in.slice == a.id);
  CHECK(mm.owner_of(a.ptr, 1000).kind == Kind::buffer);
  CHECK(mm.owner_of(a.ptr + 999, 1).kind == Kind::buffer);
  CHECK(mm.owner_of(a.ptr, 1001).kind == Kind::straddles);        // past the Buffer's bytes
  CHECK(mm.owner_of(a.ptr + 1000, 4).kind == Kind::straddles);    // in the bucket's slack
  CHECK(mm.owner_of(a.ptr, a.capacity + 1).kind == Kind::straddles);
  CHECK(mm.owner_of(a.ptr - 1, 4).kind == Kind::straddles);       // starts before it
  CHECK(mm.owner_of(a.ptr - 64, 64).kind == Kind::none);          // ends where it begins
  CHECK(mm.owner_of(a.ptr + a.capacity, 64).kind == Kind::none);  // begins where it ends
  CHECK(mm.owner_of(~std::uint64_t{0} - 8, 8).kind == Kind::none);  // no wrap at the top
  auto arena = mm.reserve_arena(4096, dev.allocate());
  auto in_arena = mm.owner_of(arena.ptr + 4000, 96);
  CHECK(in_arena.kind == Kind::arena && in_arena.slice == arena.id);
  CHECK(mm.owner_of(arena.ptr + 4000, 97).kind == Kind::straddles);
  // The arenas' own lookup agrees, at both edges, and names no Buffer's memory.
  CHECK(mm.shares_an_arena(arena.ptr, 1) && mm.shares_an_arena(arena.ptr + arena.capacity - 1, 1));
  CHECK(mm.shares_an_arena(arena.ptr - 8, 9) && mm.shares_an_arena(arena.ptr + arena.capacity - 1, 64));
  CHECK(!mm.shares_an_arena(arena.ptr - 8, 8) && !mm.shares_an_arena(arena.ptr + arena.capacity, 64));
  CHECK(!mm.shares_an_arena(arena.ptr, 0));
  CHECK(!mm.shares_an_arena(a.ptr, 1000));
  CHECK(!mm.shares_an_arena(~std::uint64_t{0} - 8, 64));  // no wrap at the top
  auto second = mm.reserve_arena(100, dev.allocate());  // a second arena: each is found among both
  CHECK(mm.shares_an_arena(second.ptr, 1) && mm.shares_an_arena(second.ptr + 99, 1));
  CHECK(mm.shares_an_arena(arena.ptr + 8, 8) && mm.owner_of(second.ptr, 100).kind == Kind::arena);
  mm.release_arena(second.id);
  CHECK(!mm.shares_an_arena(second.ptr, 1) && mm.shares_an_arena(arena.ptr, 1));
  mm.unbind(a.id);
  auto freed = mm.owner_of(a.ptr, 4);
  CHECK(freed.kind == Kind::freed && freed.slice == a.id);  // pooled, no Buffer
  mm.cleanup();
  CHECK(mm.owner_of(a.ptr, 4).kind == Kind::none);  // back to the driver: not pool memory
  mm.release_arena(arena.id);
  CHECK(mm.owner_of(arena.ptr, 4).kind == Kind::none);
  CHECK(!mm.shares_an_arena(arena.ptr, 4));
}

// A pin (another stream's queued work) keeps a slice out of the pool after its Buffer goes, and
// an arena from the driver after its last hold, until the pin goes; only a bound slice or a live
// arena can be pinned.
void a_pin_keeps_memory_until_unpinned() {
  FakeMemoryDevice dev;
  MemoryManager mm(dev.free());
  auto a = mm.reserve(1000, 0, dev.allocate());
  CHECK(mm.pin(a.id) && mm.pin(a.id));
  mm.unbind(a.id);
  CHECK(mm.stats().slices_in_use == 1 && mm.stats().slices_free == 0);
  auto b = mm.reserve(1000, 0, dev.allocate());
  CHECK(b.id != a.id && b.allocated);  // not handed out while pinned
  mm.unpin(a.id);
  CHECK(mm.stats().slices_in_use == 2);
  mm.unpin(a.id);
  CHECK(mm.stats().slices_in_use == 1 && mm.stats().slices_free == 1);
  CHECK(!mm.pin(a.id));  // free: nothing to pin
  mm.unpin(a.id);        // and an unpin of nothing changes nothing
  check_pool_invariant(mm);
  auto arena = mm.reserve_arena(4096, dev.allocate());
  CHECK(mm.pin(arena.id));
  mm.release_arena(arena.id);
  CHECK(mm.stats().arenas == 1 && dev.live.count(arena.ptr) == 1);
  mm.unpin(arena.id);
  CHECK(mm.stats().arenas == 0 && dev.live.count(arena.ptr) == 0);
  CHECK(!mm.pin(arena.id));
  auto c = mm.reserve(64, 0, dev.allocate());
  CHECK(mm.pin(c.id));
  mm.release_all();  // close returns everything, pinned or not
  mm.unpin(c.id);    // a fence after close finds nothing
  CHECK(dev.live.empty());
}

// An arena is exact-size, outside the pools, never primed by a window or freed by cleanup, held
// by a recording that touches it until its graph releases it, and goes back to the driver with
// its last hold.
void arenas_sit_beside_the_pools() {
  FakeMemoryDevice dev;
  MemoryManager mm(dev.free());
  auto arena = mm.reserve_arena(12288 + 4096, dev.allocate());
  CHECK(arena.allocated && arena.capacity == 16384);
  auto stats = mm.stats();
  CHECK(stats.arena_bytes == 16384 && stats.arenas == 1 && stats.pool_bytes == 0 && stats.slices == 0);
  CHECK(stats.driver_allocations == 1);
  check_pool_invariant(mm);
  mm.capture_begin(7);
  mm.touch(arena.id, 7);  // a window's priming never retains an arena
  CHECK(mm.capture_end(7).empty());
  // A recording that touched it holds it for the graph: the owner's release leaves it alive.
  mm.capture_begin(8);
  mm.capture_priming_end(8);
  mm.touch(arena.id, 8);
  mm.touch(arena.id, 8);  // one hold per window
  const std::vector<lifecore::runtime::SliceId> graph = mm.capture_end(8);
  CHECK(graph.size() == 1 && graph[0] == arena.id);
  CHECK(mm.stats().slices_retained == 0 && mm.stats().pool_bytes == 0);
  CHECK(mm.hold_arena(arena.id));  // the owner's second hold, dropped below
  mm.release_arena(arena.id);
  mm.release_retained(graph);  // the graph goes
  CHECK(mm.stats().arena_bytes == 16384 && dev.live.count(arena.ptr) == 1);
  CHECK(mm.hold_arena(arena.id));  // a Buffer lent over it
  mm.release_arena(arena.id);      // the owner lets go: the lent Buffer still holds it
  CHECK(mm.cleanup() == 0 && mm.stats().arena_bytes == 16384 && dev.live.count(arena.ptr) == 1);
  mm.unbind(arena.id);  // the Buffer goes
  CHECK(mm.stats().arena_bytes == 0 && mm.stats().arenas == 0 && dev.live.empty());
  CHECK(!mm.hold_arena(arena.id));
  // Releasing what is no arena changes nothing: an arena already gone, a pooled slice.
  mm.release_arena(arena.id);
  auto pooled = mm.reserve(4096, 0, dev.allocate());
  mm.release_arena(pooled.id);
  CHECK(!mm.hold_arena(pooled.id) && dev.live.count(pooled.ptr) == 1);
  CHECK(mm.stats().arenas == 0 && mm.stats().slices == 1);
  check_pool_invariant(mm);
}

// After release_all (the device's close) nothing new is handed out: an arena or a slice asked
// for by a caller that passed the open check before the close would be memory nobody returns.
void a_released_manager_allocates_nothing() {
  FakeMemoryDevice dev;
  MemoryManager mm(dev.free());
  auto arena = mm.reserve_arena(4096, dev.allocate());
  mm.release_all();
  CHECK(dev.live.empty());
  CHECK(error_of([&] { mm.reserve_arena(4096, dev.allocate()); }) == lifecore::ErrorKind::Closed);
  CHECK(error_of([&] { mm.reserve(4096, 0, dev.allocate()); }) == lifecore::ErrorKind::Closed);
  CHECK(dev.allocations == 1 && dev.live.empty());
  CHECK(!mm.hold_arena(arena.id));
  CHECK(mm.stats().arenas == 0 && mm.stats().slices == 0);
}

int main() {
  arenas_sit_beside_the_pools();
  a_released_manager_allocates_nothing();
  primed_slices_are_kept_for_their_own_window();
  concurrent_windows_never_share_a_retained_slice();
  eager_reuse_by_bucket();
  large_requests_are_not_doubled();
  priming_leaves_the_working_set_not_the_peak();
  capture_end_releases_primed_slices_when_priming_never_ended();
  capture_pins_a_reused_persistent_slice_and_not_untouched_ones();
  capture_survives_explicit_cleanup_and_is_reentrant();
  failed_allocation_changes_nothing();
  memory_node_slices_never_return_to_the_pool();
  owner_of_names_what_a_range_lies_in();
  a_pin_keeps_memory_until_unpinned();
  return lifecore::test_support::finish("runtime_memory_manager_test");
}
