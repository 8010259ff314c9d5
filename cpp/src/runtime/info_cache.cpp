#include "runtime/info_cache.hpp"

namespace lifecore::runtime {

InfoCache::InfoCache(std::size_t max_entries, std::size_t max_entry_bytes)
    : max_entries_(max_entries), max_entry_bytes_(max_entry_bytes) {}

void InfoCache::touch_lru_locked(Entry& entry) { lru_.splice(lru_.begin(), lru_, entry.lru); }

void InfoCache::evict_locked(std::vector<vendor::DevicePtr>* evicted) {
  // Oldest first; pinned entries are never evicted (a recorded launch may read them).
  auto it = lru_.end();
  while (entries_.size() > max_entries_ && it != lru_.begin()) {
    --it;
    auto entry = entries_.find(**it);
    if (entry->second.pinned()) continue;
    evicted->push_back(entry->second.ptr);
    it = lru_.erase(it);
    entries_.erase(entry);
  }
}

InfoCache::Lookup InfoCache::get(const InfoWords& words, CacheMode mode, WindowId window, const Upload& upload,
                                 bool provisional) {
  std::lock_guard lock(mutex_);
  Lookup result;
  auto found = entries_.find(words);
  if (found == entries_.end()) {
    const std::size_t bytes = words.size() * sizeof(std::uint32_t);
    if (mode == CacheMode::normal && bytes > max_entry_bytes_) {
      result.ptr = upload(words);
      result.transient = true;
      return result;
    }
    vendor::DevicePtr ptr = upload(words);  // throws: nothing changed
    found = entries_.emplace(words, Entry{}).first;
    found->second.ptr = ptr;
    if (provisional && mode == CacheMode::capture) found->second.provisional_for = window;
    lru_.push_front(&found->first);
    found->second.lru = lru_.begin();
  } else {
    touch_lru_locked(found->second);
  }
  Entry& entry = found->second;
  result.ptr = entry.ptr;
  if (mode == CacheMode::capture) {
    if (pending_[window].insert(&found->first).second) ++entry.window_pins;
  } else {
    evict_locked(&result.evicted);
  }
  return result;
}

void InfoCache::commit(WindowId window, GraphId graph) {
  std::lock_guard lock(mutex_);
  auto it = pending_.find(window);
  if (it == pending_.end()) return;
  auto& held = committed_[graph];
  for (const InfoWords* key : it->second) {
    Entry& entry = entries_.at(*key);
    --entry.window_pins;
    ++entry.graph_refs;
    if (entry.provisional_for == window) entry.provisional_for = 0;  // sealed: it exists now
    held.push_back(key);
  }
  pending_.erase(it);
}

void InfoCache::discard(WindowId window) {
  std::lock_guard lock(mutex_);
  auto it = pending_.find(window);
  if (it == pending_.end()) return;
  std::set<const InfoWords*> keys = std::move(it->second);
  pending_.erase(it);
  for (const InfoWords* key : keys) {
    auto entry = entries_.find(*key);
    --entry->second.window_pins;
    if (entry->second.provisional_for == window) {
      // Its buffer was a node of a recording that was never sealed: it never existed. Another
      // window that hit it meanwhile loses the pin with it (its own seal would fail anyway).
      for (auto& [other, other_keys] : pending_) other_keys.erase(key);
      lru_.erase(entry->second.lru);
      entries_.erase(entry);
    }
  }
}

void InfoCache::graph_release(GraphId graph) {
  std::lock_guard lock(mutex_);
  auto it = committed_.find(graph);
  if (it == committed_.end()) return;
  for (const InfoWords* key : it->second) --entries_.at(*key).graph_refs;
  committed_.erase(it);
}

std::vector<vendor::DevicePtr> InfoCache::clear_unpinned() {
  std::lock_guard lock(mutex_);
  std::vector<vendor::DevicePtr> released;
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

std::vector<vendor::DevicePtr> InfoCache::release_all() {
  std::lock_guard lock(mutex_);
  std::vector<vendor::DevicePtr> released;
  for (auto& [words, entry] : entries_) released.push_back(entry.ptr);
  entries_.clear();
  lru_.clear();
  pending_.clear();
  committed_.clear();
  return released;
}

std::size_t InfoCache::entries() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::size_t InfoCache::pinned() const {
  std::lock_guard lock(mutex_);
  std::size_t count = 0;
  for (const auto& [words, entry] : entries_)
    if (entry.pinned()) ++count;
  return count;
}

}  // namespace lifecore::runtime
