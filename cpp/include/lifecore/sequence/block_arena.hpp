// The KV pages of one capacity domain as block ids: the arena's chunks (one allocation at
// creation, one more per growth; block ids run on from one chunk to the next) and a LIFO
// free list of int32 ids. Ids never handed out yet are implicit (a watermark), so a domain
// of any size costs nothing until its pages are used. Taking and giving back ids makes no
// allocation call. Not thread-safe: the coordinator's lock guards it.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "lifecore/sequence/page_memory.hpp"

namespace lifecore::sequence {

struct ArenaChunk {
  std::int32_t first_block = 0;
  std::uint64_t blocks = 0;
  PageExtent memory;  // blocks * page_bytes bytes
};

class BlockArena {
 public:
  // Ids are int32: a domain hands out at most this many at once, however large it is.
  static constexpr std::uint64_t max_ids = std::uint64_t{std::numeric_limits<std::int32_t>::max()} + 1;

  // Blocks that have an id: of the blocks that exist (the sum of the chunks' blocks, or
  // floor(capacity / page_bytes)), at most max_ids. A page past them can never be handed out.
  std::uint64_t blocks() const noexcept { return blocks_ < max_ids ? blocks_ : max_ids; }
  std::uint64_t live() const noexcept { return live_; }
  std::uint64_t free_blocks() const noexcept { return blocks() - live_; }
  const std::vector<ArenaChunk>& chunks() const noexcept { return chunks_; }

  // New blocks at the end; `chunk` null on memory without chunks (a chunk of zero blocks).
  void add_blocks(std::uint64_t blocks, const PageExtent* chunk);
  // Writes `count` ids to `out`, the last given back first. False (nothing taken) when fewer
  // are free.
  bool take(std::uint64_t count, std::int32_t* out);
  // Gives `count` ids back, last first, so that the next take hands them out in the order
  // they had.
  void give_back(const std::int32_t* ids, std::uint64_t count) noexcept;
  // The address of block `id` (0 when no chunk holds it).
  std::uint64_t address_of(std::int32_t id, std::uint64_t page_bytes) const noexcept;
  // The index of the chunk that holds `id` (chunks().size() when none).
  std::size_t chunk_of(std::int32_t id) const noexcept;

 private:
  std::vector<std::int32_t> free_;
  std::vector<ArenaChunk> chunks_;
  std::uint64_t blocks_ = 0;
  std::uint64_t watermark_ = 0;  // ids below it were handed out at least once
  std::uint64_t live_ = 0;
};

}  // namespace lifecore::sequence
