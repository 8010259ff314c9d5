// CaptureSession, its records, steps and checkpoints: conversion only.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "capture_backend_adapter.hpp"
#include "capture_bindings.hpp"
#include "capture_reprs.hpp"
#include "lifecore/capture/session.hpp"
#include "lifecore/error.hpp"

namespace lifecore::bindings {

using namespace lifecore::capture;

namespace {

nb::object optional_reason(bool present, const char* name) { return present ? nb::object(nb::str(name)) : nb::none(); }

// Garbage-collector support: a session holds its Python estimator, and an estimator that
// refers to its session would otherwise make a cycle the collector cannot see through.
PythonInterventionEstimator* python_estimator(PyObject* self) {
  if (!nb::inst_ready(self)) return nullptr;
  return dynamic_cast<PythonInterventionEstimator*>(nb::inst_ptr<CaptureSession>(self)->estimator());
}

int session_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (auto* estimator = python_estimator(self)) Py_VISIT(estimator->object().ptr());
  return 0;
}

int session_clear(PyObject* self) {
  if (auto* estimator = python_estimator(self)) estimator->clear();
  return 0;
}

PyType_Slot session_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(session_traverse)},
                               {Py_tp_clear, reinterpret_cast<void*>(session_clear)},
                               {0, nullptr}};

CapturePhase phase_argument(nb::handle h, const char* call) {
  if (!nb::isinstance(h, nb::type<CapturePhase>()))
    raise(ErrorKind::TypeMismatch, argument_label(call, "phase") + " must be a CapturePhase (PREFILL or DECODE), got " +
                                       type_name_of(h));
  return nb::cast<CapturePhase>(h);
}

// A routing decision: a pair (ids, coefficients) of tensors the backend understands, as a
// tuple the caller keeps alive through the call (a list could be changed under it).
nb::tuple decision_argument(nb::handle h, const char* name) {
  const std::string label = argument_label("CaptureSession.routing_applied", name);
  if (!(PyTuple_Check(h.ptr()) || PyList_Check(h.ptr())))
    raise(ErrorKind::TypeMismatch, label + " must be a pair (ids, coefficients), got " + type_name_of(h));
  // The pair is what the snapshot holds: a subclass's __len__ and __iter__ need not agree.
  nb::tuple pair = sequence_snapshot(h, label);
  if (nb::len(pair) != 2)
    raise(ErrorKind::TypeMismatch, label + " must be a pair (ids, coefficients), got " + type_name_of(h) + " of " +
                                       std::to_string(nb::len(pair)) + " items");
  return pair;
}

std::pair<TensorHandle, TensorHandle> handles_of(const nb::tuple& pair) {
  return {pair[0].ptr(), pair[1].ptr()};
}

void bind_outcome_enums(nb::module_& m) {
  nb::enum_<OutcomeKind>(m, "CaptureOutcome", "What one selection produced in one step (CaptureRecord.outcome).")
      .value("CAPTURED", OutcomeKind::captured, "the transform ran and its payload is whole")
      .value("TRUNCATED", OutcomeKind::truncated,
           "a preview kept fewer elements than the region holds (see available, emitted)")
      .value("SKIPPED", OutcomeKind::skipped,
           "not captured: not scheduled, or over a limit under OnLimit.SKIP (see skip_reason)")
      .value("MISSING", OutcomeKind::missing, "scheduled, but the point was not observed this step")
      .value("FAILED", OutcomeKind::failed, "the capture failed (see fail_reason and message)");
  nb::enum_<InterventionOutcomeKind>(m, "InterventionOutcome",
       "What one intervention operation did in one step (InterventionRecord.outcome).")
      .value("INACTIVE", InterventionOutcomeKind::inactive, "not scheduled this step")
      .value("APPLIED", InterventionOutcomeKind::applied, "applied to its target")
      .value("MISSING", InterventionOutcomeKind::missing, "scheduled, but its target was not reached this step")
      .value("FAILED", InterventionOutcomeKind::failed,
           "refused or failed (see message); it did not change the value");
}

void bind_records(nb::module_& m) {
  nb::class_<CaptureRecord>(m, "CaptureRecord", "What one selection produced in one step, and what it was charged.")
      .def_ro("selection_id", &CaptureRecord::selection_id, "The id of the selection it records.")
      .def_ro("path", &CaptureRecord::path, "The observed point's path.")
      .def_ro("node_id", &CaptureRecord::node_id, "The observed point's node_id.")
      .def_ro("position", &CaptureRecord::position, "The point's PointPosition.")
      .def_ro("source_shape", &CaptureRecord::source_shape,
           "The observed tensor's shape (empty when it was not observed).")
      .def_ro("selected_shape", &CaptureRecord::selected_shape,
           "The shape of the region the slices selected (empty when none was).")
      .def_prop_ro("outcome", [](const CaptureRecord& r) { return r.outcome.kind; }, "Its CaptureOutcome.")
      .def_prop_ro("skip_reason", [](const CaptureRecord& r) {
        return optional_reason(r.outcome.kind == OutcomeKind::skipped, to_string(r.outcome.skip));
      }, nb::for_getter(nb::sig("def skip_reason(self, /) -> str | None")), "'schedule' or 'limit' for a SKIPPED record, else None")
      .def_prop_ro("fail_reason", [](const CaptureRecord& r) {
        return optional_reason(r.outcome.kind == OutcomeKind::failed, to_string(r.outcome.fail));
      }, nb::for_getter(nb::sig("def fail_reason(self, /) -> str | None")), "'limit', 'unsupported', 'invalid' or 'native' for a FAILED record, else None")
      .def_prop_ro("budget", [](const CaptureRecord& r) {
        bool limit = (r.outcome.kind == OutcomeKind::skipped && r.outcome.skip == SkipReason::limit) ||
                     (r.outcome.kind == OutcomeKind::failed && r.outcome.fail == FailReason::limit);
        return optional_reason(limit, to_string(r.outcome.budget));
      }, nb::for_getter(nb::sig("def budget(self, /) -> str | None")), "For a record SKIPPED or FAILED on a limit, the budget it hit: 'captures', 'retained_bytes', "
         "'host_bytes', 'encoded_bytes' or 'physical_native_bytes'; else None.")
      .def_prop_ro("cumulative", [](const CaptureRecord& r) { return r.outcome.cumulative; },
           "For a limit outcome, True when the cumulative limit refused it, False for the per-step one.")
      .def_prop_ro("message", [](const CaptureRecord& r) { return r.outcome.message; },
           "A FAILED record's reason (at most 256 bytes), else ''.")
      .def_prop_ro("available", [](const CaptureRecord& r) { return r.outcome.available; },
           "TRUNCATED: the elements the selected region holds (else 0).")
      .def_prop_ro("emitted", [](const CaptureRecord& r) { return r.outcome.emitted; },
           "TRUNCATED: the elements the payload kept (else 0).")
      .def_prop_ro("payload", [](const CaptureRecord& r) -> std::optional<CapturePayload> {
        if (r.payload.kind == PayloadKind::none) return std::nullopt;
        return r.payload;
      }, "The CapturePayload the transform produced, or None when none was kept.")
      .def_ro("charged", &CaptureRecord::charged, nb::rv_policy::copy,
           "The CaptureUsage charged for it: its metadata envelope plus any value cost (a copy).")
      .def("to_json", &CaptureSession::record_json, "The record as JSON; never longer than charged.encoded_bytes.")
      .def("__repr__", [](const CaptureRecord& r) {
        // Why a record holds no payload, where it says: a debugging session reads it first.
        const CaptureOutcome& o = r.outcome;
        std::string why;
        if (o.kind == OutcomeKind::skipped) why = std::string(", ") + to_string(o.skip);
        if (o.kind == OutcomeKind::failed) why = std::string(", ") + to_string(o.fail);
        const bool limit = (o.kind == OutcomeKind::skipped && o.skip == SkipReason::limit) ||
                           (o.kind == OutcomeKind::failed && o.fail == FailReason::limit);
        if (limit) why += std::string(" ") + to_string(o.budget) + (o.cumulative ? " (cumulative)" : " (per step)");
        if (o.kind == OutcomeKind::failed && !o.message.empty()) why += ": " + reprs::quoted(o.message);
        if (o.kind == OutcomeKind::truncated)
          why = ", kept " + std::to_string(o.emitted) + " of " + std::to_string(o.available);
        return "CaptureRecord(" + reprs::quoted(r.selection_id) + ", " + to_string(o.kind) + why + ")";
      });

  nb::class_<InterventionRecord>(m, "InterventionRecord",
       "What one intervention operation did in one step, its evidence and what it was charged.")
      .def_ro("operation_id", &InterventionRecord::operation_id, "The id of the operation it records.")
      .def_ro("target", &InterventionRecord::target, "The path of the point the operation targets.")
      .def_ro("outcome", &InterventionRecord::outcome, "Its InterventionOutcome.")
      .def_ro("message", &InterventionRecord::message, "A FAILED operation's reason (at most 256 bytes), else ''.")
      .def_ro("evidence", &InterventionRecord::evidence,
           "CapturePayloads: before and after for activation evidence, or the original and effective ids and "
           "coefficients for routing; empty without evidence.")
      .def_ro("charged", &InterventionRecord::charged, nb::rv_policy::copy,
           "The CaptureUsage charged for it: its metadata envelope (reserved every step, whatever the "
           "outcome) plus any evidence (a copy).")
      .def("to_json", &CaptureSession::intervention_record_json,
           "The record as JSON (a str); never longer than charged.encoded_bytes.")
      .def("__repr__", [](const InterventionRecord& r) {
        return "InterventionRecord(" + reprs::quoted(r.operation_id) + ", " + to_string(r.outcome) + ")";
      });

  nb::class_<CapturedStep>(m, "CapturedStep", "One drained step: records, intervention outcomes and usage.")
      .def("__repr__", &reprs::step)
      .def_ro("phase", &CapturedStep::phase, "The step's CapturePhase.")
      .def_ro("prediction", &CapturedStep::prediction, "The step's prediction (0 for prefill).")
      .def_ro("records", &CapturedStep::records, "One CaptureRecord per selection, in plan order.")
      .def_ro("interventions", &CapturedStep::interventions,
           "One InterventionRecord per operation, in plan order (empty without interventions).")
      .def_ro("step_usage", &CapturedStep::step_usage, nb::rv_policy::copy,
           "The CaptureUsage this step charged (a copy).")
      .def_ro("cumulative_usage", &CapturedStep::cumulative_usage, nb::rv_policy::copy,
           "The run's CaptureUsage after this step, inherited usage included (a copy).")
      .def_ro("capture_seconds", &CapturedStep::capture_seconds,
           "Seconds spent in observe and intervene during the step.")
      .def("record",
           [](const CapturedStep& s, nb::handle id_arg) -> const CaptureRecord& {
             std::string id = argument<std::string>(id_arg, "CapturedStep.record", "id");
             for (const auto& r : s.records)
               if (r.selection_id == id) return r;
             raise(ErrorKind::InvalidArgument, "no record for selection '" + id + "'");
           },
           nb::arg("id").none(), nb::rv_policy::reference_internal,
           nb::sig("def record(self, id: str) -> CaptureRecord"),
           "The CaptureRecord of selection `id`. InvalidArgumentError when the step has none.");
}

void bind_checkpoints(nb::module_& m) {
  nb::class_<CaptureCheckpoint>(m, "CaptureCheckpoint",
                                "The capture component of a generation snapshot: the admission data, schedule position "
                                "and usage, portable (no backend or handle). copy and deepcopy give a checkpoint that "
                                "restores the same run; a pickle is refused (the run it belongs to is never serialized).")
      .def_ro("artifact_identity", &CaptureCheckpoint::artifact_identity,
           "The artifact_identity of the discovery it was taken with.")
      .def_ro("plan_identity", &CaptureCheckpoint::plan_identity, "The identity of its run's AdmittedCapturePlan.")
      .def_ro("prediction", &CaptureCheckpoint::prediction, "The prediction of the last step delivered.")
      .def_ro("phase", &CaptureCheckpoint::phase, "The phase of the last step delivered.")
      .def_ro("has_step", &CaptureCheckpoint::has_step, "Whether any step was delivered (False for a fresh run).")
      .def_ro("usage", &CaptureCheckpoint::usage, nb::rv_policy::copy,
           "The run's cumulative CaptureUsage when it was taken (a copy); restoring refunds nothing.")
      .def_prop_ro(
          "plan",
          [](const CaptureCheckpoint& cp) {
            if (!cp.plan) raise(ErrorKind::CaptureSession, "CaptureCheckpoint.plan: not a checkpoint checkpoint() made");
            return AdmittedCapturePlan(*cp.plan);
          },
          "The AdmittedCapturePlan checkpoint() cloned, re-admitted against its discovery (a copy).")
      .def_prop_ro(
          "intervention_plan",
          [](const CaptureCheckpoint& cp) {
            return cp.interventions ? std::optional<AdmittedInterventionPlan>(*cp.interventions) : std::nullopt;
          },
          nb::sig("def intervention_plan(self, /) -> AdmittedInterventionPlan | None"),
          "The AdmittedInterventionPlan it cloned (a copy), or None when the run has none.")
      .def("__copy__", [](const CaptureCheckpoint& cp) { return cp; })
      .def("__deepcopy__", [](const CaptureCheckpoint& cp, nb::handle) { return cp; }, nb::arg("memo"))
      .def("__reduce__",
           [](nb::handle) {
             raise(ErrorKind::TypeMismatch, "a capture checkpoint belongs to its run, which is never serialized: copy "
                                            "it (copy.copy, copy.deepcopy) within the process instead");
           },
           nb::sig("def __reduce__(self) -> typing.NoReturn"));

  nb::class_<PreparedCaptureRestore>(m, "PreparedCaptureRestore",
                                     "A validated restore holding its session; commit() cannot fail, dropping it changes nothing.")
      .def("commit", &PreparedCaptureRestore::commit,
           "Rewinds the session to the checkpoint and releases it; never fails, and does nothing once committed "
           "or released.")
      .def_prop_ro("committed", &PreparedCaptureRestore::committed, "Whether commit() has rewound the session.")
      .def_prop_ro("holding", &PreparedCaptureRestore::holding, "Whether it still holds its session.")
      .def("release", [](PreparedCaptureRestore& p) { PreparedCaptureRestore dropped(std::move(p)); },
           "Drops the hold without restoring (as deleting the object does).")
      .def("__enter__",
           [](nb::handle self) {
             if (!nb::cast<PreparedCaptureRestore&>(self).holding())
               refuse_ended_enter("PreparedCaptureRestore", "it no longer holds its session (committed or released)");
             return self;
           },
           nb::sig("def __enter__(self) -> PreparedCaptureRestore"))
      .def("__exit__", [](PreparedCaptureRestore& p, nb::args) {
        PreparedCaptureRestore dropped(std::move(p));  // leaving without commit changes nothing
      }, nb::sig("def __exit__(self, exc_type: object | None, exc: object | None, tb: object | None) -> None"),
      "Releases the session if the restore was not committed: leaving the block changes nothing.");
}

constexpr char intervene_call[] = "CaptureSession.intervene";
constexpr char reintervene_call[] = "CaptureSession.reintervene";

// intervene / reintervene: the operations at `path` on `tensor`, the replacement or None.
template <std::optional<TensorHandle> (CaptureSession::*Apply)(CaptureBackend&, std::string_view, TensorHandle),
          const char* Call>
nb::object operations_at(CaptureSession& s, nb::handle backend, nb::handle path, nb::handle tensor) {
  std::string where = str_argument(path, Call, "path");
  require_capture_backend(backend, Call, "backend");
  PythonCaptureBackend adapter(backend);  // holds the replacement until it is borrowed below
  auto result = keeping_cause(adapter.cause(), [&] { return (s.*Apply)(adapter, where, tensor.ptr()); });
  if (!result) return nb::none();
  return nb::borrow(static_cast<PyObject*>(*result));
}

void bind_capture_session(nb::module_& m) {
  nb::class_<CaptureSession>(m, "CaptureSession",
                             "A capture run: one admission, one monotone ledger, at most one undrained step.",
                             nb::type_slots(session_slots))
      .def("__init__",
           [](CaptureSession* s, nb::handle plan, nb::handle discovery) {
             const char* call = "CaptureSession";
             const auto& admitted = object_argument<AdmittedCapturePlan>(plan, call, "plan", "an AdmittedCapturePlan");
             if (discovery.is_none()) {
               new (s) CaptureSession(admitted);
             } else {
               new (s) CaptureSession(admitted, object_argument<CaptureDiscovery>(discovery, call, "discovery",
                                                                                  "a CaptureDiscovery"));
             }
           },
           nb::arg("plan").none(), nb::arg("discovery").none() = nb::none(),
           nb::sig("def __init__(self, plan: AdmittedCapturePlan, discovery: CaptureDiscovery | None = None) -> None"),
           "With a discovery, re-admits the plan against it first (refused if it was admitted elsewhere).")
      // Copies: what the session enforces cannot be changed through what it hands out.
      .def_prop_ro("plan", &CaptureSession::plan, nb::rv_policy::copy, "The session's AdmittedCapturePlan (a copy).")
      .def_prop_ro("intervention_plan", &CaptureSession::intervention_plan, nb::rv_policy::copy,
                   nb::for_getter(nb::sig("def intervention_plan(self, /) -> AdmittedInterventionPlan | None")),
                   "The AdmittedInterventionPlan enable_interventions gave the session (a copy), or None before it.")
      .def_prop_ro("id", &CaptureSession::id,
           "A process-local id, unique per session; intervention admissions and checkpoints are bound to it.")
      .def("__repr__", [](const CaptureSession& s) {
        return "CaptureSession(id=" + std::to_string(s.id()) +
               ", selections=" + std::to_string(s.plan().plan().selections.size()) +
               ", next_prediction=" + std::to_string(s.next_prediction()) +
               ", step_pending=" + (s.step_pending() ? "True" : "False") +
               ", interventions=" + (s.intervention_plan() ? "True" : "False") + ")";
      })
      .def("begin_step",
           [](CaptureSession& s, nb::handle phase, nb::handle prediction) {
             s.begin_step(phase_argument(phase, "CaptureSession.begin_step"),
                          count_argument(prediction, "CaptureSession.begin_step", "prediction"));
           },
           nb::arg("phase").none(), nb::arg("prediction").none(),
           nb::sig("def begin_step(self, phase: CapturePhase, prediction: int) -> None"),
           "Opens the step (phase, prediction), reserving every selection's and intervention operation's "
           "metadata envelope together (all or nothing). "
           "CaptureSessionError while a step is undrained or a restore or routing control is pending; "
           "InvalidArgumentError past max_predictions or when PREFILL is not prediction 0 (those change nothing); "
           "BudgetExceededError when the envelopes exceed a limit: that step failed (nothing is charged, but "
           "step_usage reads zero and checkpoint and fork are refused, as after any failed step, until a restore "
           "or a next step that completes).")
      .def("observe",
           [](CaptureSession& s, nb::handle backend, nb::handle path, nb::handle tensor) {
             std::string where = str_argument(path, "CaptureSession.observe", "path");
             require_capture_backend(backend, "CaptureSession.observe", "backend");
             PythonCaptureBackend adapter(backend);
             keeping_cause(adapter.cause(), [&] { s.observe(adapter, where, tensor.ptr()); });
           },
           nb::arg("backend").none(), nb::arg("path").none(), nb::arg("tensor").none(),
           nb::sig("def observe(self, backend: lifecore._stub_types.CaptureBackend, path: str, tensor: object) -> None"),
           "Captures `tensor` for the selections at `path` through `backend`; unselected or skipped points cost "
           "a lookup. LifecoreTypeError for a backend without a callable transform, or a `tensor` whose describe() the "
           "backend refuses with a LifecoreTypeError (no tensor of its kind, as the bundled backends say): nothing "
           "changed, the point may still be observed. Raises CaptureSessionError without an open step or on a second observation; a refused "
           "capture (a shape the point does not take, a limit, a failed transform) marks its record FAILED, keeps "
           "what was reserved for it (record.charged: usage is never refunded) and raises (BudgetExceededError, InvalidArgumentError, "
           "CaptureSessionError). A backend's KeyboardInterrupt or SystemExit fails its records and propagates "
           "unchanged.")
      .def("take_step", &CaptureSession::take_step,
           "Hands out the open step as a CapturedStep and closes it, or returns None when no step is open. "
           "CaptureSessionError while a restore is prepared.")
      .def("checkpoint_storage_bytes",
           [](const CaptureSession& s, nb::handle discovery) {
             return s.checkpoint_storage_bytes(object_argument<CaptureDiscovery>(
                 discovery, "CaptureSession.checkpoint_storage_bytes", "discovery", "a CaptureDiscovery"));
           },
           nb::arg("discovery").none(),
           nb::sig("def checkpoint_storage_bytes(self, discovery: CaptureDiscovery) -> int | None"),
           "Logical host bytes to reserve before checkpoint(): what its checkpoint copies (identities, the admitted "
           "plans' encodings and intervention payloads; not the allocator's overhead), or None when it does not fit "
           "in 64 bits.")
      .def("checkpoint",
           [](const CaptureSession& s, nb::handle discovery) {
             return s.checkpoint(object_argument<CaptureDiscovery>(discovery, "CaptureSession.checkpoint", "discovery",
                                                                   "a CaptureDiscovery"));
           },
           nb::arg("discovery").none(), nb::sig("def checkpoint(self, discovery: CaptureDiscovery) -> CaptureCheckpoint"),
           "A CaptureCheckpoint of the last delivered step. CaptureSessionError while a step is undrained or a "
           "routing control pending, when the last step failed, or when `discovery` does not re-admit the plan.")
      .def("validate_restore",
           [](const CaptureSession& s, nb::handle checkpoint) {
             s.validate_restore(object_argument<CaptureCheckpoint>(checkpoint, "CaptureSession.validate_restore",
                                                                   "checkpoint", "a CaptureCheckpoint"));
           },
           nb::arg("checkpoint").none(), nb::sig("def validate_restore(self, checkpoint: CaptureCheckpoint) -> None"),
           "Checks that `checkpoint` can be restored, changing nothing. CaptureSessionError when it belongs to "
           "another session or admission, or while a step is undrained or a routing control pending.")
      .def("prepare_restore",
           [](CaptureSession& s, nb::handle checkpoint) {
             return s.prepare_restore(object_argument<CaptureCheckpoint>(checkpoint, "CaptureSession.prepare_restore",
                                                                         "checkpoint", "a CaptureCheckpoint"));
           },
           nb::arg("checkpoint").none(), nb::keep_alive<0, 1>(),
           nb::sig("def prepare_restore(self, checkpoint: CaptureCheckpoint) -> PreparedCaptureRestore"),
           "Validates as validate_restore and holds the session until the returned PreparedCaptureRestore "
           "commits or is released; calls that change the session raise CaptureSessionError meanwhile.")
      .def("restore",
           [](CaptureSession& s, nb::handle checkpoint) {
             s.restore(object_argument<CaptureCheckpoint>(checkpoint, "CaptureSession.restore", "checkpoint",
                                                          "a CaptureCheckpoint"));
           },
           nb::arg("checkpoint").none(), nb::sig("def restore(self, checkpoint: CaptureCheckpoint) -> None"),
           "Rewinds the schedule position to `checkpoint`; usage is not refunded and old records are not "
           "republished. Raises as validate_restore.")
      .def("cumulative_usage", &CaptureSession::cumulative_usage,
           "The run's CaptureUsage so far, including usage inherited by a fork.")
      .def("step_usage", &CaptureSession::step_usage, "The CaptureUsage charged in the current (or last) step.")
      .def_prop_ro("next_prediction", &CaptureSession::next_prediction,
           "The prediction after the current position (last step begun or restored), 0 before any step.")
      .def_prop_ro("step_pending", &CaptureSession::step_pending, "Whether a step is open and not yet taken.")
      .def_prop_ro("checkpoint_ready", &CaptureSession::checkpoint_ready,
           "Whether the session is at a delivered, successful boundary (a fresh session is).")
      .def("fork",
           [](const CaptureSession& s, nb::handle discovery, nb::handle max_predictions, nb::handle limits) {
             const char* call = "CaptureSession.fork";
             return s.fork(object_argument<CaptureDiscovery>(discovery, call, "discovery", "a CaptureDiscovery"),
                           optional_uint_argument(max_predictions, call, "max_predictions"),
                           argument<std::optional<CaptureLimits>>(limits, call, "limits"));
           },
           nb::arg("discovery").none(), nb::kw_only(), nb::arg("max_predictions").none() = nb::none(),
           nb::arg("limits").none() = nb::none(),
           nb::sig("def fork(self, discovery: CaptureDiscovery, *, max_predictions: int | None = None, "
                   "limits: CaptureLimits | None = None) -> CaptureSession"),
                   "A new CaptureSession continuing from this one's boundary with its usage, re-admitted with optional "
                   "new max_predictions and limits. The two are branches: each spends up to its limits from the usage "
                   "they share at the fork (a cumulative limit bounds each branch, not the two together). It carries the "
                   "capture plan, not the interventions: enable them "
                   "on the fork (enable_interventions, before its first step) to continue a steered run. "
                   "CaptureSessionError while a step is undrained or after a failed step; AdmissionError for another "
                   "artifact, a refused re-admission (a new cumulative limit below the usage it inherits, too), or a "
                   "max_predictions that leaves the fork no prediction to take.")
      .def("enable_interventions",
           [](CaptureSession& s, nb::handle plan, nb::object estimator) {
             const auto& admitted = object_argument<AdmittedInterventionPlan>(
                 plan, "CaptureSession.enable_interventions", "plan", "an AdmittedInterventionPlan");
             if (estimator.is_none()) raise(ErrorKind::InvalidArgument, "an intervention estimator is required");
             // Asked at the first evidence, mid-step: a missing one is refused here, before anything is installed.
             if (!nb::hasattr(estimator, "estimate") || !PyCallable_Check(estimator.attr("estimate").ptr()))
               raise(ErrorKind::TypeMismatch, argument_label("CaptureSession.enable_interventions", "estimator") +
                                                  " must offer estimate(tensor, request) -> CaptureUsage (it prices the "
                                                  "operations' evidence; a backend is one), got " +
                                                  type_name_of(estimator));
             s.enable_interventions(admitted, std::make_shared<PythonInterventionEstimator>(std::move(estimator)));
           },
           nb::arg("plan").none(), nb::arg("estimator").none(),
           nb::sig("def enable_interventions(self, plan: AdmittedInterventionPlan, estimator: lifecore._stub_types.InterventionEstimator) -> None"),
           "Installs an AdmittedInterventionPlan admitted for this session, with `estimator` pricing its "
           "evidence; before the first step only. CaptureSessionError when already enabled, after a step, or for"
           " another session's plan; InvalidArgumentError without an estimator or for another request; "
           "LifecoreTypeError for an estimator without a callable estimate; "
           "AdmissionError when the operations' metadata envelopes, reserved every step beside the selections', "
           "cannot fit each remaining step or the run's limits (nothing is installed).")
      .def("intervene", &operations_at<&CaptureSession::intervene, intervene_call>,
           nb::arg("backend").none(), nb::arg("path").none(), nb::arg("tensor").none(),
           nb::sig("def intervene(self, backend: lifecore._stub_types.CaptureBackend, path: str, tensor: typing.Any) -> typing.Any | None"),
           "Applies the operations due at `path` in plan order and returns the new tensor, or None when none "
           "applied. LifecoreTypeError for a backend without a callable transform (nothing changed). An operation "
           "refused is recorded FAILED. CaptureSessionError without an open step, when "
           "observe(backend, path, ...) has not run first at the same path in this step (whether or not anything "
           "is captured there), or on a second call at the point.")
      .def("reintervene", &operations_at<&CaptureSession::reintervene, reintervene_call>,
           nb::arg("backend").none(), nb::arg("path").none(), nb::arg("tensor").none(),
           nb::sig("def reintervene(self, backend: lifecore._stub_types.CaptureBackend, path: str, tensor: typing.Any) -> typing.Any | None"),
           "For a recompute of `path`'s output (activation checkpointing runs a forward again in backward): "
           "applies the operations at `path` again, in plan order, as the forwards applied them to a tensor of this "
           "one's shape, and returns the new tensor, or None when no forward of that shape applied one. Records, "
           "charges and observes nothing, open step or not, across later steps and restores. CaptureSessionError "
           "where forwards of that shape differed (one applied an operation, another reached it and did not: "
           "inactive or failed), where an operation met more than 64 shapes and this one was let go, or where the "
           "backend fails or changes the shape or dtype (the backend's exception is the cause).")
      .def("finish_interventions", &CaptureSession::finish_interventions,
           "Checks that every operation scheduled this step was applied. CaptureSessionError naming the first "
           "missing or failed one, without an open step, or while a routing control is pending.")
      .def("routing_control",
           [](CaptureSession& s, nb::handle path, nb::handle token_rows) {
             return s.routing_control(str_argument(path, "CaptureSession.routing_control", "path"),
                                      count_argument(token_rows, "CaptureSession.routing_control", "token_rows"));
           },
           nb::arg("path").none(), nb::arg("token_rows").none(),
           nb::sig("def routing_control(self, path: str, token_rows: int) -> GroupSelectionControl | None"),
           "The GroupSelectionControl a routing selector at `path` must apply to `token_rows` rows this step, or "
           "None when no routing operation is due; reserves original-decision evidence. CaptureSessionError "
           "without an open step or while a control is pending; InvalidArgumentError for an invalid control or "
           "too many rows; BudgetExceededError when the evidence exceeds a limit.")
      .def("routing_applied",
           [](CaptureSession& s, nb::handle backend, nb::handle path, nb::object original, nb::object effective) {
             std::string where = str_argument(path, "CaptureSession.routing_applied", "path");
             std::optional<nb::tuple> original_items;
             if (!original.is_none()) original_items = decision_argument(original, "original");
             nb::tuple effective_items = decision_argument(effective, "effective");
             std::optional<std::pair<TensorHandle, TensorHandle>> before;
             if (original_items) before = handles_of(*original_items);
             auto after = handles_of(effective_items);
             PythonCaptureBackend adapter(backend);
             keeping_cause(adapter.cause(), [&] { s.routing_applied(adapter, where, before, after); });
           },
           nb::arg("backend").none(), nb::arg("path").none(), nb::arg("original").none(), nb::arg("effective").none(),
           nb::sig("def routing_applied(self, backend: lifecore._stub_types.CaptureBackend, path: str, original: tuple[object, object] | None, "
                   "effective: tuple[object, object]) -> None"),
                   "Reports the pending control applied: (ids, coefficients) tensors of the effective decision, and the "
                   "original one when the control asked for it, captured as evidence. CaptureSessionError without a "
                   "matching pending control; InvalidArgumentError for misshaped decisions; BudgetExceededError when "
                   "evidence exceeds a limit.")
      .def("routing_failed",
           [](CaptureSession& s, nb::handle path, nb::handle message) {
             s.routing_failed(str_argument(path, "CaptureSession.routing_failed", "path"),
                              str_argument(message, "CaptureSession.routing_failed", "message"));
           },
           nb::arg("path").none(), nb::arg("message").none(), nb::sig("def routing_failed(self, path: str, message: str) -> None"),
           "Records a routing selector's failure at `path` (message cut to 256 bytes): the pending control, or "
           "the due routing operations there, become FAILED. Never raises for an unknown path.");
}

}  // namespace

void init_capture_session(nb::module_& m) {
  bind_outcome_enums(m);
  bind_records(m);
  bind_checkpoints(m);
  bind_capture_session(m);
}

}  // namespace lifecore::bindings
