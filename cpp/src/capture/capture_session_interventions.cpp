// Interventions and MoE routing control of a CaptureSession. Both share the capture ledger.
#include <algorithm>
#include <set>

#include "capture/capture_geometry.hpp"
#include "capture/capture_session_guard.hpp"
#include "lifecore/capture/session.hpp"
#include "lifecore/checked.hpp"

namespace lifecore::capture {
namespace {

bool is_routing(const InterventionOperation& op) {
  return stage_of(op.action) == InterventionStage::routing_before_dispatch;
}

void fail_operation(InterventionRecord& record, std::string_view message) {
  record.outcome = InterventionOutcomeKind::failed;
  record.message = bound_message(message);
  record.evidence.clear();
}

// Whether the evidence kept so far fits in `reserved` retained bytes: the ledger is the
// authority, so what is kept may never exceed what was charged for it (a sum past 64 bits
// does not fit).
bool evidence_fits(const std::vector<CapturePayload>& evidence, std::uint64_t reserved) {
  std::optional<std::uint64_t> bytes = 0;
  for (const auto& e : evidence) bytes = checked::add(bytes, e.retained_bytes());
  return bytes && *bytes <= reserved;
}

}  // namespace

void CaptureSession::enable_interventions(AdmittedInterventionPlan plan,
                                          std::shared_ptr<InterventionEstimator> estimator) {
  Guard guard(*this);
  require_unprepared();
  if (interventions_) raise(ErrorKind::CaptureSession, "interventions are already enabled on this capture session");
  if (ever_started_ || step_open_) raise(ErrorKind::CaptureSession, "interventions must be enabled before the first step");
  if (!estimator) raise(ErrorKind::InvalidArgument, "an intervention estimator is required");
  if (!(plan.request() == plan_.request()))
    raise(ErrorKind::InvalidArgument, "the intervention request differs from the capture request");
  if (plan.session_id() != id_)
    raise(ErrorKind::CaptureSession, "the intervention plan was admitted for another capture session");
  if (plan.plan().operations.empty()) return;  // an empty plan is not installed
  PathIndex index;
  std::vector<CaptureUsage> envelopes;
  const auto& operations = plan.plan().operations;
  for (std::size_t i = 0; i < operations.size(); ++i) {
    index[operations[i].target].push_back(i);
    envelopes.push_back(operation_envelope(operations[i]));
  }
  // Every step reserves each operation's envelope beside the selections' (its record is
  // exported whatever happens), so a plan whose envelopes cannot fit this run is refused now,
  // as capture admission refuses its own, rather than failing some later step.
  check_operation_envelopes(plan_, envelopes, inherited_, admitted_from_);
  interventions_ = std::make_shared<const AdmittedInterventionPlan>(std::move(plan));
  estimator_ = std::move(estimator);
  operations_by_path_ = std::move(index);
  operation_envelopes_ = std::move(envelopes);
  forwards_seen_.assign(operation_envelopes_.size(), {});  // one per operation
}

std::vector<std::size_t> CaptureSession::due_operations(std::string_view path, bool routing) const {
  require_unprepared();
  if (!step_open_)
    raise(ErrorKind::CaptureSession, std::string(routing ? "routing_control" : "intervene") + " at " + std::string(path) +
                                         ": no capture step is open (call begin_step)");
  std::vector<std::size_t> due;
  if (!interventions_) return due;
  auto found = operations_by_path_.find(path);
  if (found == operations_by_path_.end()) return due;
  const auto& operations = interventions_->plan().operations;
  for (auto i : found->second) {
    if (is_routing(operations[i]) != routing) continue;
    auto outcome = operation_records_[i].outcome;
    if (outcome == InterventionOutcomeKind::applied || outcome == InterventionOutcomeKind::failed)
      raise(ErrorKind::CaptureSession, std::string(routing ? "routing" : "intervention") +
                                           " point executed more than once in one step: " + std::string(path));
    if (outcome == InterventionOutcomeKind::missing) due.push_back(i);
  }
  return due;
}

std::optional<TensorHandle> CaptureSession::reintervene(CaptureBackend& backend, std::string_view path,
                                                        TensorHandle tensor) {
  Guard guard(*this);
  require_unprepared();
  if (!interventions_) return std::nullopt;
  auto found = operations_by_path_.find(path);
  if (found == operations_by_path_.end()) return std::nullopt;
  const auto& operations = interventions_->plan().operations;
  const auto refuse = [&](const InterventionOperation& op, const std::string& why) {
    raise(ErrorKind::CaptureSession, "recompute of " + std::string(path) + " (a forward run again in backward, as "
                                     "activation checkpointing does): intervention '" + op.id + "' " + why);
  };
  std::optional<std::vector<std::uint64_t>> shape;  // asked once: an applied operation keeps it
  TensorHandle current = tensor;
  bool replaced = false;
  for (auto i : found->second) {
    const auto& op = operations[i];
    const ForwardsSeen& seen = forwards_seen_[i];
    if (is_routing(op) || (seen.applied.empty() && seen.passed.empty() && !seen.let_go)) continue;
    TensorHandle out = nullptr;
    try {  // what the backend raises stays the cause of the refusal
      if (!shape) shape = backend.shape(current);
      const auto applied = std::find_if(seen.applied.begin(), seen.applied.end(),
                                        [&](const Applied& a) { return a.source_shape == *shape; });
      const bool passed = std::find(seen.passed.begin(), seen.passed.end(), *shape) != seen.passed.end();
      if (applied != seen.applied.end() && passed)
        refuse(op, "was applied in a forward of shape " + shape_text(*shape) + " and not in another (inactive or "
                   "failed there): which of them autograd runs again is unknown (backpropagate a step's graph "
                   "before a step that differs from it runs)");
      if (applied == seen.applied.end()) {
        if (!passed && seen.let_go)
          refuse(op, "met more than " + std::to_string(kept_shapes) + " shapes, and " + shape_text(*shape) +
                     " is not among those kept: what the forward did with it is unknown");
        continue;  // no forward of this shape applied it
      }
      const ValueDtype dtype = backend.dtype(current);
      InterventionRequest request;
      request.action = op.action;
      request.operation = op;
      request.source_shape = applied->source_shape;
      request.region = applied->region;
      request.selected_shape = applied->selected_shape;
      out = backend.intervene(current, request);
      if (out == current) refuse(op, "returned the output itself (a backend returns a new tensor)");
      if (backend.shape(out) != *shape) refuse(op, "changed the shape of " + op.target);
      if (backend.dtype(out) != dtype) refuse(op, "changed the dtype of " + op.target);
    } catch (const BackendFailure& failure) {
      refuse(op, "failed: " + failure.message);
    } catch (const TensorRefused& refused) {
      refuse(op, "failed: " + refused.message);
    }
    current = out;
    replaced = true;
  }
  if (!replaced) return std::nullopt;
  return current;
}

namespace {

// Puts `item` last in `kept` unless it is there; the oldest goes past `limit` (`let_go` says so).
template <class T, class Same>
void keep_bounded(std::vector<T>& kept, T item, std::size_t limit, bool& let_go, Same same) {
  if (std::any_of(kept.begin(), kept.end(), [&](const T& k) { return same(k, item); })) return;
  if (kept.size() == limit) {
    kept.erase(kept.begin());
    let_go = true;
  }
  kept.push_back(std::move(item));
}

}  // namespace

void CaptureSession::note_passed(std::size_t operation, const std::vector<std::uint64_t>& shape) {
  ForwardsSeen& seen = forwards_seen_[operation];
  keep_bounded(seen.passed, shape, kept_shapes, seen.let_go,
               [](const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b) { return a == b; });
}

void CaptureSession::note_observed(std::string_view path) {
  if (!interventions_) return;
  auto found = operations_by_path_.find(path);
  if (found == operations_by_path_.end()) return;
  for (auto i : found->second) operation_observed_[i] = 1;
}

std::optional<TensorHandle> CaptureSession::intervene(CaptureBackend& backend, std::string_view path,
                                                      TensorHandle tensor) {
  Guard guard(*this);
  const std::vector<std::size_t> active = due_operations(path, /*routing=*/false);
  // Refused before anything is noted: the shapes the inactive operations saw decide a recompute.
  if (!active.empty() && !operation_observed_[active.front()])  // a path's operations are observed together
    raise(ErrorKind::CaptureSession, "observe must precede intervene at " + std::string(path));
  note_inactive(backend, path, tensor);
  if (active.empty()) return std::nullopt;  // nothing cloned, nothing materialized
  const auto& operations = interventions_->plan().operations;
  auto started = std::chrono::steady_clock::now();
  TensorHandle current = tensor;
  bool replaced = false;
  std::optional<std::vector<std::uint64_t>> entry_shape;
  for (auto i : active) {
    const auto& op = operations[i];
    const auto& point = interventions_->points()[i];
    auto& record = operation_records_[i];
    try {
      InterventionRequest request;
      request.action = op.action;
      request.operation = op;
      request.source_shape = backend.shape(current);
      if (!entry_shape) entry_shape = request.source_shape;  // what every operation here meets
      ValueDtype dtype = backend.dtype(current);
      if (auto problem = check_shape(point, request.source_shape, plan_.request(), phase_, prediction_)) {
        fail_operation(record, *problem);
        continue;
      }
      if (auto problem = resolve_region(op.slices, point, request.source_shape, request.region, request.selected_shape)) {
        fail_operation(record, *problem);
        continue;
      }
      if (dtype != ValueDtype::floating) {
        fail_operation(record, std::string("intervention '") + op.id + "' needs a floating tensor, got " + to_string(dtype));
        continue;
      }
      bool shaped = op.action == InterventionAction::replace || op.action == InterventionAction::add ||
                    op.action == InterventionAction::mask;
      if (shaped && op.payload_shape != request.selected_shape) {
        fail_operation(record, "payload of '" + op.id + "' does not match the selected region exactly");
        continue;
      }
      if (op.action == InterventionAction::mask_logits) {
        const std::uint64_t vocabulary = request.source_shape.empty() ? 0 : request.source_shape.back();
        const auto past = std::find_if(op.ids.begin(), op.ids.end(), [&](auto id) { return id >= vocabulary; });
        if (past != op.ids.end()) {
          fail_operation(record, "token id out of range in '" + op.id + "': " + std::to_string(*past) + ", but the " +
                                     (request.source_shape.empty() ? std::string("logits are a scalar, with no ids")
                                                                   : "logits' last axis holds " +
                                                                         std::to_string(vocabulary) + " ids"));
          continue;
        }
      }
      TransformRequest evidence;
      CaptureUsage one, cost;  // one evidence transform, and the two reserved together
      bool with_evidence = op.evidence != EvidenceKind::none;
      if (with_evidence) {
        evidence.kind = op.evidence == EvidenceKind::preview ? TransformKind::preview : TransformKind::summary;
        evidence.source_shape = request.source_shape;
        evidence.region = request.region;
        evidence.selected_shape = request.selected_shape;
        evidence.max_elements = op.evidence_elements;
        one = estimator_->estimate(current, evidence);
        // Before and after, reserved together; a sum past 64 bits exceeds every limit.
        std::optional<LimitHit> hit;
        if (auto b = overflowing_budget(one, one)) hit = LimitHit{*b, false};
        else hit = ledger_.try_reserve(cost = *checked_add(one, one));
        if (hit) {
          if (plan_.plan().limits.on_limit == OnLimit::fail) {
            fail_operation(record, std::string("intervention evidence exceeds the capture limit: ") + to_string(hit->budget));
            continue;
          }
          with_evidence = false;  // skip policy: apply without evidence
          cost = {};
        }
        // On top of the envelope, within the step's reservation; checked anyway.
        record.charged = add_or_throw(record.charged, cost, "intervention evidence charge");
      }
      if (with_evidence) {
        record.evidence.push_back(backend.transform(current, evidence));
        // Checked before the intervention runs, against its own half of the reservation.
        if (!evidence_fits(record.evidence, one.retained_bytes)) {
          fail_operation(record, "backend underestimated retained evidence bytes of '" + op.id + "'");
          continue;
        }
      }
      // What the output is before the intervention, to hold the replacement to: the dtype
      // class says floating, the element size and the host side tell float32 from float64
      // and host memory from a device's (where the backend describes its tensors).
      const std::optional<TensorFacts> facts = backend.describe(current);
      TensorHandle out = backend.intervene(current, request);
      // The tensor it was given (the hook's output, or the previous operation's on this path):
      // modified in place (or not at all), never a replacement. As reintervene holds it too.
      if (out == current) {
        fail_operation(record, "intervention '" + op.id + "' returned the output of " + op.target +
                                   " itself (a backend returns a new tensor and never modifies the source)");
        continue;
      }
      if (backend.shape(out) != request.source_shape) {
        fail_operation(record, "intervention '" + op.id + "' changed the shape of " + op.target);
        continue;
      }
      if (backend.dtype(out) != dtype) {
        fail_operation(record, "intervention '" + op.id + "' changed the dtype of " + op.target);
        continue;
      }
      if (facts) {
        const std::optional<TensorFacts> replaced_facts = backend.describe(out);
        if (replaced_facts && replaced_facts->itemsize != facts->itemsize) {
          fail_operation(record, "intervention '" + op.id + "' changed the dtype of " + op.target + " (elements of " +
                                     std::to_string(facts->itemsize) + " bytes became " +
                                     std::to_string(replaced_facts->itemsize) + ")");
          continue;
        }
        if (replaced_facts && replaced_facts->on_host != facts->on_host) {
          fail_operation(record, "intervention '" + op.id + "' moved " + op.target + (facts->on_host ? " off" : " onto") +
                                     " the host (a replacement stays where the output is)");
          continue;
        }
      }
      // What the facts cannot tell (float16 against bfloat16, one device against another),
      // where the backend can.
      if (std::optional<std::string> mismatch = backend.replacement_mismatch(current, out)) {
        fail_operation(record, "intervention '" + op.id + "' changed " + op.target + ": " + *mismatch +
                                   " (a replacement keeps the output's dtype and device)");
        continue;
      }
      if (with_evidence) {
        record.evidence.push_back(backend.transform(out, evidence));
        if (!evidence_fits(record.evidence, cost.retained_bytes)) {
          fail_operation(record, "backend underestimated retained evidence bytes of '" + op.id + "'");
          continue;
        }
      }
      record.outcome = InterventionOutcomeKind::applied;
      // What is published may never exceed what was charged for it: the envelope holds the
      // record's metadata, the evidence reservation its payloads.
      if (with_evidence && !operation_fits_charge(record)) {
        fail_operation(record, "backend underestimated encoded evidence size of '" + op.id + "'");
        continue;
      }
      ForwardsSeen& seen = forwards_seen_[i];
      keep_bounded(seen.applied, Applied{request.source_shape, request.region, request.selected_shape}, kept_shapes,
                   seen.let_go, [](const Applied& a, const Applied& b) { return a.source_shape == b.source_shape; });
      current = out;
      replaced = true;
    } catch (const BackendFailure& failure) {
      fail_operation(record, "native intervention failed: " + failure.message);
    } catch (const TensorRefused& refused) {  // no tensor of the backend's, before or after
      fail_operation(record, "native intervention failed: " + refused.message);
    } catch (const Error& error) {
      fail_operation(record, error.message());
    }
  }
  if (entry_shape)  // a failed operation was reached and not applied: a recompute must know
    for (auto i : active)
      if (operation_records_[i].outcome == InterventionOutcomeKind::failed) note_passed(i, *entry_shape);
  capture_time_ += std::chrono::steady_clock::now() - started;
  if (!replaced) return std::nullopt;
  return current;
}

void CaptureSession::note_inactive(CaptureBackend& backend, std::string_view path, TensorHandle tensor) {
  if (!interventions_) return;
  auto found = operations_by_path_.find(path);
  if (found == operations_by_path_.end()) return;
  const auto& operations = interventions_->plan().operations;
  std::optional<std::vector<std::uint64_t>> shape;
  for (auto i : found->second) {
    if (is_routing(operations[i]) || operation_records_[i].outcome != InterventionOutcomeKind::inactive) continue;
    if (!shape) {
      try {
        shape = backend.shape(tensor);
      } catch (const BackendFailure&) {
        return;  // no shape to note; the operations that are due say what went wrong
      } catch (const TensorRefused&) {
        return;
      }
    }
    note_passed(i, *shape);
  }
}

void CaptureSession::finish_interventions() const {
  Guard guard(*this);
  if (!interventions_) return;
  if (!step_open_) raise(ErrorKind::CaptureSession, "finish_interventions: no capture step is open (call begin_step)");
  if (pending_control_) raise(ErrorKind::CaptureSession, "finish_interventions: a routing control is still pending");
  const auto& operations = interventions_->plan().operations;
  for (std::size_t i = 0; i < operations.size(); ++i) {
    const auto& record = operation_records_[i];
    // Named with why: the record's failure (a backend's exception among them), or that the
    // forward never reached the target at this step.
    if (record.outcome == InterventionOutcomeKind::failed)
      raise(ErrorKind::CaptureSession, "scheduled intervention " + operations[i].id + " at " + operations[i].target +
                                           " did not complete: it failed (" + record.message + ")");
    if (record.outcome == InterventionOutcomeKind::missing)
      raise(ErrorKind::CaptureSession, "scheduled intervention " + operations[i].id + " at " + operations[i].target +
                                           " did not complete: the step's forward never reached its target");
  }
}

std::optional<GroupSelectionControl> CaptureSession::routing_control(std::string_view path, std::uint64_t token_rows) {
  Guard guard(*this);
  const std::vector<std::size_t> due = due_operations(path, /*routing=*/true);
  if (due.empty()) return std::nullopt;
  if (pending_control_) raise(ErrorKind::CaptureSession, "a routing control is already pending");
  // Admission keeps routing operations from overlapping; the last one due is the one in force.
  const std::size_t active = due.back();
  const auto& op = interventions_->plan().operations[active];
  const auto& point = interventions_->points()[active];
  auto& record = operation_records_[active];
  auto invalid = [&](const std::string& message) -> std::optional<GroupSelectionControl> {
    fail_operation(record, message);
    raise(ErrorKind::InvalidArgument, message);
  };
  if (!point.routing) return invalid("routing point " + op.target + " has no routing policy");
  // At most the rows the request routes in this phase (batch x prompt tokens, or batch).
  // Refused before anything changes: the operation stays due and a correct call may follow.
  const auto& request = plan_.request();
  std::uint64_t allowed = checked::value_or_throw(
      checked::mul(request.batch, phase_ == CapturePhase::prefill ? request.prompt_tokens : std::uint64_t{1}),
      "routing_control: request token rows");
  if (token_rows > allowed)
    raise(ErrorKind::InvalidArgument, "routing_control: " + std::to_string(token_rows) + " token rows exceed the " +
                                          std::to_string(allowed) + " the request routes in " + to_string(phase_));
  if (token_rows == 0) return invalid("routing needs at least one token row");
  GroupSelectionControl control;
  control.operation_id = op.id;
  control.target = op.target;
  control.action = op.action;
  control.policy = *point.routing;
  control.num_experts = point.routing->num_experts;
  control.top_k = point.routing->top_k;
  control.token_rows = token_rows;
  control.row_end = token_rows;
  for (const auto& s : op.slices) {
    std::uint64_t end = s.end.value_or(token_rows);
    if (s.start >= token_rows || end > token_rows)
      return invalid("routing window of '" + op.id + "' exceeds the " + std::to_string(token_rows) + " token rows");
    control.row_start = s.start;
    control.row_end = end;
    control.row_stride = s.stride;
  }
  control.expert_ids = op.ids;
  control.biases = op.payload;
  control.capture_original = op.evidence != EvidenceKind::none;
  if (auto problem = control.problem(control.policy, token_rows))
    return invalid("routing control of '" + op.id + "': " + *problem);
  if (control.capture_original) {
    // Original-decision evidence is reserved before the selector runs; a skip is an error.
    // token_rows x top_k x 16 bytes; a product past 64 bits exceeds every limit.
    auto bytes = checked::mul(checked::mul(token_rows, control.top_k), std::uint64_t{16});
    CaptureUsage original{0, bytes.value_or(0), bytes.value_or(0), 0};
    std::optional<LimitHit> hit;
    if (!bytes) hit = LimitHit{Budget::retention, false};
    else hit = ledger_.try_reserve(original);
    if (hit) {
      fail_operation(record, std::string("routing evidence exceeds the capture limit: ") + to_string(hit->budget));
      raise_limit(*hit);
    }
    record.charged = add_or_throw(record.charged, original, "routing evidence charge");
  }
  pending_routing_ = active;
  pending_control_ = control;
  return control;
}

void CaptureSession::routing_applied(CaptureBackend& backend, std::string_view path,
                                     std::optional<std::pair<TensorHandle, TensorHandle>> original,
                                     std::pair<TensorHandle, TensorHandle> effective) {
  Guard guard(*this);
  require_unprepared();
  if (!interventions_) raise(ErrorKind::CaptureSession, "unsolicited routing result at " + std::string(path));
  if (!pending_control_) raise(ErrorKind::CaptureSession, "routing result has no pending control at " + std::string(path));
  if (pending_control_->target != path)
    raise(ErrorKind::CaptureSession, "routing result for " + std::string(path) + " does not match the pending control at " +
                                         pending_control_->target);
  auto control = std::move(*pending_control_);
  auto& record = operation_records_[*pending_routing_];
  pending_control_.reset();
  pending_routing_.reset();
  auto fail = [&](ErrorKind kind, const std::string& message) {
    fail_operation(record, message);
    raise(kind, message);
  };
  try {
    auto ids_shape = backend.shape(effective.first);
    if (ids_shape != backend.shape(effective.second))
      fail(ErrorKind::InvalidArgument, "effective routing ids and coefficients differ in shape");
    if (ids_shape != std::vector<std::uint64_t>{control.token_rows, control.top_k})
      fail(ErrorKind::InvalidArgument, "effective routing is not shaped [token_rows, top_k]");
    if (control.capture_original) {
      if (!original) fail(ErrorKind::InvalidArgument, "requested original routing decision is missing");
      if (backend.shape(original->first) != ids_shape || backend.shape(original->second) != ids_shape)
        fail(ErrorKind::InvalidArgument, "original routing decision is not shaped like the effective one");
      TensorHandle fields[4] = {original->first, original->second, effective.first, effective.second};
      TransformRequest request;
      request.kind = TransformKind::full_tensor;
      request.source_shape = ids_shape;
      request.selected_shape = ids_shape;
      for (auto extent : ids_shape) request.region.push_back({0, extent, 1});
      CaptureUsage cost;
      std::optional<LimitHit> hit;  // a sum past 64 bits exceeds every limit
      for (auto field : fields) {
        CaptureUsage estimate = backend.estimate(field, request);
        if (auto b = overflowing_budget(cost, estimate)) {
          hit = LimitHit{*b, false};
          break;
        }
        cost = *checked_add(cost, estimate);
      }
      if (!hit) hit = ledger_.try_reserve(cost);
      if (hit) {
        fail_operation(record, std::string("routing evidence exceeds the capture limit: ") + to_string(hit->budget));
        raise_limit(*hit);
      }
      record.charged = add_or_throw(record.charged, cost, "routing evidence charge");
      for (auto field : fields) {
        record.evidence.push_back(backend.transform(field, request));
        // Against all this record was charged: the original decision's reservation included.
        if (!evidence_fits(record.evidence, record.charged.retained_bytes))
          fail(ErrorKind::CaptureSession, "backend underestimated retained routing evidence bytes at " + std::string(path));
      }
    }
    record.outcome = InterventionOutcomeKind::applied;
    if (!record.evidence.empty() && !operation_fits_charge(record))
      fail(ErrorKind::CaptureSession, "backend underestimated encoded routing evidence size at " + std::string(path));
  } catch (const BackendFailure& failure) {
    fail(ErrorKind::CaptureSession, "native capture failed: " + failure.message);
  }
}

void CaptureSession::routing_failed(std::string_view path, std::string_view message) {
  Guard guard(*this);
  if (pending_control_ && pending_control_->target == path) {
    fail_operation(operation_records_[*pending_routing_], message);
    pending_control_.reset();
    pending_routing_.reset();
    return;
  }
  if (!interventions_ || !step_open_) return;
  auto found = operations_by_path_.find(path);
  if (found == operations_by_path_.end()) return;
  for (auto i : found->second)
    if (is_routing(interventions_->plan().operations[i]) &&
        operation_records_[i].outcome == InterventionOutcomeKind::missing)
      fail_operation(operation_records_[i], message);
}

}  // namespace lifecore::capture
