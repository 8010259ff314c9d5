#include "lifecore/sequence/session.hpp"

#include <algorithm>

#include "common/sha256.hpp"
#include "lifecore/checked.hpp"
#include "lifecore/sequence/block_table.hpp"
#include "lifecore/sequence/pause_points.hpp"
#include "lifecore/sequence/waiter.hpp"
#include "sequence/recycling_allocator.hpp"
#include "sequence/row_error.hpp"
#include "sequence/session_state.hpp"

namespace lifecore::sequence {
namespace {

void append_field(Sha256& hash, std::string_view name, std::string_view value) {
  // name=len:value; so no two payloads share an encoding.
  hash.update(name);
  hash.update("=");
  hash.update(std::to_string(value.size()));
  hash.update(":");
  hash.update(value);
  hash.update(";");
}

std::string session_fingerprint(std::uint64_t coordinator_id, const Authority& request, const Authority& sequence,
                                std::string_view request_id, std::uint64_t epoch, const BackingSnapshot& snap) {
  Sha256 hash;
  hash.update("lifecore.sequence-session.v1");
  hash.update("\0", 1);  // domain separation from every other lifecore digest
  append_field(hash, "coordinator", std::to_string(coordinator_id));
  append_field(hash, "request_authority", std::to_string(request.sparse_id) + "/" + std::to_string(request.generation));
  append_field(hash, "sequence_authority", std::to_string(sequence.sparse_id) + "/" + std::to_string(sequence.generation));
  append_field(hash, "request_id", request_id);
  append_field(hash, "epoch", std::to_string(epoch));
  std::string evidence = std::to_string(snap.generation()) + "," + std::to_string(snap.tokens()) + "," +
                         std::to_string(snap.pages());
  for (std::uint32_t d : snap.domains()) evidence += ",d" + std::to_string(d);
  append_field(hash, "backing", evidence);
  return to_hex(hash.finish());
}

constexpr const char* closed_handle = "the sequence session handle is closed";

void require_handle(const SessionState& s, const char* operation) {
  if (s.handle_closed) raise(ErrorKind::Closed, std::string(operation) + ": " + closed_handle);
}

// For a table's row: the caller names the call and the row.
void require_row_handle(const SessionState& s) {
  if (s.handle_closed) raise(ErrorKind::Closed, closed_handle);
}

// A target above the request's fit, as an extension and a batch's check refuse it.
std::string above_the_fit(const char* operation, const SessionState& s, std::uint64_t tokens, std::uint64_t pages) {
  return std::string(operation) + ": the target (" + std::to_string(tokens) + " tokens, " + std::to_string(pages) +
         " pages) is above the request's fit limit (" + std::to_string(s.fit_tokens) + " tokens, " +
         std::to_string(s.fit_pages()) + " pages)";
}

// The deferral of an extension to `context`'s target, `delta` more pages in each of `domains`,
// that page memory refused: it waits on physical memory from the epoch observed before the take.
AdmissionDeferred physical_extension_deferral(const AdmissionCoordinator& coordinator,
                                              const std::vector<std::uint32_t>& domains,
                                              const BackingDeferralContext& context, std::uint64_t delta,
                                              std::uint64_t observed_epoch, std::string_view request_id) {
  auto deferred = coordinator.physical_deferral(domains, 0, context.target_tokens, delta, context.target_tokens, delta,
                                                observed_epoch, request_id);
  deferred.backing = context;
  return deferred;
}

}  // namespace

const std::string& SessionState::fingerprint() const {
  if (const std::string* made = fingerprint_.load(std::memory_order_acquire)) return *made;
  auto fresh = std::make_unique<const std::string>(
      session_fingerprint(sequence.coordinator_id, request, sequence, request_id, epoch, *initial));
  const std::string* expected = nullptr;
  if (fingerprint_.compare_exchange_strong(expected, fresh.get(), std::memory_order_acq_rel)) return *fresh.release();
  return *expected;  // another thread made the same one first
}

const std::string& TerminalReceipt::fingerprint() const {
  static const std::string none;
  return session ? session->fingerprint() : none;
}

const char* phase_name(SessionPhase phase) noexcept {
  switch (phase) {
#define LIFECORE_SESSION_PHASE_NAME(value) \
  case SessionPhase::value:                \
    return #value;
    LIFECORE_SESSION_PHASES(LIFECORE_SESSION_PHASE_NAME)
#undef LIFECORE_SESSION_PHASE_NAME
  }
  return "unknown";
}

// ---------------- SequenceSession ----------------

SequenceSession::SequenceSession(std::shared_ptr<AdmittedSequenceResources> resources)
    : state_(make_recycled<SessionState>()) {
  auto& s = *state_;
  // Just opened by this thread: the resources hold their backing until this session closes.
  const SequenceBacking& backing = *resources->session_backing();
  s.sequence = backing.sequence_authority();
  s.request = backing.request_authority();
  s.request_id = backing.shared_request_id();
  s.fit_tokens = resources->fit_tokens();
  s.coordinator = backing.coordinator().get();
  s.tokens_per_page = s.coordinator->tokens_per_page();
  s.initial = resources->initial_backing();
  s.resources = std::move(resources);
  s.publish_locked(s.initial);  // not shared yet: no lock needed
}

SequenceSession::~SequenceSession() { close(); }

void SequenceSession::close() noexcept {
  // Released outside the session lock; the last holder returns the capacity.
  close_handing_over();
}

namespace {

// Asks for the cache lines of the first `count` ids (up to 4 KB of them) without waiting.
void prefetch_ids(const std::int32_t* ids, std::uint64_t count) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  constexpr std::uint64_t ids_per_line = 64 / sizeof(std::int32_t);
  count = std::min<std::uint64_t>(count, 1024);
  for (std::uint64_t i = 0; i < count; i += ids_per_line) __builtin_prefetch(ids + i);
#else
  (void)ids;
  (void)count;
#endif
}

}  // namespace

SequenceSession::Holds SequenceSession::close_handing_over() noexcept {
  Holds holds;
  std::lock_guard<SessionLock> lock(state_->mutex);
  if (state_->handle_closed) return holds;
  // The last holder's release gives these ids back to the arena, after the records before
  // them are let go: fetched from here on, a released burst's ids (cold by then) cost no
  // wait of their own.
  if (state_->first_ids) prefetch_ids(state_->first_ids, state_->current_pages);
  state_->handle_closed = true;
  // Dropped before a terminal state: fail closed. A terminal session is left alone.
  if (state_->active_locked()) state_->phase = SessionPhase::fail_closed;
  holds.resources = std::move(state_->resources);
  holds.backing = holds.resources->spend();  // whatever handles of the resources remain hold nothing now
  holds.current = std::move(state_->current);
  state_->first_ids = nullptr;  // read only with the handle open; never a dangling pointer kept
  state_->table_stamp.store(0, std::memory_order_release);  // a table's next look takes the checked path
  return holds;
}

std::uint64_t SequenceSession::table_stamp() const noexcept {
  return state_->table_stamp.load(std::memory_order_acquire);
}

bool SequenceSession::is_closed() const noexcept {
  std::lock_guard<SessionLock> lock(state_->mutex);
  return state_->handle_closed;
}

std::shared_ptr<AdmittedSequenceResources> SequenceSession::resources() const {
  std::lock_guard<SessionLock> lock(state_->mutex);
  require_handle(*state_, "resources");
  return state_->resources;
}

void SequenceSession::write_release_capacity_sources(std::vector<CapacitySource>& out) const {
  std::lock_guard<SessionLock> lock(state_->mutex);
  require_handle(*state_, "write_release_capacity_sources");
  state_->require_active_locked("write_release_capacity_sources");
  const auto& coordinator = *state_->coordinator;
  // What the caller passed in must be this coordinator's sources (refused before any change).
  std::vector<CapacitySource> merged;
  merged.reserve(out.size() + state_->current->domains().size() + 2);
  for (const auto& source : out) merged.push_back(coordinator.resolve_source(source, "write_release_capacity_sources"));
  merged.push_back(coordinator.slots_source());
  for (std::uint32_t d : state_->current->domains()) merged.push_back(coordinator.domain_source(d));
  // The pages' ids go back to their arenas, which a deferral on physical memory waits for.
  merged.push_back(coordinator.physical_source());
  out = std::move(merged);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

std::uint64_t SequenceSession::epoch() const noexcept { return state_->epoch; }
const std::string& SequenceSession::fingerprint() const { return state_->fingerprint(); }
Authority SequenceSession::sequence_authority() const noexcept { return state_->sequence; }
Authority SequenceSession::request_authority() const noexcept { return state_->request; }

void SequenceSession::verify(std::uint64_t epoch, const std::string& fingerprint) const {
  std::lock_guard<SessionLock> lock(state_->mutex);
  if (epoch != state_->epoch || fingerprint != state_->fingerprint())
    raise(ErrorKind::StaleAuthority, "stale sequence session authority (epoch or fingerprint mismatch)");
  require_handle(*state_, "verify");
  state_->require_active_locked("verify");
}

std::shared_ptr<CapacityWaitRegistration> SequenceSession::register_admission_waiter(const AdmissionDeferred& deferred) const {
  std::shared_ptr<AdmissionCoordinator> coordinator;  // the handle may close once the lock is let go
  {
    std::lock_guard<SessionLock> lock(state_->mutex);
    require_handle(*state_, "register_admission_waiter");
    state_->require_active_locked("register_admission_waiter");
    if (deferred.coordinator_id != state_->coordinator->id())
      raise(ErrorKind::StaleAuthority, "register_admission_waiter: the deferral belongs to another coordinator (foreign coordinator)");
    if (deferred.backing) {
      if (!(deferred.backing->sequence_authority == state_->sequence))
        raise(ErrorKind::StaleAuthority, "register_admission_waiter: the backing deferral names another sequence authority");
      if (deferred.backing->expected_generation != state_->generation_locked())
        raise(ErrorKind::StaleAuthority, "register_admission_waiter: stale backing generation " +
                                             std::to_string(deferred.backing->expected_generation) + " (now " +
                                             std::to_string(state_->generation_locked()) + "); retry the extension");
    }
    coordinator = state_->resources->session_backing()->coordinator();
  }
  return coordinator->register_waiter(deferred, "register_admission_waiter");
}

void SequenceSession::verify_backing_deferral(const BackingDecision& decision) const {
  std::lock_guard<SessionLock> lock(state_->mutex);
  require_handle(*state_, "verify_backing_deferral");
  state_->require_open_locked("verify_backing_deferral");
  if (decision.expected_generation != state_->generation_locked())
    raise(ErrorKind::StaleAuthority, "stale backing deferral: generation " + std::to_string(decision.expected_generation) +
                                         " moved on to " + std::to_string(state_->generation_locked()) + "; retry admission");
}

BackingDecision SequenceSession::try_ensure_backing_covers(std::int64_t tokens_in, std::optional<std::int64_t> pages_in) {
  return ensure_covers(tokens_in, pages_in, /*tokens_only=*/false);
}

BackingDecision SequenceSession::ensure_covers(std::int64_t tokens_in, std::optional<std::int64_t> pages_in,
                                               bool tokens_only) {
  auto& s = *state_;
  // step() asks for tokens only; its errors name it.
  const char* const op = tokens_only ? "step" : "try_ensure_backing_covers";
  if (tokens_in <= 0)
    raise(ErrorKind::InvalidArgument, std::string(op) + ": tokens must be positive, got " + std::to_string(tokens_in));
  const auto tokens = static_cast<std::uint64_t>(tokens_in);
  const std::uint64_t needed_pages =
      s.pages_for(tokens, tokens_only ? "step: tokens in pages" : "try_ensure_backing_covers: tokens in pages");
  if (pages_in && *pages_in <= 0)
    raise(ErrorKind::InvalidArgument, std::string(op) + ": pages must be positive, got " + std::to_string(*pages_in));
  std::uint64_t pages = pages_in ? static_cast<std::uint64_t>(*pages_in) : needed_pages;
  if (pages < needed_pages)
    raise(ErrorKind::InvalidArgument, std::string(op) + ": " + std::to_string(pages) + " pages cannot hold " +
                                          std::to_string(tokens) + " tokens");
  if (tokens > s.fit_tokens || pages > s.fit_pages()) raise(ErrorKind::Capacity, above_the_fit(op, s, tokens, pages));

  BackingDecision decision;
  decision.target_tokens = tokens;
  decision.target_pages = pages;
  std::shared_ptr<const BackingSnapshot> seen;
  std::shared_ptr<AdmissionCoordinator> coordinator;  // the handle may close while pages are prepared
  {
    std::lock_guard<SessionLock> lock(s.mutex);
    require_handle(s, op);
    s.require_open_locked(op);
    seen = s.current;
    decision.expected_generation = s.generation_locked();
    if (tokens_only && pages < seen->pages()) {
      pages = seen->pages();  // never above the fit: the frontier is within it
      decision.target_pages = pages;
    }
    const bool tokens_covered = tokens <= seen->tokens(), pages_covered = pages <= seen->pages();
    if (tokens_covered && pages_covered) {
      decision.outcome = BackingOutcome::current;
      decision.snapshot = seen;
      return decision;
    }
    if ((tokens < seen->tokens() && pages > seen->pages()) || (tokens > seen->tokens() && pages < seen->pages()))
      raise(ErrorKind::InvalidArgument, std::string(op) + ": the target (" + std::to_string(tokens) + " tokens, " +
                                            std::to_string(pages) + " pages) is incomparable with the frontier (" +
                                            std::to_string(seen->tokens()) + " tokens, " + std::to_string(seen->pages()) + " pages)");
    if (!s.quiescent_locked()) {
      decision.outcome = BackingOutcome::retry_required;
      decision.reason = "a frame or participant flight is live; extend between frames";
      return decision;
    }
    coordinator = s.resources->session_backing()->coordinator();
  }
  const std::uint64_t new_tokens = std::max(tokens, seen->tokens());
  const std::uint64_t new_pages = std::max(pages, seen->pages());
  const std::uint64_t delta = checked::sub_or_throw(
      new_pages, seen->pages(), tokens_only ? "step: page delta" : "try_ensure_backing_covers: page delta");
  const std::uint64_t next_generation =
      checked::add_or_throw(seen->generation(), std::uint64_t{1},
                            tokens_only ? "step: backing generation" : "try_ensure_backing_covers: backing generation");

  // Outside the locks: check logical capacity (a logical deferral never touches the device),
  // prepare physical pages, then claim the logical capacity.
  std::optional<PreparedPages> prepared;
  prepared.emplace(*coordinator, seen->domains());
  // The common extension first: it fits, and one coordinator lock claims it and takes its ids.
  std::uint64_t physical_epoch = 0;
  auto fast = AdmissionCoordinator::FastExtension::logical_short;
  if (delta > 0) {
    const auto count = checked::narrow<std::size_t>(checked::mul_or_throw(delta, std::uint64_t{seen->domains().size()},
                                                                          "backing: pages * domains"));
    if (!count) checked::overflow("backing: block ids");
    prepared->ids.resize(*count);
    fast = coordinator->take_extension(seen->domains(), delta, prepared->ids.data(), physical_epoch);
    if (fast == AdmissionCoordinator::FastExtension::taken) {
      prepared->physical_pages_ = delta;
      prepared->mark_logically_claimed();
    } else {
      prepared->ids.clear();
    }
  }
  if (fast == AdmissionCoordinator::FastExtension::physical_short) {
    decision.outcome = BackingOutcome::backing_deferred;
    decision.reason = "physical pages could not be prepared (device memory is short); wait on physical memory";
    decision.deferred = physical_extension_deferral(*coordinator, seen->domains(),
                                                    {s.sequence, decision.expected_generation, tokens, pages, seen->pages()}, delta,
                                                    physical_epoch, s.request_id);
    return decision;
  }
  // Logically short (or busy, which a take that waits never answers): the three calls answer.
  if (delta > 0 && fast != AdmissionCoordinator::FastExtension::taken) {
    pause_points::reach(pause_points::Point::extension_found_short);
    BackingDeferralContext context{s.sequence, decision.expected_generation, tokens, pages, seen->pages()};
    auto check = coordinator->claim_extension(seen->domains(), delta, context, s.request_id, /*claim=*/false, op);
    if (check.deferred) {
      decision.outcome = BackingOutcome::backing_deferred;
      decision.reason = "logical capacity is short";
      decision.deferred = std::move(check.deferred);
      return decision;
    }
    if (!prepared->allocate_physical(delta)) {
      decision.outcome = BackingOutcome::backing_deferred;
      decision.reason = "physical pages could not be prepared (device memory is short); wait on physical memory";
      decision.deferred = physical_extension_deferral(*coordinator, seen->domains(), context, delta,
                                                      check.physical_epoch, s.request_id);
      return decision;
    }
    auto claim = coordinator->claim_extension(seen->domains(), delta, context, s.request_id, /*claim=*/true, op);
    if (!claim.claimed) {
      prepared.reset();  // physical rollback; nothing logical was claimed
      decision.outcome = BackingOutcome::backing_deferred;
      decision.reason = "logical capacity is short";
      decision.deferred = std::move(claim.deferred);
      return decision;
    }
    prepared->mark_logically_claimed();
  }
  pause_points::reach(pause_points::Point::extension_prepared);

  std::shared_ptr<const BackingSnapshot> replaced;  // destroyed after the lock is released
  bool closed_meanwhile = false;
  {
    std::lock_guard<SessionLock> lock(s.mutex);
    if (s.handle_closed || !s.active_locked() || s.phase != SessionPhase::open) {
      // fall through to the rollback below, then report why
    } else if (delta > 0 && coordinator->closed()) {
      // Closed since the ids were taken: pages published now would land after close returned
      // (a frontier that moves within the pages held needs none, and goes on after a close).
      // Asked under the session's lock, so pages that pass are published before any reader
      // after close sees the session.
      closed_meanwhile = true;
    } else if (s.current != seen) {
      decision.outcome = (tokens <= s.current->tokens() && pages <= s.current->pages()) ? BackingOutcome::current
                                                                                       : BackingOutcome::retry_required;
      decision.snapshot = decision.outcome == BackingOutcome::current ? s.current : nullptr;
      decision.reason = "the backing changed while pages were prepared";
    } else if (!s.quiescent_locked()) {
      decision.outcome = BackingOutcome::retry_required;
      decision.reason = "a frame or participant flight became live; extend between frames";
    } else {
      // The snapshot first: what can fail (memory) fails before the ids are adopted.
      auto next = make_recycled<const BackingSnapshot>(s.resources->session_backing(), next_generation, new_tokens,
                                                       new_pages);
      if (delta > 0) s.resources->session_backing()->adopt(*prepared);
      replaced = std::move(s.current);
      s.publish_locked(next);
      decision.outcome = BackingOutcome::extended;
      decision.snapshot = std::move(next);
      return decision;
    }
  }
  prepared.reset();  // rollback: physical first, then the logical claim (which wakes waiters)
  if (closed_meanwhile) coordinator->require_open(op);  // raises: a coordinator never reopens
  if (decision.reason.empty()) {
    std::lock_guard<SessionLock> lock(s.mutex);
    require_handle(s, op);
    s.require_open_locked(op);
  }
  return decision;
}

CancelSnapshot SequenceSession::request_cancel() {
  std::lock_guard<SessionLock> lock(state_->mutex);
  auto& s = *state_;
  require_handle(s, "request_cancel");
  s.require_active_locked("request_cancel");
  if (s.phase == SessionPhase::poisoned) raise(ErrorKind::SessionState, "request_cancel: the sequence session is poisoned");
  s.phase = SessionPhase::cancel_requested;
  CancelSnapshot snap{s.phase, s.active_frame, {}, s.retired_locked()};
  s.extras.for_each_flight([&](std::uint64_t key, FlightPhase phase) { snap.flights.emplace_back(key, phase); });
  return snap;
}

TerminalReceipt SequenceSession::try_complete() {
  std::lock_guard<SessionLock> lock(state_->mutex);
  auto& s = *state_;
  require_handle(s, "try_complete");
  s.require_open_locked("try_complete");
  if (!s.quiescent_locked()) raise(ErrorKind::SessionState, "try_complete: a frame or participant flight is still live");
  if (s.retired_locked() == 0) raise(ErrorKind::SessionState, "try_complete: no frame has retired yet");
  return s.finish_locked(TerminalOutcome::completed, state_);
}

TerminalReceipt SequenceSession::try_abort() {
  std::lock_guard<SessionLock> lock(state_->mutex);
  auto& s = *state_;
  require_handle(s, "try_abort");
  s.require_active_locked("try_abort");
  if (s.phase == SessionPhase::open)
    raise(ErrorKind::SessionState, "try_abort: the session is open; request_cancel first or use try_abort_if_quiescent");
  if (!s.quiescent_locked()) raise(ErrorKind::SessionState, "try_abort: a frame or participant flight is still live");
  return s.finish_locked(TerminalOutcome::aborted, state_);
}

TerminalReceipt SequenceSession::try_abort_if_quiescent() {
  std::lock_guard<SessionLock> lock(state_->mutex);
  auto& s = *state_;
  require_handle(s, "try_abort_if_quiescent");
  s.require_active_locked("try_abort_if_quiescent");
  if (s.phase == SessionPhase::poisoned)
    raise(ErrorKind::SessionState, "try_abort_if_quiescent: the session is poisoned; use try_abort");
  if (!s.quiescent_locked())
    raise(ErrorKind::SessionState, "try_abort_if_quiescent: a frame or participant flight is still live (nothing changed)");
  return s.finish_locked(TerminalOutcome::aborted, state_);
}

std::unique_ptr<FrameHold> SequenceSession::acquire_frame() {
  std::lock_guard<SessionLock> lock(state_->mutex);
  auto& s = *state_;
  require_handle(s, "acquire_frame");
  s.require_open_locked("acquire_frame");
  if (s.active_frame) raise(ErrorKind::SessionState, "acquire_frame: frame " + std::to_string(*s.active_frame) + " is still active");
  const std::uint64_t id = s.take_frame_id_locked("acquire_frame");
  s.active_frame = id;
  try {
    return std::make_unique<FrameHold>(state_, id, s.current);
  } catch (...) {
    s.active_frame.reset();  // no holder: the session must not keep a frame nobody can end
    throw;
  }
}

std::unique_ptr<FlightHold> SequenceSession::prepare_flight(std::uint64_t key) {
  std::lock_guard<SessionLock> lock(state_->mutex);
  auto& s = *state_;
  require_handle(s, "prepare_flight");
  s.require_open_locked("prepare_flight");
  if (!s.active_frame) raise(ErrorKind::SessionState, "prepare_flight: no active frame");
  if (s.extras.find_flight(key)) raise(ErrorKind::SessionState, "prepare_flight: flight " + std::to_string(key) + " is already prepared");
  s.extras.set_flight(key, FlightPhase::prepared);
  try {
    return std::make_unique<FlightHold>(state_, key, *s.active_frame, s.resources->session_backing());
  } catch (...) {
    s.extras.erase_flight(key);  // no holder: the flight must not keep the session from ending
    throw;
  }
}

BackingOutcome SequenceSession::step(std::int64_t tokens) {
  auto& s = *state_;
  if (tokens <= 0) raise(ErrorKind::InvalidArgument, "step: tokens must be positive, got " + std::to_string(tokens));
  {
    std::lock_guard<SessionLock> lock(s.mutex);
    // One test for a session that can step (open, quiescent); the checks that name what is
    // wrong run only when it fails, and one of them raises.
    if (s.handle_closed || s.phase != SessionPhase::open || !s.quiescent_locked()) refuse_step_locked();
    if (static_cast<std::uint64_t>(tokens) <= s.current_tokens) {
      s.commit_step_locked();  // the common decode step: the frontier already covers it
      return BackingOutcome::current;
    }
  }
  return step_extending(tokens);
}

void SequenceSession::refuse_step_locked() const {
  const auto& s = *state_;
  require_handle(s, "step");
  s.require_open_locked("step");
  raise(ErrorKind::SessionState,
        "step: a frame or participant flight is live; commit the frame or end the flight first");
}

BackingOutcome SequenceSession::step_extending(std::int64_t tokens) {
  auto& s = *state_;
  // Extend a whole page at a time so the next steps of the page take the fast path of step().
  const std::uint64_t page_end = checked::mul_or_throw(s.pages_for(static_cast<std::uint64_t>(tokens), "step: tokens in pages"),
                                                      std::uint64_t{s.tokens_per_page}, "step: the page's last token");
  const std::uint64_t target = std::max<std::uint64_t>(static_cast<std::uint64_t>(tokens), std::min(page_end, s.fit_tokens));
  // While a test arms a pause point, the general path: its points are where the tests of its
  // races stop it (the in-place path has none, holding the session's lock throughout).
  if (!pause_points::armed())
    if (const auto outcome = extend_in_place(static_cast<std::uint64_t>(tokens), target)) return *outcome;
  BackingDecision decision = ensure_covers(static_cast<std::int64_t>(target), std::nullopt, /*tokens_only=*/true);
  std::lock_guard<SessionLock> lock(s.mutex);
  if (decision.outcome == BackingOutcome::backing_deferred) {
    if (decision.deferred) {
      s.extras.set_step_deferral(std::move(*decision.deferred));
    } else {
      s.extras.clear_step_deferral();
    }
    return decision.outcome;
  }
  s.extras.clear_step_deferral();
  if (decision.outcome != BackingOutcome::current && decision.outcome != BackingOutcome::extended) return decision.outcome;
  require_handle(s, "step");
  s.require_open_locked("step");
  if (!s.quiescent_locked() || static_cast<std::uint64_t>(tokens) > s.current_tokens) return BackingOutcome::retry_required;
  s.commit_step_locked();
  return decision.outcome;
}

std::optional<BackingOutcome> SequenceSession::extend_in_place(std::uint64_t tokens, std::uint64_t target) {
  auto& s = *state_;
  if (target > s.fit_tokens) return std::nullopt;  // the general path names the fit
  const std::uint64_t pages = s.pages_for(target, "step: tokens in pages");
  // The common extension's ids, taken here; more (a large step, many domains) take the general path.
  constexpr std::size_t kept_ids = 16;
  std::int32_t ids[kept_ids];
  // Let go after the lock: the snapshot this one replaces, and this one if it is not published.
  std::shared_ptr<const BackingSnapshot> replaced, next;
  std::unique_lock<SessionLock> lock(s.mutex);
  // What changed since step() let the lock go is answered as the general path answers it.
  if (s.handle_closed || s.phase != SessionPhase::open) refuse_step_locked();
  if (!s.quiescent_locked()) {
    s.extras.clear_step_deferral();
    return BackingOutcome::retry_required;
  }
  s.require_frame_id_locked("step");  // before anything changes: the frame is committed last
  if (tokens <= s.current_tokens) {  // another thread extended it meanwhile
    s.commit_step_locked();
    return BackingOutcome::current;
  }
  const std::uint64_t new_pages = std::max(pages, s.current_pages);
  const std::uint64_t delta = new_pages - s.current_pages;
  const auto& domains = s.current->domains();
  if (delta > kept_ids / domains.size()) return std::nullopt;
  const std::uint64_t generation =
      checked::add_or_throw(s.generation_locked(), std::uint64_t{1}, "step: backing generation");
  const auto& backing = s.resources->session_backing();
  // Made before anything is taken: what can fail (memory) fails with nothing changed.
  next = make_recycled<const BackingSnapshot>(backing, generation, target, new_pages);
  std::uint64_t physical_epoch = 0;
  if (delta != 0) {
    // Under this session's lock, without waiting: the coordinator's lock may be held across a
    // driver allocation (a domain growing), and nothing under a session's lock waits. (The
    // coordinator takes no session's lock under its own.)
    switch (s.coordinator->take_extension(domains, delta, ids, physical_epoch, /*wait=*/false)) {
      case AdmissionCoordinator::FastExtension::taken:
        break;
      case AdmissionCoordinator::FastExtension::physical_short: {
        // The page memory refused (and counted the refusal): a physical deferral, as the general
        // path answers it, made once the lock is let go. Nothing was taken.
        std::shared_ptr<AdmissionCoordinator> coordinator = backing->coordinator();
        const std::shared_ptr<const BackingSnapshot> seen = s.current;
        const BackingDeferralContext context{s.sequence, s.generation_locked(), target, new_pages, s.current_pages};
        const RequestId request_id = s.request_id;
        lock.unlock();
        auto deferred = physical_extension_deferral(*coordinator, seen->domains(), context, delta, physical_epoch,
                                                    request_id);
        lock.lock();
        s.extras.set_step_deferral(std::move(deferred));
        return BackingOutcome::backing_deferred;
      }
      default:
        return std::nullopt;  // logically short, or the coordinator busy: the general path
    }
  }
  try {
    backing->adopt_taken(ids, delta);
  } catch (...) {
    // Given back once the lock is let go (nothing was published); the backing, kept, keeps its
    // domains and its coordinator.
    const std::shared_ptr<SequenceBacking> kept = backing;
    lock.unlock();
    kept->coordinator()->give_back_blocks(kept->domains(), delta, ids);  // physical first, then the logical claim
    kept->coordinator()->release_pages(kept->domains(), delta);
    throw;
  }
  replaced = std::move(s.current);
  s.publish_locked(std::move(next));
  s.commit_step_locked();  // cannot raise: checked above, under the same lock
  return BackingOutcome::extended;
}

std::optional<AdmissionDeferred> SequenceSession::step_deferral() const {
  std::lock_guard<SessionLock> lock(state_->mutex);
  if (const AdmissionDeferred* deferral = state_->extras.step_deferral()) return *deferral;
  return std::nullopt;
}

SessionPhase SequenceSession::phase() const noexcept {
  std::lock_guard<SessionLock> lock(state_->mutex);
  return state_->phase;
}

std::shared_ptr<const BackingSnapshot> SequenceSession::backing() const {
  std::lock_guard<SessionLock> lock(state_->mutex);
  require_handle(*state_, "backing");
  return state_->current;
}

namespace {

// Under the session's lock, its handle open: where `domain_index` is among the sequence's
// domains (npos: not in it). The first domain, a decode row's common case, needs no search.
std::size_t domain_slot_locked(const SessionState& s, std::uint32_t domain_index) {
  if (domain_index == s.first_domain) return 0;
  const auto& domains = s.current->domains();
  const auto it = std::find(domains.begin(), domains.end(), domain_index);
  return it == domains.end() ? std::string::npos : static_cast<std::size_t>(it - domains.begin());
}

// What keeps a block table row of `pages` ids in domain slot `slot` from being written for
// `owner` into `width` columns (written: nothing does).
SequenceSession::TableRow row_refusal(const SessionState& s, const AdmissionCoordinator& owner, std::size_t slot,
                                      std::uint64_t pages, std::uint64_t width) {
  if (s.coordinator != &owner) return SequenceSession::TableRow::foreign;
  if (slot == std::string::npos) return SequenceSession::TableRow::not_in_domain;
  if (pages > width) return SequenceSession::TableRow::too_wide;
  return SequenceSession::TableRow::written;
}

}  // namespace

SequenceSession::TableRowAnswer SequenceSession::write_table_row(const AdmissionCoordinator& owner,
                                                                 std::uint32_t domain_index,
                                                                 TableRowTarget& target) const {
  std::lock_guard<SessionLock> lock(state_->mutex);
  const SessionState& s = *state_;
  require_row_handle(s);
  const std::uint64_t pages = s.current_pages;
  const std::size_t slot = domain_slot_locked(s, domain_index);
  if (const TableRow refusal = row_refusal(s, owner, slot, pages, target.width); refusal != TableRow::written)
    return {refusal, pages};
  // The common row, the sequence's first domain, reads the ids kept beside the lock; another
  // reads them from the backing, which the open handle's resources hold (its ids move only
  // under this lock).
  const std::int32_t* ids = slot == 0 ? s.first_ids : s.resources->session_backing()->published_ids(slot);
  write_table_row_ids(ids, pages, target);
  return {TableRow::written, pages};
}

namespace {

// Under the session's lock, its handle open.
void table_source_locked(const SessionState& s, std::uint32_t domain_index, const Authority& known,
                         std::uint64_t written, SequenceSession::TableSource& out) {
  out.coordinator = s.coordinator;
  out.pages = s.current_pages;
  out.sequence = s.sequence;
  out.stamp = s.table_stamp.load(std::memory_order_relaxed);  // under the lock that writes it
  if (out.sequence == known && out.pages == written) {
    // Unchanged since the row was written (and checked): no reference count, no domain search.
    out.backing.reset();
    out.slot = 0;
    return;
  }
  out.slot = domain_slot_locked(s, domain_index);
  out.backing = s.resources->session_backing();
}

}  // namespace

SequenceSession::TableSource SequenceSession::table_source_since(std::uint32_t domain_index, const Authority& known,
                                                                 std::uint64_t written) const {
  std::lock_guard<SessionLock> lock(state_->mutex);
  require_row_handle(*state_);
  TableSource out;
  table_source_locked(*state_, domain_index, known, written, out);
  return out;
}

namespace {

// Under the session's lock, its handle open and `t` tokens within its fit: what keeps its row
// of a block table (for `owner`, in `domain_index`, `max_pages` wide) from being written once
// they are covered, with the pages it then holds. An extension covers whole pages and no more
// (no division on a decode row's common path, which needs no extension).
SequenceSession::TableRowAnswer row_check_locked(const SessionState& s, std::uint64_t t, const AdmissionCoordinator& owner,
                                                 std::uint32_t domain_index, std::uint64_t max_pages) {
  std::uint64_t pages = s.current_pages;
  if (t > s.current_tokens) pages = std::max(pages, t / s.tokens_per_page + (t % s.tokens_per_page != 0));
  return {row_refusal(s, owner, domain_slot_locked(s, domain_index), pages, max_pages), pages};
}

}  // namespace

SequenceSession::TableRowAnswer SequenceSession::table_row_check(std::int64_t tokens, const AdmissionCoordinator& owner,
                                                                 std::uint32_t domain_index,
                                                                 std::uint64_t max_pages) const {
  const auto& s = *state_;
  if (tokens <= 0) return {};
  std::lock_guard<SessionLock> lock(s.mutex);
  if (s.handle_closed || static_cast<std::uint64_t>(tokens) > s.fit_tokens) return {};
  return row_check_locked(s, static_cast<std::uint64_t>(tokens), owner, domain_index, max_pages);
}

SequenceSession::TableRowAnswer SequenceSession::step_with_source(std::int64_t tokens, const AdmissionCoordinator& owner,
                                                                  std::uint32_t domain_index, std::uint64_t max_pages,
                                                                  const Authority& known, std::uint64_t written,
                                                                  TableSource& source, BackingOutcome& outcome) {
  auto& s = *state_;
  if (tokens > 0) {
    std::lock_guard<SessionLock> lock(s.mutex);
    // Past the request's fit no width is the reason: step() below refuses it, naming the fit.
    if (!s.handle_closed && static_cast<std::uint64_t>(tokens) <= s.fit_tokens) {
      const auto t = static_cast<std::uint64_t>(tokens);
      if (const TableRowAnswer answer = row_check_locked(s, t, owner, domain_index, max_pages);
          answer.answer != TableRow::written)
        return answer;
      if (s.phase == SessionPhase::open && s.quiescent_locked() && t <= s.current_tokens) {
        s.commit_step_locked();  // step()'s common path, then the row's source, under the same lock
        table_source_locked(s, domain_index, known, written, source);
        outcome = BackingOutcome::current;
        return {TableRow::written, s.current_pages};
      }
    }
  }
  outcome = step(tokens);  // an extension, or the error step() gives
  source = table_source_since(domain_index, known, written);
  return {TableRow::written, source.pages};
}

bool SequenceSession::opened_on(const AdmissionCoordinator& coordinator) const noexcept {
  return state_->coordinator == &coordinator;
}

std::uint64_t SequenceSession::next_frame_id() const noexcept {
  std::lock_guard<SessionLock> lock(state_->mutex);
  return state_->next_frame;
}

std::optional<std::uint64_t> SequenceSession::active_frame() const noexcept {
  std::lock_guard<SessionLock> lock(state_->mutex);
  return state_->active_frame;
}

std::size_t SequenceSession::flight_count() const noexcept {
  std::lock_guard<SessionLock> lock(state_->mutex);
  return state_->extras.flight_count();
}

std::uint64_t SequenceSession::retired_frames() const noexcept {
  std::lock_guard<SessionLock> lock(state_->mutex);
  return state_->retired_locked();
}

std::optional<TerminalReceipt> SequenceSession::receipt() const {
  std::lock_guard<SessionLock> lock(state_->mutex);
  std::optional<TerminalReceipt> out;
  if (const TerminalReceipt* receipt = state_->extras.receipt()) out = *receipt;
  if (out) out->session = state_;
  return out;
}

BatchCheck::BatchCheck() noexcept {
  static std::atomic<std::uint32_t> last{0};
  do mark_ = static_cast<std::uint8_t>(last.fetch_add(1, std::memory_order_relaxed) + 1);
  while (mark_ == 0);  // 0 is a session no batch named
}

std::optional<SequenceSession::BatchRefusal> BatchCheck::refusal(SequenceSession* const* sessions, std::size_t row,
                                                                 std::int64_t tokens) const {
  using Refusal = SequenceSession::BatchRefusal;
  if (tokens <= 0) return Refusal{ErrorKind::InvalidArgument, "step: tokens must be positive, got " + std::to_string(tokens)};
  const SessionState& s = *sessions[row]->state();
  if (s.table_stamp.load(std::memory_order_acquire) == 0)  // one load: 0 only once the handle closed
    return Refusal{ErrorKind::Closed, std::string("step: ") + closed_handle};
  // Fixed when the session opened: read without its lock. (step's own check, made early.)
  const auto target = static_cast<std::uint64_t>(tokens);
  if (target > s.fit_tokens)
    return Refusal{ErrorKind::Capacity, above_the_fit("step", s, target, s.pages_for(target, "step: tokens in pages"))};
  if (const std::size_t first = first_row(sessions, row); first != row)
    return Refusal{ErrorKind::InvalidArgument,
                   "step: the session is also row " + std::to_string(first) + ", and a batch steps each session once"};
  return std::nullopt;
}

std::size_t BatchCheck::first_row(SequenceSession* const* sessions, std::size_t row) const noexcept {
  // Relaxed: a batch reads back only its own thread's stores. Two threads stepping one
  // session in two batches at once step it in no set order anyway; a batch may then miss a
  // repeat of its own (the other's mark came between its two rows), never refuse a row.
  std::atomic<std::uint8_t>& mark = sessions[row]->state()->batch_mark;
  if (mark.load(std::memory_order_relaxed) != mark_) {
    mark.store(mark_, std::memory_order_relaxed);
    return row;
  }
  for (std::size_t j = 0; j < row; ++j)
    if (sessions[j] == sessions[row]) return j;
  return row;  // the mark of a batch 255 (or a multiple of 255) batches ago
}

std::size_t BatchCheck::first_row(FrameHold* const* frames, std::size_t row) const noexcept {
  std::atomic<std::uint8_t>& mark = frames[row]->state_->batch_mark;  // as for sessions, above
  if (mark.load(std::memory_order_relaxed) != mark_) {
    mark.store(mark_, std::memory_order_relaxed);
    return row;
  }
  for (std::size_t j = 0; j < row; ++j)
    if (frames[j]->state_ == frames[row]->state_) return j;
  return row;
}

void step_all(const std::vector<SequenceSession*>& sessions, const std::int64_t* tokens, BackingOutcome* outcomes) {
  const BatchCheck batch;
  for (std::size_t i = 0; i < sessions.size(); ++i)
    if (const auto refusal = batch.refusal(sessions.data(), i, tokens[i]))
      raise(refusal->kind, refusal->why + " (step_all: row " + std::to_string(i) + "; no row stepped)",
            {{"row", static_cast<std::int64_t>(i)}, {"rows_stepped", std::int64_t{0}}});
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    try {
      outcomes[i] = sessions[i]->step(tokens[i]);
    } catch (const Error& e) {
      rethrow_at_row(Error(e.kind(), e.message() + " (step_all: row " + std::to_string(i) + "; " +
                                         (i == 0 ? "no row stepped" : "the rows before it stepped") + ")",
                           e.attributes()),
                     i, i);
    }
  }
}

void commit_frames(const std::vector<FrameHold*>& frames, FrameDisposition* out) {
  const BatchCheck batch;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    // As step_all's refusals before any row steps: they carry the row, and none committed.
    const auto refuse = [i](const std::string& why) {
      raise(ErrorKind::InvalidArgument, why, {{"row", static_cast<std::int64_t>(i)}, {"rows_stepped", std::int64_t{0}}});
    };
    if (!frames[i]) refuse("commit_frames: a frame is missing (row " + std::to_string(i) + "; no frame was committed)");
    if (const std::size_t first = batch.first_row(frames.data(), i); first != i)
      refuse("commit_frames: row " + std::to_string(i) + " is a frame of the session of row " + std::to_string(first) +
             ", and a batch commits each session's frame once (no frame was committed)");
  }
  for (std::size_t i = 0; i < frames.size(); ++i) {
    try {
      out[i] = frames[i]->commit();
    } catch (const Error& e) {
      // As step_all's: the row refused and how many rows committed before it.
      rethrow_at_row(Error(e.kind(), e.message() + " (commit_frames: row " + std::to_string(i) + "; " +
                                         (i == 0 ? "no frame was committed" : "the rows before it committed") + ")",
                           e.attributes()),
                     i, i);
    }
  }
}

std::vector<std::unique_ptr<FrameHold>> acquire_frames(const std::vector<SequenceSession*>& sessions) {
  std::vector<SessionState*> states;
  states.reserve(sessions.size());
  for (auto* session : sessions) {
    if (!session) raise(ErrorKind::InvalidArgument, "acquire_frames: a session is missing");
    states.push_back(session->state().get());
  }
  std::vector<SessionState*> order = states;
  std::sort(order.begin(), order.end());
  if (std::adjacent_find(order.begin(), order.end()) != order.end())
    raise(ErrorKind::InvalidArgument, "acquire_frames: a session is named twice");
  // Declared before the locks: on a failure below, the locks go first, then the holds made
  // so far go (each takes its session's lock, and finds no frame of its own to end).
  std::vector<std::unique_ptr<FrameHold>> holds;
  holds.reserve(states.size());
  // Lock in address order (no deadlock with another batch), check all, then acquire all.
  std::vector<std::unique_lock<SessionLock>> locks;
  locks.reserve(order.size());
  for (auto* s : order) locks.emplace_back(s->mutex);
  for (std::size_t i = 0; i < states.size(); ++i) {
    auto& s = *states[i];
    try {
      require_handle(s, "acquire_frames");
      s.require_open_locked("acquire_frames");
      if (s.active_frame) raise(ErrorKind::SessionState, "acquire_frames: a frame is still active");
      s.require_frame_id_locked("acquire_frames");
    } catch (const Error& e) {
      raise(e.kind(), e.message() + " (row " + std::to_string(i) + "; no frame was acquired)");
    }
  }
  // Every hold is made before any session changes: out of memory at a later row then finds
  // the earlier ones not yet active, so their holds go without poisoning their sessions.
  for (std::size_t i = 0; i < states.size(); ++i)  // reserved: no growth
    holds.push_back(std::make_unique<FrameHold>(sessions[i]->state(), states[i]->next_frame, states[i]->current));
  for (std::size_t i = 0; i < states.size(); ++i)
    states[i]->active_frame = states[i]->take_frame_id_locked("acquire_frames");  // checked above: cannot throw
  return holds;
}

}  // namespace lifecore::sequence
