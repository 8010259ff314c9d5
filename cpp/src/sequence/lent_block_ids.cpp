#include "lifecore/sequence/lent_block_ids.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "common/address_range.hpp"
#include "lifecore/error.hpp"

namespace lifecore::sequence::lent_block_ids {
namespace {

// Ranges by first byte; one storage may be lent as arrays of several lengths (a sequence that
// grew between two reads), each counted. `longest` bounds how far before a byte a range
// covering it can start, so a lookup reads only the ranges that could reach it.
struct Lent {
  std::mutex mutex;
  std::map<std::uintptr_t, std::map<std::uintptr_t, std::size_t>> ranges;  // first -> end -> count
  std::uintptr_t longest = 0;
  // ranges.size(), read without the lock by the writers' check (every foreign tensor a launch,
  // copy or fill takes asks): no lock while nothing is lent.
  std::atomic<std::size_t> count{0};
  void counted() { count.store(ranges.size(), std::memory_order_release); }
};

Lent& lent() {
  static Lent* table = new Lent;  // never destroyed: a capsule may be released after static destruction
  return *table;
}

}  // namespace

void lend(const std::int32_t* data, std::size_t count) {
  if (count == 0) return;
  const auto first = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t bytes = count * sizeof(std::int32_t);  // storage that exists: no wrap
  Lent& table = lent();
  std::lock_guard<std::mutex> lock(table.mutex);
  ++table.ranges[first][first + bytes];
  table.longest = std::max(table.longest, bytes);
  table.counted();
}

void give_back(const std::int32_t* data, std::size_t count) noexcept {
  if (count == 0) return;
  const auto first = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t end = first + count * sizeof(std::int32_t);
  Lent& table = lent();
  std::lock_guard<std::mutex> lock(table.mutex);
  const auto at = table.ranges.find(first);
  if (at == table.ranges.end()) return;
  const auto ends = at->second.find(end);
  if (ends == at->second.end()) return;
  if (--ends->second == 0) at->second.erase(ends);
  if (at->second.empty()) table.ranges.erase(at);
  table.counted();
}

bool overlaps(const void* data, std::size_t bytes) {
  if (bytes == 0) return false;
  const auto first = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t last = bytes - 1 > UINTPTR_MAX - first ? UINTPTR_MAX : first + (bytes - 1);
  Lent& table = lent();
  if (table.count.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(table.mutex);
  const std::uintptr_t from = first > table.longest ? first - table.longest : 0;
  for (auto it = table.ranges.lower_bound(from); it != table.ranges.end() && it->first <= last; ++it) {
    const std::uintptr_t end = it->second.rbegin()->first;  // the longest lent from here
    if (shares_a_byte(it->first, end - it->first, first, bytes)) return true;
  }
  return false;
}

void refuse(const void* data, std::size_t bytes, const char* call, const char* argument) {
  if (!overlaps(data, bytes)) return;
  raise(ErrorKind::InvalidArgument,
        std::string(call) + ": argument '" + argument + "' is a sequence's block-id storage (a view of BackingSnapshot.block_ids "
        "made writable, as torch.from_dlpack makes it): writing there would change the "
        "ids the sequence holds, and its release would give back blocks another sequence holds (nothing was "
        "written)");
}

}  // namespace lifecore::sequence::lent_block_ids
