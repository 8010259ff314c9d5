#include "lifecore/sequence/request_index.hpp"

#include <functional>

#include "lifecore/sequence/backing.hpp"

namespace lifecore::sequence {

std::uint64_t RequestIndex::hash(std::string_view request_id) noexcept {
  return std::hash<std::string_view>{}(request_id);
}

const SequenceBacking* RequestIndex::find(std::string_view request_id, std::uint64_t h) const noexcept {
  if (slots_.empty()) return nullptr;
  for (std::size_t i = h & mask();; i = (i + 1) & mask()) {
    const Slot& slot = slots_[i];
    if (!slot.backing) return nullptr;
    if (slot.hash == h && slot.backing->request_id() == request_id) return slot.backing;
  }
}

bool RequestIndex::insert(const SequenceBacking* backing, std::uint64_t h) {
  if (find(backing->request_id(), h)) return false;
  // At most three quarters full: probe runs stay a few slots (an admission's miss reads about
  // eight, two cache lines), every probe ends at an empty slot, and a live sequence costs
  // 21-43 bytes of table rather than 32-64.
  if ((size_ + 1) * 4 > slots_.size() * 3) rehash(slots_.empty() ? min_slots : slots_.size() * 2);
  std::size_t i = h & mask();
  while (slots_[i].backing) i = (i + 1) & mask();
  slots_[i] = {h, backing};
  ++size_;
  return true;
}

bool RequestIndex::erase(const SequenceBacking* backing, std::uint64_t h) noexcept {
  if (slots_.empty()) return false;
  std::size_t i = h & mask();
  while (slots_[i].backing != backing) {
    if (!slots_[i].backing) return false;
    i = (i + 1) & mask();
  }
  // Backward shift: each later entry of the run that may sit earlier moves into the hole,
  // so no probe ever stops short of an entry (no tombstones).
  for (std::size_t j = (i + 1) & mask(); slots_[j].backing; j = (j + 1) & mask()) {
    const std::size_t home = slots_[j].hash & mask();
    // The entry at j may move to i unless its home lies cyclically in (i, j].
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    slots_[i] = slots_[j];
    i = j;
  }
  slots_[i] = Slot{};
  --size_;
  // Below an eighth full, half the slots: a quarter full after, so it takes a growth of three
  // times the entries to double again (no resizing back and forth at one size).
  if (slots_.size() > min_slots && size_ * 8 < slots_.size()) {
    try {
      rehash(slots_.size() / 2);
    } catch (...) {  // no memory for the smaller table: the larger one is still right
    }
  }
  return true;
}

void RequestIndex::rehash(std::size_t count) {
  std::vector<Slot> next(count);  // throws: nothing changed
  const std::size_t next_mask = next.size() - 1;
  for (const Slot& slot : slots_) {
    if (!slot.backing) continue;
    std::size_t i = slot.hash & next_mask;
    while (next[i].backing) i = (i + 1) & next_mask;
    next[i] = slot;
  }
  slots_.swap(next);
}

}  // namespace lifecore::sequence
