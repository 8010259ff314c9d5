// The device memory behind Buffers: two pools of slices, one driver allocation each.
//  - dynamic pool: sizes up to 1 MiB rounded up to power-of-two buckets, up to 1 GiB to a
//    quarter of their power of two (at most 25% over, four buckets a doubling), larger ones to
//    a multiple of 2 MiB (a power of two, or a quarter of one, would take a request near the
//    device's size past it); a free slice of the same bucket is reused. Serves eager
//    allocations.
//  - persistent pool: exact-fit slices (only alignment padding), reused only by the same size.
//    Forced while a capture window is armed, so the addresses a graph bakes in come from
//    slices the pool keeps for as long as the graph retains them.
// A window (graph_prepare .. end_capture) records every slice it reserves or binds ("touched").
// While it is priming (the warmup, until begin_capture) it also retains them, so the pool grows
// to the step's whole working set rather than its transient peak and the recorded pass finds
// every slice it needs without allocating. Touched slices of the recording are retained by
// the window and handed to the graph at capture_end, so the pool can never give that memory
// to a later allocation while a replay writes it.
// Arenas (reserve_arena) sit beside the pools: one exact-size driver allocation for a
// long-lived owner (a KV arena of the sequence coordinator), never rounded, never pooled, never
// primed or reserved by a capture window, returned to the driver as soon as its last hold goes
// (or at device close); a recording that touches one holds it for its graph's life. pool_bytes counts the pools only; arena_bytes the arenas.
// Thread-safe: one mutex guards all of it (driver allocations happen under it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "lifecore/driver/driver.hpp"

namespace lifecore::runtime {

using SliceId = std::uint64_t;
using WindowId = std::uint64_t;  // 0: no window

struct MemoryStats {
  std::size_t pool_bytes = 0;
  std::size_t slices = 0;
  std::size_t slices_in_use = 0;
  std::size_t slices_retained = 0;
  std::size_t slices_free = 0;
  // Of those free, the ones a capture window made: kept, at their exact size, for later
  // windows; an allocation outside a window never takes them.
  std::size_t slices_free_for_capture = 0;
  std::uint64_t driver_allocations = 0;
  std::size_t windows_active = 0;
  std::size_t arena_bytes = 0;
  std::size_t arenas = 0;
};

// What an allocation callback produced: the pointer, and whether the driver recorded it as a
// memory node of a live capture (such memory belongs to that graph, never to the pool).
struct SliceAllocation {
  driver::DevicePtr ptr = 0;
  bool memory_node = false;
};

class MemoryManager {
 public:
  // Allocates `bytes` from the driver or throws lifecore::Error; called under the lock.
  using Allocate = std::function<SliceAllocation(std::size_t bytes)>;
  // Returns a driver allocation; must not throw.
  using Free = std::function<void(driver::DevicePtr ptr, bool memory_node)>;

  static constexpr std::size_t alignment = 256;
  static constexpr std::size_t min_bucket = 512;
  static constexpr std::size_t largest_power_of_two_bucket = std::size_t{1} << 20;
  static constexpr std::size_t largest_quartered_bucket = std::size_t{1} << 30;
  static constexpr std::size_t large_granularity = std::size_t{2} << 20;

  explicit MemoryManager(Free free);
  MemoryManager(const MemoryManager&) = delete;
  MemoryManager& operator=(const MemoryManager&) = delete;

  struct Reservation {
    SliceId id = 0;
    driver::DevicePtr ptr = 0;
    std::size_t capacity = 0;
    bool allocated = false;  // the pool could not serve it: a new driver allocation was made
  };
  // Binds a slice of at least `nbytes` (> 0) for a new Buffer. Inside an armed `window` the
  // slice comes from the persistent pool and is touched. Nothing changes when allocate throws.
  Reservation reserve(std::size_t nbytes, WindowId window, const Allocate& allocate);
  // A recorded (or warmup) operation bound this slice inside `window`.
  void touch(SliceId slice, WindowId window);
  // The Buffer bound to the slice was freed, its unbind queued for the stream's next fence:
  // from now on an address in it is a freed buffer's (owner_of), not a live one's.
  void mark_dropped(SliceId slice) noexcept;
  // The Buffer bound to the slice is gone (after its fence): the slice returns to its pool
  // unless something retains it.
  void unbind(SliceId slice);
  // The recording of `window` drops a Buffer whose slice only its warmup used: no fence comes
  // inside a window, but nothing recorded reads the slice, so it may serve the recording's next
  // allocation of its size at once (one warmup is then enough for a step that drops its previous
  // output before allocating the next). A slice the recording used stays the graph's alone: a
  // replay must not read what a later node of the previous replay wrote. False, with nothing
  // changed, when the slice does not qualify (the recording or another stream's work used it, a
  // graph retains it, it is not this window's): the caller defers the unbind.
  bool unbind_in_recording(SliceId slice, WindowId window);
  // Drops one retention per id (a graph going away).
  void release_retained(const std::vector<SliceId>& slices);
  // Work queued on a stream other than the one that allocated the slice: pinned, the slice does
  // not return to its pool (an arena to the driver) when its Buffer goes, until unpin. False
  // (nothing pinned) when no Buffer is bound to the slice or the arena is gone.
  bool pin(SliceId slice);
  void unpin(SliceId slice) noexcept;

  // Arms `window`: force the persistent pool, track touched slices, start priming. Re-entrant.
  void capture_begin(WindowId window);
  // Ends priming: the slices warmup retained become free but stay pooled, set aside for this
  // window's recording (another stream's window must not take them). Mandatory before the
  // recording, or the recorded pass would allocate.
  void capture_priming_end(WindowId window);
  // Disarms `window`; returns every slice the recording touched, each with one retention the
  // caller now owns (a graph keeps them; a refused capture releases them at once).
  std::vector<SliceId> capture_end(WindowId window);

  // An arena of exactly `nbytes` (> 0): one new driver allocation, held once by the caller
  // (release_arena drops that hold). Nothing changes when allocate throws.
  Reservation reserve_arena(std::size_t nbytes, const Allocate& allocate);
  // One more hold on a live arena (a Buffer lent over it: unbind drops it); false when the
  // arena is gone (released, or the device closed).
  bool hold_arena(SliceId arena);
  // Drops one hold; the memory goes back to the driver with the last one.
  void release_arena(SliceId arena);

  // Returns every free slice to the driver; skipped (returns 0) while any window is armed.
  std::size_t cleanup();
  // Device close: returns every slice to the driver, whatever holds it. From then on reserve
  // and reserve_arena refuse (ClosedError) without allocating.
  void release_all();

  MemoryStats stats() const;
  // The pool a slice lives in (for tests): true when persistent.
  bool is_persistent(SliceId slice) const;
  // What of the device's memory [ptr, ptr + bytes) (bytes > 0) lies in, for a tensor passed in
  // by address. A scan: few calls take such tensors.
  struct RangeOwner {
    enum class Kind {
      none,       // no slice or arena: not the device's memory as lifecore knows it
      buffer,     // within the bytes of the Buffer bound to `slice`
      arena,      // within the arena `slice`
      freed,      // in a pooled slice no live Buffer is bound to (a freed one's awaits its fence)
      straddles,  // runs past a Buffer's bytes or an arena's, or across several
    };
    Kind kind = Kind::none;
    SliceId slice = 0;
  };
  RangeOwner owner_of(driver::DevicePtr ptr, std::size_t bytes) const;
  // Whether [ptr, ptr + bytes) shares a byte with any live arena (any coordinator's KV blocks):
  // a lookup among the arenas alone, for a check on every block-table call.
  bool shares_an_arena(driver::DevicePtr ptr, std::size_t bytes) const;

  static std::size_t bucket_size(std::size_t nbytes);
  static std::size_t exact_size(std::size_t nbytes);

 private:
  struct Slice {
    driver::DevicePtr ptr = 0;
    std::size_t capacity = 0;
    bool persistent = false;
    bool bound = false;
    bool dropped = false;         // bound, but its Buffer was freed: unbound at the next fence
    std::size_t bound_bytes = 0;  // the bound Buffer's size (<= capacity)
    bool memory_node = false;
    std::uint32_t retains = 0;
    std::uint32_t pins = 0;  // queued work of other streams (pin / unpin)
    WindowId reserved_for = 0;  // primed by this window: only its recording may reuse it
    std::uint32_t arena_holds = 0;  // > 0: an arena (outside the pools), freed when it reaches 0
  };
  using FreeList = std::map<std::size_t, std::vector<SliceId>>;
  struct Window {
    bool priming = true;
    std::set<SliceId> primed;    // retained until priming ends
    std::set<SliceId> touched;   // retained by the window, then by the graph
    std::set<SliceId> reserved;  // primed here: kept for this window's recording until capture_end
    FreeList reserved_free;      // the free ones among them
  };

  // A window's record of one slice, made before anything changes (a set's node, allocated),
  // so that recording the slice afterwards cannot throw.
  using SliceNode = std::set<SliceId>::node_type;
  static SliceNode slice_node();
  void touch_locked(SliceId id, Slice& slice, Window& window, SliceNode room) noexcept;
  void touch_locked(SliceId id, Slice& slice, Window& window);  // a throw changes nothing
  void retain_locked(Slice& slice) { ++slice.retains; }
  void drop_retain_locked(SliceId id);
  void maybe_free_locked(SliceId id, Slice& slice) noexcept;
  void drop_arena_hold_locked(std::unordered_map<SliceId, Slice>::iterator it);
  void check_not_released_locked(const char* op) const;

  mutable std::mutex mutex_;
  Free free_;
  std::unordered_map<SliceId, Slice> slices_;
  FreeList dynamic_free_;
  FreeList persistent_free_;
  std::unordered_map<WindowId, Window> windows_;
  SliceId next_id_ = 1;
  std::size_t pool_bytes_ = 0;
  std::size_t arena_bytes_ = 0;
  std::map<driver::DevicePtr, std::size_t> arenas_;  // each live arena's bytes, by its first address
  std::uint64_t driver_allocations_ = 0;
  bool released_ = false;  // release_all ran (the device closed)
};

}  // namespace lifecore::runtime
