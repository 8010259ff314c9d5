// The request ids of a coordinator's live sequences, each naming its backing (the backing
// holds the id). An open-addressing table of (hash, backing) slots: a lookup reads one run of
// adjacent slots and compares an id only on a full hash match, and an entry costs no
// allocation of its own, so admitting or releasing among many live sequences touches little
// memory. A release hashes its id again to find its entry (no hash kept per sequence).
// Not thread-safe: the coordinator's lock guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace lifecore::sequence {

class SequenceBacking;

class RequestIndex {
 public:
  static std::uint64_t hash(std::string_view request_id) noexcept;

  // Adds `backing` under its request id (of hash `h`); false, nothing changed, when that id
  // is there already. Growing may throw (nothing changed then either).
  bool insert(const SequenceBacking* backing, std::uint64_t h);
  // Removes `backing`'s entry (found by hash and identity); false when it has none. A table
  // left less than an eighth full halves (when it can allocate), so a burst of live
  // sequences does not keep its peak's memory, nor make a walk over the index cost the peak.
  bool erase(const SequenceBacking* backing, std::uint64_t h) noexcept;
  // The backing admitted under `request_id` (of hash `h`), or null.
  const SequenceBacking* find(std::string_view request_id, std::uint64_t h) const noexcept;

  std::size_t size() const noexcept { return size_; }
  std::size_t slot_count() const noexcept { return slots_.size(); }
  template <class F>
  void for_each(F&& f) const {
    for (const auto& slot : slots_)
      if (slot.backing) f(*slot.backing);
  }

 private:
  struct Slot {
    std::uint64_t hash = 0;
    const SequenceBacking* backing = nullptr;  // null: empty
  };
  static constexpr std::size_t min_slots = 16;
  std::size_t mask() const noexcept { return slots_.size() - 1; }
  // Moves every entry into a table of `count` slots (a power of two above size_ / 0.75);
  // throws when it cannot allocate, nothing changed.
  void rehash(std::size_t count);

  std::vector<Slot> slots_;  // a power of two of them (or none), at most three quarters full
  std::size_t size_ = 0;
};

}  // namespace lifecore::sequence
