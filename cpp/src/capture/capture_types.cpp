#include "lifecore/capture/intervention_plan.hpp"
#include "lifecore/capture/types.hpp"

namespace lifecore::capture {

const char* to_string(RoutingScoring s) noexcept {
  return s == RoutingScoring::Softmax ? "softmax" : "sigmoid";
}

const char* to_string(Budget b) noexcept {
  switch (b) {
    case Budget::Captures: return "captures";
    case Budget::Retention: return "retained_bytes";
    case Budget::Host: return "host_bytes";
    case Budget::Encoded: return "encoded_bytes";
    case Budget::PhysicalNative: return "physical_native_bytes";
  }
  return "?";
}
const char* to_string(CapturePhase p) noexcept { return p == CapturePhase::Prefill ? "prefill" : "decode"; }
const char* to_string(OutcomeKind k) noexcept {
  switch (k) {
    case OutcomeKind::Captured: return "CAPTURED";
    case OutcomeKind::Truncated: return "TRUNCATED";
    case OutcomeKind::Skipped: return "SKIPPED";
    case OutcomeKind::Missing: return "MISSING";
    case OutcomeKind::Failed: return "FAILED";
  }
  return "?";
}
const char* to_string(TransformKind k) noexcept {
  switch (k) {
    case TransformKind::Preview: return "preview";
    case TransformKind::Slice: return "slice";
    case TransformKind::FullTensor: return "full_tensor";
    case TransformKind::Summary: return "summary";
    case TransformKind::Histogram: return "histogram";
    case TransformKind::TopCandidates: return "top_candidates";
  }
  return "?";
}
const char* to_string(DimKind k) noexcept {
  switch (k) {
    case DimKind::Known: return "known";
    case DimKind::Batch: return "batch";
    case DimKind::Sequence: return "sequence";
    case DimKind::TokenRows: return "token_rows";
    case DimKind::Context: return "context";
    case DimKind::MediaPositions: return "media_positions";
    case DimKind::Unknown: return "unknown";
  }
  return "?";
}
const char* to_string(ValueDtype d) noexcept {
  switch (d) {
    case ValueDtype::Floating: return "floating";
    case ValueDtype::Integer: return "integer";
    case ValueDtype::Boolean: return "boolean";
    case ValueDtype::Unknown: return "unknown";
  }
  return "?";
}
const char* to_string(PointPosition p) noexcept {
  switch (p) {
    case PointPosition::BeforeIntervention: return "before_intervention";
    case PointPosition::ReadOnly: return "read_only";
    case PointPosition::AfterIntervention: return "after_intervention";
  }
  return "?";
}
const char* to_string(PhaseSupport s) noexcept {
  switch (s) {
    case PhaseSupport::Supported: return "supported";
    case PhaseSupport::Conditional: return "conditional";
    case PhaseSupport::Unsupported: return "unsupported";
    case PhaseSupport::Unverified: return "unverified";
  }
  return "?";
}
const char* to_string(SkipReason r) noexcept {
  switch (r) {
    case SkipReason::None: return "none";
    case SkipReason::Schedule: return "schedule";
    case SkipReason::Limit: return "limit";
  }
  return "?";
}
const char* to_string(FailReason r) noexcept {
  switch (r) {
    case FailReason::None: return "none";
    case FailReason::Limit: return "limit";
    case FailReason::Unsupported: return "unsupported";
    case FailReason::Invalid: return "invalid";
    case FailReason::Native: return "native";
  }
  return "?";
}
const char* to_string(InterventionOutcomeKind k) noexcept {
  switch (k) {
    case InterventionOutcomeKind::Inactive: return "INACTIVE";
    case InterventionOutcomeKind::Applied: return "APPLIED";
    case InterventionOutcomeKind::Missing: return "MISSING";
    case InterventionOutcomeKind::Failed: return "FAILED";
  }
  return "?";
}
const char* to_string(InterventionAction a) noexcept {
  switch (a) {
    case InterventionAction::Zero: return "zero";
    case InterventionAction::Scale: return "scale";
    case InterventionAction::Mask: return "mask";
    case InterventionAction::Replace: return "replace";
    case InterventionAction::Add: return "add";
    case InterventionAction::MaskLogits: return "mask_logits";
    case InterventionAction::ExcludeExperts: return "exclude_experts";
    case InterventionAction::ZeroExpertContribution: return "zero_expert_contribution";
    case InterventionAction::BiasRoutingScores: return "bias_routing_scores";
    case InterventionAction::ForceExperts: return "force_experts";
  }
  return "?";
}
InterventionStage stage_of(InterventionAction a) noexcept {
  switch (a) {
    case InterventionAction::MaskLogits: return InterventionStage::LogitsBeforeSampling;
    case InterventionAction::ExcludeExperts:
    case InterventionAction::ZeroExpertContribution:
    case InterventionAction::BiasRoutingScores:
    case InterventionAction::ForceExperts: return InterventionStage::RoutingBeforeDispatch;
    default: return InterventionStage::Activation;
  }
}

std::string bound_message(std::string_view message, std::size_t limit) {
  if (message.size() <= limit) return std::string(message);
  std::size_t cut = limit;
  // Step back over continuation bytes (10xxxxxx) so no sequence is split.
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return std::string(message.substr(0, cut));
}

}  // namespace lifecore::capture
