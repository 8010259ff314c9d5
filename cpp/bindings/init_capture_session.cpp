// CaptureSession, its records, steps and checkpoints: conversion only.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "capture_backend_adapter.hpp"
#include "capture_bindings.hpp"
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
  if (!(PyTuple_Check(h.ptr()) || PyList_Check(h.ptr())) || PySequence_Size(h.ptr()) != 2)
    raise(ErrorKind::TypeMismatch, argument_label("CaptureSession.routing_applied", name) +
                                       " must be a pair (ids, coefficients), got " + type_name_of(h));
  return nb::steal<nb::tuple>(PySequence_Tuple(h.ptr()));
}

std::pair<TensorHandle, TensorHandle> handles_of(const nb::tuple& pair) {
  return {pair[0].ptr(), pair[1].ptr()};
}

void bind_outcome_enums(nb::module_& m) {
  nb::enum_<OutcomeKind>(m, "CaptureOutcome")
      .value("CAPTURED", OutcomeKind::captured)
      .value("TRUNCATED", OutcomeKind::truncated)
      .value("SKIPPED", OutcomeKind::skipped)
      .value("MISSING", OutcomeKind::missing)
      .value("FAILED", OutcomeKind::failed);
  nb::enum_<InterventionOutcomeKind>(m, "InterventionOutcome")
      .value("INACTIVE", InterventionOutcomeKind::inactive)
      .value("APPLIED", InterventionOutcomeKind::applied)
      .value("MISSING", InterventionOutcomeKind::missing)
      .value("FAILED", InterventionOutcomeKind::failed);
}

void bind_records(nb::module_& m) {
  nb::class_<CaptureRecord>(m, "CaptureRecord", "What one selection produced in one step, and what it was charged.")
      .def_ro("selection_id", &CaptureRecord::selection_id)
      .def_ro("path", &CaptureRecord::path)
      .def_ro("node_id", &CaptureRecord::node_id)
      .def_ro("position", &CaptureRecord::position)
      .def_ro("source_shape", &CaptureRecord::source_shape)
      .def_ro("selected_shape", &CaptureRecord::selected_shape)
      .def_prop_ro("outcome", [](const CaptureRecord& r) { return r.outcome.kind; })
      .def_prop_ro("skip_reason", [](const CaptureRecord& r) {
        return optional_reason(r.outcome.kind == OutcomeKind::skipped, to_string(r.outcome.skip));
      }, "'schedule' or 'limit' for a SKIPPED record, else None")
      .def_prop_ro("fail_reason", [](const CaptureRecord& r) {
        return optional_reason(r.outcome.kind == OutcomeKind::failed, to_string(r.outcome.fail));
      }, "'limit', 'unsupported', 'invalid' or 'native' for a FAILED record, else None")
      .def_prop_ro("budget", [](const CaptureRecord& r) {
        bool limit = (r.outcome.kind == OutcomeKind::skipped && r.outcome.skip == SkipReason::limit) ||
                     (r.outcome.kind == OutcomeKind::failed && r.outcome.fail == FailReason::limit);
        return optional_reason(limit, to_string(r.outcome.budget));
      })
      .def_prop_ro("cumulative", [](const CaptureRecord& r) { return r.outcome.cumulative; })
      .def_prop_ro("message", [](const CaptureRecord& r) { return r.outcome.message; })
      .def_prop_ro("available", [](const CaptureRecord& r) { return r.outcome.available; })
      .def_prop_ro("emitted", [](const CaptureRecord& r) { return r.outcome.emitted; })
      .def_prop_ro("payload", [](const CaptureRecord& r) -> std::optional<CapturePayload> {
        if (r.payload.kind == PayloadKind::none) return std::nullopt;
        return r.payload;
      })
      .def_ro("charged", &CaptureRecord::charged, nb::rv_policy::copy)
      .def("to_json", &CaptureSession::record_json, "The record as JSON; never longer than charged.encoded_bytes.")
      .def("__repr__", [](const CaptureRecord& r) {
        return "CaptureRecord('" + r.selection_id + "', " + to_string(r.outcome.kind) + ")";
      });

  nb::class_<InterventionRecord>(m, "InterventionRecord")
      .def_ro("operation_id", &InterventionRecord::operation_id)
      .def_ro("target", &InterventionRecord::target)
      .def_ro("outcome", &InterventionRecord::outcome)
      .def_ro("message", &InterventionRecord::message)
      .def_ro("evidence", &InterventionRecord::evidence)
      .def_ro("charged", &InterventionRecord::charged, nb::rv_policy::copy)
      .def("to_json", &CaptureSession::intervention_record_json)
      .def("__repr__", [](const InterventionRecord& r) {
        return "InterventionRecord('" + r.operation_id + "', " + to_string(r.outcome) + ")";
      });

  nb::class_<CapturedStep>(m, "CapturedStep", "One drained step: records, intervention outcomes and usage.")
      .def_ro("phase", &CapturedStep::phase)
      .def_ro("prediction", &CapturedStep::prediction)
      .def_ro("records", &CapturedStep::records)
      .def_ro("interventions", &CapturedStep::interventions)
      .def_ro("step_usage", &CapturedStep::step_usage, nb::rv_policy::copy)
      .def_ro("cumulative_usage", &CapturedStep::cumulative_usage, nb::rv_policy::copy)
      .def_ro("capture_seconds", &CapturedStep::capture_seconds)
      .def("record",
           [](const CapturedStep& s, nb::handle id_arg) -> const CaptureRecord& {
             std::string id = argument<std::string>(id_arg, "CapturedStep.record", "id");
             for (const auto& r : s.records)
               if (r.selection_id == id) return r;
             raise(ErrorKind::InvalidArgument, "no record for selection '" + id + "'");
           },
           nb::arg("id").none(), nb::rv_policy::reference_internal,
           nb::sig("def record(self, id: str) -> CaptureRecord"));
}

void bind_checkpoints(nb::module_& m) {
  nb::class_<CaptureCheckpoint>(m, "CaptureCheckpoint", "The capture component of a generation snapshot.")
      .def_ro("artifact_identity", &CaptureCheckpoint::artifact_identity)
      .def_ro("plan_identity", &CaptureCheckpoint::plan_identity)
      .def_ro("prediction", &CaptureCheckpoint::prediction)
      .def_ro("phase", &CaptureCheckpoint::phase)
      .def_ro("has_step", &CaptureCheckpoint::has_step)
      .def_ro("usage", &CaptureCheckpoint::usage, nb::rv_policy::copy)
      .def("__reduce__", [](nb::handle) { raise(ErrorKind::TypeMismatch, "a capture checkpoint belongs to its run"); });

  nb::class_<PreparedCaptureRestore>(m, "PreparedCaptureRestore",
                                     "A validated restore holding its session; commit() cannot fail, dropping it changes nothing.")
      .def("commit", &PreparedCaptureRestore::commit)
      .def_prop_ro("committed", &PreparedCaptureRestore::committed)
      .def_prop_ro("holding", &PreparedCaptureRestore::holding, "Whether it still holds its session.")
      .def("release", [](PreparedCaptureRestore& p) { PreparedCaptureRestore dropped(std::move(p)); },
           "Drops the hold without restoring (as deleting the object does).")
      .def("__enter__", [](nb::handle self) { return self; }, nb::sig("def __enter__(self) -> PreparedCaptureRestore"))
      .def("__exit__", [](PreparedCaptureRestore& p, nb::args) {
        PreparedCaptureRestore dropped(std::move(p));  // leaving without commit changes nothing
      });
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
      .def_prop_ro("plan", &CaptureSession::plan, nb::rv_policy::copy)
      .def_prop_ro("intervention_plan", &CaptureSession::intervention_plan, nb::rv_policy::copy,
                   nb::for_getter(nb::sig("def intervention_plan(self, /) -> AdmittedInterventionPlan | None")))
      .def_prop_ro("id", &CaptureSession::id)
      .def("begin_step",
           [](CaptureSession& s, nb::handle phase, nb::handle prediction) {
             s.begin_step(phase_argument(phase, "CaptureSession.begin_step"),
                          count_argument(prediction, "CaptureSession.begin_step", "prediction"));
           },
           nb::arg("phase").none(), nb::arg("prediction").none(),
           nb::sig("def begin_step(self, phase: CapturePhase, prediction: int) -> None"))
      .def("observe",
           [](CaptureSession& s, nb::handle backend, nb::handle path, nb::handle tensor) {
             std::string where = str_argument(path, "CaptureSession.observe", "path");
             PythonCaptureBackend adapter(backend);
             keeping_cause(adapter.cause(), [&] { s.observe(adapter, where, tensor.ptr()); });
           },
           nb::arg("backend").none(), nb::arg("path").none(), nb::arg("tensor").none(),
           nb::sig("def observe(self, backend: object, path: str, tensor: object) -> None"))
      .def("take_step", &CaptureSession::take_step)
      .def("checkpoint_storage_bytes",
           [](const CaptureSession& s, nb::handle discovery) {
             return s.checkpoint_storage_bytes(object_argument<CaptureDiscovery>(
                 discovery, "CaptureSession.checkpoint_storage_bytes", "discovery", "a CaptureDiscovery"));
           },
           nb::arg("discovery").none(),
           nb::sig("def checkpoint_storage_bytes(self, discovery: CaptureDiscovery) -> int | None"))
      .def("checkpoint",
           [](const CaptureSession& s, nb::handle discovery) {
             return s.checkpoint(object_argument<CaptureDiscovery>(discovery, "CaptureSession.checkpoint", "discovery",
                                                                   "a CaptureDiscovery"));
           },
           nb::arg("discovery").none(), nb::sig("def checkpoint(self, discovery: CaptureDiscovery) -> CaptureCheckpoint"))
      .def("validate_restore",
           [](const CaptureSession& s, nb::handle checkpoint) {
             s.validate_restore(object_argument<CaptureCheckpoint>(checkpoint, "CaptureSession.validate_restore",
                                                                   "checkpoint", "a CaptureCheckpoint"));
           },
           nb::arg("checkpoint").none(), nb::sig("def validate_restore(self, checkpoint: CaptureCheckpoint) -> None"))
      .def("prepare_restore",
           [](CaptureSession& s, nb::handle checkpoint) {
             return s.prepare_restore(object_argument<CaptureCheckpoint>(checkpoint, "CaptureSession.prepare_restore",
                                                                         "checkpoint", "a CaptureCheckpoint"));
           },
           nb::arg("checkpoint").none(), nb::keep_alive<0, 1>(),
           nb::sig("def prepare_restore(self, checkpoint: CaptureCheckpoint) -> PreparedCaptureRestore"))
      .def("restore",
           [](CaptureSession& s, nb::handle checkpoint) {
             s.restore(object_argument<CaptureCheckpoint>(checkpoint, "CaptureSession.restore", "checkpoint",
                                                          "a CaptureCheckpoint"));
           },
           nb::arg("checkpoint").none(), nb::sig("def restore(self, checkpoint: CaptureCheckpoint) -> None"))
      .def("cumulative_usage", &CaptureSession::cumulative_usage)
      .def("step_usage", &CaptureSession::step_usage)
      .def_prop_ro("next_prediction", &CaptureSession::next_prediction)
      .def_prop_ro("step_pending", &CaptureSession::step_pending)
      .def_prop_ro("checkpoint_ready", &CaptureSession::checkpoint_ready)
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
                   "limits: CaptureLimits | None = None) -> CaptureSession"))
      .def("enable_interventions",
           [](CaptureSession& s, nb::handle plan, nb::object estimator) {
             const auto& admitted = object_argument<AdmittedInterventionPlan>(
                 plan, "CaptureSession.enable_interventions", "plan", "an AdmittedInterventionPlan");
             if (estimator.is_none()) raise(ErrorKind::InvalidArgument, "an intervention estimator is required");
             s.enable_interventions(admitted, std::make_shared<PythonInterventionEstimator>(std::move(estimator)));
           },
           nb::arg("plan").none(), nb::arg("estimator").none(),
           nb::sig("def enable_interventions(self, plan: AdmittedInterventionPlan, estimator: object) -> None"))
      .def("intervene",
           [](CaptureSession& s, nb::handle backend, nb::handle path, nb::handle tensor) -> nb::object {
             std::string where = str_argument(path, "CaptureSession.intervene", "path");
             PythonCaptureBackend adapter(backend);
             auto result = s.intervene(adapter, where, tensor.ptr());
             if (!result) return nb::none();
             return nb::borrow(static_cast<PyObject*>(*result));
           },
           nb::arg("backend").none(), nb::arg("path").none(), nb::arg("tensor").none(),
           nb::sig("def intervene(self, backend: object, path: str, tensor: typing.Any) -> typing.Any | None"))
      .def("finish_interventions", &CaptureSession::finish_interventions)
      .def("routing_control",
           [](CaptureSession& s, nb::handle path, nb::handle token_rows) {
             return s.routing_control(str_argument(path, "CaptureSession.routing_control", "path"),
                                      count_argument(token_rows, "CaptureSession.routing_control", "token_rows"));
           },
           nb::arg("path").none(), nb::arg("token_rows").none(),
           nb::sig("def routing_control(self, path: str, token_rows: int) -> GroupSelectionControl | None"))
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
           nb::sig("def routing_applied(self, backend: object, path: str, original: tuple[object, object] | None, "
                   "effective: tuple[object, object]) -> None"))
      .def("routing_failed",
           [](CaptureSession& s, nb::handle path, nb::handle message) {
             s.routing_failed(str_argument(path, "CaptureSession.routing_failed", "path"),
                              str_argument(message, "CaptureSession.routing_failed", "message"));
           },
           nb::arg("path").none(), nb::arg("message").none(), nb::sig("def routing_failed(self, path: str, message: str) -> None"));
}

}  // namespace

void init_capture_session(nb::module_& m) {
  bind_outcome_enums(m);
  bind_records(m);
  bind_checkpoints(m);
  bind_capture_session(m);
}

}  // namespace lifecore::bindings
