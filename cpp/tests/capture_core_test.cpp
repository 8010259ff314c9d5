// C++-only checks of the capture core: SHA-256 vectors, the monotone ledger, bounded
// messages, and a session driven through a scripted backend.
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>

#include "capture/capture_geometry.hpp"
#include "capture/capture_json.hpp"
#include "lifecore/capture/admission.hpp"
#include "lifecore/capture/ledger.hpp"
#include "lifecore/capture/session.hpp"
#include "lifecore/capture/transform_cost.hpp"
#include "lifecore/error.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::capture;

namespace {

class ScriptedBackend final : public CaptureBackend {
 public:
  int transforms = 0;
  std::vector<std::uint64_t> shape(TensorHandle) override { return {2, 3}; }
  ValueDtype dtype(TensorHandle) override { return ValueDtype::floating; }
  CaptureUsage estimate(TensorHandle, const TransformRequest&) override { return {1, 48, 24, 400}; }
  CapturePayload transform(TensorHandle, const TransformRequest&) override {
    ++transforms;
    CapturePayload p;
    p.kind = PayloadKind::summary;
    p.count = 6;
    return p;
  }
  TensorHandle intervene(TensorHandle t, const InterventionRequest&) override { return t; }
};

void ledger_is_monotone_and_all_or_nothing() {
  CaptureLimits limits{{2, 100, 100, 100}, {3, 1000, 1000, 1000}, std::nullopt, OnLimit::fail};
  CaptureLedger ledger(limits, {});
  CHECK(!ledger.try_reserve({1, 10, 10, 10}));
  auto hit = ledger.try_reserve({0, 0, 0, 91});
  CHECK(hit && hit->budget == Budget::encoded && !hit->cumulative);
  CHECK(ledger.cumulative() == (CaptureUsage{1, 10, 10, 10}));
  ledger.begin_step();
  CHECK(!ledger.try_reserve({1, 0, 0, 0}));
  hit = ledger.try_reserve({2, 0, 0, 0});  // per-step is checked first
  CHECK(hit && hit->budget == Budget::captures && !hit->cumulative);
  ledger.begin_step();
  hit = ledger.try_reserve({2, 0, 0, 0});
  CHECK(hit && hit->budget == Budget::captures && hit->cumulative);
  CHECK(ledger.cumulative() == (CaptureUsage{2, 10, 10, 10}));
  bool threw = false;
  try {
    CaptureLedger child(limits, {4, 0, 0, 0});
  } catch (const Error& e) {
    threw = e.kind() == ErrorKind::BudgetExceeded;
  }
  CHECK(threw);
}

// A sum past 64 bits is refused as over its limit, never wrapped, and nothing is charged.
void ledger_refuses_sums_past_64_bits() {
  constexpr std::uint64_t max = UINT64_MAX;
  CaptureLimits limits{{max, max, max, max}, {max, max, max, max}, std::nullopt, OnLimit::fail};
  CaptureLedger ledger(limits, {});
  CHECK(!ledger.try_reserve({1, std::uint64_t{1} << 63, 0, 0}));
  auto hit = ledger.try_reserve({1, std::uint64_t{1} << 63, 0, 0});
  CHECK(hit && hit->budget == Budget::retention && !hit->cumulative);
  CHECK(ledger.cumulative() == (CaptureUsage{1, std::uint64_t{1} << 63, 0, 0}));
  ledger.begin_step();  // the per-step sum restarts, the cumulative one overflows
  hit = ledger.try_reserve({0, std::uint64_t{1} << 63, 0, 0});
  CHECK(hit && hit->budget == Budget::retention && hit->cumulative);
  CHECK(overflowing_budget({0, 0, 0, max}, {0, 0, 0, 1}) == Budget::encoded);
  CHECK(!overflowing_budget({0, 0, 0, max - 1}, {0, 0, 0, 1}));
  CHECK(!checked_add({0, max, 0, 0}, {0, 1, 0, 0}));
  CHECK(!checked_mul({0, 0, std::uint64_t{1} << 32, 0}, std::uint64_t{1} << 32));
  bool threw = false;
  try {
    add_or_throw({max, 0, 0, 0}, {1, 0, 0, 0}, "test charge");
  } catch (const Error& e) {
    threw = e.kind() == ErrorKind::Overflow;
  }
  CHECK(threw);
}

// ceil((end - start) / stride) at the edges of 64 bits.
void slice_extents_never_wrap() {
  constexpr std::uint64_t max = UINT64_MAX;
  CHECK(slice_extent(0, 8, 1) == 8);
  CHECK(slice_extent(0, 8, 3) == 3);
  CHECK(slice_extent(0, 8, max) == 1);
  CHECK(slice_extent(0, 8, std::uint64_t{1} << 63) == 1);
  CHECK(slice_extent(0, max, max) == 1);
  CHECK(slice_extent(1, max, 2) == (max - 1) / 2);
  CHECK(slice_extent(5, 5, 1) == 0 && slice_extent(0, 8, 0) == 0);
  GroupSelectionControl control;
  control.row_start = 0;
  control.row_end = 4;
  control.row_stride = max;
  CHECK(control.selected_rows() == 1);
  CHECK(element_count({std::uint64_t{1} << 32, std::uint64_t{1} << 32}) == max);  // saturates
}

// A value floor past 64 bits saturates (still a floor) so the Fail preflight refuses it.
void value_floors_saturate() {
  ObservationPoint point{"p", "p", "activation", ValueDtype::floating,
                         {{"a", {DimKind::known, std::uint64_t{1} << 32}}, {"b", {DimKind::known, std::uint64_t{1} << 32}}}};
  point.itemsize = 4;
  CaptureSelection selection{"s", "p", {}, {}, {TransformKind::full_tensor, 0, {}, 0}};
  auto floor = value_floor(selection, point, {1, 1, 1}, CapturePhase::prefill, 0);
  CHECK(floor && floor->host_bytes == UINT64_MAX && floor->retained_bytes == UINT64_MAX);
  CaptureUsage big{100, 1u << 30, 1u << 30, 1u << 30};
  CapturePlan plan{capture_schema_version, {selection}, {big, big, std::nullopt, OnLimit::fail}};
  bool refused = false;
  try {
    admit(plan, CaptureDiscovery{"artifact", {point}, {}}, {1, 1, 1});
  } catch (const Error& e) {
    refused = e.kind() == ErrorKind::Admission;
  }
  CHECK(refused);
}

void bounded_messages_cut_on_utf8_boundaries() {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "\xc3\xa9";  // é, two bytes each
  auto cut = bound_message("x" + text);
  CHECK(cut.size() <= 256);
  CHECK(cut.size() == 255);  // "x" + 127 whole characters
}

void counting_writer_measures_what_the_writer_writes() {
  CaptureRecord record;
  record.selection_id = "quote\" back\\slash \x01 control \xc3\xa9";
  record.path = "p";
  record.source_shape = {1, 2, 3};
  record.outcome.kind = OutcomeKind::failed;
  record.outcome.message = "tab\there";
  record.payload.kind = PayloadKind::tensor;
  record.payload.values = {1.5, -2e-300, 1e300, 0.0};
  JsonWriter full, counted(UINT64_MAX, JsonMode::count), bounded(UINT64_MAX, JsonMode::bound);
  write_record(full, record);
  write_record(counted, record);
  write_record(bounded, record);
  CHECK(full.size() == counted.size() && full.take().size() == counted.size());
  CHECK(bounded.size() >= counted.size() && !bounded.overflowed());
  JsonWriter limited(counted.size() - 1, JsonMode::count);
  write_record(limited, record);
  CHECK(limited.overflowed());
  JsonWriter bound_limited(counted.size() - 1, JsonMode::bound);
  write_record(bound_limited, record);
  CHECK(bound_limited.overflowed());
}

// The bound writer charges each value its longest text: check those lengths against every
// extreme and a sweep of bit patterns, and that a bound covers typed arrays without reading them.
void bounding_writer_never_undercounts() {
  auto number_text = [](double v) { JsonWriter json; json.number(v); return json.take(); };
  CHECK(number_text(-2.2250738585072014e-308).size() == max_number_text_bytes);
  std::uint64_t bits = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 200000; ++i) {
    bits ^= bits << 13; bits ^= bits >> 7; bits ^= bits << 17;  // xorshift: every exponent and sign
    double v;
    std::memcpy(&v, &bits, sizeof v);
    CHECK(number_text(v).size() <= max_number_text_bytes);
  }
  const std::string controls(10, '\x01');  // the longest escape, \u0001, per byte
  JsonWriter escaped, escaped_bound(UINT64_MAX, JsonMode::bound);
  escaped.string(controls);
  escaped_bound.string(controls);
  CHECK(escaped.take().size() == escaped_bound.size());
  JsonWriter longest;
  longest.integer(UINT64_MAX);
  longest.signed_integer(INT64_MIN);
  CHECK(longest.take().size() == 2 * max_integer_text_bytes);
  const std::int64_t longs[] = {INT64_MIN, INT64_MIN, INT64_MIN};
  const bool flags[] = {false, false};
  for (auto [type, data, n] : {std::tuple{ElementType::int64, static_cast<const void*>(longs), std::uint64_t{3}},
                               std::tuple{ElementType::boolean, static_cast<const void*>(flags), std::uint64_t{2}}}) {
    CapturePayload p;
    p.kind = PayloadKind::tensor;
    p.shape = {n};
    p.array = {type, n, data, nullptr};
    JsonWriter text, bound(UINT64_MAX, JsonMode::bound);
    write_payload(text, p);
    write_payload(bound, p);
    CHECK(bound.size() >= text.size());
  }
  // A tensor too large to format is bounded in one step, and a bound past 64 bits overflows.
  CapturePayload huge;
  huge.kind = PayloadKind::tensor;
  huge.shape = {UINT64_MAX};
  const float one = 1.0f;  // never read: the bound does not look at values
  huge.array = {ElementType::float32, UINT64_MAX, &one, nullptr};
  JsonWriter bound(UINT64_MAX, JsonMode::bound);
  write_payload(bound, huge);
  CHECK(bound.overflowed() && bound.size() == UINT64_MAX);
}

// An operation's envelope bounds its record's JSON in every outcome: the longest outcome, a
// FAILED record's longest message of control bytes (6 bytes each escaped), ids and targets
// that escape at every byte and every usage number at its widest, beside up to four evidence
// payloads' separators (each payload is charged on its own).
void operation_envelopes_bound_every_record() {
  InterventionOperation op;
  op.id = std::string(max_operation_id_bytes, '\x01');
  op.target = "quoted \" target \\ \x1f";
  const CaptureUsage envelope = operation_envelope(op);
  CHECK(envelope.captures == 0 && envelope.retained_bytes == 0);
  CHECK(envelope.host_bytes == 512 + op.id.size() + op.target.size());
  CHECK(envelope.encoded_bytes == 2048 + 6 * (op.id.size() + op.target.size()));
  for (auto outcome : {InterventionOutcomeKind::inactive, InterventionOutcomeKind::applied,
                       InterventionOutcomeKind::missing, InterventionOutcomeKind::failed}) {
    for (std::size_t evidence : {0, 1, 2, 4}) {
      InterventionRecord record;
      record.operation_id = op.id;
      record.target = op.target;
      record.outcome = outcome;
      if (outcome == InterventionOutcomeKind::failed) record.message = bound_message(std::string(1000, '\x02'));
      record.charged = {UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};
      record.evidence.resize(evidence);  // "null" each: 4 bytes that are the payload's own
      JsonWriter exact(UINT64_MAX, JsonMode::count), text;
      write_intervention_record(exact, record);
      write_intervention_record(text, record);
      CHECK(exact.size() == text.take().size());
      CHECK(exact.size() - 4 * evidence <= envelope.encoded_bytes);
    }
  }
  // A target is not bounded by admission: its size enters the envelope with checked arithmetic.
  CHECK(operation_envelope(InterventionOperation{"x", std::string(100, 'p')}).encoded_bytes == 2048 + 6 * 101);
}

void typed_arrays_encode_in_their_element_type_within_the_cost_model() {
  // float16: 1, -2, 65504 (the largest), a subnormal (2**-24), +inf; int64 extremes; bfloat16 1.5.
  const std::uint16_t halves[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00};
  const std::int64_t longs[] = {INT64_MIN, INT64_MAX, -1};
  const std::uint16_t bf16[] = {0x3fc0};
  auto payload = [](ElementType type, const void* data, std::uint64_t n) {
    CapturePayload p;
    p.kind = PayloadKind::tensor;
    p.shape = {n};
    p.array = {type, n, data, nullptr};
    return p;
  };
  auto text = [](const CapturePayload& p) {
    JsonWriter json;
    write_payload(json, p);
    return json.take();
  };
  CHECK(text(payload(ElementType::float16, halves, 5)) ==
        R"({"kind":"tensor","dtype":"float16","shape":[5],"values":[1,-2,65504,5.960464477539063e-08,"Infinity"]})");
  CHECK(text(payload(ElementType::int64, longs, 3)) ==
        R"({"kind":"tensor","dtype":"int64","shape":[3],"values":[-9223372036854775808,9223372036854775807,-1]})");
  CHECK(text(payload(ElementType::bfloat16, bf16, 1)) == R"({"kind":"tensor","dtype":"bfloat16","shape":[1],"values":[1.5]})");
  CHECK(payload(ElementType::float16, halves, 5).retained_bytes() == 10);
  // The cost model's encoded bound covers each payload; retained is the real bytes.
  for (auto [type, data, n] : {std::tuple{ElementType::float16, static_cast<const void*>(halves), 5},
                               std::tuple{ElementType::int64, static_cast<const void*>(longs), 3}}) {
    auto usage = transform_usage(TransformKind::full_tensor, {std::uint64_t(n)}, itemsize(type), 0, 0, 0, true);
    auto p = payload(type, data, n);
    CHECK(text(p).size() <= usage.encoded_bytes);
    CHECK(usage.retained_bytes == p.retained_bytes());
  }
  CHECK(transform_usage(TransformKind::summary, {2, 3}, 2, 0, 0, 0, false) ==
        (CaptureUsage{1, 48, 48, 128 + 25 * 6 + 21 * 2}));
  CHECK(transform_usage(TransformKind::full_tensor, {UINT64_MAX, 2}, 4, 0, 0, 0, true).retained_bytes == UINT64_MAX);
}

void session_round_trip() {
  CaptureDiscovery discovery{"artifact", {ObservationPoint{"p", "p", "activation", ValueDtype::floating,
                                                          {{"a", {DimKind::known, 2}}, {"b", {DimKind::known, 3}}}}},
                             {}};
  CaptureUsage big{100, 1u << 30, 1u << 30, 1u << 30};
  CapturePlan plan{capture_schema_version, {CaptureSelection{"s", "p", {}, {}, {}}}, {big, big, std::nullopt, OnLimit::fail}};
  CaptureSession session(admit(plan, discovery, {1, 1, 3}));
  ScriptedBackend backend;
  int tensor = 0;
  session.begin_step(CapturePhase::prefill, 0);
  session.observe(backend, "p", &tensor);
  session.observe(backend, "elsewhere", &tensor);
  auto step = session.take_step();
  CHECK(step && step->records.size() == 1 && step->records[0].outcome.kind == OutcomeKind::captured);
  CHECK(backend.transforms == 1);
  auto cp = session.checkpoint(discovery);
  session.begin_step(CapturePhase::decode, 1);
  session.take_step();
  auto spent = session.cumulative_usage();
  {
    auto prepared = session.prepare_restore(cp);
    // dropped without commit
  }
  CHECK(session.next_prediction() == 2);
  session.restore(cp);
  CHECK(session.next_prediction() == 1 && session.cumulative_usage() == spent && !session.take_step());
}

}  // namespace

int main() {
  ledger_is_monotone_and_all_or_nothing();
  ledger_refuses_sums_past_64_bits();
  slice_extents_never_wrap();
  value_floors_saturate();
  bounded_messages_cut_on_utf8_boundaries();
  counting_writer_measures_what_the_writer_writes();
  bounding_writer_never_undercounts();
  operation_envelopes_bound_every_record();
  typed_arrays_encode_in_their_element_type_within_the_cost_model();
  session_round_trip();
  return lifecore::test_support::finish("capture_core_test");
}
