// Intervention plans: scheduled operations on activations, logits and expert routing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lifecore/capture/types.hpp"

namespace lifecore::capture {

enum class InterventionAction : std::uint8_t {
  Zero, Scale, Mask, Replace, Add,           // activation stage
  MaskLogits,                                // logits before sampling
  ExcludeExperts, ZeroExpertContribution,    // routing before dispatch
  BiasRoutingScores, ForceExperts,
};

enum class InterventionStage : std::uint8_t { Activation, LogitsBeforeSampling, RoutingBeforeDispatch };
enum class EvidenceKind : std::uint8_t { None, Preview, Summary };

struct InterventionOperation {
  std::string id;
  std::string target;
  CaptureSchedule schedule;
  std::vector<CaptureSlice> slices;
  InterventionAction action = InterventionAction::Zero;
  double factor = 1.0;                       // Scale
  std::vector<std::uint64_t> payload_shape;  // Mask / Replace / Add / ForceExperts
  std::vector<double> payload;               // Replace / Add values, Mask keep (0/1), Bias biases
  std::vector<std::uint64_t> ids;            // MaskLogits token ids, expert ids, forced ids (row-major)
  EvidenceKind evidence = EvidenceKind::None;
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
