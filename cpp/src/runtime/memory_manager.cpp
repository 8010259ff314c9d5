#include "lifecore/runtime/memory_manager.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <new>
#include <utility>

#include "lifecore/error.hpp"

namespace lifecore::runtime {

MemoryManager::MemoryManager(Free free) : free_(std::move(free)) {}

std::size_t MemoryManager::bucket_size(std::size_t nbytes) {
  if (nbytes <= largest_power_of_two_bucket) return std::max(min_bucket, std::bit_ceil(nbytes));
  if (nbytes <= largest_quartered_bucket) {
    // In (2^k, 2^(k+1)]: a multiple of 2^(k-2), k >= 20 here, so the sum stays below 2^31.
    const std::size_t quarter = (std::bit_floor(nbytes - 1)) / 4;
    return (nbytes + quarter - 1) / quarter * quarter;
  }
  // At most 2 MiB - 1 above the request: past the largest multiple of 2 MiB nothing is left.
  constexpr std::size_t largest = std::numeric_limits<std::size_t>::max() / large_granularity * large_granularity;
  if (nbytes > largest)
    raise(ErrorKind::Overflow, "alloc: " + std::to_string(nbytes) + " bytes cannot be rounded to the pool's granularity");
  return (nbytes + large_granularity - 1) / large_granularity * large_granularity;
}

std::size_t MemoryManager::exact_size(std::size_t nbytes) {
  return (nbytes + alignment - 1) / alignment * alignment;
}

MemoryManager::Reservation MemoryManager::reserve(std::size_t nbytes, WindowId window, const Allocate& allocate) {
  if (nbytes == 0) raise(ErrorKind::InvalidArgument, "alloc: nbytes must be > 0");
  std::lock_guard lock(mutex_);
  check_not_released_locked("alloc");
  Window* armed = nullptr;
  if (window != 0) {
    auto it = windows_.find(window);
    if (it != windows_.end()) armed = &it->second;
  }
  const bool persistent = armed != nullptr;
  const std::size_t capacity = persistent ? exact_size(nbytes) : bucket_size(nbytes);
  FreeList& free_list = persistent ? persistent_free_ : dynamic_free_;

  SliceNode room;  // the window's record of the slice, made before anything changes
  if (armed) room = slice_node();
  Reservation result;
  auto take = [&](FreeList& list) {
    auto bucket = list.find(capacity);
    if (bucket == list.end() || bucket->second.empty()) return false;
    result.id = bucket->second.back();
    bucket->second.pop_back();
    if (bucket->second.empty()) list.erase(bucket);
    return true;
  };
  // A window first reuses what its own warmup primed, then the shared persistent pool.
  if (!(armed && take(armed->reserved_free)) && !take(free_list)) {
    SliceAllocation made = allocate(capacity);  // throws: nothing changed
    Slice slice;
    slice.ptr = made.ptr;
    slice.capacity = capacity;
    slice.persistent = persistent;
    slice.memory_node = made.memory_node;
    try {
      slices_.emplace(result.id = next_id_, slice);
    } catch (...) {  // no memory for the record: the allocation goes back, nothing changed
      free_(made.ptr, made.memory_node);
      throw;
    }
    ++next_id_;
    result.allocated = true;
    pool_bytes_ += capacity;
    ++driver_allocations_;
  }
  // Nothing below throws: a slice bound here and then refused would be bound to no Buffer.
  Slice& slice = slices_.find(result.id)->second;
  slice.bound = true;
  slice.dropped = false;
  slice.bound_bytes = nbytes;
  result.ptr = slice.ptr;
  result.capacity = slice.capacity;
  if (armed) touch_locked(result.id, slice, *armed, std::move(room));
  return result;
}

MemoryManager::SliceNode MemoryManager::slice_node() {
  std::set<SliceId> one{SliceId{}};
  return one.extract(one.begin());
}

void MemoryManager::touch_locked(SliceId id, Slice& slice, Window& window, SliceNode room) noexcept {
  std::set<SliceId>& record = window.priming ? window.primed : window.touched;
  if (record.count(id) != 0) return;
  room.value() = id;
  record.insert(std::move(room));
  retain_locked(slice);
}

void MemoryManager::touch_locked(SliceId id, Slice& slice, Window& window) {
  std::set<SliceId>& record = window.priming ? window.primed : window.touched;
  if (record.insert(id).second) retain_locked(slice);
}

MemoryManager::Reservation MemoryManager::reserve_arena(std::size_t nbytes, const Allocate& allocate) {
  if (nbytes == 0) raise(ErrorKind::InvalidArgument, "reserve_arena: nbytes must be > 0");
  std::lock_guard lock(mutex_);
  check_not_released_locked("reserve_arena");
  SliceAllocation made = allocate(nbytes);  // throws: nothing changed
  Slice slice;
  slice.ptr = made.ptr;
  slice.capacity = nbytes;
  slice.memory_node = made.memory_node;
  slice.arena_holds = 1;
  Reservation result{next_id_++, made.ptr, nbytes, true};
  try {
    slices_.emplace(result.id, slice);
    arenas_.emplace(made.ptr, nbytes);
  } catch (...) {  // no memory for the records: the allocation goes back, nothing changed
    slices_.erase(result.id);
    free_(made.ptr, made.memory_node);
    throw;
  }
  arena_bytes_ += nbytes;
  ++driver_allocations_;
  return result;
}

bool MemoryManager::hold_arena(SliceId id) {
  std::lock_guard lock(mutex_);
  auto it = slices_.find(id);
  if (it == slices_.end() || it->second.arena_holds == 0) return false;
  ++it->second.arena_holds;
  return true;
}

void MemoryManager::drop_arena_hold_locked(std::unordered_map<SliceId, Slice>::iterator it) {
  if (--it->second.arena_holds != 0) return;
  free_(it->second.ptr, it->second.memory_node);
  arena_bytes_ -= it->second.capacity;
  arenas_.erase(it->second.ptr);
  slices_.erase(it);
}

void MemoryManager::release_arena(SliceId id) {
  std::lock_guard lock(mutex_);
  auto it = slices_.find(id);
  if (it == slices_.end() || it->second.arena_holds == 0) return;
  drop_arena_hold_locked(it);
}

void MemoryManager::touch(SliceId id, WindowId window) {
  std::lock_guard lock(mutex_);
  auto w = windows_.find(window);
  auto s = slices_.find(id);
  if (w == windows_.end() || s == slices_.end()) return;
  if (s->second.arena_holds > 0) {
    // An arena belongs to its owner, never to a window's pools (nor to its priming). But a
    // graph keeps what its recording touched: one more hold, which capture_end hands over and
    // release_retained drops, so a replay never reads an arena its owner let go.
    if (!w->second.priming && w->second.touched.insert(id).second) ++s->second.arena_holds;
    return;
  }
  touch_locked(id, s->second, w->second);
}

void MemoryManager::maybe_free_locked(SliceId id, Slice& slice) noexcept {
  if (slice.bound || slice.retains > 0 || slice.pins > 0) return;
  // Memory a capture recorded as a node belongs to that (discarded) graph, never to the pool;
  // and a slice with no room in a free list (out of host memory) goes back to the driver too.
  const auto give_back = [&] {
    pool_bytes_ -= slice.capacity;
    free_(slice.ptr, slice.memory_node);
    slices_.erase(id);
  };
  if (slice.memory_node) return give_back();
  try {
    if (slice.reserved_for != 0) {
      auto window = windows_.find(slice.reserved_for);
      if (window != windows_.end()) {
        window->second.reserved_free[slice.capacity].push_back(id);
        return;
      }
      slice.reserved_for = 0;
    }
    FreeList& free_list = slice.persistent ? persistent_free_ : dynamic_free_;
    free_list[slice.capacity].push_back(id);
  } catch (const std::bad_alloc&) {
    give_back();
  }
}

void MemoryManager::mark_dropped(SliceId id) noexcept {
  std::lock_guard lock(mutex_);
  auto it = slices_.find(id);
  if (it != slices_.end() && it->second.bound) it->second.dropped = true;
}

void MemoryManager::unbind(SliceId id) {
  std::lock_guard lock(mutex_);
  auto it = slices_.find(id);
  if (it == slices_.end()) return;
  if (it->second.arena_holds > 0) return drop_arena_hold_locked(it);  // a Buffer lent over an arena
  if (!it->second.bound) return;
  it->second.bound = false;
  it->second.bound_bytes = 0;
  maybe_free_locked(id, it->second);
}

bool MemoryManager::unbind_in_recording(SliceId id, WindowId window) {
  std::lock_guard lock(mutex_);
  auto w = windows_.find(window);
  auto it = slices_.find(id);
  if (w == windows_.end() || w->second.priming || it == slices_.end()) return false;
  Slice& slice = it->second;
  if (slice.arena_holds > 0 || !slice.bound || !slice.persistent || slice.memory_node || slice.pins > 0) return false;
  // Primed for this window, and nothing retains it: no graph, and not this recording.
  if (slice.reserved_for != window || slice.retains != 0 || w->second.touched.contains(id)) return false;
  w->second.reserved_free[slice.capacity].push_back(id);  // a throw changes nothing
  slice.bound = false;
  slice.bound_bytes = 0;
  return true;
}

void MemoryManager::drop_retain_locked(SliceId id) {
  auto it = slices_.find(id);
  if (it == slices_.end()) return;
  if (it->second.arena_holds > 0) return drop_arena_hold_locked(it);  // a recording's hold (touch)
  if (it->second.retains == 0) return;
  if (--it->second.retains == 0) maybe_free_locked(id, it->second);
}

void MemoryManager::release_retained(const std::vector<SliceId>& ids) {
  std::lock_guard lock(mutex_);
  for (SliceId id : ids) drop_retain_locked(id);
}

bool MemoryManager::pin(SliceId id) {
  std::lock_guard lock(mutex_);
  auto it = slices_.find(id);
  if (it == slices_.end()) return false;
  // An arena's memory goes back with its last hold: a pin is one more.
  if (it->second.arena_holds > 0) return ++it->second.arena_holds, true;
  // Only a Buffer's slice: a free one may be handed out again whatever pins it.
  if (!it->second.bound || it->second.pins == std::numeric_limits<std::uint32_t>::max()) return false;
  ++it->second.pins;
  return true;
}

void MemoryManager::unpin(SliceId id) noexcept {
  std::lock_guard lock(mutex_);
  auto it = slices_.find(id);
  if (it == slices_.end()) return;  // returned by close() meanwhile
  if (it->second.arena_holds > 0) return drop_arena_hold_locked(it);
  if (it->second.pins == 0) return;
  if (--it->second.pins == 0) maybe_free_locked(id, it->second);
}

void MemoryManager::capture_begin(WindowId window) {
  std::lock_guard lock(mutex_);
  windows_.try_emplace(window);  // re-entrant: an armed window keeps what it tracks
}

void MemoryManager::capture_priming_end(WindowId window) {
  std::lock_guard lock(mutex_);
  auto it = windows_.find(window);
  if (it == windows_.end() || !it->second.priming) return;
  it->second.priming = false;
  std::set<SliceId> primed = std::move(it->second.primed);
  it->second.primed.clear();
  for (SliceId id : primed) {
    auto slice = slices_.find(id);
    if (slice != slices_.end() && slice->second.persistent && slice->second.reserved_for == 0) {
      slice->second.reserved_for = window;
      it->second.reserved.insert(id);
    }
    drop_retain_locked(id);
  }
}

std::vector<SliceId> MemoryManager::capture_end(WindowId window) {
  std::lock_guard lock(mutex_);
  auto it = windows_.find(window);
  if (it == windows_.end()) return {};
  Window record = std::move(it->second);
  windows_.erase(it);
  // What this window set aside goes back to the shared persistent pool.
  for (SliceId id : record.reserved) {
    auto slice = slices_.find(id);
    if (slice == slices_.end() || slice->second.reserved_for != window) continue;
    slice->second.reserved_for = 0;
  }
  for (auto& [capacity, ids] : record.reserved_free)
    for (SliceId id : ids) persistent_free_[capacity].push_back(id);
  for (SliceId id : record.primed) drop_retain_locked(id);  // priming never ended
  return {record.touched.begin(), record.touched.end()};
}

std::size_t MemoryManager::cleanup() {
  std::lock_guard lock(mutex_);
  // A free can synchronise the device, which would abort a live capture; and a prepared
  // window's pool must keep what warmup grew it to.
  if (!windows_.empty()) return 0;
  std::size_t released = 0;
  for (FreeList* list : {&dynamic_free_, &persistent_free_}) {
    for (auto& [capacity, ids] : *list) {
      for (SliceId id : ids) {
        auto it = slices_.find(id);
        if (it == slices_.end()) continue;
        free_(it->second.ptr, it->second.memory_node);
        pool_bytes_ -= it->second.capacity;
        released += it->second.capacity;
        slices_.erase(it);
      }
    }
    list->clear();
  }
  return released;
}

void MemoryManager::check_not_released_locked(const char* op) const {
  // A caller that passed the device's open check before its close would get memory that
  // nobody returns: release_all has run, and nothing frees after it.
  if (released_) raise(ErrorKind::Closed, std::string(op) + ": the device is closed");
}

void MemoryManager::release_all() {
  std::lock_guard lock(mutex_);
  released_ = true;
  for (auto& [id, slice] : slices_) free_(slice.ptr, slice.memory_node);
  slices_.clear();
  dynamic_free_.clear();
  persistent_free_.clear();
  windows_.clear();
  pool_bytes_ = 0;
  arena_bytes_ = 0;
  arenas_.clear();
}

MemoryStats MemoryManager::stats() const {
  std::lock_guard lock(mutex_);
  MemoryStats stats;
  stats.pool_bytes = pool_bytes_;
  stats.slices = slices_.size() - arenas_.size();
  for (const auto& [id, slice] : slices_) {
    if (slice.arena_holds > 0) continue;
    if (slice.bound || slice.pins > 0) ++stats.slices_in_use;  // pinned: queued work uses it
    else if (slice.retains > 0) ++stats.slices_retained;
    else {
      ++stats.slices_free;
      if (slice.persistent) ++stats.slices_free_for_capture;
    }
  }
  stats.driver_allocations = driver_allocations_;
  stats.windows_active = windows_.size();
  stats.arena_bytes = arena_bytes_;
  stats.arenas = arenas_.size();
  return stats;
}

bool MemoryManager::is_persistent(SliceId id) const {
  std::lock_guard lock(mutex_);
  auto it = slices_.find(id);
  return it != slices_.end() && it->second.persistent;
}

MemoryManager::RangeOwner MemoryManager::owner_of(driver::DevicePtr ptr, std::size_t bytes) const {
  using Kind = RangeOwner::Kind;
  std::lock_guard lock(mutex_);
  RangeOwner found;
  for (const auto& [id, candidate] : slices_) {
    // Overlap without wrapping: [ptr, ptr + bytes) against [candidate.ptr, + capacity).
    const bool before = ptr < candidate.ptr && candidate.ptr - ptr >= bytes;
    const bool after = ptr >= candidate.ptr && ptr - candidate.ptr >= candidate.capacity;
    if (before || after) continue;
    if (found.kind != Kind::none) return {Kind::straddles, found.slice};  // a second one
    found.slice = id;
    const bool inside = ptr >= candidate.ptr;
    const std::size_t offset = inside ? ptr - candidate.ptr : 0;
    if (candidate.arena_holds > 0) {
      found.kind = inside && bytes <= candidate.capacity - offset ? Kind::arena : Kind::straddles;
    } else if (!candidate.bound || candidate.dropped) {
      found.kind = Kind::freed;  // a dropped Buffer's slice awaits its fence: its memory is freed all the same
    } else {
      // Within the Buffer's bytes, not merely the slice's capacity: the rest of the bucket is
      // no one's.
      found.kind = inside && offset < candidate.bound_bytes && bytes <= candidate.bound_bytes - offset
                       ? Kind::buffer
                       : Kind::straddles;
    }
  }
  return found;
}

bool MemoryManager::shares_an_arena(driver::DevicePtr ptr, std::size_t bytes) const {
  if (bytes == 0) return false;
  std::lock_guard lock(mutex_);
  // Arenas never overlap: only the last one starting at or before the range's last byte can
  // reach into it (distances, not ends: nothing wraps).
  const driver::DevicePtr last = ptr + std::min<std::uint64_t>(bytes - 1, ~ptr);
  auto it = arenas_.upper_bound(last);
  if (it == arenas_.begin()) return false;
  --it;
  return it->first >= ptr || ptr - it->first < it->second;
}

}  // namespace lifecore::runtime
