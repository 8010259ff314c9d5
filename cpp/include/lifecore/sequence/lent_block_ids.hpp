// The block-id storage lent to Python as read-only arrays (BackingSnapshot.block_ids, zero
// copy). A consumer can drop the read-only flag (torch.from_dlpack makes a writable tensor of
// it, and NumPy one of that), so every host write lifecore makes into a caller's array (a
// block table's `out`, a decode table's memory, read_into's target) first checks that the
// array is none of this storage: a write there would change the ids a live sequence holds,
// and its release would then give back blocks another sequence holds.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lifecore::sequence::lent_block_ids {

// [data, data + count) is lent until the matching give_back (a lending per array made). Out
// of memory: std::bad_alloc, nothing lent.
void lend(const std::int32_t* data, std::size_t count);
void give_back(const std::int32_t* data, std::size_t count) noexcept;

// Whether any byte of [data, data + bytes) is lent block-id storage.
bool overlaps(const void* data, std::size_t bytes);

// InvalidArgumentError "<call>: argument '<argument>' is the block-id storage of a live
// sequence ..." when overlaps(data, bytes); nothing written.
void refuse(const void* data, std::size_t bytes, const char* call, const char* argument);

}  // namespace lifecore::sequence::lent_block_ids
