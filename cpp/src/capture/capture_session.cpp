// CaptureSession: schedule, ledger, the one step slot, records and checkpoints.
// Interventions and routing live in capture_session_interventions.cpp.
#include "lifecore/capture/session.hpp"

#include <cassert>
#include <limits>

#include "capture/capture_geometry.hpp"
#include "capture/capture_json.hpp"
#include "capture/capture_payload_check.hpp"
#include "capture/capture_session_guard.hpp"
#include "lifecore/capture/transform_cost.hpp"
#include "lifecore/checked.hpp"

namespace lifecore::capture {

std::atomic<std::uint64_t> CaptureSession::next_id_{1};

CaptureSession::CaptureSession(AdmittedCapturePlan plan)
    : id_(next_id_.fetch_add(1)), plan_(std::move(plan)), ledger_(plan_.plan().limits, {}) {
  const auto& selections = plan_.plan().selections;
  for (std::size_t i = 0; i < selections.size(); ++i) {
    selections_by_path_[selections[i].path].push_back(i);
    envelopes_.push_back(metadata_envelope(selections[i], plan_.points()[i]));
    // What a point's expected extents depend on, beside its shape: the phase (sequence, token
    // rows) and the prediction (context).
    std::uint8_t depends = 0;
    for (const auto& axis : plan_.points()[i].axes) {
      if (axis.dim.kind == DimKind::sequence || axis.dim.kind == DimKind::token_rows) depends |= depends_on_phase;
      if (axis.dim.kind == DimKind::context) depends |= depends_on_prediction;
    }
    priced_depends_.push_back(depends);
  }
  priced_.resize(selections.size());
}

namespace {

const AdmittedCapturePlan& readmitted(const AdmittedCapturePlan& plan, const CaptureDiscovery& discovery) {
  std::string identity;
  try {
    identity = admit(plan.plan(), discovery, plan.request()).identity();
  } catch (const Error& error) {
    raise(ErrorKind::Admission, std::string("capture admission does not match this session's catalog: ") + error.message());
  }
  if (identity != plan.identity()) raise(ErrorKind::Admission, "capture admission does not match this session's catalog");
  return plan;
}

}  // namespace

CaptureSession::CaptureSession(AdmittedCapturePlan plan, const CaptureDiscovery& discovery)
    : CaptureSession(readmitted(plan, discovery)) {}

void CaptureSession::require_unprepared() const {
  if (restore_prepared_) raise(ErrorKind::CaptureSession, "a prepared restore holds this capture session");
}

void CaptureSession::begin_step(CapturePhase phase, std::uint64_t prediction) {
  Guard guard(*this);
  require_unprepared();
  if (step_open_) raise(ErrorKind::CaptureSession, "previous capture step has not been consumed");
  if (pending_control_) raise(ErrorKind::CaptureSession, "a routing control is still pending");
  if (prediction >= plan_.request().max_predictions)
    raise(ErrorKind::InvalidArgument, "prediction " + std::to_string(prediction) + " is beyond max_predictions " +
                                          std::to_string(plan_.request().max_predictions));
  if ((phase == CapturePhase::prefill) != (prediction == 0))
    raise(ErrorKind::InvalidArgument, "prediction 0 is the prefill prediction; decode starts at 1");
  ready_ = false;  // a failed begin_step can never become a checkpoint
  ever_started_ = true;
  ledger_.begin_step();
  // Reserve every diagnostic envelope first, the selections' and the operations': an
  // unaccounted skip or operation record would itself violate the export limit, so any
  // refusal here (fail or skip policy) fails the step. Reserved as one sum, so a refused step
  // is charged nothing (a sum past 64 bits exceeds every limit).
  CaptureUsage envelopes;
  for (const auto* all : {&envelopes_, &operation_envelopes_}) {
    for (const auto& envelope : *all) {
      if (auto budget = overflowing_budget(envelopes, envelope)) raise_limit({*budget, false});
      envelopes = *checked_add(envelopes, envelope);
    }
  }
  ledger_.reserve(envelopes);
  const auto& selections = plan_.plan().selections;
  records_.clear();
  records_.reserve(selections.size());
  for (std::size_t i = 0; i < selections.size(); ++i) {
    const auto& point = plan_.points()[i];
    CaptureRecord record;
    record.selection_id = selections[i].id;
    record.path = selections[i].path;
    record.node_id = point.node_id;
    record.position = point.position;
    record.charged = envelopes_[i];
    if (!selections[i].schedule.scheduled(phase, prediction)) {
      record.outcome.kind = OutcomeKind::skipped;
      record.outcome.skip = SkipReason::schedule;
    }
    records_.push_back(std::move(record));
  }
  operation_records_.clear();
  if (interventions_) {
    const auto& operations = interventions_->plan().operations;
    for (std::size_t i = 0; i < operations.size(); ++i) {
      const auto& op = operations[i];
      InterventionRecord record;
      record.operation_id = op.id;
      record.target = op.target;
      record.charged = operation_envelopes_[i];
      record.outcome = op.schedule.scheduled(phase, prediction) ? InterventionOutcomeKind::missing
                                                                : InterventionOutcomeKind::inactive;
      operation_records_.push_back(std::move(record));
    }
  }
  operation_observed_.assign(operation_records_.size(), 0);
  phase_ = phase;
  prediction_ = prediction;
  has_step_ = true;
  step_open_ = true;
  capture_time_ = {};
}

void CaptureSession::fail_record(CaptureRecord& record, FailReason reason, std::string_view message) {
  record.payload = {};
  record.outcome = {};
  record.outcome.kind = OutcomeKind::failed;
  record.outcome.fail = reason;
  record.outcome.message = bound_message(message);
}

std::vector<std::size_t> CaptureSession::selections_at(std::string_view path) const {
  auto found = selections_by_path_.find(path);
  return found == selections_by_path_.end() ? std::vector<std::size_t>{} : found->second;
}

void CaptureSession::observe(CaptureBackend& backend, std::string_view path, TensorHandle tensor) {
  auto found = selections_by_path_.find(path);
  static const std::vector<std::size_t> none;
  observe_at(backend, path, found == selections_by_path_.end() ? none : found->second, tensor);
}

void CaptureSession::observe_at(CaptureBackend& backend, std::string_view path,
                                const std::vector<std::size_t>& selections, TensorHandle tensor) {
  Guard guard(*this);
  require_unprepared();
  if (!step_open_)
    raise(ErrorKind::CaptureSession, "observe at " + std::string(path) +
                                         ": no capture step is open (begin_step or capture_step opens one; a "
                                         "capture() block's one step is its forward through the model)");
  if (selections.empty()) {  // nothing selected here
    note_observed(path);
    return;
  }
  for (auto index : selections)
    if (index >= records_.size() || plan_.plan().selections[index].path != path)
      raise(ErrorKind::InvalidArgument, "selection " + std::to_string(index) + " is not observed at " + std::string(path));
  bool work = false;
  for (auto index : selections) {
    const auto kind = records_[index].outcome.kind;
    if (kind == OutcomeKind::skipped) continue;
    if (kind != OutcomeKind::missing)
      raise(ErrorKind::CaptureSession, "observation emitted twice at " + std::string(path) + " (selection '" +
                                           records_[index].selection_id + "' is already " +
                                           to_string(kind) + " this step)");
    work = true;
  }
  if (!work) {  // skipped: the backend is never called, no handle is kept
    note_observed(path);
    return;
  }
  auto started = std::chrono::steady_clock::now();
  std::optional<Error> first_error;
  Facts facts;
  // Asked before any record is touched: what is no tensor of the backend's is the caller's
  // mistake, refused with every record as it was (the right tensor may still be observed).
  try {
    facts.facts = backend.describe(tensor);
  } catch (const TensorRefused& refused) {
    capture_time_ += std::chrono::steady_clock::now() - started;
    raise(ErrorKind::TypeMismatch, "observe at " + std::string(path) + ": " + refused.message + " (nothing was changed)");
  } catch (const BackendFailure& failure) {
    facts.failure = failure;
  }
  note_observed(path);
  for (auto index : selections)
    if (records_[index].outcome.kind == OutcomeKind::missing) observe_selection(backend, index, tensor, facts, first_error);
  capture_time_ += std::chrono::steady_clock::now() - started;
  if (!first_error) return;
  // The error is the first record's to fail (every record here was missing or skipped before
  // this call, so a failed one failed in it). It says what became of every record the call
  // failed, when that is more than its own refusal tells (the call's mistake, a tensor that does
  // not fit the point, or several records): the point is observed once per step, so the same
  // call again is refused as a second observation.
  std::vector<std::string_view> failed;
  bool invalid = false;
  for (auto index : selections) {
    const CaptureRecord& r = records_[index];
    if (r.outcome.kind != OutcomeKind::failed) continue;
    failed.push_back(r.selection_id);
    invalid = invalid || r.outcome.fail == FailReason::invalid;
  }
  if (!invalid && failed.size() < 2) throw *first_error;
  std::string which;
  for (std::size_t k = 0; k < failed.size(); ++k)
    which += std::string(k == 0 ? "" : k + 1 == failed.size() ? " and " : ", ") + "'" + std::string(failed[k]) + "'";
  throw Error(first_error->kind(),
              first_error->message() + (failed.size() == 1 ? " (the record of selection " + which + " is FAILED"
                                                            : " (the records of selections " + which + " are FAILED") +
                  " for this step: a point is observed once per step)",
              first_error->attributes());
}

void CaptureSession::observe_selection(CaptureBackend& backend, std::size_t index, TensorHandle tensor, Facts& facts,
                                       std::optional<Error>& first_error) {
  auto& record = records_[index];
  const auto& selection = plan_.plan().selections[index];
  const auto& point = plan_.points()[index];
  auto fail = [&](FailReason reason, ErrorKind kind, const std::string& message,
                  std::vector<ErrorAttribute> attributes = {}) {
    fail_record(record, reason, message);
    // The caller's error also says what became of the record: the point is observed once per
    // step, so the same call again is refused as a second observation.
    if (!first_error) first_error.emplace(kind, message, std::move(attributes));  // observe() completes it
  };
  try {
    if (facts.failure) throw *facts.failure;
    auto& priced = priced_[index];
    const std::uint8_t depends = priced_depends_[index];
    if (facts.facts && priced.valid && priced.source_shape == facts.facts->shape &&
        priced.itemsize == facts.facts->itemsize && priced.on_host == facts.facts->on_host &&
        (!(depends & depends_on_phase) || priced.phase == phase_) &&
        (!(depends & depends_on_prediction) || priced.prediction == prediction_)) {
      // Seen before with these facts: checked, resolved and priced then.
      record.source_shape = priced.request.source_shape;
      record.selected_shape = priced.request.selected_shape;
    } else {
      priced.valid = false;
      priced.summary_record_bound = 0;
      TransformRequest request;
      request.serial = ++request_serial_;
      request.kind = selection.transform.kind;
      request.source_shape = facts.facts ? facts.facts->shape : backend.shape(tensor);
      if (auto problem = check_shape(point, request.source_shape, plan_.request(), phase_, prediction_))
        return fail(FailReason::invalid, ErrorKind::InvalidArgument, *problem);
      // Kept only once checked: the envelope prices a record's shape at the point's rank, and
      // a refused shape (of any rank) is published by its message alone.
      record.source_shape = request.source_shape;
      if (auto problem = resolve_region(selection.slices, point, request.source_shape, request.region,
                                        request.selected_shape))
        return fail(FailReason::invalid, ErrorKind::InvalidArgument, *problem);
      record.selected_shape = request.selected_shape;
      request.max_elements = selection.transform.max_elements;
      request.edges = selection.transform.edges;
      request.count = selection.transform.count;
      if (request.kind == TransformKind::top_candidates &&
          (request.source_shape.empty() || request.count > request.source_shape.back()))
        return fail(FailReason::invalid, ErrorKind::InvalidArgument,
                    "top candidates exceed the vocabulary at " + point.path + ": " + std::to_string(request.count) +
                        " asked, but the last axis holds " +
                        (request.source_shape.empty() ? std::string("none (a scalar)")
                                                      : std::to_string(request.source_shape.back())));
      // Top candidates are of the last row: logits with no rows have none (refused before any charge).
      if (request.kind == TransformKind::top_candidates && element_count(request.selected_shape) == 0)
        return fail(FailReason::invalid, ErrorKind::InvalidArgument,
                    "top candidates of logits with no rows at " + point.path);
      if (facts.facts) {
        priced.cost = transform_usage(request.kind, request.selected_shape, facts.facts->itemsize, request.max_elements,
                                      request.edges.size(), request.count, facts.facts->on_host);
        priced.source_shape = facts.facts->shape;
        priced.itemsize = facts.facts->itemsize;
        priced.on_host = facts.facts->on_host;
        priced.phase = phase_;
        priced.prediction = prediction_;
        priced.request = std::move(request);
        priced.valid = true;
      } else {
        // A backend pricing its own transforms is asked every time (its estimate may change).
        priced.request = std::move(request);
        priced.cost = backend.estimate(tensor, priced.request);  // side-effect free; unknown throws
      }
    }
    const TransformRequest& request = priced.request;
    const CaptureUsage cost = priced.cost;
    std::optional<LimitHit> hit;
    // The physical native byte limit bounds one capture's peak native memory; it is checked
    // before the ledger so a refused capture is charged nothing beyond its envelope.
    if (auto physical = plan_.plan().limits.physical_native_bytes;
        physical && backend.native_bytes(tensor, request) > *physical)
      hit = LimitHit{Budget::physical_native, false};
    if (!hit) hit = ledger_.try_reserve(cost);
    if (hit) {
      if (plan_.plan().limits.on_limit == OnLimit::skip) {
        record.outcome = {};
        record.outcome.kind = OutcomeKind::skipped;
        record.outcome.skip = SkipReason::limit;
        record.outcome.budget = hit->budget;
        record.outcome.cumulative = hit->cumulative;
        return;  // no transform runs, nothing is materialized
      }
      std::string message = hit->budget == Budget::physical_native
                                ? "capture physical native byte limit exceeded at " + point.path
                                : std::string("capture ") + (hit->cumulative ? "cumulative" : "per-step") +
                                      " limit exceeded: " + to_string(hit->budget) + " (selection '" +
                                      selection.id + "' at " + point.path + ")";
      fail(FailReason::limit, ErrorKind::BudgetExceeded, message,
           {{"budget", std::string(to_string(hit->budget))}, {"cumulative", hit->cumulative}});
      record.outcome.budget = hit->budget;
      record.outcome.cumulative = hit->cumulative;
      return;
    }
    // Within the step's reservation (envelopes + cost), so it cannot overflow; checked anyway.
    record.charged = add_or_throw(record.charged, cost, "capture charge");
    const std::uint64_t available = element_count(request.selected_shape);
    if (request.kind == TransformKind::summary && available == 0) {
      // An empty region's summary is known without the backend (an empty reduction is an
      // error in some frameworks): no values, every statistic NaN.
      constexpr double nan = std::numeric_limits<double>::quiet_NaN();
      record.payload = CapturePayload::summary_of(0, 0, nan, nan, nan, nan);
    } else {
      record.payload = backend.transform(tensor, request);
      // Published only as the answer to what was asked: another kind, shape or element size,
      // or numbers no region could give, fail the record with what the backend got wrong.
      if (auto problem = payload_problem(request, record.payload, available, facts.facts ? facts.facts->itemsize : 0))
        return fail(FailReason::native, ErrorKind::CaptureSession,
                    "backend.transform returned " + *problem + " at " + point.path);
    }
    // The ledger is the authority: what is kept may never exceed what was charged for it.
    if (record.payload.retained_bytes() > cost.retained_bytes)
      return fail(FailReason::native, ErrorKind::CaptureSession,
                  "backend underestimated retained capture bytes at " + point.path);
    if (request.kind == TransformKind::preview && record.payload.elements() < available) {
      record.outcome.kind = OutcomeKind::truncated;
      record.outcome.available = available;
      record.outcome.emitted = record.payload.elements();
    } else {
      record.outcome.kind = OutcomeKind::captured;
    }
    // What is published may never exceed what was charged for it.
    if (!record_fits_charge(priced, record))
      return fail(FailReason::native, ErrorKind::CaptureSession,
                  "backend underestimated encoded capture size at " + point.path);
  } catch (const BackendFailure& failure) {
    fail(FailReason::native, ErrorKind::CaptureSession, "native capture failed: " + failure.message);
  } catch (const Error& error) {
    fail(FailReason::invalid, error.kind(), error.message());
  }
}

bool CaptureSession::record_fits_charge(PricedRequest& priced, const CaptureRecord& record) {
  if (priced.valid && record.payload.kind == PayloadKind::summary && record.outcome.kind == OutcomeKind::captured) {
    if (priced.summary_record_bound == 0) {
      JsonWriter bound(UINT64_MAX, JsonMode::bound);
      write_record(bound, record);
      priced.summary_record_bound = bound.size();
    }
    // Sound because such a record's strings and shape lengths are fixed under one pricing
    // (write_record / write_outcome say so where they write them).
    assert(priced.summary_record_bound >= [&] {
      JsonWriter exact(UINT64_MAX, JsonMode::count);
      write_record(exact, record);
      return exact.size();
    }());
    if (priced.summary_record_bound <= record.charged.encoded_bytes) return true;
  }
  return fits_within(record.charged.encoded_bytes, [&](JsonWriter& json) { write_record(json, record); });
}

bool CaptureSession::operation_fits_charge(const InterventionRecord& record) {
  return fits_within(record.charged.encoded_bytes, [&](JsonWriter& json) { write_intervention_record(json, record); });
}

std::optional<CapturedStep> CaptureSession::take_step() {
  Guard guard(*this);
  require_unprepared();
  if (!step_open_) return std::nullopt;
  bool succeeded = !pending_control_;
  for (const auto& r : records_) succeeded = succeeded && r.outcome.kind != OutcomeKind::failed;
  for (const auto& r : operation_records_)
    succeeded = succeeded && (r.outcome == InterventionOutcomeKind::inactive || r.outcome == InterventionOutcomeKind::applied);
  CapturedStep step;
  step.phase = phase_;
  step.prediction = prediction_;
  step.records = std::move(records_);
  step.interventions = std::move(operation_records_);
  step.step_usage = ledger_.step();
  step.cumulative_usage = ledger_.cumulative();
  step.capture_seconds = std::chrono::duration<double>(capture_time_).count();
  records_.clear();
  operation_records_.clear();
  pending_control_.reset();
  pending_routing_.reset();
  step_open_ = false;
  ready_ = succeeded;
  return step;
}

std::optional<std::uint64_t> CaptureSession::checkpoint_storage_bytes(const CaptureDiscovery& discovery) const {
  std::optional<std::uint64_t> total = sizeof(CaptureCheckpoint);
  auto add = [&](std::optional<std::uint64_t> n) { total = n ? checked::add(total, *n) : std::nullopt; };
  auto words = [](std::size_t n) { return checked::mul(std::uint64_t{n}, std::uint64_t{8}); };
  add(discovery.artifact_identity.size());
  add(plan_.identity().size());
  add(plan_.encoded_size());
  if (interventions_) {
    add(interventions_->identity().size());
    add(interventions_->encoded_size());  // its declarations: operations, slices, targeted points
    for (const auto& op : interventions_->plan().operations) {
      add(sizeof(InterventionOperation));
      add(op.id.size());
      add(op.target.size());
      add(words(op.payload.size()));
      add(words(op.ids.size()));
      add(words(op.payload_shape.size()));
    }
  }
  return total;  // nullopt: the size does not fit in 64 bits
}

CaptureCheckpoint CaptureSession::checkpoint(const CaptureDiscovery& discovery) const {
  Guard guard(*this);
  require_unprepared();
  if (step_open_) raise(ErrorKind::CaptureSession, "undelivered capture records must be taken before a checkpoint");
  if (pending_control_) raise(ErrorKind::CaptureSession, "a routing control is still pending");
  if (!ready_) raise(ErrorKind::CaptureSession, "the last capture step did not complete; it cannot be a checkpoint");
  std::shared_ptr<const AdmittedCapturePlan> readmitted;
  try {
    readmitted = std::make_shared<const AdmittedCapturePlan>(
        admit(plan_.plan(), discovery, plan_.request(), inherited_, admitted_from_));
  } catch (const Error& error) {
    raise(ErrorKind::CaptureSession, std::string("checkpoint source/admission mismatch: ") + error.message());
  }
  if (readmitted->identity() != plan_.identity())
    raise(ErrorKind::CaptureSession, "checkpoint source/admission mismatch");
  CaptureCheckpoint cp;
  cp.plan = std::move(readmitted);  // the admission data, cloned
  if (interventions_) cp.interventions = std::make_shared<const AdmittedInterventionPlan>(*interventions_);
  cp.owner = id_;
  cp.artifact_identity = discovery.artifact_identity;
  cp.plan_identity = plan_.identity();
  cp.intervention_identity = interventions_ ? interventions_->identity() : std::string();
  cp.prediction = prediction_;
  cp.phase = phase_;
  cp.has_step = has_step_;
  cp.usage = ledger_.cumulative();
  return cp;
}

void CaptureSession::validate_restore(const CaptureCheckpoint& cp) const {
  if (cp.owner != id_) raise(ErrorKind::CaptureSession, "checkpoint belongs to another capture session");
  if (cp.plan_identity != plan_.identity() ||
      cp.intervention_identity != (interventions_ ? interventions_->identity() : std::string()))
    raise(ErrorKind::CaptureSession, "checkpoint source/admission mismatch");
  // Undelivered records must be consumed even when the previous operation failed.
  if (step_open_) raise(ErrorKind::CaptureSession, "undelivered capture records must be taken before restore");
  if (pending_control_) raise(ErrorKind::CaptureSession, "a routing control is still pending");
}

PreparedCaptureRestore CaptureSession::prepare_restore(const CaptureCheckpoint& cp) {
  Guard guard(*this);
  require_unprepared();
  validate_restore(cp);
  restore_prepared_ = true;
  return PreparedCaptureRestore(this, cp);
}

void CaptureSession::restore(const CaptureCheckpoint& cp) { prepare_restore(cp).commit(); }

void CaptureSession::commit_restore(const CaptureCheckpoint& cp) noexcept {
  // Rewinds the position only: no refund, nothing republished.
  prediction_ = cp.prediction;
  phase_ = cp.phase;
  has_step_ = cp.has_step;
  capture_time_ = {};
  ready_ = true;
  restore_prepared_ = false;
}

PreparedCaptureRestore::PreparedCaptureRestore(PreparedCaptureRestore&& other) noexcept
    : session_(other.session_), checkpoint_(std::move(other.checkpoint_)), committed_(other.committed_) {
  other.session_ = nullptr;
}

PreparedCaptureRestore::~PreparedCaptureRestore() {
  if (session_) session_->restore_prepared_ = false;
}

void PreparedCaptureRestore::commit() noexcept {
  if (!session_) return;
  session_->commit_restore(checkpoint_);
  session_ = nullptr;
  committed_ = true;
}

std::unique_ptr<CaptureSession> CaptureSession::fork(const CaptureDiscovery& discovery,
                                                     std::optional<std::uint64_t> max_predictions,
                                                     std::optional<CaptureLimits> limits) const {
  Guard guard(*this);
  require_unprepared();
  if (step_open_) raise(ErrorKind::CaptureSession, "undelivered capture records must be taken before a fork");
  if (!ready_) raise(ErrorKind::CaptureSession, "a fork needs a delivered, successful boundary");
  if (discovery.artifact_identity != plan_.artifact_identity())
    raise(ErrorKind::Admission, "a fork must use the same artifact");
  CapturePlan plan = plan_.plan();
  if (limits) plan.limits = *limits;
  CaptureRequest request = plan_.request();
  if (max_predictions) request.max_predictions = *max_predictions;
  CaptureUsage inherited = ledger_.cumulative();
  std::uint64_t next = next_prediction();
  // A child that could never take its next step is no fork: refused here, not at its first step.
  if (request.max_predictions <= next)
    raise(ErrorKind::Admission, "fork: max_predictions " + std::to_string(request.max_predictions) +
                                    " leaves no prediction to take: the fork continues at prediction " +
                                    std::to_string(next) + ", so it needs at least " + std::to_string(next + 1));
  // Re-admission rechecks future geometry and the continuation preflight.
  auto admitted = admit(plan, discovery, request, inherited, next);
  auto child = std::make_unique<CaptureSession>(std::move(admitted));
  child->ledger_ = CaptureLedger(plan.limits, inherited);
  child->inherited_ = inherited;
  child->admitted_from_ = next;
  child->prediction_ = prediction_;
  child->phase_ = phase_;
  child->has_step_ = has_step_;
  return child;
}

std::string CaptureSession::record_json(const CaptureRecord& record) {
  JsonWriter json;
  write_record(json, record);
  return json.take();
}

std::string CaptureSession::intervention_record_json(const InterventionRecord& record) {
  JsonWriter json;
  write_intervention_record(json, record);
  return json.take();
}

}  // namespace lifecore::capture
