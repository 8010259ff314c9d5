// Per-window reservation in the memory manager: a slice one window's warmup primed is kept for
// that window's recording until its capture_end, so another window (another stream capturing
// at the same time) is never handed it. Pinned for the orders the shared-pool tests miss: a
// primed slice still bound when priming ends (it is set aside only at its unbind), a slice two
// windows both primed (the first priming end owns it), the end of the owning window, and a
// slice set aside again by a later window, and a slice dropped while its window records.
#include <cstdio>
#include <set>

#include "lifecore/error.hpp"
#include "lifecore/runtime/memory_manager.hpp"
#include "fake_memory_device.hpp"
#include "test_support.hpp"

using lifecore::runtime::MemoryManager;
using lifecore::runtime::SliceAllocation;

using lifecore::test_support::check_pool_invariant;
using lifecore::test_support::FakeMemoryDevice;

namespace {


// Primed by window 1 and still bound when its priming ends: set aside at the unbind.
void a_slice_bound_at_priming_end_is_set_aside_at_its_unbind() {
  FakeMemoryDevice dev{.next = 0x10000, .gap = 256};
  MemoryManager mm(dev.free());
  mm.capture_begin(1);
  auto held = mm.reserve(2048, 1, dev.allocate());
  mm.capture_priming_end(1);   // still bound: nothing to set aside yet
  mm.capture_begin(2);
  mm.capture_priming_end(2);
  mm.unbind(held.id);          // now free, but only for window 1
  CHECK(mm.stats().slices_free == 1);
  auto other = mm.reserve(2048, 2, dev.allocate());
  CHECK(other.allocated && other.id != held.id && other.ptr != held.ptr);
  auto eager = mm.reserve(2048, 0, dev.allocate());  // an eager allocation never takes it either
  CHECK(eager.allocated && eager.id != held.id);
  auto own = mm.reserve(2048, 1, dev.allocate());
  CHECK(!own.allocated && own.id == held.id);
  mm.unbind(own.id);
  mm.unbind(other.id);
  mm.unbind(eager.id);
  mm.release_retained(mm.capture_end(2));
  mm.release_retained(mm.capture_end(1));
  check_pool_invariant(mm);
  // Window 1 is over: the slice is back in the shared persistent pool.
  mm.capture_begin(3);
  mm.capture_priming_end(3);
  auto later = mm.reserve(2048, 3, dev.allocate());
  CHECK(!later.allocated && (later.id == held.id || later.id == other.id));
  mm.unbind(later.id);
  mm.release_retained(mm.capture_end(3));
  check_pool_invariant(mm);
}

// An eager buffer both windows' warmups used: the first priming end owns it; the second window
// neither takes it over nor finds it in its own set-aside slices.
void a_slice_two_windows_primed_belongs_to_the_first_priming_end() {
  FakeMemoryDevice dev{.next = 0x10000, .gap = 256};
  MemoryManager mm(dev.free());
  mm.capture_begin(1);
  mm.capture_begin(2);
  auto shared = mm.reserve(4096, 1, dev.allocate());  // persistent, primed by window 1
  mm.touch(shared.id, 2);                             // window 2's warmup used it as well
  auto mine = mm.reserve(4096, 2, dev.allocate());    // window 2's own warmup slice
  mm.unbind(mine.id);
  mm.capture_priming_end(1);
  mm.capture_priming_end(2);
  mm.unbind(shared.id);
  // Window 2 gets back its own slice first, then must allocate: `shared` is window 1's.
  auto first = mm.reserve(4096, 2, dev.allocate());
  CHECK(!first.allocated && first.id == mine.id);
  auto second = mm.reserve(4096, 2, dev.allocate());
  CHECK(second.allocated && second.id != shared.id);
  auto own = mm.reserve(4096, 1, dev.allocate());
  CHECK(!own.allocated && own.id == shared.id);
  for (auto id : {first.id, second.id, own.id}) mm.unbind(id);
  mm.release_retained(mm.capture_end(1));
  mm.release_retained(mm.capture_end(2));
  CHECK(mm.stats().slices_retained == 0);
  check_pool_invariant(mm);
}

// A window that ends without its recording using what it set aside gives it back to the shared
// pool: a later window reuses it rather than allocating.
void an_ended_window_returns_what_it_set_aside() {
  FakeMemoryDevice dev{.next = 0x10000, .gap = 256};
  MemoryManager mm(dev.free());
  mm.capture_begin(1);
  auto primed = mm.reserve(1024, 1, dev.allocate());
  mm.unbind(primed.id);
  mm.capture_priming_end(1);
  mm.capture_begin(2);
  mm.capture_priming_end(2);
  auto before = mm.reserve(1024, 2, dev.allocate());
  CHECK(before.allocated);                 // window 1 still holds it
  CHECK(mm.capture_end(1).empty());        // its recording touched nothing
  auto after = mm.reserve(1024, 2, dev.allocate());
  CHECK(!after.allocated && after.id == primed.id);
  mm.unbind(before.id);
  mm.unbind(after.id);
  mm.release_retained(mm.capture_end(2));
  CHECK(mm.cleanup() == 2048);
  CHECK(dev.live.empty());
}

// A slice set aside by a window that ended is an ordinary pooled slice again: the next window
// whose warmup uses it sets it aside for itself, and a third window is not handed it.
void a_slice_set_aside_by_an_ended_window_can_be_set_aside_again() {
  FakeMemoryDevice dev{.next = 0x10000, .gap = 256};
  MemoryManager mm(dev.free());
  mm.capture_begin(1);
  auto first = mm.reserve(1024, 1, dev.allocate());
  mm.unbind(first.id);
  mm.capture_priming_end(1);
  mm.release_retained(mm.capture_end(1));  // the recording never used it
  mm.capture_begin(2);
  auto warm = mm.reserve(1024, 2, dev.allocate());  // window 2's warmup reuses it
  CHECK(!warm.allocated && warm.id == first.id);
  mm.unbind(warm.id);
  mm.capture_priming_end(2);
  mm.capture_begin(3);
  mm.capture_priming_end(3);
  auto other = mm.reserve(1024, 3, dev.allocate());
  CHECK(other.allocated && other.id != first.id);
  auto own = mm.reserve(1024, 2, dev.allocate());
  CHECK(!own.allocated && own.id == first.id);
  mm.unbind(own.id);
  mm.unbind(other.id);
  mm.release_retained(mm.capture_end(2));
  mm.release_retained(mm.capture_end(3));
  CHECK(mm.stats().slices_retained == 0);
  check_pool_invariant(mm);
}

}  // namespace

// Dropped while its window records: a slice only the warmup used serves the recording's next
// allocation at once; one the recording used, one another window primed, one a stream pins and
// one that is not persistent wait for the usual unbind, with nothing changed.
void a_slice_only_the_warmup_used_serves_the_recording_when_dropped() {
  FakeMemoryDevice dev{.next = 0x10000, .gap = 256};
  MemoryManager mm(dev.free());
  auto eager = mm.reserve(1024, 0, dev.allocate());  // before the window: dynamic pool
  mm.capture_begin(1);
  auto warm = mm.reserve(1024, 1, dev.allocate());   // the warmup's output, still held
  auto used = mm.reserve(1024, 1, dev.allocate());   // the warmup's, and the recording's
  auto pinned = mm.reserve(1024, 1, dev.allocate());
  CHECK(mm.pin(pinned.id));
  mm.capture_priming_end(1);
  mm.touch(used.id, 1);
  CHECK(!mm.unbind_in_recording(eager.id, 1));
  CHECK(!mm.unbind_in_recording(used.id, 1));
  CHECK(!mm.unbind_in_recording(pinned.id, 1));
  CHECK(!mm.unbind_in_recording(warm.id, 2));        // not that window's
  CHECK(mm.stats().slices_in_use == 4);
  const auto made = mm.stats().driver_allocations;
  CHECK(mm.unbind_in_recording(warm.id, 1));
  CHECK(!mm.unbind_in_recording(warm.id, 1));        // no longer bound
  auto next = mm.reserve(1024, 1, dev.allocate());
  CHECK(!next.allocated && next.id == warm.id && mm.stats().driver_allocations == made);
  auto again = mm.reserve(1024, 1, dev.allocate());  // the others are still held
  CHECK(again.allocated);
  // A window that is still priming takes nothing this way (its fence comes at begin_capture).
  mm.capture_begin(2);
  auto priming = mm.reserve(1024, 2, dev.allocate());
  CHECK(!mm.unbind_in_recording(priming.id, 2));
  for (auto id : {eager.id, used.id, pinned.id, priming.id}) mm.unbind(id);
  mm.unpin(pinned.id);
  auto graph = mm.capture_end(1);
  CHECK(std::set<lifecore::runtime::SliceId>(graph.begin(), graph.end()) ==
        std::set<lifecore::runtime::SliceId>({used.id, next.id, again.id}));
  mm.unbind(next.id);
  mm.unbind(again.id);
  mm.release_retained(graph);
  mm.release_retained(mm.capture_end(2));
  check_pool_invariant(mm);
  CHECK(mm.stats().slices_in_use == 0);
}

int main() {
  a_slice_only_the_warmup_used_serves_the_recording_when_dropped();
  a_slice_set_aside_by_an_ended_window_can_be_set_aside_again();
  a_slice_bound_at_priming_end_is_set_aside_at_its_unbind();
  a_slice_two_windows_primed_belongs_to_the_first_priming_end();
  an_ended_window_returns_what_it_set_aside();
  return lifecore::test_support::finish("runtime_memory_window_reservation_test");
}
