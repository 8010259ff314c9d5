// Frame and participant-flight holds: the finalization rules of one decode step.
#include "lifecore/sequence/session.hpp"
#include "sequence/session_state.hpp"

namespace lifecore::sequence {
namespace {

// A hold whose frame is no longer the session's active frame names a stale identity.
void require_frame_locked(const SessionState& s, std::uint64_t frame_id, bool finalized, const char* operation) {
  if (finalized) raise(ErrorKind::SessionState, std::string(operation) + ": the frame is already finalized");
  s.require_active_locked(operation);
  if (!s.active_frame || *s.active_frame != frame_id)
    raise(ErrorKind::StaleAuthority, std::string(operation) + ": frame " + std::to_string(frame_id) +
                                         " is not the session's active frame (stale sequence session authority)");
}

}  // namespace

FrameHold::FrameHold(std::shared_ptr<SessionState> state, std::uint64_t frame_id,
                     std::shared_ptr<const BackingSnapshot> snapshot)
    : state_(std::move(state)), frame_id_(frame_id), snapshot_(std::move(snapshot)),
      pin_(snapshot_ ? snapshot_->backing() : nullptr) {}

FrameHold::~FrameHold() { drop(); }

void FrameHold::drop() noexcept {
  if (finalized_) return;
  finalized_ = true;
  std::shared_ptr<const BackingSnapshot> released = std::move(snapshot_);  // dropped after the lock
  std::shared_ptr<SequenceBacking> pin = std::move(pin_);
  std::lock_guard<SessionLock> lock(state_->mutex);
  // An unfinalized hold: the step's outcome is unknown, so the session can no longer be
  // trusted. Its frame id stays consumed.
  if (state_->active_frame && *state_->active_frame == frame_id_) {
    state_->active_frame.reset();
    state_->poison_locked();
  }
}

FrameDisposition FrameHold::commit() {
  std::shared_ptr<const BackingSnapshot> released;  // dropped after the lock
  std::shared_ptr<SequenceBacking> pin;             // likewise: the last holder returns capacity
  std::lock_guard<SessionLock> lock(state_->mutex);
  auto& s = *state_;
  require_frame_locked(s, frame_id_, finalized_, "commit");
  if (s.phase == SessionPhase::poisoned) raise(ErrorKind::SessionState, "commit: the sequence session is poisoned");
  if (!s.extras.no_flights()) raise(ErrorKind::SessionState, "commit: participant flights of this frame are still live");
  s.active_frame.reset();
  finalized_ = true;
  released = std::move(snapshot_);
  pin = std::move(pin_);
  if (s.phase == SessionPhase::cancel_requested) {
    ++s.discarded;
    return FrameDisposition::discarded_cancelled;
  }
  ++s.committed;
  return FrameDisposition::committed;
}

void FrameHold::abort() {
  std::shared_ptr<const BackingSnapshot> released;  // dropped after the lock
  std::shared_ptr<SequenceBacking> pin;             // likewise: the last holder returns capacity
  std::lock_guard<SessionLock> lock(state_->mutex);
  auto& s = *state_;
  require_frame_locked(s, frame_id_, finalized_, "abort");
  s.active_frame.reset();
  s.poison_locked();
  finalized_ = true;
  released = std::move(snapshot_);
  pin = std::move(pin_);
}

void FrameHold::rollback_unsubmitted() {
  std::shared_ptr<const BackingSnapshot> released;  // dropped after the lock
  std::shared_ptr<SequenceBacking> pin;             // likewise: the last holder returns capacity
  std::lock_guard<SessionLock> lock(state_->mutex);
  auto& s = *state_;
  require_frame_locked(s, frame_id_, finalized_, "rollback_unsubmitted");
  if (s.phase != SessionPhase::open)
    raise(ErrorKind::SessionState, std::string("rollback_unsubmitted: the sequence session is ") + phase_name(s.phase) + ", not open");
  if (!s.extras.no_flights()) raise(ErrorKind::SessionState, "rollback_unsubmitted: participant flights of this frame are still live");
  s.active_frame.reset();
  s.next_frame = frame_id_;  // never submitted: the retry reuses the same frame id
  finalized_ = true;
  released = std::move(snapshot_);
  pin = std::move(pin_);
}

FlightHold::FlightHold(std::shared_ptr<SessionState> state, std::uint64_t key, std::uint64_t frame_id,
                       std::shared_ptr<SequenceBacking> pin)
    : state_(std::move(state)), key_(key), frame_id_(frame_id), pin_(std::move(pin)) {}

FlightHold::~FlightHold() { drop(); }

void FlightHold::drop() noexcept {
  if (released_) return;
  released_ = true;
  std::shared_ptr<SequenceBacking> pin = std::move(pin_);  // dropped after the lock
  std::lock_guard<SessionLock> lock(state_->mutex);
  auto& s = *state_;
  const FlightPhase* recorded = s.extras.find_flight(key_);
  if (!recorded) {
    if (s.active_locked()) s.phase = SessionPhase::fail_closed;  // a stale identity fails closed
    return;
  }
  const bool mismatch = *recorded != phase_ || phase_ == FlightPhase::in_flight;
  s.extras.erase_flight(key_);
  if (mismatch) s.poison_locked();  // work may still be running on this sequence's pages
}

void FlightHold::dispatch() {
  std::lock_guard<SessionLock> lock(state_->mutex);
  auto& s = *state_;
  if (released_) raise(ErrorKind::SessionState, "dispatch: the flight is already released");
  s.require_open_locked("dispatch");
  if (phase_ != FlightPhase::prepared) raise(ErrorKind::SessionState, "dispatch: the flight is already in flight");
  s.extras.set_flight(key_, FlightPhase::in_flight);
  phase_ = FlightPhase::in_flight;
}

void FlightHold::not_submitted() {
  std::lock_guard<SessionLock> lock(state_->mutex);
  auto& s = *state_;
  if (released_) raise(ErrorKind::SessionState, "not_submitted: the flight is already released");
  s.require_active_locked("not_submitted");
  if (phase_ != FlightPhase::in_flight) raise(ErrorKind::SessionState, "not_submitted: the flight is not in flight");
  s.extras.set_flight(key_, FlightPhase::prepared);
  phase_ = FlightPhase::prepared;
}

void FlightHold::finish() {
  std::shared_ptr<SequenceBacking> pin;  // dropped after the lock: the last holder returns capacity
  std::lock_guard<SessionLock> lock(state_->mutex);
  auto& s = *state_;
  if (released_) raise(ErrorKind::SessionState, "finish: the flight is already released");
  if (phase_ != FlightPhase::in_flight) raise(ErrorKind::SessionState, "finish: the flight is not in flight (use release)");
  s.extras.erase_flight(key_);
  released_ = true;
  pin = std::move(pin_);
}

void FlightHold::release() {
  std::shared_ptr<SequenceBacking> pin;  // dropped after the lock: the last holder returns capacity
  std::lock_guard<SessionLock> lock(state_->mutex);
  auto& s = *state_;
  if (released_) raise(ErrorKind::SessionState, "release: the flight is already released");
  if (phase_ != FlightPhase::prepared) raise(ErrorKind::SessionState, "release: the flight is in flight (use finish)");
  s.extras.erase_flight(key_);
  released_ = true;
  pin = std::move(pin_);
}

}  // namespace lifecore::sequence
