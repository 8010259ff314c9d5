// A driver call's outcome: lifecore's own code (the same for every backend), the native code
// and name the backend reported, and the native call. Each backend maps its native codes into
// lifecore's (its StatusNaming); everything above the backend folders compares lifecore codes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lifecore/error.hpp"

namespace lifecore::driver {

// lifecore's status codes. Only the names are stable; the numbers are an enum's order.
#define LIFECORE_STATUS_CODES(X)                                                              \
  X(success) X(invalid_value) X(out_of_memory) X(not_initialized) X(no_device)               \
  X(invalid_device) X(invalid_image) X(invalid_context) X(invalid_kernel_source)             \
  X(invalid_handle) X(illegal_state) X(not_found) X(not_ready) X(illegal_address)            \
  X(launch_failure) X(not_permitted) X(not_supported)                                        \
  X(capture_unsupported) X(capture_invalidated) X(capture_merge) X(capture_unmatched)        \
  X(capture_unjoined) X(capture_isolation) X(capture_implicit) X(captured_event)             \
  X(capture_wrong_thread) X(graph_exec_update_failure) X(unknown)

enum class Code : int {
#define LIFECORE_STATUS_CODE_ENUM(name) name,
  LIFECORE_STATUS_CODES(LIFECORE_STATUS_CODE_ENUM)
#undef LIFECORE_STATUS_CODE_ENUM
};

// "capture_invalidated" for Code::capture_invalidated.
const char* code_name(Code code);
// Returns false when `name` is not a code's name.
bool code_from_name(std::string_view name, Code* out);
// Every code, in the enum's order.
const std::vector<Code>& all_codes();
// A short description ("operation failed due to a previous error during capture").
std::string_view code_description(Code code);

// How one backend names its native codes; each backend folder defines its own.
struct StatusNaming {
  Code (*code)(int native) = nullptr;         // lifecore's code; Code::unknown when it has none
  int (*native)(Code code) = nullptr;         // the native code for a failure lifecore detects itself
  std::string (*name)(int native) = nullptr;  // the native name, e.g. CUDA_ERROR_INVALID_VALUE
  // Whether the native code leaves the driver's context unusable ("any further work returns
  // the same error"): the device is lost.
  bool (*sticky)(int native) = nullptr;
};

struct Status {
  Code code = Code::success;  // lifecore's code
  int native_code = 0;        // the backend's own number
  std::string name;           // the backend's own name, e.g. CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
  std::string call;           // the native call that failed, e.g. cuStreamEndCapture
  std::string message;        // the driver's own description, when it has one
  // A sticky error: every later call on the device fails (the device is lost).
  bool sticky = false;

  bool ok() const noexcept { return code == Code::success; }
  static Status success() { return {}; }
};

// A native code as a Status named by `naming`, with the standard description when `message`
// is empty.
Status native_status(const StatusNaming& naming, int native, std::string call, std::string message = {});
// A failure lifecore detected itself (a bad handle, an empty image), reported the backend's way.
Status local_status(const StatusNaming& naming, Code code, std::string call, std::string message = {});

// "<call> failed: <name> (<native code>): <message>", the message part only when there is one.
std::string failure_text(const Status& status);
// "<name>, status <native code>": a status inside a sentence that already names the call.
std::string status_summary(const Status& status);

// Throws lifecore::Error(ErrorKind::Driver, ...) carrying the native code and name, lifecore's
// code name and the call as attributes; ErrorKind::DeviceLost for a sticky status.
[[noreturn]] void throw_status(const Status& status);
inline void check(const Status& status) {
  if (!status.ok()) throw_status(status);
}

}  // namespace lifecore::driver
