// Where a stream sits in the graph-capture lifecycle, and the only thing allowed to move it.
// NO_CAPTURE -> PREPARE -> CAPTURE -> NO_CAPTURE, driven by prepare / begin / end. The rule is
// the same on every backend, so it lives here once; backends and streams supply only the work
// a transition brackets (arming pools, opening the driver capture), never the ordering itself.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace lifecore {

// How the metadata info cache behaves at a lifecycle position.
enum class CacheMode : std::uint8_t { normal, capture };

// One table for the variants and their names (capture_variant_name).
#define LIFECORE_CAPTURE_VARIANTS(X) X(no_capture, "NO_CAPTURE") X(prepare, "PREPARE") X(capture, "CAPTURE")
enum class CaptureVariant : std::uint8_t {
#define LIFECORE_CAPTURE_VARIANT_CASE(variant, name) variant,
  LIFECORE_CAPTURE_VARIANTS(LIFECORE_CAPTURE_VARIANT_CASE)
#undef LIFECORE_CAPTURE_VARIANT_CASE
};

// The identity of whoever opened a window (a logical stream, a thread, a task).
using CaptureOwner = std::int64_t;

// What end() reports: who opened the window, who closed it, and whether the closer was
// someone else (then nothing may be sealed: the window is discarded, not handed over).
struct CaptureEnd {
  CaptureOwner owner = 0;
  CaptureOwner caller = 0;
  bool abandoned = false;

  bool operator==(const CaptureEnd&) const = default;
};

// The operations a refusal names: a Stream's own by default; the standalone value type's
// (a scheduler checking a plan of its own, where no stream exists) name themselves.
struct CaptureStateOperations {
  const char* prepare;
  const char* begin;
  const char* end;
};
inline constexpr CaptureStateOperations stream_capture_operations{"graph_prepare", "begin_capture", "end_capture"};

class StreamCaptureState {
 public:
  // NO_CAPTURE -> PREPARE. Call before arming the pools. Throws CaptureStateError (state
  // untouched) when a capture is already prepared or recording on this stream.
  void prepare(CaptureOwner owner = 0, const CaptureStateOperations& names = stream_capture_operations);
  // PREPARE -> CAPTURE. Call before the work that opens the window, so a rejected call runs
  // none of it (a flush on the way to a rejection would abort a live capture). A backend whose
  // window then fails to open undoes its work and calls abort().
  void begin(const CaptureStateOperations& names = stream_capture_operations);
  // CAPTURE -> NO_CAPTURE. Call before closing the window, so a failed seal can never leave
  // the stream recording. A caller other than the owner still closes it: abandoned = true.
  CaptureEnd end(CaptureOwner caller = 0, const CaptureStateOperations& names = stream_capture_operations);
  // Back to NO_CAPTURE from anywhere; asserts nothing and never fails.
  void abort() noexcept;

  bool is_recording() const noexcept { return variant_ == CaptureVariant::capture; }
  bool is_active() const noexcept { return variant_ != CaptureVariant::no_capture; }
  CaptureVariant variant() const noexcept { return variant_; }
  // The owner of the prepared or recording window; empty in NO_CAPTURE.
  std::optional<CaptureOwner> owner() const noexcept;
  // CAPTURE while a graph is prepared (warmup primes the cache) or recorded, else NORMAL.
  CacheMode cache_mode() const noexcept { return is_active() ? CacheMode::capture : CacheMode::normal; }

  std::string repr() const;
  bool operator==(const StreamCaptureState&) const = default;

 private:
  CaptureVariant variant_ = CaptureVariant::no_capture;
  CaptureOwner owner_ = 0;  // meaningful only while active
};

const char* capture_variant_name(CaptureVariant variant);

// The message a Stream reports (as CaptureRefusedError) for an abandoned end.
std::string abandoned_capture_message(const CaptureEnd& end);

}  // namespace lifecore
