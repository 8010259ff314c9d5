// The metadata info cache: small arrays of 32-bit words (sizes, strides, scalars) that kernels
// read from device memory, keyed by the words alone so identical metadata shares one buffer.
//  - NORMAL: only entries up to 2048 bytes are cached, at most 4096 of them, least recently
//    used evicted first; a larger array gets a transient buffer the caller releases after use.
//  - CAPTURE (a window is prepared or recording): any size, and every hit or insert is pinned
//    for the window, so a recorded launch never loses its buffer. In either mode, past the count,
//    the least recently used unpinned entries are evicted (a pinned one never is). commit moves
//    a window's pins to its graph, discard drops them, graph_release undoes a commit (pins are
//    reference-counted: several graphs may share an entry).
//  - An entry first made inside a hardware recording is a memory node of that recording: its
//    pointer has memory behind it only while the graph would run, never for an eager launch. It
//    stays private to its window (no other stream or window ever gets it) and leaves the cache
//    when the window ends, sealed or not (a sealed graph owns its memory nodes).
// Thread-safe. Buffers are made by a caller-supplied upload (which knows the stream and
// whether it is recording) and returned to the caller for release, never freed in here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "lifecore/runtime/stream_capture_state.hpp"
#include "lifecore/runtime/memory_manager.hpp"
#include "lifecore/driver/driver.hpp"

namespace lifecore::runtime {

using GraphId = std::uint64_t;
using InfoWords = std::vector<std::uint32_t>;

class InfoCache {
 public:
  static constexpr std::size_t normal_max_entry_bytes = 2048;
  static constexpr std::size_t normal_max_entries = 4096;

  // Makes a device buffer holding `words` or throws lifecore::Error. The words must be on the
  // device when it returns (except for a provisional entry): a hit from any stream uses the
  // buffer at once, with nothing ordering it after the inserting stream's copy.
  using Upload = std::function<driver::DevicePtr(const InfoWords& words)>;

  struct Lookup {
    driver::DevicePtr ptr = 0;
    bool transient = false;                   // not cached: release after the launch's fence
    std::vector<driver::DevicePtr> evicted;   // release after the stream's next fence
  };

  explicit InfoCache(std::size_t max_entries = normal_max_entries,
                     std::size_t max_entry_bytes = normal_max_entry_bytes);

  // `window` names the pins in CAPTURE mode (ignored in NORMAL). Nothing changes if upload throws.
  // `provisional`: a miss now creates an entry private to `window` (its buffer is a node of the
  // recording); it is visible to that window only and leaves the cache when the window ends.
  Lookup get(const InfoWords& words, CacheMode mode, WindowId window, const Upload& upload,
             bool provisional = false);
  // A capture window opens (graph_prepare). The entries over the count go first (returned for
  // the caller to release in its stream's order: a program that only captures stays within
  // the count), then the entries left, the most recently used up to the count, are pinned for
  // the window until it ends: the capture mode caches every buffer and invalidates none, so the
  // window finds warm what was cached before it. Those are on top of the count, which eviction
  // keeps for the rest meanwhile: an open window (a capture whose thread is gone stays open for
  // ever) or windows that overlap for ever add at most their warm entries to it.
  std::vector<driver::DevicePtr> open_window(WindowId window);
  // The window is gone without commit or discard (its device closed or was lost): its warm
  // pins go. Nothing if they went already.
  void close_window(WindowId window) noexcept;
  // Moves the window's pins to the graph; the window's private entries leave the cache.
  void commit(WindowId window, GraphId graph);
  // Drops the window's pins (the window was abandoned, refused or aborted) and its private
  // entries.
  void discard(WindowId window);
  // The graph is gone: its pins are released.
  void graph_release(GraphId graph);
  // Removes every unpinned entry; returns their buffers for the caller to release.
  std::vector<driver::DevicePtr> clear_unpinned();
  // Device close: every buffer, pinned or not.
  std::vector<driver::DevicePtr> release_all();

  // Distinct words cached, shared or private to a window (a private entry is always pinned).
  std::size_t entries() const;
  // Those a window or a live graph uses (a recorded launch may read them); not the entries an
  // open window only keeps warm.
  std::size_t pinned() const;

 private:
  struct Entry {
    driver::DevicePtr ptr = 0;
    std::size_t window_pins = 0;  // windows that pinned it and have not committed or discarded
    std::size_t graph_refs = 0;   // live graphs that use it
    std::size_t warm_pins = 0;    // open windows it was cached before
    std::list<const InfoWords*>::iterator lru;
    bool held() const { return window_pins > 0 || graph_refs > 0; }  // a recorded launch may read it
    bool pinned() const { return held() || warm_pins > 0; }          // never evicted
  };
  using Entries = std::map<InfoWords, Entry>;

  void touch_lru_locked(Entry& entry);
  // Over the count, the least recently used entries that nothing pins, `keep` (the entry a
  // lookup hands out) never.
  void evict_locked(std::vector<driver::DevicePtr>* evicted, const InfoWords* keep = nullptr);
  // Hands out `found` (pinned by a capture `window`) and evicts over the count.
  void use_locked(Entries::iterator found, CacheMode mode, WindowId window, Lookup& result);
  // One warm pin fewer on each of `keys`; the window's own list of them, when it ends.
  void unwarm_locked(const std::vector<const InfoWords*>& keys) noexcept;
  void release_warm_locked(WindowId window) noexcept;
  // Words private to some window and not also shared.
  std::set<InfoWords> private_only_locked() const;

  mutable std::mutex mutex_;
  std::size_t max_entries_;
  std::size_t max_entry_bytes_;
  Entries entries_;
  std::list<const InfoWords*> lru_;  // front: most recently used
  std::unordered_map<WindowId, std::set<const InfoWords*>> pending_;
  // Per open capture window, the entries cached before it opened (each warm-pinned once).
  std::unordered_map<WindowId, std::vector<const InfoWords*>> warm_;
  std::size_t warm_held_ = 0;  // entries some open window keeps warm: on top of the count
  std::unordered_map<GraphId, std::vector<const InfoWords*>> committed_;
  // Entries made inside a hardware recording, per window: never in entries_, so a hit from any
  // other stream or window can never be handed a pointer with no memory behind it.
  std::unordered_map<WindowId, std::map<InfoWords, driver::DevicePtr>> private_;
};

}  // namespace lifecore::runtime
