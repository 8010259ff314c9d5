// The block table of a batch: row r holds the block ids of row r's sequence in one domain,
// padded to `width`, as paged-attention kernels read it. Built in one pass, O(total blocks).
// A row comes from a live frame (its snapshot's ids) or from an open session (its current
// backing, which the session holds): ids are read only from something that holds them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace lifecore::sequence {

class AdmissionCoordinator;
class FrameHold;
class SequenceSession;

struct BlockTableRow {
  const FrameHold* frame = nullptr;         // exactly one of the two
  const SequenceSession* session = nullptr;
};

// Checks every row first (a finalized frame, a closed session, a sequence of another
// coordinator or not in the domain, more blocks than `width`: an error naming the row, and
// nothing written), then writes rows.size() * width ids to `out`. `domain` empty: the
// coordinator's first domain.
void build_block_table(const AdmissionCoordinator& coordinator, const std::vector<BlockTableRow>& rows,
                       std::optional<std::uint32_t> domain, std::size_t width, std::int32_t pad, std::int32_t* out);

}  // namespace lifecore::sequence
