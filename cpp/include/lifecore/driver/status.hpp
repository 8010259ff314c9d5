// A vendor call's outcome, vendor-neutral: the native code, its name and the call.
// CUDA and HIP share the numbers of the capture errors (900..908); the mock uses CUDA's
// numbering throughout so a differential run can compare statuses across backends.
#pragma once

#include <string>
#include <string_view>

#include "lifecore/error.hpp"

namespace lifecore::driver {

namespace status_code {
inline constexpr int success = 0;
inline constexpr int invalid_value = 1;
inline constexpr int out_of_memory = 2;
inline constexpr int not_initialized = 3;
inline constexpr int no_device = 100;
inline constexpr int invalid_device = 101;
inline constexpr int invalid_image = 200;
inline constexpr int invalid_context = 201;
inline constexpr int invalid_ptx = 218;
inline constexpr int illegal_state = 401;
inline constexpr int not_found = 500;
inline constexpr int not_ready = 600;
inline constexpr int illegal_address = 700;
inline constexpr int launch_failed = 719;
inline constexpr int not_permitted = 800;
inline constexpr int not_supported = 801;
inline constexpr int capture_unsupported = 900;
inline constexpr int capture_invalidated = 901;
inline constexpr int capture_merge = 902;
inline constexpr int capture_unmatched = 903;
inline constexpr int capture_unjoined = 904;
inline constexpr int capture_isolation = 905;
inline constexpr int capture_implicit = 906;
inline constexpr int captured_event = 907;
inline constexpr int capture_wrong_thread = 908;
inline constexpr int graph_exec_update_failure = 910;
inline constexpr int unknown = 999;
}  // namespace status_code

struct Status {
  int code = status_code::success;  // native code
  std::string name;                 // native name, e.g. CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
  std::string call;                 // the vendor call that failed, e.g. cuStreamEndCapture
  std::string message;              // the driver's own description, when it has one
  // A sticky error: the driver's context is unusable and every later call on the device fails
  // (the device is lost). Which codes are sticky is the backend's call: cuda_sticky / hip_sticky.
  bool sticky = false;

  bool ok() const noexcept { return code == status_code::success; }
  static Status success() { return {}; }
};

// CUDA-style name for a code ("CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"); "CUDA_ERROR_<code>" if unknown.
std::string cuda_status_name(int code);
// HIP-style name for a code ("hipErrorStreamCaptureInvalidated"); "hipError<code>" if unknown.
std::string hip_status_name(int code);
// A short description for the codes above ("operation not permitted when stream is capturing").
std::string_view status_description(int code);

// Whether a code leaves the context unusable ("any further work returns the same error"): CUDA's
// 700, 702, 710, 714-719 and 911; HIP's 700, 702, 710 and 719. The mock uses CUDA's.
bool cuda_sticky(int code);
bool hip_sticky(int code);

// Builds a failed Status with the CUDA-style name, the standard description and CUDA's stickiness.
Status make_status(int code, std::string call, std::string message = {});

// Throws lifecore::Error(ErrorKind::Driver, ...) carrying code, name and call as attributes;
// ErrorKind::DeviceLost for a sticky status.
[[noreturn]] void throw_status(const Status& status);
inline void check(const Status& status) {
  if (!status.ok()) throw_status(status);
}

}  // namespace lifecore::driver
