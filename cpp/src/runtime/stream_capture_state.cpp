#include "lifecore/runtime/stream_capture_state.hpp"

#include <string>

#include "lifecore/error.hpp"

namespace lifecore {

void StreamCaptureState::prepare(CaptureOwner owner, const CaptureStateOperations& names) {
  if (variant_ == CaptureVariant::prepare)
    raise(ErrorKind::CaptureState, std::string(names.prepare) + ": a graph capture is already prepared on this stream");
  if (variant_ == CaptureVariant::capture)
    raise(ErrorKind::CaptureState, std::string(names.prepare) + ": a graph capture is already recording on this stream");
  variant_ = CaptureVariant::prepare;
  owner_ = owner;
}

void StreamCaptureState::begin(const CaptureStateOperations& names) {
  if (variant_ == CaptureVariant::no_capture)
    raise(ErrorKind::CaptureState,
          std::string(names.begin) + ": call " + names.prepare + " before starting a capture");
  if (variant_ == CaptureVariant::capture)
    raise(ErrorKind::CaptureState, std::string(names.begin) + ": a graph capture is already recording on this stream");
  variant_ = CaptureVariant::capture;
}

CaptureEnd StreamCaptureState::end(CaptureOwner caller, const CaptureStateOperations& names) {
  if (variant_ != CaptureVariant::capture)
    raise(ErrorKind::CaptureState, std::string(names.end) + ": no graph capture is recording on this stream");
  CaptureEnd result{owner_, caller, caller != owner_};
  variant_ = CaptureVariant::no_capture;
  owner_ = 0;
  return result;
}

void StreamCaptureState::abort() noexcept {
  variant_ = CaptureVariant::no_capture;
  owner_ = 0;
}

std::optional<CaptureOwner> StreamCaptureState::owner() const noexcept {
  if (!is_active()) return std::nullopt;
  return owner_;
}

std::string StreamCaptureState::repr() const {
  std::string text = "StreamCaptureState(";
  text += capture_variant_name(variant_);
  if (is_active()) text += ", owner=" + std::to_string(owner_);
  return text + ")";
}

const char* capture_variant_name(CaptureVariant variant) {
  switch (variant) {
#define LIFECORE_CAPTURE_VARIANT_NAME(value, name) \
  case CaptureVariant::value:                      \
    return name;
    LIFECORE_CAPTURE_VARIANTS(LIFECORE_CAPTURE_VARIANT_NAME)
#undef LIFECORE_CAPTURE_VARIANT_NAME
  }
  return "UNKNOWN";
}

std::string abandoned_capture_message(const CaptureEnd& end) {
  return "end_capture: the capture belongs to owner " + std::to_string(end.owner) + ", not to " +
         std::to_string(end.caller) + "; it is discarded rather than left recording on a stream both share";
}

}  // namespace lifecore
