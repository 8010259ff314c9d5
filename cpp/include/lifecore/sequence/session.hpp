// The lifecycle of one generated sequence: phases, frames, participant flights, backing
// extension in immutable generations, cancel / complete / abort, and fail-closed drop.
//
// SequenceSession is the owning handle: destroying (or close()-ing) it while the session is
// still active fails the session closed. Frame and flight holds share the session's state
// so they can observe that, and keep the exact backing snapshot they captured alive.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "lifecore/error.hpp"
#include "lifecore/sequence/backing.hpp"
#include "lifecore/sequence/capacity.hpp"

namespace lifecore::sequence {

class AdmissionCoordinator;
class AdmittedSequenceResources;
class CapacityWaitRegistration;

// One table for the phases and their names (phase_name): each name is its case's spelling.
#define LIFECORE_SESSION_PHASES(X) X(open) X(cancel_requested) X(poisoned) X(completed) X(aborted) X(fail_closed)
enum class SessionPhase : std::uint8_t {
#define LIFECORE_SESSION_PHASE_CASE(phase) phase,
  LIFECORE_SESSION_PHASES(LIFECORE_SESSION_PHASE_CASE)
#undef LIFECORE_SESSION_PHASE_CASE
};
enum class TerminalOutcome : std::uint8_t { completed, aborted };
enum class FrameDisposition : std::uint8_t { committed, discarded_cancelled, aborted, rolled_back, dropped };
enum class FlightPhase : std::uint8_t { prepared, in_flight };
enum class BackingOutcome : std::uint8_t { current, extended, retry_required, backing_deferred };

const char* phase_name(SessionPhase phase) noexcept;

class SessionState;
struct TableRowTarget;  // block_table.hpp

struct TerminalReceipt {
  TerminalOutcome outcome = TerminalOutcome::completed;
  Authority sequence_authority;
  Authority request_authority;
  std::uint64_t epoch = 0;
  // The session's fingerprint, hashed on first read (a receipt nobody inspects costs no digest).
  const std::string& fingerprint() const;
  std::shared_ptr<const SessionState> session;  // where the fingerprint is read from
  std::uint64_t retired_frames = 0;
  std::uint64_t committed_frames = 0;
  std::uint64_t discarded_frames = 0;
  std::uint64_t backing_generation = 0;
};

struct CancelSnapshot {
  SessionPhase phase = SessionPhase::cancel_requested;
  std::optional<std::uint64_t> active_frame;
  std::vector<std::pair<std::uint64_t, FlightPhase>> flights;  // sorted by key
  std::uint64_t retired_frames = 0;
};

struct BackingDecision {
  BackingOutcome outcome = BackingOutcome::current;
  std::shared_ptr<const BackingSnapshot> snapshot;  // CURRENT / EXTENDED: the frontier now
  std::optional<AdmissionDeferred> deferred;         // BACKING_DEFERRED: logical capacity short
  std::string reason;                                // RETRY_REQUIRED / BACKING_DEFERRED: why
  std::uint64_t expected_generation = 0;             // the generation this decision was taken on
  std::uint64_t target_tokens = 0;
  std::uint64_t target_pages = 0;
};

class FrameHold {
 public:
  FrameHold(std::shared_ptr<SessionState> state, std::uint64_t frame_id,
            std::shared_ptr<const BackingSnapshot> snapshot);
  ~FrameHold();  // unfinalized: poisons the session; the frame id is never reused
  FrameHold(const FrameHold&) = delete;
  FrameHold& operator=(const FrameHold&) = delete;

  FrameDisposition commit();           // Committed, or DiscardedCancelled after a cancel
  void abort();                        // poisons the session
  void rollback_unsubmitted();         // Open only; the same frame id is reused on retry
  void drop() noexcept;                // what destruction does, now (poisons if unfinalized)
  std::uint64_t frame_id() const noexcept { return frame_id_; }
  bool finalized() const noexcept { return finalized_; }
  // The snapshot captured at acquisition; null once finalized (a retired step lets go of it).
  const std::shared_ptr<const BackingSnapshot>& snapshot() const noexcept { return snapshot_; }

 private:
  std::shared_ptr<SessionState> state_;
  std::uint64_t frame_id_;
  std::shared_ptr<const BackingSnapshot> snapshot_;
  std::shared_ptr<SequenceBacking> pin_;  // a live frame holds the capacity its snapshot observes
  bool finalized_ = false;
  friend class SessionState;
  friend class BatchCheck;
};

class FlightHold {
 public:
  FlightHold(std::shared_ptr<SessionState> state, std::uint64_t key, std::uint64_t frame_id,
             std::shared_ptr<SequenceBacking> pin);
  ~FlightHold();  // removes the flight; dropped while in flight: poisons (its work may still run)
  FlightHold(const FlightHold&) = delete;
  FlightHold& operator=(const FlightHold&) = delete;

  void dispatch();         // Prepared -> InFlight
  void not_submitted();    // InFlight -> Prepared (definitely never reached the device)
  void finish();           // InFlight -> released (its work completed)
  void release();          // Prepared -> released
  void drop() noexcept;    // what destruction does, now
  FlightPhase phase() const noexcept { return phase_; }
  bool released() const noexcept { return released_; }
  std::uint64_t key() const noexcept { return key_; }
  std::uint64_t frame_id() const noexcept { return frame_id_; }

 private:
  std::shared_ptr<SessionState> state_;
  std::uint64_t key_;
  std::uint64_t frame_id_;
  // A flight's work reads the sequence's pages until it is released: it holds their capacity,
  // so they are never handed to another sequence while it may still run.
  std::shared_ptr<SequenceBacking> pin_;
  FlightPhase phase_ = FlightPhase::prepared;
  bool released_ = false;
};

class SequenceSession {
 public:
  explicit SequenceSession(std::shared_ptr<AdmittedSequenceResources> resources);
  ~SequenceSession();  // close()
  SequenceSession(const SequenceSession&) = delete;
  SequenceSession& operator=(const SequenceSession&) = delete;

  // Fails the session closed if still active, and lets go of its resources and backing.
  void close() noexcept;
  // close(), handing what it lets go of to the caller (empty when already closed), who drops
  // it where it chooses: the backing returns capacity if this is its last hold. The resources
  // are spent by then (they let go of the backing, whatever handles of them remain).
  struct Holds {
    std::shared_ptr<AdmittedSequenceResources> resources;
    std::shared_ptr<SequenceBacking> backing;
    std::shared_ptr<const BackingSnapshot> current;
  };
  Holds close_handing_over() noexcept;
  bool is_closed() const noexcept;
  // Changes whenever the ids a block table's row shows may change (every published backing)
  // and becomes 0 when the handle closes; never repeats, across sessions too. Read without
  // the lock: equal to a stamp read with the ids, the row holds exactly those ids.
  std::uint64_t table_stamp() const noexcept;
  // Why a batch refuses a row before any row steps (BatchCheck).
  struct BatchRefusal {
    ErrorKind kind;
    std::string why;
  };

  std::shared_ptr<AdmittedSequenceResources> resources() const;
  void write_release_capacity_sources(std::vector<CapacitySource>& out) const;
  std::uint64_t epoch() const noexcept;
  // Hashed once, on first read (thread-safe): opening a session computes no digest.
  const std::string& fingerprint() const;
  Authority sequence_authority() const noexcept;
  Authority request_authority() const noexcept;
  // StaleAuthorityError unless (epoch, fingerprint) names this live session.
  void verify(std::uint64_t epoch, const std::string& fingerprint) const;

  std::shared_ptr<CapacityWaitRegistration> register_admission_waiter(const AdmissionDeferred& deferred) const;
  BackingDecision try_ensure_backing_covers(std::int64_t tokens, std::optional<std::int64_t> pages = std::nullopt);
  // Validates a BACKING_DEFERRED decision: StaleAuthorityError when the backing moved on.
  void verify_backing_deferral(const BackingDecision& decision) const;

  CancelSnapshot request_cancel();
  TerminalReceipt try_complete();
  TerminalReceipt try_abort();
  TerminalReceipt try_abort_if_quiescent();

  std::unique_ptr<FrameHold> acquire_frame();
  std::unique_ptr<FlightHold> prepare_flight(std::uint64_t key);
  // One decode step's bookkeeping in one call: ensure the backing covers `tokens`, acquire a
  // frame, commit it; an extension covers the whole page. Returns CURRENT or EXTENDED when the frame committed, RETRY_REQUIRED or
  // BACKING_DEFERRED (nothing changed, no frame) otherwise.
  BackingOutcome step(std::int64_t tokens);
  // The deferral behind the last step() that answered BACKING_DEFERRED (what to wait on or
  // preempt for), beside step's plain answer; empty after any other answer.
  std::optional<AdmissionDeferred> step_deferral() const;

  SessionPhase phase() const noexcept;
  std::shared_ptr<const BackingSnapshot> backing() const;
  // For an incremental block table (DecodeTable), read under one lock: the current backing's
  // pages, the slot of `domain_index` among its domains (`slot` == npos when the sequence is
  // not in it), and the backing its ids are read from. ClosedError once the handle is closed.
  struct TableSource {
    std::shared_ptr<SequenceBacking> backing;
    const AdmissionCoordinator* coordinator = nullptr;
    std::uint64_t pages = 0;
    std::size_t slot = 0;
    Authority sequence;  // which sequence the ids are of
    std::uint64_t stamp = 0;  // the session's table stamp when read (see table_stamp)
  };
  // A block table's row in one lock and no reference count: the current ids in `domain_index`
  // go to the target (block_table.hpp). Nothing is written unless the answer is `written`
  // (`pages`: the sequence's blocks). ClosedError once the handle is closed.
  enum class TableRow : std::uint8_t { written, foreign, not_in_domain, too_wide };
  struct TableRowAnswer {
    TableRow answer = TableRow::written;
    std::uint64_t pages = 0;
  };
  TableRowAnswer write_table_row(const AdmissionCoordinator& owner, std::uint32_t domain_index,
                                 TableRowTarget& target) const;
  // A row's source, where `backing` is referenced only when the row must be written: its
  // sequence is not `known` or it holds more than `written` pages.
  TableSource table_source_since(std::uint32_t domain_index, const Authority& known, std::uint64_t written) const;
  // A decode table's row: step(tokens) into `outcome`, then table_source_since(...) into
  // `source`, under one lock when the step needs no extension. First, with the handle open,
  // the row's checks: a sequence of another coordinator than `owner`, not in `domain_index`, or
  // holding more than `max_pages` once `tokens` are covered answers that refusal and steps
  // nothing. `source` and `outcome` are set only when the answer is `written`.
  TableRowAnswer step_with_source(std::int64_t tokens, const AdmissionCoordinator& owner, std::uint32_t domain_index,
                                  std::uint64_t max_pages, const Authority& known, std::uint64_t written,
                                  TableSource& source, BackingOutcome& outcome);
  // step_with_source's checks alone, changing nothing: a batch asks every row before any
  // steps. A count past the fit, or a closed handle, answers `written` (step() refuses those).
  TableRowAnswer table_row_check(std::int64_t tokens, const AdmissionCoordinator& owner, std::uint32_t domain_index,
                                 std::uint64_t max_pages) const;

  std::uint64_t next_frame_id() const noexcept;
  // Whether the session was opened on `coordinator` (fixed at open: asked without the lock,
  // by address only, so also of a closed session).
  bool opened_on(const AdmissionCoordinator& coordinator) const noexcept;
  std::optional<std::uint64_t> active_frame() const noexcept;
  std::size_t flight_count() const noexcept;
  std::uint64_t retired_frames() const noexcept;
  std::optional<TerminalReceipt> receipt() const;

  const std::shared_ptr<SessionState>& state() const noexcept { return state_; }

 private:
  // try_ensure_backing_covers; with `tokens_only` (step's target, which names no pages) the
  // target's pages are at least the frontier's, read under the lock: pages reserved ahead of
  // the tokens cover a step, which is then never incomparable with the frontier.
  BackingDecision ensure_covers(std::int64_t tokens, std::optional<std::int64_t> pages, bool tokens_only);
  // step()'s rare paths, out of line so that its common one stays a few instructions: why a
  // session cannot step (raises; under the lock), and a step that needs an extension.
  [[noreturn, gnu::noinline, gnu::cold]] void refuse_step_locked() const;
  [[gnu::noinline]] BackingOutcome step_extending(std::int64_t tokens);
  // The common extension of a step to `target` tokens (its page's end) under one hold of the
  // session's lock: the ids taken, adopted and published, the frame committed. Empty when it
  // takes the general path (nothing changed): logical capacity short, the coordinator's lock
  // busy, more ids than it keeps, a target above the fit.
  std::optional<BackingOutcome> extend_in_place(std::uint64_t tokens, std::uint64_t target);

  std::shared_ptr<SessionState> state_;
};

// What a batch that steps (step_all, DecodeTable.step) checks of every row before any row
// steps: the caller's mistakes, a count below 1, a closed handle (a preempted victim left in
// the batch), a count above the request's fit (fixed when the session opened: read without its
// lock), and a session an earlier row named (it would step twice in one iteration). A row's
// own state (finished, framed) is found as it steps.
//
// Each session once, for one load and one store per row on a line the fit check reads anyway:
// a row's session is marked with the batch's one-byte mark, and the earlier rows are scanned
// only when it already carries that mark (a repeat, or a mark written a multiple of 255 batches
// ago), so a mark never refuses a row by itself.
class BatchCheck {
 public:
  BatchCheck() noexcept;  // a new batch's mark, never 0
  // Why row `row` (sessions[row] stepped to `tokens`) is refused; empty when it may step.
  std::optional<SequenceSession::BatchRefusal> refusal(SequenceSession* const* sessions, std::size_t row,
                                                       std::int64_t tokens) const;
  // The first row that names the session of sessions[row]: `row` itself (now marked) unless
  // an earlier row named it. (A plain index: an optional returned through memory costs a
  // store-forwarding stall per row.)
  std::size_t first_row(SequenceSession* const* sessions, std::size_t row) const noexcept;
  // The first row whose frame is of the session of frames[row] (a frame named twice, or two
  // frames of one session, of which at most one is live).
  std::size_t first_row(FrameHold* const* frames, std::size_t row) const noexcept;

 private:
  std::uint8_t mark_;
};

// One decode step on each session (sessions[i]->step(tokens[i])), outcomes written to
// `outcomes`. A bad token count, a count above the fit, a closed handle or a session an
// earlier row named, in any row, is refused before any row steps; otherwise not
// all-or-nothing: the first row that raises stops the batch, naming the row; the rows before
// it stepped.
void step_all(const std::vector<SequenceSession*>& sessions, const std::int64_t* tokens, BackingOutcome* outcomes);

// Commits each frame in order (frames[i]->commit()), dispositions written to `out`: the end
// of a batch's step in one call. A missing frame, or a session's frame an earlier row named,
// is refused before any frame commits; otherwise, like step_all, not all-or-nothing: the
// first frame that raises stops the batch, naming the row; the frames before it committed.
void commit_frames(const std::vector<FrameHold*>& frames, FrameDisposition* out);

// All-or-nothing acquisition over several sessions: if any refuses, none acquires.
std::vector<std::unique_ptr<FrameHold>> acquire_frames(const std::vector<SequenceSession*>& sessions);

}  // namespace lifecore::sequence
