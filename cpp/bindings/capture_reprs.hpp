// The reprs of the capture area's value types: what a user sees printing a plan, a discovery or
// a step. Each names the type and the fields that tell one value from another, in the
// constructor's order where there is one (a histogram's edges and a catalog are counted, not
// listed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "lifecore/capture/intervention_plan.hpp"
#include "lifecore/capture/types.hpp"

namespace lifecore::bindings::reprs {

// Text as Python's repr() writes it: quoted, with a newline, a NUL or a quote escaped, so one
// repr is one line that reads back as the same id (called under the interpreter lock).
inline std::string quoted(const std::string& text) { return nb::cast<std::string>(nb::repr(python_text(text))); }

inline std::string optional_count(const std::optional<std::uint64_t>& value) {
  return value ? std::to_string(*value) : "None";
}

inline std::string axis(const capture::Axis& a) {
  const auto& d = a.dim;
  return "Axis(" + quoted(a.name) + ", " +
         (d.kind == capture::DimKind::known ? std::to_string(d.size) : quoted(capture::to_string(d.kind))) + ")";
}

inline std::string transform(const capture::CaptureTransform& t) {
  using capture::TransformKind;
  std::string args;
  if (t.kind == TransformKind::preview) args = std::to_string(t.max_elements);
  if (t.kind == TransformKind::top_candidates) args = std::to_string(t.count);
  if (t.kind == TransformKind::histogram) args = "<" + std::to_string(t.edges.size()) + " edges>";
  return std::string("CaptureTransform.") + capture::to_string(t.kind) + "(" + args + ")";
}

inline std::string slice(const capture::CaptureSlice& s) {
  return "CaptureSlice(" + quoted(s.axis) + ", " + std::to_string(s.start) + ", " + optional_count(s.end) + ", " +
         std::to_string(s.stride) + ")";
}

inline std::string schedule(const capture::CaptureSchedule& s) {
  return std::string("CaptureSchedule(prefill=") + (s.prefill ? "True" : "False") +
         ", decode=" + (s.decode ? "True" : "False") + ", first_prediction=" + std::to_string(s.first_prediction) +
         ", end_prediction=" + optional_count(s.end_prediction) + ", every=" + std::to_string(s.every) + ")";
}

inline std::string selection(const capture::CaptureSelection& s) {
  std::string out = "CaptureSelection(" + quoted(s.id) + ", " + quoted(s.path) + ", " + transform(s.transform);
  if (!s.slices.empty()) out += ", " + std::to_string(s.slices.size()) + " slices";
  return out + ")";
}

inline std::string request(const capture::CaptureRequest& r) {
  return "CaptureRequest(batch=" + std::to_string(r.batch) + ", prompt_tokens=" + std::to_string(r.prompt_tokens) +
         ", max_predictions=" + std::to_string(r.max_predictions) + ")";
}

inline std::string on_limit(capture::OnLimit o) { return o == capture::OnLimit::skip ? "SKIP" : "FAIL"; }

inline std::string usage(const capture::CaptureUsage& u) {
  return "CaptureUsage(captures=" + std::to_string(u.captures) + ", retained_bytes=" + std::to_string(u.retained_bytes) +
         ", host_bytes=" + std::to_string(u.host_bytes) + ", encoded_bytes=" + std::to_string(u.encoded_bytes) + ")";
}

inline std::string limits(const capture::CaptureLimits& l) {
  return "CaptureLimits(per_step=" + usage(l.per_step) + ", cumulative=" + usage(l.cumulative) +
         ", on_limit=" + on_limit(l.on_limit) + ")";
}

inline std::string capabilities(const capture::BackendCapabilities& c) {
  std::string kinds;
  for (auto kind : c.transforms) kinds += (kinds.empty() ? "" : ", ") + quoted(capture::to_string(kind));
  return "BackendCapabilities([" + kinds + "], max_histogram_bins=" + std::to_string(c.max_histogram_bins) +
         ", physical_native_limit=" + (c.physical_native_limit ? "True" : "False") + ")";
}

inline std::string discovery(const capture::CaptureDiscovery& d) {
  return "CaptureDiscovery(" + quoted(d.artifact_identity) + ", " + std::to_string(d.catalog.size()) + " points)";
}

inline std::string plan(const capture::CapturePlan& p) {
  return "CapturePlan(" + std::to_string(p.selections.size()) + " selections, on_limit=" +
         on_limit(p.limits.on_limit) + ")";
}

inline std::string step(const capture::CapturedStep& s) {
  return std::string("CapturedStep(") + (s.phase == capture::CapturePhase::prefill ? "PREFILL" : "DECODE") +
         ", prediction=" + std::to_string(s.prediction) +
         ", " + std::to_string(s.records.size()) + " records, " + std::to_string(s.interventions.size()) +
         " interventions)";
}

inline std::string operation(const capture::InterventionOperation& op) {
  return "InterventionOperation(" + quoted(op.id) + ", " + capture::to_string(op.action) + " at " +
         quoted(op.target) + ")";
}

inline std::string intervention_plan(const capture::InterventionPlan& p) {
  return "InterventionPlan(" + std::to_string(p.operations.size()) + " operations)";
}

}  // namespace lifecore::bindings::reprs
