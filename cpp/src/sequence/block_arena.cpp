#include "lifecore/sequence/block_arena.hpp"

#include <algorithm>
#include <iterator>

namespace lifecore::sequence {

void BlockArena::add_blocks(std::uint64_t blocks, const PageExtent* chunk) {
  if (chunk) {
    ArenaChunk made;
    made.first_block = static_cast<std::int32_t>(std::min(blocks_, max_ids - 1));
    made.blocks = blocks;
    made.memory = *chunk;
    chunks_.push_back(made);
  }
  blocks_ += blocks;
}

bool BlockArena::take(std::uint64_t count, std::int32_t* out) {
  if (count > free_blocks()) return false;
  const std::uint64_t reused = std::min<std::uint64_t>(count, free_.size());
  const std::uint64_t fresh = count - reused;
  if (fresh > blocks() - watermark_) return false;  // beyond the int32 ids
  // Room for every id ever handed out, so give_back never allocates; grown by doubling, so a
  // take of fresh ids does not reallocate each time.
  if (fresh > 0 && watermark_ + fresh > free_.capacity())
    free_.reserve(std::max<std::uint64_t>(watermark_ + fresh, 2 * free_.capacity()));
  // The last given back first: the tail of the free list, reversed.
  std::reverse_copy(free_.end() - static_cast<std::ptrdiff_t>(reused), free_.end(), out);
  free_.resize(free_.size() - reused);
  for (std::uint64_t i = 0; i < fresh; ++i) out[reused + i] = static_cast<std::int32_t>(watermark_++);
  live_ += count;
  return true;
}

void BlockArena::give_back(const std::int32_t* ids, std::uint64_t count) noexcept {
  // take reserved room for every id ever handed out: this never allocates.
  free_.insert(free_.end(), std::make_reverse_iterator(ids + count), std::make_reverse_iterator(ids));
  live_ -= std::min(live_, count);
}

std::size_t BlockArena::chunk_of(std::int32_t id) const noexcept {
  // Chunks are few (one per growth) and sorted by first block.
  auto it = std::upper_bound(chunks_.begin(), chunks_.end(), id,
                             [](std::int32_t v, const ArenaChunk& c) { return v < c.first_block; });
  if (it == chunks_.begin()) return chunks_.size();
  const std::size_t index = static_cast<std::size_t>(it - chunks_.begin()) - 1;
  const auto& c = chunks_[index];
  return static_cast<std::uint64_t>(id - c.first_block) < c.blocks ? index : chunks_.size();
}

std::uint64_t BlockArena::address_of(std::int32_t id, std::uint64_t page_bytes) const noexcept {
  const std::size_t index = chunk_of(id);
  if (index == chunks_.size()) return 0;
  const auto& c = chunks_[index];
  if (c.memory.address == 0) return 0;
  return c.memory.address + static_cast<std::uint64_t>(id - c.first_block) * page_bytes;
}

}  // namespace lifecore::sequence
