// Intervention plans and routing controls: conversion only.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "capture_bindings.hpp"
#include "lifecore/capture/admission.hpp"
#include "lifecore/capture/backend.hpp"
#include "lifecore/capture/session.hpp"
#include "lifecore/error.hpp"

namespace lifecore::bindings {

using namespace lifecore::capture;

void init_capture_interventions(nb::module_& m) {
  nb::enum_<InterventionAction>(m, "InterventionAction")
      .value("ZERO", InterventionAction::zero)
      .value("SCALE", InterventionAction::scale)
      .value("MASK", InterventionAction::mask)
      .value("REPLACE", InterventionAction::replace)
      .value("ADD", InterventionAction::add)
      .value("MASK_LOGITS", InterventionAction::mask_logits)
      .value("EXCLUDE_EXPERTS", InterventionAction::exclude_experts)
      .value("ZERO_EXPERT_CONTRIBUTION", InterventionAction::zero_expert_contribution)
      .value("BIAS_ROUTING_SCORES", InterventionAction::bias_routing_scores)
      .value("FORCE_EXPERTS", InterventionAction::force_experts);
  nb::enum_<EvidenceKind>(m, "EvidenceKind")
      .value("NONE", EvidenceKind::none)
      .value("PREVIEW", EvidenceKind::preview)
      .value("SUMMARY", EvidenceKind::summary);

  nb::class_<InterventionOperation>(m, "InterventionOperation",
                                    "One scheduled operation (see lifecore.capture.interventions for builders).")
      .def("__init__",
           [](InterventionOperation* op, nb::handle id, nb::handle target, nb::handle action, nb::handle schedule,
              nb::handle slices, nb::handle factor, nb::handle payload_shape, nb::handle payload, nb::handle ids,
              nb::handle evidence, nb::handle evidence_elements) {
             const char* call = "InterventionOperation";
             InterventionOperation operation{
                 argument<std::string>(id, call, "id"), argument<std::string>(target, call, "target"),
                 argument<std::optional<CaptureSchedule>>(schedule, call, "schedule").value_or(CaptureSchedule{}),
                 argument<std::vector<CaptureSlice>>(slices, call, "slices"),
                 argument<InterventionAction>(action, call, "action"), argument<double>(factor, call, "factor"),
                 argument<std::vector<std::uint64_t>>(payload_shape, call, "payload_shape"),
                 argument<std::vector<double>>(payload, call, "payload"),
                 argument<std::vector<std::uint64_t>>(ids, call, "ids"),
                 argument<EvidenceKind>(evidence, call, "evidence"),
                 argument<std::uint64_t>(evidence_elements, call, "evidence_elements")};
             new (op) InterventionOperation(std::move(operation));
           },
           nb::arg("id").none(), nb::arg("target").none(), nb::arg("action").none(), nb::kw_only(),
           nb::arg("schedule").none() = nb::none(), nb::arg("slices").none() = nb::list(),
           nb::arg("factor").none() = 1.0, nb::arg("payload_shape").none() = nb::list(),
           nb::arg("payload").none() = nb::list(), nb::arg("ids").none() = nb::list(),
           nb::arg("evidence").none() = EvidenceKind::none, nb::arg("evidence_elements").none() = 0,
           nb::sig("def __init__(self, id: str, target: str, action: InterventionAction, *, "
                   "schedule: CaptureSchedule | None = None, slices: collections.abc.Sequence[CaptureSlice] = [], "
                   "factor: float = 1.0, payload_shape: collections.abc.Sequence[int] = [], "
                   "payload: collections.abc.Sequence[float] = [], ids: collections.abc.Sequence[int] = [], "
                   "evidence: EvidenceKind = ..., evidence_elements: int = 0) -> None"))
      .def_ro("id", &InterventionOperation::id)
      .def_ro("target", &InterventionOperation::target)
      .def_ro("action", &InterventionOperation::action)
      .def_ro("schedule", &InterventionOperation::schedule)
      .def_ro("slices", &InterventionOperation::slices)
      .def_ro("factor", &InterventionOperation::factor)
      .def_ro("payload_shape", &InterventionOperation::payload_shape)
      .def_ro("payload", &InterventionOperation::payload)
      .def_ro("ids", &InterventionOperation::ids)
      .def_ro("evidence", &InterventionOperation::evidence)
      .def_ro("evidence_elements", &InterventionOperation::evidence_elements);

  nb::class_<InterventionPlan>(m, "InterventionPlan", "Operations applied in plan order.")
      .def("__init__",
           [](InterventionPlan* p, nb::handle ops) {
             auto operations = argument<std::vector<InterventionOperation>>(ops, "InterventionPlan", "operations");
             new (p) InterventionPlan{std::move(operations)};
           },
           nb::arg("operations").none(),
           nb::sig("def __init__(self, operations: collections.abc.Sequence[InterventionOperation]) -> None"))
      .def_ro("operations", &InterventionPlan::operations)
      .def("admit",
           [](const InterventionPlan& plan, nb::handle discovery_arg, nb::handle session_arg) {
             const char* call = "InterventionPlan.admit";
             const auto& discovery = object_argument<CaptureDiscovery>(discovery_arg, call, "discovery", "a CaptureDiscovery");
             const auto& session = object_argument<CaptureSession>(session_arg, call, "session", "a CaptureSession");
             return admit_interventions(plan, discovery, session.plan().request(), session.plan().identity(), session.id());
           },
           nb::arg("discovery").none(), nb::arg("session").none(),
           nb::sig("def admit(self, discovery: CaptureDiscovery, session: CaptureSession) -> AdmittedInterventionPlan"),
           "Admits the plan for one session (its identity binds the session's admission and id).");

  nb::class_<AdmittedInterventionPlan>(m, "AdmittedInterventionPlan")
      // Copies: an admitted plan cannot be changed from Python (what is handed out is a value).
      .def_prop_ro("plan", &AdmittedInterventionPlan::plan, nb::rv_policy::copy)
      .def_prop_ro("identity", &AdmittedInterventionPlan::identity)
      .def_prop_ro("request", &AdmittedInterventionPlan::request, nb::rv_policy::copy)
      .def("__reduce__", [](nb::handle) { raise(ErrorKind::TypeMismatch, "deserialization cannot forge admission"); })
      .def("__reduce_ex__", [](nb::handle, int) { raise(ErrorKind::TypeMismatch, "deserialization cannot forge admission"); });

  nb::class_<InterventionRequest>(m, "InterventionRequest", "What a backend must apply for one operation.")
      .def_ro("action", &InterventionRequest::action)
      .def_ro("source_shape", &InterventionRequest::source_shape)
      .def_ro("region", &InterventionRequest::region)
      .def_ro("selected_shape", &InterventionRequest::selected_shape)
      .def_prop_ro("operation_id", [](const InterventionRequest& r) { return r.operation.id; })
      .def_prop_ro("factor", [](const InterventionRequest& r) { return r.operation.factor; })
      .def_prop_ro("ids", [](const InterventionRequest& r) { return r.operation.ids; })
      .def_prop_ro("payload_shape", [](const InterventionRequest& r) { return r.operation.payload_shape; })
      .def_prop_ro("payload", [](const InterventionRequest& r) { return r.operation.payload; })
      .def_prop_ro("index", [](const InterventionRequest& r) {
        nb::list items;
        for (const auto& s : r.region)
          items.append(nb::steal(PySlice_New(nb::int_(s.start).ptr(), nb::int_(s.end).ptr(), nb::int_(s.stride).ptr())));
        return nb::tuple(items);
      });

  nb::class_<GroupSelectionControl>(m, "GroupSelectionControl", "What a routing selector must apply this step.")
      .def_ro("operation_id", &GroupSelectionControl::operation_id)
      .def_ro("target", &GroupSelectionControl::target)
      .def_ro("action", &GroupSelectionControl::action)
      .def_ro("policy", &GroupSelectionControl::policy, "The expected grouped top-k routing policy.")
      .def_ro("num_experts", &GroupSelectionControl::num_experts)
      .def_ro("top_k", &GroupSelectionControl::top_k)
      .def_ro("token_rows", &GroupSelectionControl::token_rows)
      .def_ro("row_start", &GroupSelectionControl::row_start)
      .def_ro("row_end", &GroupSelectionControl::row_end)
      .def_ro("row_stride", &GroupSelectionControl::row_stride)
      .def_ro("expert_ids", &GroupSelectionControl::expert_ids)
      .def_ro("biases", &GroupSelectionControl::biases)
      .def_ro("capture_original", &GroupSelectionControl::capture_original)
      .def_prop_ro("selected_rows", &GroupSelectionControl::selected_rows)
      .def("validate",
           [](const GroupSelectionControl& control, nb::handle policy, nb::handle token_rows) {
             control.validate(argument<RoutingPolicy>(policy, "GroupSelectionControl.validate", "policy"),
                              argument<std::uint64_t>(token_rows, "GroupSelectionControl.validate", "token_rows"));
           },
           nb::arg("policy").none(), nb::arg("token_rows").none(),
           nb::sig("def validate(self, policy: RoutingPolicy, token_rows: int) -> None"),
           "Re-checks before native work: policy matches, rows valid, ids unique and in range, grouped top-k "
           "still feasible after exclusion, finite biases, forced ids shaped rows x top_k within group limits. "
           "Raises InvalidArgumentError.");
}

}  // namespace lifecore::bindings
