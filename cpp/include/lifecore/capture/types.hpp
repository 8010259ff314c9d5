// Value types of capture sessions: observation points, plans, limits, usage, records.
// Plain data; the rules that relate them live in admission, ledger and session.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lifecore::capture {

enum class CapturePhase : std::uint8_t { Prefill, Decode };
enum class ValueDtype : std::uint8_t { Floating, Integer, Boolean, Unknown };
enum class PointPosition : std::uint8_t { BeforeIntervention, ReadOnly, AfterIntervention };
enum class PhaseSupport : std::uint8_t { Supported, Conditional, Unsupported, Unverified };

// A symbolic extent: Known(n) or a size resolved from the request at run time.
enum class DimKind : std::uint8_t { Known, Batch, Sequence, TokenRows, Context, MediaPositions, Unknown };

struct Dim {
  DimKind kind = DimKind::Unknown;
  std::uint64_t size = 0;  // only for Known
};

struct Axis {
  std::string name;
  Dim dim;
};

// How a selector turns router logits into scores: softmax or sigmoid.
enum class RoutingScoring : std::uint8_t { Softmax, Sigmoid };

// Expected grouped top-k routing of a mixture-of-experts selector observed at a point:
// experts are split into `groups` equal groups, the best `topk_groups` groups are kept and
// top_k experts chosen among them; coefficients are normalized with `epsilon` and
// multiplied by `scale` (and by learned per-expert scales when the selector has them).
// The defaults (one group, no epsilon, scale 1) are plain top-k.
struct RoutingPolicy {
  std::uint64_t num_experts = 0;
  std::uint64_t top_k = 0;
  RoutingScoring scoring = RoutingScoring::Softmax;
  std::uint64_t groups = 1;
  std::uint64_t topk_groups = 1;
  double epsilon = 0.0;
  double scale = 1.0;
  bool learned_coefficient_scale = false;
  bool operator==(const RoutingPolicy&) const = default;
};

struct ObservationPoint {
  std::string path;
  std::string node_id;
  std::string meaning;  // e.g. "activation", "logits", "routing"
  ValueDtype dtype = ValueDtype::Floating;
  std::vector<Axis> axes;
  bool prefill = true;
  bool decode = true;
  PointPosition position = PointPosition::ReadOnly;
  PhaseSupport prefill_support = PhaseSupport::Supported;
  PhaseSupport decode_support = PhaseSupport::Supported;
  std::optional<RoutingPolicy> routing;
  // Bytes per element of the native value, 0 when unknown. With every extent known it makes
  // a selection's value cost computable at admission (the preflight under OnLimit::Fail).
  std::uint64_t itemsize = 0;
};

enum class TransformKind : std::uint8_t { Preview, Slice, FullTensor, Summary, Histogram, TopCandidates };

struct BackendCapabilities {
  std::vector<TransformKind> transforms{TransformKind::Preview, TransformKind::Slice, TransformKind::FullTensor,
                                        TransformKind::Summary, TransformKind::Histogram,
                                        TransformKind::TopCandidates};
  std::uint64_t max_histogram_bins = 4096;
  bool physical_native_limit = false;
};

struct CaptureDiscovery {
  std::string artifact_identity;
  std::vector<ObservationPoint> catalog;
  BackendCapabilities capabilities;
};

struct CaptureRequest {
  std::uint64_t batch = 1;
  std::uint64_t prompt_tokens = 1;
  std::uint64_t max_predictions = 1;
  bool operator==(const CaptureRequest&) const = default;
};

struct CaptureSchedule {
  bool prefill = true;
  bool decode = true;
  std::uint64_t first_prediction = 0;
  std::optional<std::uint64_t> end_prediction;  // exclusive
  std::uint64_t every = 1;

  bool scheduled(CapturePhase phase, std::uint64_t prediction) const noexcept {
    if (phase == CapturePhase::Prefill ? !prefill : !decode) return false;
    if (prediction < first_prediction) return false;
    if (end_prediction && prediction >= *end_prediction) return false;
    return every != 0 && (prediction - first_prediction) % every == 0;
  }
};

struct CaptureSlice {
  std::string axis;
  std::uint64_t start = 0;
  std::optional<std::uint64_t> end;  // exclusive; none = to the end of the axis
  std::uint64_t stride = 1;
};

struct CaptureTransform {
  TransformKind kind = TransformKind::Summary;
  std::uint64_t max_elements = 0;     // Preview
  std::vector<double> edges;          // Histogram
  std::uint64_t count = 0;            // TopCandidates
};

struct CaptureSelection {
  std::string id;
  std::string path;
  CaptureSchedule schedule;
  std::vector<CaptureSlice> slices;
  CaptureTransform transform;
};

struct CaptureUsage {
  std::uint64_t captures = 0;
  std::uint64_t retained_bytes = 0;
  std::uint64_t host_bytes = 0;
  std::uint64_t encoded_bytes = 0;
  bool operator==(const CaptureUsage&) const = default;
};

// PhysicalNative: the per-capture physical native byte limit (not a ledger budget).
enum class Budget : std::uint8_t { Captures, Retention, Host, Encoded, PhysicalNative };
enum class OnLimit : std::uint8_t { Fail, Skip };

struct CaptureLimits {
  CaptureUsage per_step;
  CaptureUsage cumulative;
  std::optional<std::uint64_t> physical_native_bytes;
  OnLimit on_limit = OnLimit::Fail;
};

constexpr std::uint32_t capture_schema_version = 1;

struct CapturePlan {
  std::uint32_t schema_version = capture_schema_version;
  std::vector<CaptureSelection> selections;
  CaptureLimits limits;
};

// Outcomes of one selection in one step.
enum class OutcomeKind : std::uint8_t { Captured, Truncated, Skipped, Missing, Failed };
enum class SkipReason : std::uint8_t { None, Schedule, Limit };
enum class FailReason : std::uint8_t { None, Limit, Unsupported, Invalid, Native };

struct CaptureOutcome {
  OutcomeKind kind = OutcomeKind::Missing;
  SkipReason skip = SkipReason::None;
  FailReason fail = FailReason::None;
  Budget budget = Budget::Captures;  // Skipped{Limit} / Failed{Limit}
  bool cumulative = false;
  std::uint64_t available = 0;       // Truncated
  std::uint64_t emitted = 0;
  std::string message;               // Failed, at most 256 bytes, cut on a UTF-8 boundary
};

enum class PayloadKind : std::uint8_t { None, Tensor, Summary, Histogram, Candidates };

struct CapturePayload {
  PayloadKind kind = PayloadKind::None;
  std::vector<std::uint64_t> shape;    // Tensor
  std::vector<double> values;          // Tensor values / Histogram edges / Candidate scores
  std::vector<std::uint64_t> counts;   // Histogram counts / Candidate ids
  // Summary
  std::uint64_t count = 0;
  std::uint64_t nonfinite = 0;
  double min = 0, max = 0, mean = 0, std = 0;
};

struct CaptureRecord {
  std::string selection_id;
  std::string path;
  std::string node_id;
  PointPosition position = PointPosition::ReadOnly;
  std::vector<std::uint64_t> source_shape;
  std::vector<std::uint64_t> selected_shape;
  CaptureOutcome outcome;
  CapturePayload payload;
  CaptureUsage charged;
};

// Outcome of one intervention operation in one step.
enum class InterventionOutcomeKind : std::uint8_t { Inactive, Applied, Missing, Failed };

struct InterventionRecord {
  std::string operation_id;
  std::string target;
  InterventionOutcomeKind outcome = InterventionOutcomeKind::Inactive;
  std::string message;
  std::vector<CapturePayload> evidence;  // before / after, or the four routing fields
  CaptureUsage charged;
};

struct CapturedStep {
  CapturePhase phase = CapturePhase::Prefill;
  std::uint64_t prediction = 0;
  std::vector<CaptureRecord> records;
  std::vector<InterventionRecord> interventions;
  CaptureUsage step_usage;
  CaptureUsage cumulative_usage;
  double capture_seconds = 0;
};

const char* to_string(Budget budget) noexcept;
const char* to_string(CapturePhase phase) noexcept;
const char* to_string(OutcomeKind kind) noexcept;
const char* to_string(TransformKind kind) noexcept;
const char* to_string(DimKind kind) noexcept;
const char* to_string(ValueDtype dtype) noexcept;
const char* to_string(PointPosition position) noexcept;
const char* to_string(PhaseSupport support) noexcept;
const char* to_string(SkipReason reason) noexcept;
const char* to_string(FailReason reason) noexcept;
const char* to_string(InterventionOutcomeKind kind) noexcept;
const char* to_string(RoutingScoring scoring) noexcept;

// Cuts a message to at most 256 bytes without splitting a UTF-8 sequence.
std::string bound_message(std::string_view message, std::size_t limit = 256);

}  // namespace lifecore::capture
