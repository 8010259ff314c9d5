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

// Where one row of a table goes. A row of a table the caller owns comes with `saved`: it is
// written only where it differs (in a decode batch most rows already hold their ids), first
// copied to `saved`, and `wrote` says so. A row of a new table is simply written.
struct TableRowTarget {
  std::int32_t* row = nullptr;
  std::size_t width = 0;
  std::int32_t pad = 0;
  std::int32_t* saved = nullptr;
  bool wrote = false;
};
// Puts ids[0, pages) then `pad` up to the width in target.row (pages <= width).
void write_table_row_ids(const std::int32_t* ids, std::uint64_t pages, TableRowTarget& target) noexcept;

// Writes rows.size() * width ids to `out` (the caller checked the product), a row at a time
// under its own lock. A refused row (a finalized frame, a closed session, a sequence of another
// coordinator or not in the domain, more blocks than `width`) raises an error naming the row;
// with `in_place` (a table the caller owns) rows are written only where they differ, and the
// rows already written are put back before the error, so the table is left as it was.
// `domain` empty: the coordinator's first domain.
void build_block_table(const AdmissionCoordinator& coordinator, const std::vector<BlockTableRow>& rows,
                       std::optional<std::uint32_t> domain, std::size_t width, std::int32_t pad, std::int32_t* out,
                       bool in_place = false);

}  // namespace lifecore::sequence
