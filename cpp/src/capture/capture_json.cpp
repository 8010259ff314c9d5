#include "capture/capture_json.hpp"

#include <charconv>
#include <cmath>
#include <cstring>

#include "lifecore/checked.hpp"

namespace lifecore::capture {

void JsonWriter::string(std::string_view text) {
  if (mode_ == JsonMode::bound) {  // 2 quotes, at most 6 bytes per byte (a control byte's \u00XX)
    add(checked::add(checked::mul(std::uint64_t{text.size()}, std::uint64_t{6}), std::uint64_t{2}).value_or(UINT64_MAX));
    return;
  }
  if (mode_ == JsonMode::count) {  // the size alone: 2 quotes, 1 extra byte per '"' or '\\', 5 per control byte
    std::uint64_t n = text.size() + 2;
    for (unsigned char c : text) n += c == '"' || c == '\\' ? 1 : c < 0x20 ? 5 : 0;
    add(n);
    return;
  }
  raw("\"");
  std::size_t run = 0;  // start of the current run of characters that need no escaping
  for (std::size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c != '"' && c != '\\' && c >= 0x20) continue;
    raw(text.substr(run, i - run));
    run = i + 1;
    if (c == '"') raw("\\\"");
    else if (c == '\\') raw("\\\\");
    else {
      static const char* hex = "0123456789abcdef";
      char buf[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xf]};
      raw(std::string_view(buf, 6));
    }
  }
  raw(text.substr(run));
  raw("\"");
}

void JsonWriter::number(double value) {
  if (mode_ == JsonMode::bound) { add(max_number_text_bytes); return; }
  if (!std::isfinite(value)) {
    // JSON has no such numbers: the names JavaScript and Python's json give them, as strings,
    // so a NaN and an overflow stay apart.
    raw(std::isnan(value) ? "\"NaN\"" : value > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    return;
  }
  if (value == 0 && std::signbit(value)) {
    // "-0" reads back as the integer 0 in most JSON readers (Python's json among them): the
    // sign would be lost.
    raw("-0.0");
    return;
  }
  char buf[32];
  auto result = std::to_chars(buf, buf + sizeof buf, value);
  raw(std::string_view(buf, static_cast<std::size_t>(result.ptr - buf)));
}

void JsonWriter::integer(std::uint64_t value) {
  if (mode_ == JsonMode::bound) { add(max_integer_text_bytes); return; }
  char buf[24];
  auto result = std::to_chars(buf, buf + sizeof buf, value);
  raw(std::string_view(buf, static_cast<std::size_t>(result.ptr - buf)));
}

void JsonWriter::signed_integer(std::int64_t value) {
  if (mode_ == JsonMode::bound) { add(max_integer_text_bytes); return; }
  char buf[24];
  auto result = std::to_chars(buf, buf + sizeof buf, value);
  raw(std::string_view(buf, static_cast<std::size_t>(result.ptr - buf)));
}

void JsonWriter::bounded_elements(std::uint64_t count, std::uint64_t each) {
  begin_array();
  // A comma and a value per element: one comma more than written, which a bound allows.
  if (count != 0) add(checked::mul(count, each + 1).value_or(UINT64_MAX));
  end_array();
}

void JsonWriter::elements(const PayloadArray& kept) {
  if (mode_ == JsonMode::bound) {
    const PayloadArray& array = kept;
    const bool integral = array.type != ElementType::float16 && array.type != ElementType::bfloat16 &&
                          array.type != ElementType::float32 && array.type != ElementType::float64;
    // "false" is the longest boolean; any integer fits an int64's or a uint64's text.
    return bounded_elements(array.size, integral ? max_integer_text_bytes : max_number_text_bytes);
  }
  const PayloadArray array = kept.current();  // its values, where they are now
  begin_array();
  // Integers stay integers (a double would round past 2**53); floating values take the
  // shortest form that reads back as the same double.
  for (std::uint64_t i = 0; i < array.size && !overflowed_; ++i) {
    element();
    switch (array.type) {
      case ElementType::int8:
      case ElementType::int16:
      case ElementType::int32: signed_integer(static_cast<std::int64_t>(array.number(i))); break;
      case ElementType::int64: {
        std::int64_t v;
        std::memcpy(&v, static_cast<const unsigned char*>(array.data) + i * 8, 8);
        signed_integer(v);
        break;
      }
      case ElementType::uint64: {
        std::uint64_t v;
        std::memcpy(&v, static_cast<const unsigned char*>(array.data) + i * 8, 8);
        integer(v);
        break;
      }
      case ElementType::uint8:
      case ElementType::uint16:
      case ElementType::uint32: integer(static_cast<std::uint64_t>(array.number(i))); break;
      case ElementType::boolean: boolean(array.number(i) != 0); break;
      default: number(array.number(i));
    }
  }
  end_array();
}

void JsonWriter::key(std::string_view name) {
  // Keys are this writer's own identifiers and never need escaping.
  const bool comma = !first_;
  first_ = false;
  if (mode_ != JsonMode::text) {  // sized in one step: a record has a dozen keys
    add(std::uint64_t{name.size()} + (comma ? 4 : 3));
    return;
  }
  if (comma) raw(",");
  raw("\"");
  raw(name);
  raw("\":");
}

void JsonWriter::integers(const std::vector<std::uint64_t>& values) {
  if (mode_ == JsonMode::bound) return bounded_elements(values.size(), max_integer_text_bytes);
  begin_array();
  for (auto v : values) { element(); integer(v); }
  end_array();
}

void JsonWriter::numbers(const std::vector<double>& values) {
  if (mode_ == JsonMode::bound) return bounded_elements(values.size(), max_number_text_bytes);
  begin_array();
  for (auto v : values) { element(); number(v); }
  end_array();
}

namespace {

void write_schedule(JsonWriter& json, const CaptureSchedule& s) {
  json.begin_object();
  json.key("prefill"); json.boolean(s.prefill);
  json.key("decode"); json.boolean(s.decode);
  json.key("first_prediction"); json.integer(s.first_prediction);
  json.key("end_prediction");
  if (s.end_prediction) json.integer(*s.end_prediction); else json.raw("null");
  json.key("every"); json.integer(s.every);
  json.end_object();
}

void write_slices(JsonWriter& json, const std::vector<CaptureSlice>& slices) {
  json.begin_array();
  for (const auto& s : slices) {
    json.element();
    json.begin_object();
    json.key("axis"); json.string(s.axis);
    json.key("start"); json.integer(s.start);
    json.key("end");
    if (s.end) json.integer(*s.end); else json.raw("null");
    json.key("stride"); json.integer(s.stride);
    json.end_object();
  }
  json.end_array();
}

}  // namespace

void write_usage(JsonWriter& json, const CaptureUsage& u) {
  json.begin_object();
  json.key("captures"); json.integer(u.captures);
  json.key("retained_bytes"); json.integer(u.retained_bytes);
  json.key("host_bytes"); json.integer(u.host_bytes);
  json.key("encoded_bytes"); json.integer(u.encoded_bytes);
  json.end_object();
}

void write_plan(JsonWriter& json, const CapturePlan& plan) {
  json.begin_object();
  json.key("schema_version"); json.integer(plan.schema_version);
  json.key("selections");
  json.begin_array();
  for (const auto& s : plan.selections) {
    json.element();
    json.begin_object();
    json.key("id"); json.string(s.id);
    json.key("path"); json.string(s.path);
    json.key("schedule"); write_schedule(json, s.schedule);
    json.key("slices"); write_slices(json, s.slices);
    json.key("transform");
    json.begin_object();
    json.key("kind"); json.string(to_string(s.transform.kind));
    json.key("max_elements"); json.integer(s.transform.max_elements);
    json.key("edges"); json.numbers(s.transform.edges);
    json.key("count"); json.integer(s.transform.count);
    json.end_object();
    json.end_object();
  }
  json.end_array();
  json.key("limits");
  json.begin_object();
  json.key("per_step"); write_usage(json, plan.limits.per_step);
  json.key("cumulative"); write_usage(json, plan.limits.cumulative);
  json.key("physical_native_bytes");
  if (plan.limits.physical_native_bytes) json.integer(*plan.limits.physical_native_bytes); else json.raw("null");
  json.key("on_limit"); json.string(to_string(plan.limits.on_limit));
  json.end_object();
  json.end_object();
}

void write_points(JsonWriter& json, const std::vector<ObservationPoint>& points) {
  json.begin_array();
  for (const auto& p : points) {
    json.element();
    json.begin_object();
    json.key("path"); json.string(p.path);
    json.key("node_id"); json.string(p.node_id);
    json.key("meaning"); json.string(p.meaning);
    json.key("dtype"); json.string(to_string(p.dtype));
    json.key("axes");
    json.begin_array();
    for (const auto& a : p.axes) {
      json.element();
      json.begin_object();
      json.key("name"); json.string(a.name);
      json.key("dim"); json.string(to_string(a.dim.kind));
      json.key("size"); json.integer(a.dim.size);
      json.end_object();
    }
    json.end_array();
    json.key("prefill"); json.boolean(p.prefill);
    json.key("decode"); json.boolean(p.decode);
    json.key("position"); json.string(to_string(p.position));
    json.key("prefill_support"); json.string(to_string(p.prefill_support));
    json.key("decode_support"); json.string(to_string(p.decode_support));
    json.key("routing");
    if (p.routing) {
      json.begin_object();
      json.key("num_experts"); json.integer(p.routing->num_experts);
      json.key("top_k"); json.integer(p.routing->top_k);
      json.key("scoring"); json.string(to_string(p.routing->scoring));
      json.key("groups"); json.integer(p.routing->groups);
      json.key("topk_groups"); json.integer(p.routing->topk_groups);
      json.key("epsilon"); json.number(p.routing->epsilon);
      json.key("scale"); json.number(p.routing->scale);
      json.key("learned_coefficient_scale"); json.boolean(p.routing->learned_coefficient_scale);
      json.end_object();
    } else {
      json.raw("null");
    }
    json.key("itemsize"); json.integer(p.itemsize);
    json.end_object();
  }
  json.end_array();
}

void write_request(JsonWriter& json, const CaptureRequest& r) {
  json.begin_object();
  json.key("batch"); json.integer(r.batch);
  json.key("prompt_tokens"); json.integer(r.prompt_tokens);
  json.key("max_predictions"); json.integer(r.max_predictions);
  json.end_object();
}

void write_intervention_plan(JsonWriter& json, const InterventionPlan& plan) {
  json.begin_array();
  for (const auto& op : plan.operations) {
    json.element();
    json.begin_object();
    json.key("id"); json.string(op.id);
    json.key("target"); json.string(op.target);
    json.key("schedule"); write_schedule(json, op.schedule);
    json.key("slices"); write_slices(json, op.slices);
    json.key("action"); json.string(to_string(op.action));
    json.key("factor"); json.number(op.factor);
    json.key("payload_shape"); json.integers(op.payload_shape);
    json.key("payload"); json.numbers(op.payload);
    json.key("ids"); json.integers(op.ids);
    json.key("evidence"); json.integer(static_cast<std::uint64_t>(op.evidence));
    json.key("evidence_elements"); json.integer(op.evidence_elements);
    json.end_object();
  }
  json.end_array();
}

void write_payload(JsonWriter& json, const CapturePayload& p) {
  switch (p.kind) {
    case PayloadKind::none: json.raw("null"); return;
    case PayloadKind::tensor:
      json.begin_object();
      json.key("kind"); json.string(to_string(p.kind));
      json.key("dtype"); json.string(p.array.present() ? to_string(p.array.type) : "float64");
      json.key("shape"); json.integers(p.shape);
      json.key("values");
      if (p.array.present()) json.elements(p.array); else json.numbers(p.values);
      json.end_object();
      return;
    case PayloadKind::summary:
      json.begin_object();
      json.key("kind"); json.string(to_string(p.kind));
      json.key("count"); json.integer(p.count);
      json.key("nonfinite"); json.integer(p.nonfinite);
      json.key("min"); json.number(p.min);
      json.key("max"); json.number(p.max);
      json.key("mean"); json.number(p.mean);
      json.key("std"); json.number(p.std);
      json.end_object();
      return;
    case PayloadKind::histogram:
      json.begin_object();
      json.key("kind"); json.string(to_string(p.kind));
      json.key("edges"); json.numbers(p.values);
      json.key("counts"); json.integers(p.counts);
      json.end_object();
      return;
    case PayloadKind::candidates:
      json.begin_object();
      json.key("kind"); json.string(to_string(p.kind));
      json.key("ids"); json.integers(p.counts);
      json.key("scores"); json.numbers(p.values);
      json.end_object();
      return;
  }
}

static void write_outcome(JsonWriter& json, const CaptureOutcome& o) {
  json.begin_object();
  json.key("kind"); json.string(to_string(o.kind));
  if (o.kind == OutcomeKind::skipped) {
    json.key("reason"); json.string(to_string(o.skip));
  }
  if (o.kind == OutcomeKind::failed) {
    json.key("reason"); json.string(to_string(o.fail));
    json.key("message"); json.string(o.message);
  }
  if ((o.kind == OutcomeKind::skipped && o.skip == SkipReason::limit) ||
      (o.kind == OutcomeKind::failed && o.fail == FailReason::limit)) {
    json.key("budget"); json.string(to_string(o.budget));
    json.key("cumulative"); json.boolean(o.cumulative);
  }
  if (o.kind == OutcomeKind::truncated) {
    json.key("available"); json.integer(o.available);
    json.key("emitted"); json.integer(o.emitted);
  }
  json.end_object();
}

// A CAPTURED summary's record is written with the same strings and shape lengths under one
// pricing, only its numbers differing: the session keeps one bound per pricing for it
// (CaptureSession::record_fits_charge). A key written only sometimes would break that.
void write_record(JsonWriter& json, const CaptureRecord& r) {
  json.begin_object();
  json.key("selection_id"); json.string(r.selection_id);
  json.key("path"); json.string(r.path);
  json.key("node_id"); json.string(r.node_id);
  json.key("position"); json.string(to_string(r.position));
  json.key("source_shape"); json.integers(r.source_shape);
  json.key("selected_shape"); json.integers(r.selected_shape);
  json.key("outcome"); write_outcome(json, r.outcome);
  json.key("charged"); write_usage(json, r.charged);
  json.key("payload"); write_payload(json, r.payload);
  json.end_object();
}

void write_intervention_record(JsonWriter& json, const InterventionRecord& r) {
  json.begin_object();
  json.key("operation_id"); json.string(r.operation_id);
  json.key("target"); json.string(r.target);
  json.key("outcome"); json.string(to_string(r.outcome));
  json.key("message"); json.string(r.message);
  json.key("charged"); write_usage(json, r.charged);
  json.key("evidence");
  json.begin_array();
  for (const auto& e : r.evidence) { json.element(); write_payload(json, e); }
  json.end_array();
  json.end_object();
}

}  // namespace lifecore::capture
