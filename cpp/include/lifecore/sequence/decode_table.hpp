// A persistent block table for a decode loop: a fixed [rows, width] int32 table whose row r
// shows the block ids of the sequence last given for row r, padded. An update writes only
// what changed since the row was last written (the new ids of a sequence that grew; a whole
// row when its sequence changed), so a decode iteration costs O(rows + new blocks), not
// O(total blocks) as build_block_table does. A row whose session still has the table stamp
// the row was written (or checked) with costs one atomic load: no lock, no reference count.
//
// Per row it keeps which sequence (its authority, never a reference: a row holds no capacity)
// and how many ids it wrote; everything past them is pad. Nobody else may write the table.
// Nor does it hold its coordinator: a table kept after the coordinator and its sequences were
// dropped keeps neither the arena's memory nor the coordinator's waiters from closing.
// Not thread-safe: one caller at a time (the binding's lock, or the caller's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lifecore/sequence/capacity.hpp"
#include "lifecore/sequence/session.hpp"

namespace lifecore::sequence {

class DecodeTable {
 public:
  // `data` holds rows * width int32 and outlives this table; it is filled with pad now.
  DecodeTable(std::shared_ptr<const AdmissionCoordinator> coordinator, std::uint32_t domain, std::size_t rows,
              std::size_t width, std::int32_t pad, std::int32_t* data);

  std::size_t rows() const noexcept { return rows_.size(); }
  std::size_t width() const noexcept { return width_; }
  std::int32_t pad() const noexcept { return pad_; }
  std::uint32_t domain() const noexcept { return domain_; }
  const std::int32_t* data() const noexcept { return data_; }

  // Row r shows sessions[r] (null: pad), rows past sessions.size() pad. Checks every row first
  // (more sessions than rows, a closed session, one of another coordinator or not in the
  // domain, more blocks than width: an error naming the row, and nothing written), then
  // writes what changed.
  void update(const std::vector<const SequenceSession*>& sessions) { update(sessions.data(), sessions.size()); }
  void update(const SequenceSession* const* sessions, std::size_t count);
  // Row `row` shows `session`, the same checks; the other rows are left as they are.
  void assign(std::size_t row, const SequenceSession& session);
  // Row `row` back to pad (it shows no sequence).
  void clear(std::size_t row);
  void clear_all() noexcept;
  // step_all(sessions, tokens, outcomes), then update(sessions): a decode iteration's
  // bookkeeping and its table in one call. Each row is checked before it steps; a row that
  // cannot step or could not be written (another coordinator's, not in the domain, more
  // blocks than width once stepped) stops the batch: the rows before it stepped and are
  // written, it did not, and the other rows are left as they were.
  void step(const std::vector<SequenceSession*>& sessions, const std::int64_t* tokens, BackingOutcome* outcomes);

  // Host bytes a table keeps per row beside its int32 entries (its row record and a pending
  // write), for a caller that bounds a table by the host's memory before making it.
  static constexpr std::size_t bookkeeping_bytes_per_row() noexcept { return sizeof(Row) + sizeof(Pending); }

  // Int32 values the last update / assign / clear wrote (ids and pad), for a caller that
  // mirrors the table elsewhere (0: nothing changed) and for tests.
  std::uint64_t last_written() const noexcept { return last_written_; }
  // The rows the last call wrote to, first to one past the last (empty when it wrote nothing):
  // what a mirror elsewhere copies.
  std::size_t first_row_written() const noexcept { return first_row_written_; }
  std::size_t end_row_written() const noexcept { return end_row_written_; }
  // A call begins: nothing written yet (each call begins so too; a caller that refuses one
  // before it reaches the table calls this first, so last_written never shows an older call).
  void begin_call() noexcept { begin_writes(); }

 private:
  struct Row {
    Authority sequence;  // valid while assigned
    std::uint64_t written = 0;
    std::uint64_t stamp = 0;  // the session's table stamp the row is current with (0: check it)
    bool assigned = false;
  };
  struct Pending {
    std::size_t row = 0;
    SequenceSession::TableSource source;  // source.backing null: nothing to write
  };
  // The sequence row r shows; unassigned: Authority{}, which names no sequence (coordinator
  // ids start at 1).
  Authority known(std::size_t r) const noexcept;
  // Throws naming row r and why it cannot be written (`answer`), `after` saying what happened.
  [[noreturn]] void refuse_row(const char* call, std::size_t r, const SequenceSession::TableRowAnswer& answer,
                               const char* after) const;
  // Checks a resolved row (throws naming it, `after` saying what happened); false when it
  // needs no write.
  bool check(const char* call, std::size_t r, const Pending& p, const char* after) const;
  // Reads and checks one row (throws naming it); false when it needs no write. The caller holds
  // the coordinator (live_coordinator).
  bool resolve(const char* call, std::size_t r, const SequenceSession& session, Pending& out) const;
  void write(const Pending& p);
  void clear_row(std::size_t r) noexcept;
  // Writes the pending rows, then pads the rows that show no session now.
  void finish(const SequenceSession* const* sessions, std::size_t count);

  // The coordinator while anything else holds it; a call that reads a session locks it
  // (live_coordinator), and only then compares a session's coordinator with `identity_`.
  std::shared_ptr<const AdmissionCoordinator> live_coordinator(const char* call) const;
  std::weak_ptr<const AdmissionCoordinator> coordinator_;
  const AdmissionCoordinator* identity_;
  std::string domain_name_;
  std::uint32_t tokens_per_page_;
  std::uint32_t domain_;
  std::size_t width_;
  std::int32_t pad_;
  std::int32_t* data_;
  std::vector<Row> rows_;
  // One past the last assigned row: an update clears the rows past its batch up to here, so
  // its cost follows the rows in use, not a table sized for every sequence the engine allows.
  std::size_t assigned_end_ = 0;
  std::vector<Pending> pending_;  // reused from call to call
  std::uint64_t last_written_ = 0;
  std::size_t first_row_written_ = 0;
  std::size_t end_row_written_ = 0;
  void begin_writes() noexcept {
    last_written_ = 0;
    first_row_written_ = end_row_written_ = 0;
  }
  void note_written(std::size_t row, std::uint64_t values) noexcept {
    if (values == 0) return;
    if (last_written_ == 0 || row < first_row_written_) first_row_written_ = row;
    if (last_written_ == 0 || row + 1 > end_row_written_) end_row_written_ = row + 1;
    last_written_ += values;
  }
};

}  // namespace lifecore::sequence
