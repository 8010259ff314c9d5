// Value types of capture sessions: observation points, plans, limits, usage, records.
// Plain data; the rules that relate them live in admission, ledger and session.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lifecore::capture {

// Each enum is generated from one table of (case, name) rows, and so is its to_string:
// a case cannot be added without its name.
#define LIFECORE_CAPTURE_ENUM_CASE(value, name) value,

#define LIFECORE_CAPTURE_PHASES(X) X(prefill, "prefill") X(decode, "decode")
enum class CapturePhase : std::uint8_t { LIFECORE_CAPTURE_PHASES(LIFECORE_CAPTURE_ENUM_CASE) };
#define LIFECORE_VALUE_DTYPES(X)                                                            \
  X(floating, "floating") X(integer, "integer") X(boolean, "boolean") X(unknown, "unknown")
enum class ValueDtype : std::uint8_t { LIFECORE_VALUE_DTYPES(LIFECORE_CAPTURE_ENUM_CASE) };
#define LIFECORE_POINT_POSITIONS(X)                                       \
  X(before_intervention, "before_intervention") X(read_only, "read_only") \
  X(after_intervention, "after_intervention")
enum class PointPosition : std::uint8_t { LIFECORE_POINT_POSITIONS(LIFECORE_CAPTURE_ENUM_CASE) };
#define LIFECORE_PHASE_SUPPORTS(X)                                                      \
  X(supported, "supported") X(conditional, "conditional") X(unsupported, "unsupported") \
  X(unverified, "unverified")
enum class PhaseSupport : std::uint8_t { LIFECORE_PHASE_SUPPORTS(LIFECORE_CAPTURE_ENUM_CASE) };

// A symbolic extent: Known(n) or a size resolved from the request at run time.
#define LIFECORE_DIM_KINDS(X)                                                                                   \
  X(known, "known") X(batch, "batch") X(sequence, "sequence") X(token_rows, "token_rows") X(context, "context") \
  X(media_positions, "media_positions") X(unknown, "unknown")
enum class DimKind : std::uint8_t { LIFECORE_DIM_KINDS(LIFECORE_CAPTURE_ENUM_CASE) };

struct Dim {
  DimKind kind = DimKind::unknown;
  std::uint64_t size = 0;  // only for Known
};

struct Axis {
  std::string name;
  Dim dim;
};

// How a selector turns router logits into scores: softmax or sigmoid.
#define LIFECORE_ROUTING_SCORINGS(X) X(softmax, "softmax") X(sigmoid, "sigmoid")
enum class RoutingScoring : std::uint8_t { LIFECORE_ROUTING_SCORINGS(LIFECORE_CAPTURE_ENUM_CASE) };

// Expected grouped top-k routing of a mixture-of-experts selector observed at a point:
// experts are split into `groups` equal groups, the best `topk_groups` groups are kept and
// top_k experts chosen among them; coefficients are normalized with `epsilon` and
// multiplied by `scale` (and by learned per-expert scales when the selector has them).
// The defaults (one group, no epsilon, scale 1) are plain top-k.
struct RoutingPolicy {
  std::uint64_t num_experts = 0;
  std::uint64_t top_k = 0;
  RoutingScoring scoring = RoutingScoring::softmax;
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
  ValueDtype dtype = ValueDtype::floating;
  std::vector<Axis> axes;
  bool prefill = true;
  bool decode = true;
  PointPosition position = PointPosition::read_only;
  PhaseSupport prefill_support = PhaseSupport::supported;
  PhaseSupport decode_support = PhaseSupport::supported;
  std::optional<RoutingPolicy> routing;
  // Bytes per element of the native value, 0 when unknown. With every extent known it makes
  // a selection's value cost computable at admission (the preflight under OnLimit::fail).
  std::uint64_t itemsize = 0;
};

#define LIFECORE_TRANSFORM_KINDS(X)                                                           \
  X(preview, "preview") X(slice, "slice") X(full_tensor, "full_tensor") X(summary, "summary") \
  X(histogram, "histogram") X(top_candidates, "top_candidates")
enum class TransformKind : std::uint8_t { LIFECORE_TRANSFORM_KINDS(LIFECORE_CAPTURE_ENUM_CASE) };

struct BackendCapabilities {
  std::vector<TransformKind> transforms{TransformKind::preview, TransformKind::slice, TransformKind::full_tensor,
                                        TransformKind::summary, TransformKind::histogram,
                                        TransformKind::top_candidates};
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
    if (phase == CapturePhase::prefill ? !prefill : !decode) return false;
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
  TransformKind kind = TransformKind::summary;
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
#define LIFECORE_BUDGETS(X)                                                                                \
  X(captures, "captures") X(retention, "retained_bytes") X(host, "host_bytes") X(encoded, "encoded_bytes") \
  X(physical_native, "physical_native_bytes")
enum class Budget : std::uint8_t { LIFECORE_BUDGETS(LIFECORE_CAPTURE_ENUM_CASE) };
#define LIFECORE_ON_LIMITS(X) X(fail, "fail") X(skip, "skip")
enum class OnLimit : std::uint8_t { LIFECORE_ON_LIMITS(LIFECORE_CAPTURE_ENUM_CASE) };

struct CaptureLimits {
  CaptureUsage per_step;
  CaptureUsage cumulative;
  std::optional<std::uint64_t> physical_native_bytes;
  OnLimit on_limit = OnLimit::fail;
};

constexpr std::uint32_t capture_schema_version = 1;

struct CapturePlan {
  std::uint32_t schema_version = capture_schema_version;
  std::vector<CaptureSelection> selections;
  CaptureLimits limits;
};

// Outcomes of one selection in one step.
#define LIFECORE_OUTCOME_KINDS(X)                                                               \
  X(captured, "CAPTURED") X(truncated, "TRUNCATED") X(skipped, "SKIPPED") X(missing, "MISSING") \
  X(failed, "FAILED")
enum class OutcomeKind : std::uint8_t { LIFECORE_OUTCOME_KINDS(LIFECORE_CAPTURE_ENUM_CASE) };
#define LIFECORE_SKIP_REASONS(X) X(none, "none") X(schedule, "schedule") X(limit, "limit")
enum class SkipReason : std::uint8_t { LIFECORE_SKIP_REASONS(LIFECORE_CAPTURE_ENUM_CASE) };
#define LIFECORE_FAIL_REASONS(X)                                                                            \
  X(none, "none") X(limit, "limit") X(unsupported, "unsupported") X(invalid, "invalid") X(native, "native")
enum class FailReason : std::uint8_t { LIFECORE_FAIL_REASONS(LIFECORE_CAPTURE_ENUM_CASE) };

struct CaptureOutcome {
  OutcomeKind kind = OutcomeKind::missing;
  SkipReason skip = SkipReason::none;
  FailReason fail = FailReason::none;
  Budget budget = Budget::captures;  // Skipped{Limit} / Failed{Limit}
  bool cumulative = false;
  std::uint64_t available = 0;       // Truncated
  std::uint64_t emitted = 0;
  std::string message;               // Failed, at most 256 bytes, cut on a UTF-8 boundary
};

#define LIFECORE_PAYLOAD_KINDS(X)                                                                                 \
  X(none, "none") X(tensor, "tensor") X(summary, "summary") X(histogram, "histogram") X(candidates, "candidates")
enum class PayloadKind : std::uint8_t { LIFECORE_PAYLOAD_KINDS(LIFECORE_CAPTURE_ENUM_CASE) };

// Element types a tensor payload keeps: the source tensor's own.
#define LIFECORE_ELEMENT_TYPES(X)                                                                          \
  X(float16, "float16") X(bfloat16, "bfloat16") X(float32, "float32") X(float64, "float64") X(int8, "int8") \
  X(int16, "int16") X(int32, "int32") X(int64, "int64") X(uint8, "uint8") X(uint16, "uint16")               \
  X(uint32, "uint32") X(uint64, "uint64") X(boolean, "bool")
enum class ElementType : std::uint8_t { LIFECORE_ELEMENT_TYPES(LIFECORE_CAPTURE_ENUM_CASE) };
std::uint64_t itemsize(ElementType type) noexcept;

struct PayloadArray;

// Whoever built a payload keeps its array alive through one of these (the bindings hold a
// Python array in theirs); the core only reads the host view it gives.
class PayloadStorage {
 public:
  virtual ~PayloadStorage() = default;
  // Where `array`'s values are now. A storage whose owner may move them after the payload was
  // built (a framework tensor resized in place frees its old memory) finds them again, and
  // throws if they no longer have the array's type and size; every reader asks right before
  // it reads.
  virtual const void* current_data(const PayloadArray& array) const;
};

// A tensor payload's values in their own element type: `size` contiguous elements in host
// memory at `data`, valid while `storage` lives (read them through current()).
struct PayloadArray {
  ElementType type = ElementType::float64;
  std::uint64_t size = 0;
  const void* data = nullptr;
  std::shared_ptr<const PayloadStorage> storage;
  bool present() const noexcept { return data != nullptr || (storage && size == 0); }
  // This array with `data` where its storage says the values are now (see current_data).
  PayloadArray current() const;
  std::uint64_t bytes() const noexcept;  // size x itemsize, saturating
  double number(std::uint64_t i) const noexcept;  // element i as a double (floating types)
};

struct CapturePayload {
  PayloadKind kind = PayloadKind::none;
  std::vector<std::uint64_t> shape;    // Tensor
  PayloadArray array;                  // Tensor values, when built from an array
  std::vector<double> values;          // Tensor values (float64, built from numbers) / Histogram edges / Candidate scores
  std::vector<std::uint64_t> counts;   // Histogram counts / Candidate ids
  // Summary
  std::uint64_t count = 0;
  std::uint64_t nonfinite = 0;
  double min = 0, max = 0, mean = 0, std = 0;

  // A summary: `count` elements, `nonfinite` of them NaN or infinite, and the statistics of the
  // finite ones.
  static CapturePayload summary_of(std::uint64_t count, std::uint64_t nonfinite, double min, double max, double mean,
                                   double std) {
    CapturePayload p;
    p.kind = PayloadKind::summary;
    p.count = count;
    p.nonfinite = nonfinite;
    p.min = min;
    p.max = max;
    p.mean = mean;
    p.std = std;
    return p;
  }

  // Elements a tensor payload holds.
  std::uint64_t elements() const noexcept { return array.present() ? array.size : values.size(); }
  // Bytes the payload's values occupy where they are kept: a tensor payload's real bytes,
  // 8 per number otherwise.
  std::uint64_t retained_bytes() const noexcept;
};

struct CaptureRecord {
  std::string selection_id;
  std::string path;
  std::string node_id;
  PointPosition position = PointPosition::read_only;
  std::vector<std::uint64_t> source_shape;
  std::vector<std::uint64_t> selected_shape;
  CaptureOutcome outcome;
  CapturePayload payload;
  CaptureUsage charged;
};

// Outcome of one intervention operation in one step.
#define LIFECORE_INTERVENTION_OUTCOME_KINDS(X)                                            \
  X(inactive, "INACTIVE") X(applied, "APPLIED") X(missing, "MISSING") X(failed, "FAILED")
enum class InterventionOutcomeKind : std::uint8_t { LIFECORE_INTERVENTION_OUTCOME_KINDS(LIFECORE_CAPTURE_ENUM_CASE) };

struct InterventionRecord {
  std::string operation_id;
  std::string target;
  InterventionOutcomeKind outcome = InterventionOutcomeKind::inactive;
  std::string message;
  std::vector<CapturePayload> evidence;  // before / after, or the four routing fields
  CaptureUsage charged;
};

struct CapturedStep {
  CapturePhase phase = CapturePhase::prefill;
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
const char* to_string(PayloadKind kind) noexcept;
const char* to_string(OnLimit on_limit) noexcept;
const char* to_string(ElementType type) noexcept;

// Cuts a message to at most 256 bytes without splitting a UTF-8 sequence.
std::string bound_message(std::string_view message, std::size_t limit = 256);

}  // namespace lifecore::capture
