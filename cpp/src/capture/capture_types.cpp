#include <bit>
#include <cstring>

#include "lifecore/capture/intervention_plan.hpp"
#include "lifecore/checked.hpp"
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
LIFECORE_CAPTURE_TO_STRING(ElementType, LIFECORE_ELEMENT_TYPES)

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

std::uint64_t itemsize(ElementType type) noexcept {
  switch (type) {
    case ElementType::int8:
    case ElementType::uint8:
    case ElementType::boolean: return 1;
    case ElementType::float16:
    case ElementType::bfloat16:
    case ElementType::int16:
    case ElementType::uint16: return 2;
    case ElementType::float32:
    case ElementType::int32:
    case ElementType::uint32: return 4;
    case ElementType::float64:
    case ElementType::int64:
    case ElementType::uint64: return 8;
  }
  return 8;
}

std::uint64_t PayloadArray::bytes() const noexcept {
  return checked::mul(size, itemsize(type)).value_or(UINT64_MAX);
}

namespace {

template <class T>
T load(const void* data, std::uint64_t i) noexcept {
  T value;
  std::memcpy(&value, static_cast<const unsigned char*>(data) + i * sizeof(T), sizeof(T));
  return value;
}

// IEEE binary16 to float, exactly (every half is a float).
float half_to_float(std::uint16_t h) noexcept {
  std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // infinity or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    int shift = 0;
    while ((mantissa & 0x400u) == 0) { mantissa <<= 1; ++shift; }
    bits = sign | (static_cast<std::uint32_t>(113 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

}  // namespace

double PayloadArray::number(std::uint64_t i) const noexcept {
  switch (type) {
    case ElementType::float16: return half_to_float(load<std::uint16_t>(data, i));
    case ElementType::bfloat16: return std::bit_cast<float>(std::uint32_t{load<std::uint16_t>(data, i)} << 16);
    case ElementType::float32: return load<float>(data, i);
    case ElementType::float64: return load<double>(data, i);
    case ElementType::int8: return load<std::int8_t>(data, i);
    case ElementType::int16: return load<std::int16_t>(data, i);
    case ElementType::int32: return load<std::int32_t>(data, i);
    case ElementType::int64: return static_cast<double>(load<std::int64_t>(data, i));
    case ElementType::uint8: return load<std::uint8_t>(data, i);
    case ElementType::uint16: return load<std::uint16_t>(data, i);
    case ElementType::uint32: return load<std::uint32_t>(data, i);
    case ElementType::uint64: return static_cast<double>(load<std::uint64_t>(data, i));
    case ElementType::boolean: return load<std::uint8_t>(data, i) != 0;
  }
  return 0;
}

const void* PayloadStorage::current_data(const PayloadArray& array) const { return array.data; }

PayloadArray PayloadArray::current() const {
  PayloadArray now = *this;
  if (storage && data) now.data = storage->current_data(*this);
  return now;
}

std::uint64_t CapturePayload::retained_bytes() const noexcept {
  if (kind == PayloadKind::tensor && array.present()) return array.bytes();
  std::uint64_t numbers = kind == PayloadKind::summary ? 6 : values.size() + counts.size();
  return checked::mul(numbers, std::uint64_t{8}).value_or(UINT64_MAX);
}

std::string bound_message(std::string_view message, std::size_t limit) {
  if (message.size() <= limit) return std::string(message);
  std::size_t cut = limit;
  // Step back over continuation bytes (10xxxxxx) so no sequence is split.
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return std::string(message.substr(0, cut));
}

}  // namespace lifecore::capture
