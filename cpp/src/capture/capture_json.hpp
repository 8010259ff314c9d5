// A small JSON writer. It can enforce a byte limit while writing (the "counting writer"):
// a record's encoding may never exceed what was charged for it, so a backend that
// underestimated is caught before anything is published. Checking a limit needs no text:
// `count` measures the exact size, and `bound` an upper bound of it without formatting a
// single number or scanning a string (a number is at most 24 bytes, an integer 20, a string
// byte 6), so a record checked once per capture costs a walk of its structure.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lifecore/capture/intervention_plan.hpp"
#include "lifecore/capture/transform_cost.hpp"
#include "lifecore/capture/types.hpp"

namespace lifecore::capture {

enum class JsonMode {
  text,   // build the text
  count,  // the exact size of the text, nothing built
  bound,  // at least the exact size, nothing built, no number formatted
};

class JsonWriter {
 public:
  explicit JsonWriter(std::uint64_t limit = UINT64_MAX, JsonMode mode = JsonMode::text) : limit_(limit), mode_(mode) {}
  void raw(std::string_view text) { add(text.size()); if (!overflowed_ && mode_ == JsonMode::text) out_.append(text); }
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
  // The bytes written (text, count), or an upper bound of them (bound); saturates past the limit.
  std::uint64_t size() const noexcept { return size_; }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  std::uint64_t size_ = 0;
  std::uint64_t limit_;
  bool overflowed_ = false;
  JsonMode mode_ = JsonMode::text;
  bool first_ = true;

  // Adds n bytes; past the limit the writer has overflowed (and stops writing text).
  void add(std::uint64_t n) noexcept {
    if (n > limit_ - std::min(size_, limit_)) {
      overflowed_ = true;
      size_ = limit_ == UINT64_MAX ? UINT64_MAX : limit_ + 1;
      return;
    }
    size_ += n;
  }
  // `count` elements, each at most `each` bytes, separated by commas (bound mode).
  void bounded_elements(std::uint64_t count, std::uint64_t each);
};

void write_plan(JsonWriter& json, const CapturePlan& plan);
void write_points(JsonWriter& json, const std::vector<ObservationPoint>& points);
void write_request(JsonWriter& json, const CaptureRequest& request);
void write_usage(JsonWriter& json, const CaptureUsage& usage);
void write_intervention_plan(JsonWriter& json, const InterventionPlan& plan);
void write_payload(JsonWriter& json, const CapturePayload& payload);
void write_record(JsonWriter& json, const CaptureRecord& record);
void write_intervention_record(JsonWriter& json, const InterventionRecord& record);

// The longest text of one value: a double's shortest round-trip form ("-2.2250738585072014e-308")
// and a 64-bit integer ("18446744073709551615", "-9223372036854775808").
constexpr std::uint64_t max_number_text_bytes = 24;
constexpr std::uint64_t max_integer_text_bytes = 20;
// The cost model charges each number its longest text and a comma, so a bound clears it.
static_assert(encoded_number_bytes >= max_number_text_bytes + 1);

// Whether what `write(json)` writes takes at most `limit` bytes. An upper bound settles it
// almost always; only output the bound does not clear is measured exactly.
template <class Write>
bool fits_within(std::uint64_t limit, Write&& write) {
  JsonWriter bound(limit, JsonMode::bound);
  write(bound);
  if (!bound.overflowed()) return true;
  JsonWriter exact(limit, JsonMode::count);
  write(exact);
  return !exact.overflowed();
}

}  // namespace lifecore::capture
