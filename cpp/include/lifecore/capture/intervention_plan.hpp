// Intervention plans: scheduled operations on activations, logits and expert routing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lifecore/capture/types.hpp"

namespace lifecore::capture {

#define LIFECORE_INTERVENTION_ACTIONS(X)                                                        \
  /* activation stage */                                                                        \
  X(zero, "zero") X(scale, "scale") X(mask, "mask") X(replace, "replace") X(add, "add")         \
  /* logits before sampling */                                                                  \
  X(mask_logits, "mask_logits")                                                                 \
  /* routing before dispatch */                                                                 \
  X(exclude_experts, "exclude_experts") X(zero_expert_contribution, "zero_expert_contribution") \
  X(bias_routing_scores, "bias_routing_scores") X(force_experts, "force_experts")
enum class InterventionAction : std::uint8_t { LIFECORE_INTERVENTION_ACTIONS(LIFECORE_CAPTURE_ENUM_CASE) };

enum class InterventionStage : std::uint8_t { activation, logits_before_sampling, routing_before_dispatch };
enum class EvidenceKind : std::uint8_t { none, preview, summary };

struct InterventionOperation {
  std::string id;
  std::string target;
  CaptureSchedule schedule;
  std::vector<CaptureSlice> slices;
  InterventionAction action = InterventionAction::zero;
  double factor = 1.0;                       // Scale
  std::vector<std::uint64_t> payload_shape;  // Mask / Replace / Add / ForceExperts
  std::vector<double> payload;               // Replace / Add values, Mask keep (0/1), Bias biases
  std::vector<std::uint64_t> ids;            // MaskLogits token ids, expert ids, forced ids (row-major)
  EvidenceKind evidence = EvidenceKind::none;
  std::uint64_t evidence_elements = 0;       // Preview{max_elements}
};

struct InterventionPlan {
  std::vector<InterventionOperation> operations;
};

InterventionStage stage_of(InterventionAction action) noexcept;
const char* to_string(InterventionAction action) noexcept;

// Hard limits of this version.
constexpr std::size_t max_intervention_operations = 64;
constexpr std::size_t max_intervention_plan_bytes = 1u << 20;
constexpr std::size_t max_intervention_payload_bytes = 512u << 10;
constexpr std::size_t max_operation_id_bytes = 128;
constexpr std::uint64_t max_evidence_elements = 4096;

}  // namespace lifecore::capture
