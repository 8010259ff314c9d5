#include "lifecore/capture/intervention_plan.hpp"
#include "lifecore/capture/types.hpp"

namespace lifecore::capture {

// One to_string per enum, each generated from the enum's own table.
#define LIFECORE_CAPTURE_NAME_CASE(value, name) \
  case Enum::value:                             \
    return name;
#define LIFECORE_CAPTURE_TO_STRING(EnumType, TABLE)      \
  const char* to_string(EnumType value) noexcept {       \
    using Enum = EnumType;                               \
    switch (value) { TABLE(LIFECORE_CAPTURE_NAME_CASE) } \
    return "?";                                          \
  }

LIFECORE_CAPTURE_TO_STRING(RoutingScoring, LIFECORE_ROUTING_SCORINGS)
LIFECORE_CAPTURE_TO_STRING(Budget, LIFECORE_BUDGETS)
LIFECORE_CAPTURE_TO_STRING(CapturePhase, LIFECORE_CAPTURE_PHASES)
LIFECORE_CAPTURE_TO_STRING(OutcomeKind, LIFECORE_OUTCOME_KINDS)
LIFECORE_CAPTURE_TO_STRING(TransformKind, LIFECORE_TRANSFORM_KINDS)
LIFECORE_CAPTURE_TO_STRING(DimKind, LIFECORE_DIM_KINDS)
LIFECORE_CAPTURE_TO_STRING(ValueDtype, LIFECORE_VALUE_DTYPES)
LIFECORE_CAPTURE_TO_STRING(PointPosition, LIFECORE_POINT_POSITIONS)
LIFECORE_CAPTURE_TO_STRING(PhaseSupport, LIFECORE_PHASE_SUPPORTS)
LIFECORE_CAPTURE_TO_STRING(SkipReason, LIFECORE_SKIP_REASONS)
LIFECORE_CAPTURE_TO_STRING(FailReason, LIFECORE_FAIL_REASONS)
LIFECORE_CAPTURE_TO_STRING(InterventionOutcomeKind, LIFECORE_INTERVENTION_OUTCOME_KINDS)
LIFECORE_CAPTURE_TO_STRING(InterventionAction, LIFECORE_INTERVENTION_ACTIONS)
LIFECORE_CAPTURE_TO_STRING(PayloadKind, LIFECORE_PAYLOAD_KINDS)
LIFECORE_CAPTURE_TO_STRING(OnLimit, LIFECORE_ON_LIMITS)

#undef LIFECORE_CAPTURE_TO_STRING
#undef LIFECORE_CAPTURE_NAME_CASE

InterventionStage stage_of(InterventionAction a) noexcept {
  switch (a) {
    case InterventionAction::mask_logits: return InterventionStage::logits_before_sampling;
    case InterventionAction::exclude_experts:
    case InterventionAction::zero_expert_contribution:
    case InterventionAction::bias_routing_scores:
    case InterventionAction::force_experts: return InterventionStage::routing_before_dispatch;
    default: return InterventionStage::activation;
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
