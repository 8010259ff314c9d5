// Intervention plans and routing controls: conversion only.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "capture_bindings.hpp"
#include "capture_reprs.hpp"
#include "lifecore/capture/admission.hpp"
#include "lifecore/capture/backend.hpp"
#include "lifecore/capture/session.hpp"
#include "lifecore/error.hpp"

namespace lifecore::bindings {

using namespace lifecore::capture;

void init_capture_interventions(nb::module_& m) {
  nb::enum_<InterventionAction>(m, "InterventionAction",
       "What an intervention operation does: activation actions, MASK_LOGITS before sampling, and routing "
       "actions before expert dispatch.")
      .value("ZERO", InterventionAction::zero, "sets the selected region to zero")
      .value("SCALE", InterventionAction::scale, "multiplies the selected region by factor")
      .value("MASK", InterventionAction::mask, "keeps the region where the 0/1 payload is 1 and zeroes the rest")
      .value("REPLACE", InterventionAction::replace, "replaces the selected region with the payload")
      .value("ADD", InterventionAction::add, "adds the payload to the selected region")
      .value("MASK_LOGITS", InterventionAction::mask_logits,
           "sets the logits of the given token ids to -inf before sampling")
      .value("EXCLUDE_EXPERTS", InterventionAction::exclude_experts,
           "removes the given experts from the routing choice")
      .value("ZERO_EXPERT_CONTRIBUTION", InterventionAction::zero_expert_contribution,
           "keeps the routing choice but zeroes the given experts' coefficients")
      .value("BIAS_ROUTING_SCORES", InterventionAction::bias_routing_scores,
           "adds biases to the given experts' routing scores before top-k selection")
      .value("FORCE_EXPERTS", InterventionAction::force_experts,
           "routes each selected row to the given experts (ids shaped rows x top_k)");
  nb::enum_<EvidenceKind>(m, "EvidenceKind",
                          "What an operation records as evidence: an activation operation its target's region before "
                          "and after it applies; a routing operation with any evidence the original and effective "
                          "decisions.")
      .value("NONE", EvidenceKind::none, "no evidence")
      .value("PREVIEW", EvidenceKind::preview, "a preview of evidence_elements elements (1 to 4096)")
      .value("SUMMARY", EvidenceKind::summary, "a summary (not for routing operations)");

  nb::class_<InterventionOperation>(m, "InterventionOperation",
                                    "One scheduled operation (see lifecore.capture.interventions for builders).")
      .def("__repr__", &reprs::operation)
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
      .def_ro("id", &InterventionOperation::id,
           "Its id (1 to 128 bytes, unique in the plan), which names its records.")
      .def_ro("target", &InterventionOperation::target, "The path of the ObservationPoint it changes.")
      .def_ro("action", &InterventionOperation::action, "Its InterventionAction.")
      .def_ro("schedule", &InterventionOperation::schedule, "Its CaptureSchedule (every step by default).")
      .def_ro("slices", &InterventionOperation::slices,
           "Its CaptureSlices: the region it changes (the whole value without any).")
      .def_ro("factor", &InterventionOperation::factor, "SCALE: the factor (finite).")
      .def_ro("payload_shape", &InterventionOperation::payload_shape,
           "MASK, REPLACE, ADD, FORCE_EXPERTS: the payload's shape (the selected region's, for activations).")
      .def_ro("payload", &InterventionOperation::payload,
           "REPLACE and ADD values, MASK's 0/1 keep flags or BIAS_ROUTING_SCORES' biases, as floats.")
      .def_ro("ids", &InterventionOperation::ids,
           "MASK_LOGITS token ids, or expert ids for routing actions (FORCE_EXPERTS: row-major rows x top_k).")
      .def_ro("evidence", &InterventionOperation::evidence, "Its EvidenceKind.")
      .def_ro("evidence_elements", &InterventionOperation::evidence_elements,
           "PREVIEW evidence: the elements kept (1 to 4096).");

  nb::class_<InterventionPlan>(m, "InterventionPlan", "Operations applied in plan order.")
      .def("__repr__", &reprs::intervention_plan)
      .def("__init__",
           [](InterventionPlan* p, nb::handle ops) {
             auto operations = argument<std::vector<InterventionOperation>>(ops, "InterventionPlan", "operations");
             new (p) InterventionPlan{std::move(operations)};
           },
           nb::arg("operations").none(),
           nb::sig("def __init__(self, operations: collections.abc.Sequence[InterventionOperation]) -> None"))
      .def_ro("operations", &InterventionPlan::operations, "Its InterventionOperations, in the order they apply.")
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

  nb::class_<AdmittedInterventionPlan>(m, "AdmittedInterventionPlan",
       "An intervention plan admitted for one capture session; only InterventionPlan.admit creates one, and "
       "it cannot be pickled.")
      // Copies: an admitted plan cannot be changed from Python (what is handed out is a value).
      .def_prop_ro("plan", &AdmittedInterventionPlan::plan, nb::rv_policy::copy,
           "The InterventionPlan admitted (a copy).")
      .def_prop_ro("identity", &AdmittedInterventionPlan::identity,
           "'intervention-v1-' and the SHA-256 (hex) of its canonical encoding, bound to the session's "
           "admission.")
      .def_prop_ro("request", &AdmittedInterventionPlan::request, nb::rv_policy::copy,
           "The session's CaptureRequest it was admitted for (a copy).")
      .def("__repr__", [](const AdmittedInterventionPlan& a) { return "AdmittedInterventionPlan(" + a.identity() + ")"; })
      .def("__reduce__", [](nb::handle) { raise(ErrorKind::TypeMismatch, "deserialization cannot forge admission"); },
           nb::sig("def __reduce__(self) -> typing.NoReturn"))
      .def("__reduce_ex__", [](nb::handle, int) { raise(ErrorKind::TypeMismatch, "deserialization cannot forge admission"); },
           nb::sig("def __reduce_ex__(self, protocol: typing.SupportsIndex, /) -> typing.NoReturn"));

  nb::class_<InterventionRequest>(m, "InterventionRequest", "What a backend must apply for one operation.")
      .def_ro("action", &InterventionRequest::action, "The InterventionAction to apply.")
      .def_ro("source_shape", &InterventionRequest::source_shape, "The target tensor's shape.")
      .def_ro("region", &InterventionRequest::region,
           "One ResolvedSlice per axis of the source: the region to change.")
      .def_ro("selected_shape", &InterventionRequest::selected_shape, "The shape of that region.")
      .def_prop_ro("operation_id", [](const InterventionRequest& r) { return r.operation.id; },
           "The id of the operation.")
      .def_prop_ro("factor", [](const InterventionRequest& r) { return r.operation.factor; }, "SCALE: the factor.")
      .def_prop_ro("ids", [](const InterventionRequest& r) { return r.operation.ids; },
           "MASK_LOGITS: the token ids to mask.")
      .def_prop_ro("payload_shape", [](const InterventionRequest& r) { return r.operation.payload_shape; },
           "MASK, REPLACE, ADD: the payload's shape (the selected region's).")
      .def_prop_ro("payload", [](const InterventionRequest& r) { return r.operation.payload; },
           "MASK's 0/1 keep flags, or REPLACE and ADD values, as a flat list of floats.")
      .def_prop_ro("index", [](const InterventionRequest& r) {
        nb::list items;
        for (const auto& s : r.region)
          items.append(nb::steal(PySlice_New(nb::int_(s.start).ptr(), nb::int_(s.end).ptr(), nb::int_(s.stride).ptr())));
        return nb::tuple(items);
      }, nb::for_getter(nb::sig("def index(self, /) -> tuple[slice, ...]")), "The region as a tuple of Python slices.");

  nb::class_<GroupSelectionControl>(m, "GroupSelectionControl", "What a routing selector must apply this step.")
      .def_ro("operation_id", &GroupSelectionControl::operation_id, "The id of the routing operation.")
      .def_ro("target", &GroupSelectionControl::target, "The path of the routing point.")
      .def_ro("action", &GroupSelectionControl::action, "The routing InterventionAction to apply.")
      .def_ro("policy", &GroupSelectionControl::policy, "The expected grouped top-k routing policy.")
      .def_ro("num_experts", &GroupSelectionControl::num_experts, "policy.num_experts.")
      .def_ro("top_k", &GroupSelectionControl::top_k, "policy.top_k.")
      .def_ro("token_rows", &GroupSelectionControl::token_rows, "The token rows the selector routes this step.")
      .def_ro("row_start", &GroupSelectionControl::row_start, "The first row it applies to.")
      .def_ro("row_end", &GroupSelectionControl::row_end, "The row it stops before.")
      .def_ro("row_stride", &GroupSelectionControl::row_stride, "The step between rows it applies to.")
      .def_ro("expert_ids", &GroupSelectionControl::expert_ids,
           "Experts excluded, zeroed or biased, or FORCE_EXPERTS' ids (row-major, rows x top_k).")
      .def_ro("biases", &GroupSelectionControl::biases, "BIAS_ROUTING_SCORES: one bias per expert id.")
      .def_ro("capture_original", &GroupSelectionControl::capture_original,
           "Whether routing_applied must also receive the original decision as evidence.")
      .def_prop_ro("selected_rows", &GroupSelectionControl::selected_rows,
           "The rows it applies to: ceil((row_end - row_start) / row_stride), 0 when empty.")
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
