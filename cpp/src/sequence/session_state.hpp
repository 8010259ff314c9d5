// The state cell shared by a session handle and its frame and flight holds. Every field is
// guarded by `mutex`; helpers named *_locked expect it held.
#pragma once

#include <atomic>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/request_id.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "lifecore/sequence/session_lock.hpp"

namespace lifecore::sequence {

// What few sessions ever need, made on first use and read and written under the session's
// lock: participant flights, the deferral behind the last BACKING_DEFERRED step, and the
// terminal receipt. A live session carries one pointer for the three, not 64 bytes.
class SessionExtras {
 public:
  bool no_flights() const noexcept { return !rare_ || rare_->flights.empty(); }
  std::size_t flight_count() const noexcept { return rare_ ? rare_->flights.size() : 0; }
  // The phase recorded for flight `key`, or null.
  const FlightPhase* find_flight(std::uint64_t key) const noexcept {
    if (!rare_) return nullptr;
    const auto it = rare_->flights.find(key);
    return it == rare_->flights.end() ? nullptr : &it->second;
  }
  // Records `phase` for flight `key` (may throw bad_alloc before anything changed).
  void set_flight(std::uint64_t key, FlightPhase phase) { made().flights.insert_or_assign(key, phase); }
  void erase_flight(std::uint64_t key) noexcept {
    if (rare_) rare_->flights.erase(key);
  }
  template <class F>
  void for_each_flight(F&& f) const {
    if (rare_)
      for (const auto& [key, phase] : rare_->flights) f(key, phase);
  }

  const AdmissionDeferred* step_deferral() const noexcept {
    return rare_ && rare_->step_deferral ? &*rare_->step_deferral : nullptr;
  }
  void set_step_deferral(AdmissionDeferred deferral) { made().step_deferral = std::move(deferral); }
  // On every decode step: a test of one pointer when there is nothing to clear.
  void clear_step_deferral() noexcept {
    if (rare_ && rare_->step_deferral) rare_->step_deferral.reset();
  }

  const TerminalReceipt* receipt() const noexcept { return rare_ && rare_->receipt ? &*rare_->receipt : nullptr; }
  // Makes the room a receipt is kept in (may throw bad_alloc); then set_receipt cannot fail.
  void reserve() { made(); }
  void set_receipt(const TerminalReceipt& receipt) noexcept { rare_->receipt = receipt; }

 private:
  struct Rare {
    std::map<std::uint64_t, FlightPhase> flights;
    std::optional<AdmissionDeferred> step_deferral;
    std::optional<TerminalReceipt> receipt;
  };
  Rare& made() {
    if (!rare_) rare_ = std::make_unique<Rare>();
    return *rare_;
  }
  std::unique_ptr<Rare> rare_;
};

// The active frame's id or none: an optional in 8 bytes (frame ids start at 1, so 0 is none).
class ActiveFrame {
 public:
  explicit operator bool() const noexcept { return id_ != 0; }
  std::uint64_t operator*() const noexcept { return id_; }
  ActiveFrame& operator=(std::uint64_t id) noexcept {
    id_ = id;
    return *this;
  }
  void reset() noexcept { id_ = 0; }
  operator std::optional<std::uint64_t>() const noexcept {
    return id_ != 0 ? std::optional<std::uint64_t>(id_) : std::nullopt;
  }

 private:
  std::uint64_t id_ = 0;
};

class SessionState {
 public:
  SessionState() = default;
  SessionState(const SessionState&) = delete;
  SessionState& operator=(const SessionState&) = delete;
  ~SessionState() { delete fingerprint_.load(std::memory_order_relaxed); }

  // Everything a decode step reads and writes comes first, in 64 bytes beside the lock, and
  // what a block table's row reads with it but the coordinator (right after): a batch of
  // sessions costs one or two cache lines each and no pointer chase.
  mutable SessionLock mutex;
  SessionPhase phase = SessionPhase::open;
  bool handle_closed = false;
  std::uint32_t first_domain = 0;            // current->domains()[0]
  std::uint64_t current_tokens = 0;          // current->tokens()
  std::uint64_t current_pages = 0;           // current->pages()
  const std::int32_t* first_ids = nullptr;   // the backing's ids of first_domain (they move only under this lock)
  ActiveFrame active_frame;
  SessionExtras extras;
  std::uint64_t next_frame = 1;
  std::uint64_t committed = 0;
  // Frames retired discarded (a cancel's); committed + discarded frames are the retired ones,
  // so a decode step counts one number, not two.
  std::uint64_t discarded = 0;
  // Names what a block table's row of this session shows: a new process-wide value at every
  // publish, 0 once the handle closed. Written under the lock, read without it: a table that
  // kept the stamp it wrote knows the row is current with one load (decode_table.hpp).
  std::atomic<std::uint64_t> table_stamp{0};
  // Read only with the handle open: `resources` keeps it alive then (a closed session, its
  // receipt and its snapshots do not keep the coordinator). A call that lets the lock go
  // holds a reference of its own.
  AdmissionCoordinator* coordinator = nullptr;
  Authority sequence;
  std::shared_ptr<AdmittedSequenceResources> resources;  // null once the handle closed
  std::shared_ptr<const BackingSnapshot> current;        // null once the handle closed; set by publish_locked
  static constexpr std::uint64_t epoch = 1;  // a session's incarnation: one per logical sequence
  std::shared_ptr<const BackingSnapshot> initial;  // observes only: part of the fingerprint
  Authority request;
  RequestId request_id;  // the backing's, shared
  std::uint64_t fit_tokens = 0;
  std::uint32_t tokens_per_page = 1;
  // The last batch that named this session (BatchCheck): in what was padding, beside the fit a
  // batch reads of every row anyway. Written without the lock.
  std::atomic<std::uint8_t> batch_mark{0};

  // `next` becomes the current backing (its ids published), with the copies beside the lock.
  // Under the lock, the handle open (`resources` set).
  void publish_locked(std::shared_ptr<const BackingSnapshot> next) noexcept {
    current = std::move(next);
    current_tokens = current->tokens();
    current_pages = current->pages();
    first_domain = current->domains().front();
    first_ids = resources->session_backing()->published_ids(0);
    table_stamp.store(next_table_stamp(), std::memory_order_release);
  }
  // Never 0 and never repeated (2^64 publishes do not happen).
  static std::uint64_t next_table_stamp() noexcept {
    static std::atomic<std::uint64_t> last{0};
    return last.fetch_add(1, std::memory_order_relaxed) + 1;
  }

  // Pages that hold `tokens` (rounded up), as the coordinator counts them; OverflowError
  // naming `what` if it cannot be computed. Needs no coordinator (and no lock).
  // Of `current`: read with the handle open.
  std::uint64_t generation_locked() const noexcept { return current->generation(); }
  std::uint64_t pages_for(std::uint64_t tokens, const char* what) const {
    return pages_holding(tokens, tokens_per_page, what);
  }
  // Computed where needed (an extension's check) rather than kept in every live session.
  std::uint64_t fit_pages() const { return pages_for(fit_tokens, "the fit in pages"); }
  // The fingerprint over the immutable open-time fields, hashed once by the first reader.
  // Made on the first read (most sessions are never asked); the coordinator's id in it is
  // the sequence authority's, which outlives the coordinator.
  const std::string& fingerprint() const;

  // Frames committed or discarded; below next_frame, so the sum cannot wrap.
  std::uint64_t retired_locked() const noexcept { return committed + discarded; }

  bool active_locked() const noexcept {
    return phase == SessionPhase::open || phase == SessionPhase::cancel_requested || phase == SessionPhase::poisoned;
  }
  bool quiescent_locked() const noexcept { return !active_frame && extras.no_flights(); }
  // OverflowError naming `operation` unless a frame id is left: a frame id never wraps
  // (retired and committed counts stay below it, so they cannot wrap either). For a caller
  // that must know before it changes anything; take_frame_id_locked checks it too.
  void require_frame_id_locked(const char* operation) const {
    // The message is built only on overflow: this runs on every decode step.
    if (next_frame == std::numeric_limits<std::uint64_t>::max())
      checked::overflow(std::string(operation) + ": frame ids");
  }
  // The next frame id, checked before it is taken.
  std::uint64_t take_frame_id_locked(const char* operation) {
    require_frame_id_locked(operation);
    return next_frame++;
  }
  // A decode step's frame, acquired and committed at once (what step() does once its tokens
  // are covered): its id taken, the last step's deferral forgotten, one more committed.
  void commit_step_locked() {
    take_frame_id_locked("step");
    extras.clear_step_deferral();
    ++committed;
  }

  // SessionStateError unless the session is active (not terminal, not fail-closed).
  void require_active_locked(const char* operation) const {
    if (phase == SessionPhase::completed || phase == SessionPhase::aborted)
      raise(ErrorKind::SessionState, std::string(operation) + ": the sequence session is already terminal (" +
                                         phase_name(phase) + ")");
    if (phase == SessionPhase::fail_closed)
      raise(ErrorKind::SessionState, std::string(operation) + ": the sequence session failed closed");
  }
  void require_open_locked(const char* operation) const {
    require_active_locked(operation);
    if (phase != SessionPhase::open)
      raise(ErrorKind::SessionState, std::string(operation) + ": the sequence session is " + phase_name(phase) +
                                         ", not open");
  }
  void poison_locked() noexcept {
    if (phase == SessionPhase::open || phase == SessionPhase::cancel_requested) phase = SessionPhase::poisoned;
  }
  TerminalReceipt finish_locked(TerminalOutcome outcome, std::shared_ptr<const SessionState> self) {
    extras.reserve();  // before any change: what follows cannot fail
    phase = outcome == TerminalOutcome::completed ? SessionPhase::completed : SessionPhase::aborted;
    // Kept without the back reference (no cycle); each copy handed out names the state.
    TerminalReceipt out{outcome, sequence, request, epoch, nullptr, retired_locked(), committed, discarded,
                        generation_locked()};
    extras.set_receipt(out);
    out.session = std::move(self);
    return out;
  }

 private:
  mutable std::atomic<const std::string*> fingerprint_{nullptr};  // owned; a pointer until read
};

}  // namespace lifecore::sequence
