#include "lifecore/sequence/decode_table.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "sequence/row_error.hpp"

namespace lifecore::sequence {
namespace {

constexpr const char* nothing_written = "nothing was written";
// A refusal at a row after the rows before it stepped: the table shows what they hold now.
constexpr const char* stepped_before = "the rows before it stepped and the table shows them";
constexpr const char* none_stepped = "no row stepped, nothing was written";  // row 0's stepped_before
// A row that changed between its check and its step (another thread's extension).
constexpr const char* stepped_up_to = "the rows up to it stepped; the table shows the rows before it";
constexpr const char* none_stepped_but_it = "the row stepped, nothing was written";  // row 0's stepped_up_to

[[noreturn]] void refuse(const char* call, ErrorKind kind, std::size_t row, const std::string& why, const char* after) {
  raise(kind, std::string(call) + ": row " + std::to_string(row) + ": " + why + " (" + after + ")");
}

// Empties the pending rows on entry and on every way out of a call: their sources reference
// the sequences' backings, which must not outlive the call (a failed update would keep their
// capacity after every session closed).
template <class Rows>
struct ClearedOnExit {
  Rows& rows;
  explicit ClearedOnExit(Rows& r) : rows(r) { rows.clear(); }
  ~ClearedOnExit() { rows.clear(); }
  ClearedOnExit(const ClearedOnExit&) = delete;
  ClearedOnExit& operator=(const ClearedOnExit&) = delete;
};

}  // namespace

DecodeTable::DecodeTable(std::shared_ptr<const AdmissionCoordinator> coordinator, std::uint32_t domain,
                         std::size_t rows, std::size_t width, std::int32_t pad, std::int32_t* data)
    : coordinator_(coordinator), identity_(coordinator.get()), tokens_per_page_(coordinator->tokens_per_page()),
      domain_(domain), width_(width), pad_(pad), data_(data), rows_(rows) {
  if (domain_ >= coordinator->domain_count()) raise(ErrorKind::InvalidArgument, "decode_table: unknown domain index");
  domain_name_ = coordinator->domain_name(domain_);
  std::fill(data_, data_ + rows * width, pad_);
  pending_.reserve(rows);
}

std::shared_ptr<const AdmissionCoordinator> DecodeTable::live_coordinator(const char* call) const {
  auto held = coordinator_.lock();
  if (!held)
    raise(ErrorKind::Closed, std::string(call) + ": the table's coordinator is gone (nothing held it any more: no "
                                                 "coordinator object, no admitted sequence); nothing was written");
  return held;
}

Authority DecodeTable::known(std::size_t r) const noexcept {
  return rows_[r].assigned ? rows_[r].sequence : Authority{};
}

void DecodeTable::refuse_row(const char* call, std::size_t r, const SequenceSession::TableRowAnswer& answer,
                             const char* after) const {
  switch (answer.answer) {
    case SequenceSession::TableRow::foreign:
      refuse(call, ErrorKind::StaleAuthority, r, "the sequence belongs to another coordinator (foreign)", after);
    case SequenceSession::TableRow::not_in_domain:
      refuse(call, ErrorKind::InvalidArgument, r,
             "the sequence holds no pages in domain '" + domain_name_ + "'", after);
    case SequenceSession::TableRow::too_wide:
    case SequenceSession::TableRow::written:
      break;
  }
  refuse(call, ErrorKind::InvalidArgument, r,
         std::to_string(answer.pages) + " blocks do not fit in width " + std::to_string(width_), after);
}

bool DecodeTable::check(const char* call, std::size_t r, const Pending& p, const char* after) const {
  const auto& s = p.source;
  using Row = SequenceSession::TableRow;
  if (s.coordinator != identity_) refuse_row(call, r, {Row::foreign, s.pages}, after);
  if (s.slot == std::string::npos) refuse_row(call, r, {Row::not_in_domain, s.pages}, after);
  if (s.pages > width_) refuse_row(call, r, {Row::too_wide, s.pages}, after);
  return s.backing != nullptr;
}

bool DecodeTable::resolve(const char* call, std::size_t r, const SequenceSession& session, Pending& out) const {
  try {
    out.source = session.table_source_since(domain_, known(r), rows_[r].written);
  } catch (const Error& e) {
    refuse(call, e.kind(), r, e.message(), nothing_written);
  }
  out.row = r;
  return check(call, r, out, nothing_written);
}

void DecodeTable::write(const Pending& p) {
  Row& row = rows_[p.row];
  std::int32_t* out = data_ + p.row * width_;
  const auto& s = p.source;
  // The same sequence grown: only its new ids. Anything else: the whole row.
  const bool grown = row.assigned && row.sequence == s.sequence && s.pages >= row.written;
  const std::uint64_t first = grown ? row.written : 0;
  s.backing->copy_ids_from(s.slot, first, s.pages, out);
  std::uint64_t count = s.pages - first;
  if (row.written > s.pages) {  // a shorter sequence now: pad over the old ids
    std::fill(out + s.pages, out + row.written, pad_);
    count += row.written - s.pages;
  }
  row.sequence = s.sequence;
  row.written = s.pages;
  row.stamp = s.stamp;
  row.assigned = true;
  assigned_end_ = std::max(assigned_end_, p.row + 1);
  note_written(p.row, count);
}

void DecodeTable::clear_row(std::size_t r) noexcept {
  Row& row = rows_[r];
  if (row.written != 0) std::fill(data_ + r * width_, data_ + r * width_ + row.written, pad_);
  note_written(r, row.written);
  row = Row{};
  while (assigned_end_ != 0 && !rows_[assigned_end_ - 1].assigned) --assigned_end_;
}

void DecodeTable::finish(const SequenceSession* const* sessions, std::size_t count) {
  // Every row checked: now write. The pending sources keep their backings alive meanwhile.
  begin_writes();
  for (const auto& q : pending_) write(q);
  for (std::size_t r = 0; r < count; ++r)
    if (!sessions[r] && rows_[r].assigned) clear_row(r);
  for (std::size_t r = count; r < assigned_end_; ++r)  // assigned_end_ may shrink as rows clear
    if (rows_[r].assigned) clear_row(r);
}

void DecodeTable::update(const SequenceSession* const* sessions, std::size_t count) {
  constexpr const char* call = "DecodeTable.update";
  begin_writes();  // a refused call wrote nothing: last_written says so, and no copy follows it
  if (count > rows_.size())
    raise(ErrorKind::InvalidArgument, std::string(call) + ": " + std::to_string(count) + " sessions for a table of " +
                                          std::to_string(rows_.size()) + " rows (nothing was written)");
  ClearedOnExit scope(pending_);
  Pending p;
  std::shared_ptr<const AdmissionCoordinator> held;  // locked at the first row read
  for (std::size_t r = 0; r < count; ++r) {
    const SequenceSession* session = sessions[r];
    if (!session) continue;
    // The common row: its session published nothing since (and its handle is open: a closed
    // one reads 0, which no row keeps). Stamps never repeat, so it is this coordinator's.
    const std::uint64_t stamp = session->table_stamp();
    if (stamp != 0 && stamp == rows_[r].stamp && rows_[r].assigned) continue;
    if (!held) held = live_coordinator(call);
    if (resolve(call, r, *session, p)) pending_.push_back(std::move(p));
    else if (rows_[r].assigned && rows_[r].sequence == p.source.sequence) rows_[r].stamp = p.source.stamp;  // current
  }
  finish(sessions, count);
}

void DecodeTable::assign(std::size_t row, const SequenceSession& session) {
  constexpr const char* call = "DecodeTable.assign";
  begin_writes();
  if (row >= rows_.size())
    raise(ErrorKind::InvalidArgument, std::string(call) + ": row " + std::to_string(row) + " is out of range for " +
                                          std::to_string(rows_.size()) + " rows (nothing was written)");
  Pending p;
  const auto held = live_coordinator(call);
  const bool changed = resolve(call, row, session, p);
  begin_writes();
  if (changed) write(p);
}

void DecodeTable::clear(std::size_t row) {
  begin_writes();
  if (row >= rows_.size())
    raise(ErrorKind::InvalidArgument, "DecodeTable.clear: row " + std::to_string(row) + " is out of range for " +
                                          std::to_string(rows_.size()) + " rows");
  begin_writes();
  clear_row(row);
}

void DecodeTable::clear_all() noexcept {
  begin_writes();
  for (std::size_t r = 0; r < rows_.size(); ++r)
    if (rows_[r].assigned) clear_row(r);
}

void DecodeTable::step(const std::vector<SequenceSession*>& sessions, const std::int64_t* tokens,
                       BackingOutcome* outcomes) {
  constexpr const char* call = "DecodeTable.step";
  begin_writes();
  if (sessions.size() > rows_.size())
    raise(ErrorKind::InvalidArgument, std::string(call) + ": " + std::to_string(sessions.size()) +
                                          " sessions for a table of " + std::to_string(rows_.size()) +
                                          " rows (nothing was stepped or written)");
  // What the caller got wrong (a bad token count, another coordinator's sequence, a closed
  // handle, a count above the fit, a session named twice) is refused before any row steps.
  const BatchCheck batch;
  // A batch of empty rows (or none) reads no session: like update's, it needs no live
  // coordinator. Each row steps nothing (CURRENT) and is cleared.
  if (std::none_of(sessions.begin(), sessions.end(), [](const SequenceSession* s) { return s != nullptr; })) {
    std::fill(outcomes, outcomes + sessions.size(), BackingOutcome::current);
    finish(sessions.data(), sessions.size());
    return;
  }
  const auto held = live_coordinator(call);
  const AdmissionCoordinator& coordinator = *held;
  // The most tokens a row of width_ blocks covers (saturated: past 64 bits, none is too many).
  const std::uint64_t width_tokens =
      checked::mul(static_cast<std::uint64_t>(width_), std::uint64_t{tokens_per_page_})
          .value_or(std::numeric_limits<std::uint64_t>::max());
  std::size_t checked_row = 0;
  try {
    for (; checked_row < sessions.size(); ++checked_row) {
      const std::size_t r = checked_row;
      if (!sessions[r]) continue;  // an empty row: stepped by none, cleared as update clears it
      if (!sessions[r]->opened_on(coordinator))
        refuse(call, ErrorKind::StaleAuthority, r, "the sequence belongs to another coordinator (foreign)",
               "nothing was stepped or written");
      if (const auto refusal = batch.refusal(sessions.data(), r, tokens[r]))
        refuse(call, refusal->kind, r, refusal->why, "nothing was stepped or written");
      // A row its table cannot show (no pages in the table's domain, more blocks than its width
      // once stepped) too: which domains a sequence holds never changes, and its pages only
      // grow. A row the table shows as it is (the session's stamp unchanged since) is in the
      // domain and within the width: only its tokens can take it past, which needs no lock.
      const std::uint64_t stamp = sessions[r]->table_stamp();
      const bool shown = rows_[r].assigned && stamp != 0 && stamp == rows_[r].stamp;
      if (shown && static_cast<std::uint64_t>(tokens[r]) <= width_tokens) continue;
      const auto answer = sessions[r]->table_row_check(tokens[r], coordinator, domain_, width_);
      if (answer.answer != SequenceSession::TableRow::written)
        refuse_row(call, r, answer, "nothing was stepped or written");
    }
  } catch (const Error& e) {
    rethrow_at_row(e, checked_row, 0);
  }
  // Each row is checked, steps and is resolved under one session lock; a row that could not
  // be written steps nothing. The table is written once every row passed, or, when a row
  // stops the batch, for the rows that stepped before it: a row never shows fewer ids than
  // its sequence holds (an engine that goes on after the error would attend over too few).
  ClearedOnExit scope(pending_);
  Pending p;
  std::size_t r = 0;
  std::size_t stepped = 0;  // rows that stepped: row r too once its step returned
  try {
    for (; r < sessions.size(); ++r) {
      const char* const after = r == 0 ? none_stepped : stepped_before;  // a refusal at this row
      if (!sessions[r]) {  // an empty row: nothing steps (CURRENT), finish() clears it
        outcomes[r] = BackingOutcome::current;
        stepped = r + 1;
        continue;
      }
      SequenceSession::TableRowAnswer answer;
      try {
        answer = sessions[r]->step_with_source(tokens[r], coordinator, domain_, width_, known(r), rows_[r].written,
                                               p.source, outcomes[r]);
      } catch (const Error& e) {
        raise(e.kind(), e.message() + " (" + call + ": row " + std::to_string(r) + "; " + after + ")");
      }
      if (answer.answer != SequenceSession::TableRow::written) refuse_row(call, r, answer, after);  // not stepped
      stepped = r + 1;
      p.row = r;
      if (check(call, r, p, r == 0 ? none_stepped_but_it : stepped_up_to)) pending_.push_back(std::move(p));
    }
  } catch (const Error& e) {
    begin_writes();
    for (const auto& q : pending_) write(q);  // rows before r only: r's own source is not pending
    for (std::size_t q = 0; q < r; ++q)  // the empty rows before it too: the table shows every row it counts
      if (!sessions[q] && rows_[q].assigned) clear_row(q);
    rethrow_at_row(e, r, stepped);
  }
  finish(sessions.data(), sessions.size());
}

}  // namespace lifecore::sequence
