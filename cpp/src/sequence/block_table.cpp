#include "lifecore/sequence/block_table.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "lifecore/error.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/session.hpp"

namespace lifecore::sequence {
namespace {

[[noreturn]] void refuse(ErrorKind kind, std::size_t row, const std::string& why) {
  raise(kind, "block_table: row " + std::to_string(row) + ": " + why + " (nothing was written)");
}

// A row the sequence cannot fill, whether it came from a session or a frame.
[[noreturn]] void refuse_row(const AdmissionCoordinator& coordinator, std::uint32_t d, std::size_t r,
                             SequenceSession::TableRow why, std::uint64_t pages, std::size_t width) {
  switch (why) {
    case SequenceSession::TableRow::foreign:
      refuse(ErrorKind::StaleAuthority, r, "the sequence belongs to another coordinator (foreign)");
    case SequenceSession::TableRow::not_in_domain:
      refuse(ErrorKind::InvalidArgument, r, "the sequence holds no pages in domain '" + coordinator.domain_name(d) + "'");
    default:
      refuse(ErrorKind::InvalidArgument, r, std::to_string(pages) + " blocks do not fit in width " + std::to_string(width));
  }
}

// A frame's row: its snapshot's ids, read from the backing the live frame pins.
void write_frame_row(const AdmissionCoordinator& coordinator, const FrameHold& frame, std::uint32_t d,
                     std::size_t r, TableRowTarget& target) {
  if (frame.finalized() || !frame.snapshot())
    refuse(ErrorKind::SessionState, r, "the frame is finalized (its snapshot was let go)");
  const auto& snapshot = frame.snapshot();
  const std::uint64_t pages = snapshot->pages();
  using Why = SequenceSession::TableRow;
  if (!snapshot->taken_by(coordinator)) refuse_row(coordinator, d, r, Why::foreign, pages, target.width);
  const auto& domains = snapshot->domains();
  const auto it = std::find(domains.begin(), domains.end(), d);
  if (it == domains.end()) refuse_row(coordinator, d, r, Why::not_in_domain, pages, target.width);
  if (pages > target.width) refuse_row(coordinator, d, r, Why::too_wide, pages, target.width);
  const auto backing = snapshot->backing();
  if (!backing) refuse(ErrorKind::SessionState, r, "the backing was released");
  backing->write_table_row(static_cast<std::size_t>(it - domains.begin()), pages, target);
}

// Where a table written in place keeps the rows it changed until every row is written.
// Reused by the thread up to a size; a larger table gets its own.
constexpr std::size_t kept_scratch_entries = std::size_t{1} << 20;

// Whether a row already holds `count` ids and then the pad: one pass over the row, no early
// exit, so it vectorizes (built for AVX2 too where the loader can pick it). Two memcmp calls,
// the second against a block of zeros, read three streams, and a table's time then depended on
// where that block and the table lay: 7 or 15 us for the same 256 x 128 table, by process.
// Not under ThreadSanitizer: the loader runs the clones' resolver before the sanitizer's
// runtime is up, and the instrumented resolver crashes the program at load.
#if defined(__x86_64__) && defined(__GNUC__) && defined(__GLIBC__) && !defined(__SANITIZE_THREAD__)
#define LIFECORE_ROW_CHECK_CLONES 1
#else
#define LIFECORE_ROW_CHECK_CLONES 0
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#undef LIFECORE_ROW_CHECK_CLONES
#define LIFECORE_ROW_CHECK_CLONES 0
#endif
#endif
#if LIFECORE_ROW_CHECK_CLONES
[[gnu::target_clones("avx2", "default")]]
#endif
bool row_holds(const std::int32_t* row, const std::int32_t* ids, std::size_t count, std::size_t width,
               std::int32_t pad) noexcept {
  std::uint32_t differs = 0;
  for (std::size_t i = 0; i < count; ++i) differs |= static_cast<std::uint32_t>(row[i] ^ ids[i]);
  for (std::size_t i = count; i < width; ++i) differs |= static_cast<std::uint32_t>(row[i] ^ pad);
  return differs == 0;
}

}  // namespace

void write_table_row_ids(const std::int32_t* ids, std::uint64_t pages, TableRowTarget& target) noexcept {
  std::int32_t* row = target.row;
  const std::size_t count = static_cast<std::size_t>(pages);  // <= width
  if (target.saved && row_holds(row, ids, count, target.width, target.pad))
    return;  // the row already holds exactly this
  if (target.saved) std::memcpy(target.saved, row, target.width * sizeof(std::int32_t));  // to put back
  if (count != 0) std::memcpy(row, ids, count * sizeof(std::int32_t));
  std::fill(row + count, row + target.width, target.pad);
  target.wrote = true;
}

void build_block_table(const AdmissionCoordinator& coordinator, const std::vector<BlockTableRow>& rows,
                       std::optional<std::uint32_t> domain, std::size_t width, std::int32_t pad, std::int32_t* out,
                       bool in_place) {
  const std::uint32_t d = domain.value_or(0);
  if (d >= coordinator.domain_count()) raise(ErrorKind::InvalidArgument, "block_table: unknown domain index");
  // One pass, a row at a time under its own lock. A refused row puts back the rows changed
  // before it.
  thread_local std::vector<std::int32_t> kept_scratch;
  std::vector<std::int32_t> own_scratch;
  std::int32_t* saved = nullptr;
  if (in_place && !rows.empty() && width != 0) {
    const std::size_t count = rows.size() * width;  // the caller checked the product
    auto& scratch = count <= kept_scratch_entries ? kept_scratch : own_scratch;
    if (scratch.size() < count) scratch.resize(count);
    saved = scratch.data();
  }
  std::vector<std::size_t> changed;  // rows written in place, to put back on a refusal
  if (saved) changed.reserve(rows.size());  // never allocates between a write and its record
  std::size_t r = 0;
  try {
    for (; r < rows.size(); ++r) {
      TableRowTarget target{out + r * width, width, pad, saved ? saved + r * width : nullptr};
      if (rows[r].session) {
        SequenceSession::TableRowAnswer answer;
        try {
          answer = rows[r].session->write_table_row(coordinator, d, target);
        } catch (const Error& e) {  // a closed handle: named with its row
          refuse(e.kind(), r, e.message());
        }
        if (answer.answer != SequenceSession::TableRow::written)
          refuse_row(coordinator, d, r, answer.answer, answer.pages, width);
      } else {
        write_frame_row(coordinator, *rows[r].frame, d, r, target);
      }
      if (target.wrote && saved) changed.push_back(r);  // a new table needs nothing put back
    }
  } catch (...) {
    for (const std::size_t w : changed)
      std::memcpy(out + w * width, saved + w * width, width * sizeof(std::int32_t));
    throw;
  }
}

}  // namespace lifecore::sequence
