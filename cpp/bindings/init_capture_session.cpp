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

}  // namespace

void init_capture_session(nb::module_& m) {
  nb::enum_<OutcomeKind>(m, "CaptureOutcome")
      .value("CAPTURED", OutcomeKind::Captured)
      .value("TRUNCATED", OutcomeKind::Truncated)
      .value("SKIPPED", OutcomeKind::Skipped)
      .value("MISSING", OutcomeKind::Missing)
      .value("FAILED", OutcomeKind::Failed);
  nb::enum_<InterventionOutcomeKind>(m, "InterventionOutcome")
      .value("INACTIVE", InterventionOutcomeKind::Inactive)
      .value("APPLIED", InterventionOutcomeKind::Applied)
      .value("MISSING", InterventionOutcomeKind::Missing)
      .value("FAILED", InterventionOutcomeKind::Failed);

  nb::class_<CaptureRecord>(m, "CaptureRecord", "What one selection produced in one step, and what it was charged.")
      .def_ro("selection_id", &CaptureRecord::selection_id)
      .def_ro("path", &CaptureRecord::path)
      .def_ro("node_id", &CaptureRecord::node_id)
      .def_ro("position", &CaptureRecord::position)
      .def_ro("source_shape", &CaptureRecord::source_shape)
      .def_ro("selected_shape", &CaptureRecord::selected_shape)
      .def_prop_ro("outcome", [](const CaptureRecord& r) { return r.outcome.kind; })
      .def_prop_ro("skip_reason", [](const CaptureRecord& r) {
        return optional_reason(r.outcome.kind == OutcomeKind::Skipped, to_string(r.outcome.skip));
      }, "'schedule' or 'limit' for a SKIPPED record, else None")
      .def_prop_ro("fail_reason", [](const CaptureRecord& r) {
        return optional_reason(r.outcome.kind == OutcomeKind::Failed, to_string(r.outcome.fail));
      }, "'limit', 'unsupported', 'invalid' or 'native' for a FAILED record, else None")
      .def_prop_ro("budget", [](const CaptureRecord& r) {
        bool limit = (r.outcome.kind == OutcomeKind::Skipped && r.outcome.skip == SkipReason::Limit) ||
                     (r.outcome.kind == OutcomeKind::Failed && r.outcome.fail == FailReason::Limit);
        return optional_reason(limit, to_string(r.outcome.budget));
      })
      .def_prop_ro("cumulative", [](const CaptureRecord& r) { return r.outcome.cumulative; })
      .def_prop_ro("message", [](const CaptureRecord& r) { return r.outcome.message; })
      .def_prop_ro("available", [](const CaptureRecord& r) { return r.outcome.available; })
      .def_prop_ro("emitted", [](const CaptureRecord& r) { return r.outcome.emitted; })
      .def_prop_ro("payload", [](const CaptureRecord& r) -> std::optional<CapturePayload> {
        if (r.payload.kind == PayloadKind::None) return std::nullopt;
        return r.payload;
      })
      .def_ro("charged", &CaptureRecord::charged)
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
      .def_ro("charged", &InterventionRecord::charged)
      .def("to_json", &CaptureSession::intervention_record_json)
      .def("__repr__", [](const InterventionRecord& r) {
        return "InterventionRecord('" + r.operation_id + "', " + to_string(r.outcome) + ")";
      });

  nb::class_<CapturedStep>(m, "CapturedStep", "One drained step: records, intervention outcomes and usage.")
      .def_ro("phase", &CapturedStep::phase)
      .def_ro("prediction", &CapturedStep::prediction)
      .def_ro("records", &CapturedStep::records)
      .def_ro("interventions", &CapturedStep::interventions)
      .def_ro("step_usage", &CapturedStep::step_usage)
      .def_ro("cumulative_usage", &CapturedStep::cumulative_usage)
      .def_ro("capture_seconds", &CapturedStep::capture_seconds)
      .def("record", [](const CapturedStep& s, const std::string& id) -> const CaptureRecord& {
        for (const auto& r : s.records)
          if (r.selection_id == id) return r;
        raise(ErrorKind::InvalidArgument, "no record for selection '" + id + "'");
      }, nb::rv_policy::reference_internal);

  nb::class_<CaptureCheckpoint>(m, "CaptureCheckpoint", "The capture component of a generation snapshot.")
      .def_ro("artifact_identity", &CaptureCheckpoint::artifact_identity)
      .def_ro("plan_identity", &CaptureCheckpoint::plan_identity)
      .def_ro("prediction", &CaptureCheckpoint::prediction)
      .def_ro("phase", &CaptureCheckpoint::phase)
      .def_ro("has_step", &CaptureCheckpoint::has_step)
      .def_ro("usage", &CaptureCheckpoint::usage)
      .def("__reduce__", [](nb::handle) { raise(ErrorKind::TypeMismatch, "a capture checkpoint belongs to its run"); });

  nb::class_<PreparedCaptureRestore>(m, "PreparedCaptureRestore",
                                     "A validated restore holding its session; commit() cannot fail, dropping it changes nothing.")
      .def("commit", &PreparedCaptureRestore::commit)
      .def_prop_ro("committed", &PreparedCaptureRestore::committed)
      .def_prop_ro("holding", &PreparedCaptureRestore::holding, "Whether it still holds its session.")
      .def("release", [](PreparedCaptureRestore& p) { PreparedCaptureRestore dropped(std::move(p)); },
           "Drops the hold without restoring (as deleting the object does).")
      .def("__enter__", [](nb::handle self) { return self; })
      .def("__exit__", [](PreparedCaptureRestore& p, nb::args) {
        PreparedCaptureRestore dropped(std::move(p));  // leaving without commit changes nothing
      });

  nb::class_<CaptureSession>(m, "CaptureSession",
                             "A capture run: one admission, one monotone ledger, at most one undrained step.")
      .def(nb::init<const AdmittedCapturePlan&>(), nb::arg("plan"))
      .def(nb::init<const AdmittedCapturePlan&, const CaptureDiscovery&>(), nb::arg("plan"), nb::arg("discovery"),
           "Re-admits the plan against this session's discovery first (refused if it was admitted elsewhere).")
      .def_prop_ro("plan", &CaptureSession::plan, nb::rv_policy::reference_internal)
      .def_prop_ro("intervention_plan", &CaptureSession::intervention_plan, nb::rv_policy::reference_internal)
      .def_prop_ro("id", &CaptureSession::id)
      .def("begin_step", &CaptureSession::begin_step, nb::arg("phase"), nb::arg("prediction"))
      .def("observe",
           [](CaptureSession& s, nb::handle backend, std::string_view path, nb::handle tensor) {
             PythonCaptureBackend adapter(backend);
             s.observe(adapter, path, tensor.ptr());
           },
           nb::arg("backend"), nb::arg("path"), nb::arg("tensor"))
      .def("take_step", &CaptureSession::take_step)
      .def("checkpoint_storage_bytes", &CaptureSession::checkpoint_storage_bytes, nb::arg("discovery"))
      .def("checkpoint", &CaptureSession::checkpoint, nb::arg("discovery"))
      .def("validate_restore", &CaptureSession::validate_restore, nb::arg("checkpoint"))
      .def("prepare_restore", &CaptureSession::prepare_restore, nb::arg("checkpoint"), nb::keep_alive<0, 1>())
      .def("restore", &CaptureSession::restore, nb::arg("checkpoint"))
      .def("cumulative_usage", &CaptureSession::cumulative_usage)
      .def("step_usage", &CaptureSession::step_usage)
      .def_prop_ro("next_prediction", &CaptureSession::next_prediction)
      .def_prop_ro("step_pending", &CaptureSession::step_pending)
      .def_prop_ro("checkpoint_ready", &CaptureSession::checkpoint_ready)
      .def("fork", &CaptureSession::fork, nb::arg("discovery"), nb::kw_only(),
           nb::arg("max_predictions").none() = nb::none(), nb::arg("limits").none() = nb::none())
      .def("enable_interventions",
           [](CaptureSession& s, const AdmittedInterventionPlan& plan, nb::object estimator) {
             if (estimator.is_none()) raise(ErrorKind::InvalidArgument, "an intervention estimator is required");
             s.enable_interventions(plan, std::make_shared<PythonInterventionEstimator>(std::move(estimator)));
           },
           nb::arg("plan"), nb::arg("estimator").none())
      .def("intervene",
           [](CaptureSession& s, nb::handle backend, std::string_view path, nb::handle tensor) -> nb::object {
             PythonCaptureBackend adapter(backend);
             auto result = s.intervene(adapter, path, tensor.ptr());
             if (!result) return nb::none();
             return nb::borrow(static_cast<PyObject*>(*result));
           },
           nb::arg("backend"), nb::arg("path"), nb::arg("tensor"))
      .def("finish_interventions", &CaptureSession::finish_interventions)
      .def("routing_control", &CaptureSession::routing_control, nb::arg("path"), nb::arg("token_rows"))
      .def("routing_applied",
           [](CaptureSession& s, nb::handle backend, std::string_view path, nb::object original, nb::object effective) {
             PythonCaptureBackend adapter(backend);
             auto pair_of = [](nb::handle pair) {
               nb::tuple items = nb::cast<nb::tuple>(pair);
               if (items.size() != 2) raise(ErrorKind::InvalidArgument, "a routing decision is a pair (ids, coefficients)");
               return std::pair<TensorHandle, TensorHandle>(items[0].ptr(), items[1].ptr());
             };
             std::optional<std::pair<TensorHandle, TensorHandle>> before;
             nb::tuple original_items, effective_items;  // keep the tuples alive through the call
             if (!original.is_none()) before = pair_of(original);
             s.routing_applied(adapter, path, before, pair_of(effective));
           },
           nb::arg("backend"), nb::arg("path"), nb::arg("original").none(), nb::arg("effective"))
      .def("routing_failed", &CaptureSession::routing_failed, nb::arg("path"), nb::arg("message"));
}

}  // namespace lifecore::bindings
