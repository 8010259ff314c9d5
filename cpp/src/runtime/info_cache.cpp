#include "lifecore/runtime/info_cache.hpp"

#include <algorithm>
#include <new>

namespace lifecore::runtime {

InfoCache::InfoCache(std::size_t max_entries, std::size_t max_entry_bytes)
    : max_entries_(max_entries), max_entry_bytes_(max_entry_bytes) {}

void InfoCache::touch_lru_locked(Entry& entry) { lru_.splice(lru_.begin(), lru_, entry.lru); }

void InfoCache::evict_locked(std::vector<driver::DevicePtr>* evicted, const InfoWords* keep) {
  // Oldest first; pinned entries are never evicted (a recorded launch may read them).
  // The count is of the entries no open window keeps warm: those a window keeps are on top of
  // it, so eager lookups beside an open window (one that never ends included) still have the
  // whole count, and their entries are not evicted as soon as they are made.
  auto it = lru_.end();
  while (entries_.size() > max_entries_ + warm_held_ && it != lru_.begin()) {
    --it;
    auto entry = entries_.find(**it);
    if (entry->second.pinned() || *it == keep) continue;
    evicted->push_back(entry->second.ptr);
    it = lru_.erase(it);
    entries_.erase(entry);
  }
}

InfoCache::Lookup InfoCache::get(const InfoWords& words, CacheMode mode, WindowId window, const Upload& upload,
                                 bool provisional) {
  Lookup result;
  const bool make_private = provisional && mode == CacheMode::capture;
  {
    std::lock_guard lock(mutex_);
    if (make_private) {
      // The window's own memory nodes first: one recording reuses its node for the same words.
      if (auto own = private_.find(window); own != private_.end()) {
        if (auto hit = own->second.find(words); hit != own->second.end()) {
          result.ptr = hit->second;
          return result;
        }
      }
    }
    if (auto found = entries_.find(words); found != entries_.end()) {
      touch_lru_locked(found->second);
      use_locked(found, mode, window, result);
      return result;
    }
  }
  // A miss: the words go up without the cache's lock, which every launch with info words on the
  // device takes, where an upload waits for its copy behind the work queued on its stream.
  const std::size_t bytes = words.size() * sizeof(std::uint32_t);
  if (mode == CacheMode::normal && bytes > max_entry_bytes_) {
    result.ptr = upload(words);
    result.transient = true;
    // Not cached, but a launch with info words all the same: the entries over the count (those
    // a window that ended since unpinned) go now, not at the next cached launch. Best effort:
    // short of memory, what is not evicted yet stays cached, and what is goes with the launch.
    std::lock_guard lock(mutex_);
    try {
      evict_locked(&result.evicted);
    } catch (const std::bad_alloc&) {
    }
    return result;
  }
  const driver::DevicePtr ptr = upload(words);  // throws: nothing changed
  std::lock_guard lock(mutex_);
  if (make_private) {  // only this window's stream, under its own lock, adds to its entries
    private_[window].emplace(words, ptr);
    result.ptr = ptr;
    return result;
  }
  auto [found, inserted] = entries_.try_emplace(words);
  if (inserted) {
    found->second.ptr = ptr;
    lru_.push_front(&found->first);
    found->second.lru = lru_.begin();
  } else {
    // Another stream uploaded the same words meanwhile: its entry is used, this copy released.
    touch_lru_locked(found->second);
    result.evicted.push_back(ptr);
  }
  use_locked(found, mode, window, result);
  return result;
}

void InfoCache::use_locked(Entries::iterator found, CacheMode mode, WindowId window, Lookup& result) {
  Entry& entry = found->second;
  result.ptr = entry.ptr;
  if (mode == CacheMode::capture && pending_[window].insert(&found->first).second) ++entry.window_pins;
  // Over the count, the least recently used unpinned entries go in either mode: a program that
  // only captures, and destroys its graphs, would otherwise grow the cache for ever. What a
  // window pins (used in it, or cached before it opened), what a live graph pins, and this
  // lookup's entry never go.
  evict_locked(&result.evicted, &found->first);
}

std::vector<driver::DevicePtr> InfoCache::open_window(WindowId window) {
  std::lock_guard lock(mutex_);
  std::vector<driver::DevicePtr> evicted;
  evicted.reserve(entries_.size() > max_entries_ ? entries_.size() - max_entries_ : 0);
  std::vector<const InfoWords*> warm;
  warm.reserve(std::min(entries_.size(), max_entries_));
  auto& held = warm_[window];  // throws: nothing changed (the reservations above leave nothing to undo)
  evict_locked(&evicted);      // no throw from here on
  // The most recently used, up to the count: an entry past it would have gone by now but for
  // another window's pin, and windows that overlap for ever would otherwise keep everything.
  for (auto it = lru_.begin(); it != lru_.end() && warm.size() < max_entries_; ++it) {
    if (entries_.at(**it).warm_pins++ == 0) ++warm_held_;
    warm.push_back(*it);  // within the reservation
  }
  held.swap(warm);
  unwarm_locked(warm);  // a window opened twice: its first pins go
  return evicted;
}

void InfoCache::unwarm_locked(const std::vector<const InfoWords*>& keys) noexcept {
  for (const InfoWords* key : keys)
    if (--entries_.at(*key).warm_pins == 0) --warm_held_;
}

void InfoCache::release_warm_locked(WindowId window) noexcept {
  auto it = warm_.find(window);
  if (it == warm_.end()) return;
  unwarm_locked(it->second);
  warm_.erase(it);
}

void InfoCache::close_window(WindowId window) noexcept {
  std::lock_guard lock(mutex_);
  release_warm_locked(window);
}

void InfoCache::commit(WindowId window, GraphId graph) {
  std::lock_guard lock(mutex_);
  release_warm_locked(window);  // what it used moves to the graph below; the rest was only kept warm
  private_.erase(window);  // the graph owns its memory nodes: they are never shared
  auto it = pending_.find(window);
  if (it == pending_.end()) return;
  auto& held = committed_[graph];
  for (const InfoWords* key : it->second) {
    Entry& entry = entries_.at(*key);
    --entry.window_pins;
    ++entry.graph_refs;
    held.push_back(key);
  }
  pending_.erase(it);
}

void InfoCache::discard(WindowId window) {
  std::lock_guard lock(mutex_);
  release_warm_locked(window);
  // Its private buffers were nodes of a recording that was never sealed: they never existed.
  private_.erase(window);
  auto it = pending_.find(window);
  if (it == pending_.end()) return;
  for (const InfoWords* key : it->second) --entries_.at(*key).window_pins;
  pending_.erase(it);
}

void InfoCache::graph_release(GraphId graph) {
  std::lock_guard lock(mutex_);
  auto it = committed_.find(graph);
  if (it == committed_.end()) return;
  for (const InfoWords* key : it->second) --entries_.at(*key).graph_refs;
  committed_.erase(it);
}

std::vector<driver::DevicePtr> InfoCache::clear_unpinned() {
  std::lock_guard lock(mutex_);
  std::vector<driver::DevicePtr> released;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.pinned()) {
      ++it;
      continue;
    }
    released.push_back(it->second.ptr);
    lru_.erase(it->second.lru);
    it = entries_.erase(it);
  }
  return released;
}

std::vector<driver::DevicePtr> InfoCache::release_all() {
  std::lock_guard lock(mutex_);
  std::vector<driver::DevicePtr> released;
  for (auto& [words, entry] : entries_) released.push_back(entry.ptr);
  entries_.clear();
  lru_.clear();
  pending_.clear();
  warm_.clear();
  warm_held_ = 0;
  committed_.clear();
  private_.clear();  // memory nodes of recordings, not driver allocations
  return released;
}

std::set<InfoWords> InfoCache::private_only_locked() const {
  std::set<InfoWords> words;
  for (const auto& [window, own] : private_)
    for (const auto& [key, ptr] : own)
      if (!entries_.count(key)) words.insert(key);
  return words;
}

std::size_t InfoCache::entries() const {
  std::lock_guard lock(mutex_);
  return entries_.size() + private_only_locked().size();
}

std::size_t InfoCache::pinned() const {
  std::lock_guard lock(mutex_);
  // A private entry is pinned by its window, also when the same words are shared unpinned.
  std::set<InfoWords> words;
  for (const auto& [key, entry] : entries_)
    if (entry.held()) words.insert(key);
  for (const auto& [window, own] : private_)
    for (const auto& [key, ptr] : own) words.insert(key);
  return words.size();
}

}  // namespace lifecore::runtime
