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
      .value("ZERO", InterventionAction::Zero)
      .value("SCALE", InterventionAction::Scale)
      .value("MASK", InterventionAction::Mask)
      .value("REPLACE", InterventionAction::Replace)
      .value("ADD", InterventionAction::Add)
      .value("MASK_LOGITS", InterventionAction::MaskLogits)
      .value("EXCLUDE_EXPERTS", InterventionAction::ExcludeExperts)
      .value("ZERO_EXPERT_CONTRIBUTION", InterventionAction::ZeroExpertContribution)
      .value("BIAS_ROUTING_SCORES", InterventionAction::BiasRoutingScores)
      .value("FORCE_EXPERTS", InterventionAction::ForceExperts);
  nb::enum_<EvidenceKind>(m, "EvidenceKind")
      .value("NONE", EvidenceKind::None)
      .value("PREVIEW", EvidenceKind::Preview)
      .value("SUMMARY", EvidenceKind::Summary);

  nb::class_<InterventionOperation>(m, "InterventionOperation",
                                    "One scheduled operation (see lifecore.capture.interventions for builders).")
      .def("__init__",
           [](InterventionOperation* op, std::string id, std::string target, InterventionAction action,
              std::optional<CaptureSchedule> schedule, std::vector<CaptureSlice> slices, double factor,
              std::vector<std::uint64_t> payload_shape, std::vector<double> payload, std::vector<std::uint64_t> ids,
              EvidenceKind evidence, std::uint64_t evidence_elements) {
             new (op) InterventionOperation{std::move(id), std::move(target), schedule.value_or(CaptureSchedule{}),
                                            std::move(slices), action, factor, std::move(payload_shape),
                                            std::move(payload), std::move(ids), evidence, evidence_elements};
           },
           nb::arg("id"), nb::arg("target"), nb::arg("action"), nb::kw_only(), nb::arg("schedule").none() = nb::none(),
           nb::arg("slices") = std::vector<CaptureSlice>{}, nb::arg("factor") = 1.0,
           nb::arg("payload_shape") = std::vector<std::uint64_t>{}, nb::arg("payload") = std::vector<double>{},
           nb::arg("ids") = std::vector<std::uint64_t>{}, nb::arg("evidence") = EvidenceKind::None,
           nb::arg("evidence_elements") = 0)
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
      .def("__init__", [](InterventionPlan* p, std::vector<InterventionOperation> ops) { new (p) InterventionPlan{std::move(ops)}; },
           nb::arg("operations"))
      .def_ro("operations", &InterventionPlan::operations)
      .def("admit",
           [](const InterventionPlan& plan, const CaptureDiscovery& discovery, const CaptureSession& session) {
             return admit_interventions(plan, discovery, session.plan().request(), session.plan().identity(), session.id());
           },
           nb::arg("discovery"), nb::arg("session"),
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
      .def("validate", &GroupSelectionControl::validate, nb::arg("policy"), nb::arg("token_rows"),
           "Re-checks before native work: policy matches, rows valid, ids unique and in range, grouped top-k "
           "still feasible after exclusion, finite biases, forced ids shaped rows x top_k within group limits. "
           "Raises InvalidArgumentError.");
}

}  // namespace lifecore::bindings
