// The metadata info cache without a driver: NORMAL limits and LRU, CAPTURE pins, commit /
// discard / graph release, and cleanup of unpinned entries only.
#include <cstdio>
#include <vector>

#include "lifecore/runtime/info_cache.hpp"
#include "test_support.hpp"

using lifecore::CacheMode;
using lifecore::runtime::InfoCache;
using lifecore::runtime::InfoWords;

namespace {

struct Uploads {
  std::uint64_t next = 0x100;
  int count = 0;
  InfoCache::Upload fn() {
    return [this](const InfoWords&) {
      ++count;
      return next += 0x100;
    };
  }
};

void identical_words_share_one_buffer() {
  Uploads up;
  InfoCache cache;
  auto a = cache.get({1, 2}, CacheMode::normal, 0, up.fn());
  auto b = cache.get({1, 2}, CacheMode::normal, 0, up.fn());
  auto c = cache.get({1, 3}, CacheMode::normal, 0, up.fn());
  CHECK(a.ptr == b.ptr && a.ptr != c.ptr && up.count == 2 && cache.entries() == 2);
  CHECK(!a.transient && cache.pinned() == 0);
}

void normal_mode_limits_size_and_count() {
  Uploads up;
  InfoCache cache(3, 16);
  auto big = cache.get(InfoWords(5, 7), CacheMode::normal, 0, up.fn());  // 20 bytes > 16
  CHECK(big.transient && cache.entries() == 0);
  for (std::uint32_t i = 0; i < 3; ++i) cache.get({i}, CacheMode::normal, 0, up.fn());
  cache.get({0}, CacheMode::normal, 0, up.fn());  // 0 becomes most recent
  auto evicting = cache.get({9}, CacheMode::normal, 0, up.fn());
  CHECK(cache.entries() == 3 && evicting.evicted.size() == 1);
  int before = up.count;
  cache.get({0}, CacheMode::normal, 0, up.fn());  // still cached
  CHECK(up.count == before);
  cache.get({1}, CacheMode::normal, 0, up.fn());  // 1 was least recent: evicted, re-uploaded
  CHECK(up.count == before + 1);
}

void capture_mode_pins_commit_and_release() {
  Uploads up;
  InfoCache cache(2, 16);
  auto big = cache.get(InfoWords(100, 1), CacheMode::capture, 7, up.fn());  // any size
  CHECK(!big.transient && cache.entries() == 1 && cache.pinned() == 1);
  for (std::uint32_t i = 0; i < 4; ++i) cache.get({i}, CacheMode::capture, 7, up.fn());  // all pinned: kept
  CHECK(cache.entries() == 5 && cache.pinned() == 5);
  cache.commit(7, 42);
  CHECK(cache.pinned() == 5);
  // A second graph shares one entry: refcounted.
  cache.get({0}, CacheMode::capture, 8, up.fn());
  cache.commit(8, 43);
  auto normal = cache.get({50}, CacheMode::normal, 0, up.fn());  // pinned entries are never evicted
  CHECK(cache.pinned() == 5);
  cache.graph_release(42);
  CHECK(cache.pinned() == 1);  // {0} still held by graph 43
  auto cleared = cache.clear_unpinned();
  CHECK(cache.entries() == 1 && !cleared.empty());
  cache.graph_release(43);
  CHECK(cache.pinned() == 0);
  CHECK(cache.clear_unpinned().size() == 1 && cache.entries() == 0);
  (void)normal;
}

// A program that only captures (each graph with new words, then destroyed) keeps the cache at
// its count: the unpinned entries of destroyed graphs are evicted by a later capture's lookup.
void captures_alone_keep_the_cache_at_its_count() {
  Uploads up;
  InfoCache cache(4, 16);
  std::size_t evicted = 0;
  for (std::uint32_t i = 0; i < 100; ++i) {
    auto lookup = cache.get({i, i}, CacheMode::capture, 100 + i, up.fn());
    evicted += lookup.evicted.size();
    cache.commit(100 + i, 1000 + i);
    CHECK(cache.entries() <= 4 && cache.pinned() == 1);
    cache.graph_release(1000 + i);
  }
  CHECK(cache.entries() == 4 && evicted == 96 && cache.pinned() == 0);
  // A pinned entry is never the one evicted, though it is the least recently used.
  const auto pinned = cache.get({500}, CacheMode::capture, 1, up.fn()).ptr;
  for (std::uint32_t i = 0; i < 10; ++i) cache.get({600 + i}, CacheMode::normal, 0, up.fn());
  const int uploads = up.count;
  CHECK(cache.pinned() == 1 && cache.get({500}, CacheMode::capture, 1, up.fn()).ptr == pinned && up.count == uploads);
  cache.discard(1);
}

void discard_drops_a_windows_pins() {
  Uploads up;
  InfoCache cache;
  cache.get({1}, CacheMode::capture, 3, up.fn());
  cache.get({1}, CacheMode::capture, 3, up.fn());  // one pin per window, however many hits
  cache.get({1}, CacheMode::capture, 4, up.fn());
  CHECK(cache.pinned() == 1);
  cache.discard(3);
  CHECK(cache.pinned() == 1);  // window 4 still holds it
  cache.discard(4);
  CHECK(cache.pinned() == 0 && cache.entries() == 1);
  cache.commit(99, 1);  // unknown window: nothing happens
  cache.graph_release(12345);
  CHECK(cache.pinned() == 0);
}

void failed_upload_changes_nothing() {
  InfoCache cache;
  bool threw = false;
  try {
    cache.get({1}, CacheMode::capture, 1, [](const InfoWords&) -> std::uint64_t { throw 1; });
  } catch (int) {
    threw = true;
  }
  CHECK(threw && cache.entries() == 0 && cache.pinned() == 0);
}

void provisional_entries_vanish_with_a_discarded_window() {
  Uploads up;
  InfoCache cache;
  cache.get({1}, CacheMode::capture, 5, up.fn(), /*provisional=*/true);
  cache.get({2}, CacheMode::capture, 5, up.fn(), /*provisional=*/false);
  CHECK(cache.entries() == 2);
  cache.discard(5);
  CHECK(cache.entries() == 1);  // only the real upload stays
  int before = up.count;
  cache.get({1}, CacheMode::normal, 0, up.fn());
  CHECK(up.count == before + 1);  // uploaded again
  cache.get({3}, CacheMode::capture, 6, up.fn(), true);
  CHECK(cache.entries() == 3 && cache.pinned() == 1);
  cache.commit(6, 60);
  CHECK(cache.entries() == 2);  // the graph owns its memory node: it is never shared
  cache.graph_release(60);
  CHECK(cache.entries() == 2);
}

void provisional_entries_are_private_to_their_window() {
  Uploads up;
  InfoCache cache;
  auto recorded = cache.get({7}, CacheMode::capture, 5, up.fn(), /*provisional=*/true);
  CHECK(up.count == 1);
  // The same window reuses its own node.
  CHECK(cache.get({7}, CacheMode::capture, 5, up.fn(), true).ptr == recorded.ptr && up.count == 1);
  // Any other stream (eager) or window gets a buffer of its own, never the node.
  auto eager = cache.get({7}, CacheMode::normal, 0, up.fn());
  CHECK(up.count == 2 && eager.ptr != recorded.ptr);
  auto other = cache.get({7}, CacheMode::capture, 6, up.fn(), true);
  CHECK(up.count == 2 && other.ptr == eager.ptr);  // shared now: a hit, no new node
  CHECK(cache.entries() == 1 && cache.pinned() == 1);
  cache.discard(5);
  CHECK(cache.entries() == 1);
  CHECK(cache.get({7}, CacheMode::normal, 0, up.fn()).ptr == eager.ptr);
  cache.discard(6);
  CHECK(cache.pinned() == 0);
}

}  // namespace

int main() {
  captures_alone_keep_the_cache_at_its_count();
  provisional_entries_vanish_with_a_discarded_window();
  provisional_entries_are_private_to_their_window();
  identical_words_share_one_buffer();
  normal_mode_limits_size_and_count();
  capture_mode_pins_commit_and_release();
  discard_drops_a_windows_pins();
  failed_upload_changes_nothing();
  return lifecore::test_support::finish("runtime_info_cache_test");
}
