// A small JSON writer. It can enforce a byte limit while writing (the "counting writer"):
// a record's encoding may never exceed what was charged for it, so a backend that
// underestimated is caught before anything is published.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lifecore/capture/intervention_plan.hpp"
#include "lifecore/capture/types.hpp"

namespace lifecore::capture {

class JsonWriter {
 public:
  explicit JsonWriter(std::uint64_t limit = UINT64_MAX, bool count_only = false)
      : limit_(limit), count_only_(count_only) {}
  void raw(std::string_view text) {
    size_ += text.size();
    if (size_ > limit_) { overflowed_ = true; return; }
    if (!overflowed_ && !count_only_) out_.append(text);
  }
  void string(std::string_view text);
  void number(double value);  // non-finite values become null
  void integer(std::uint64_t value);
  void signed_integer(std::int64_t value);
  void boolean(bool value) { raw(value ? "true" : "false"); }
  void key(std::string_view name);  // writes the separating comma when needed
  void begin_object() { raw("{"); first_ = true; }
  void end_object() { raw("}"); first_ = false; }
  void begin_array() { raw("["); first_ = true; }
  void end_array() { raw("]"); first_ = false; }
  void element() { if (!first_) raw(","); first_ = false; }  // before each array element
  void integers(const std::vector<std::uint64_t>& values);
  void numbers(const std::vector<double>& values);
  void elements(const PayloadArray& array);  // a tensor payload's values in their element type
  bool overflowed() const noexcept { return overflowed_; }
  std::uint64_t size() const noexcept { return size_; }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  std::uint64_t size_ = 0;
  std::uint64_t limit_;
  bool overflowed_ = false;
  bool count_only_ = false;  // measure without building the text
  bool first_ = true;
};

void write_plan(JsonWriter& json, const CapturePlan& plan);
void write_points(JsonWriter& json, const std::vector<ObservationPoint>& points);
void write_request(JsonWriter& json, const CaptureRequest& request);
void write_usage(JsonWriter& json, const CaptureUsage& usage);
void write_intervention_plan(JsonWriter& json, const InterventionPlan& plan);
void write_payload(JsonWriter& json, const CapturePayload& payload);
void write_record(JsonWriter& json, const CaptureRecord& record);
void write_intervention_record(JsonWriter& json, const InterventionRecord& record);

// Bytes one number takes at most in this encoding (shortest round-trip form plus a comma).
constexpr std::uint64_t max_encoded_number_bytes = 25;

}  // namespace lifecore::capture
