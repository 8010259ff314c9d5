#include "lifecore/driver/status.hpp"

#include <array>
#include <utility>

#include "driver/enum_names.hpp"

namespace lifecore::driver {
namespace {

constexpr std::array code_names{
#define LIFECORE_STATUS_CODE_NAME(name) #name,
    LIFECORE_STATUS_CODES(LIFECORE_STATUS_CODE_NAME)
#undef LIFECORE_STATUS_CODE_NAME
};

}  // namespace

const char* code_name(Code code) { return enum_name(code_names, code); }

bool code_from_name(std::string_view name, Code* out) { return enum_from_name(code_names, name, out); }

const std::vector<Code>& all_codes() {
  static const std::vector<Code> codes{
#define LIFECORE_STATUS_CODE_VALUE(name) Code::name,
      LIFECORE_STATUS_CODES(LIFECORE_STATUS_CODE_VALUE)
#undef LIFECORE_STATUS_CODE_VALUE
  };
  return codes;
}

std::string_view code_description(Code code) {
  switch (code) {
    case Code::success: return "no error";
    case Code::invalid_value: return "invalid argument";
    case Code::out_of_memory: return "out of memory";
    case Code::not_initialized: return "initialization error";
    case Code::no_device: return "no device is detected";
    case Code::invalid_device: return "invalid device ordinal";
    case Code::invalid_image: return "device kernel image is invalid";
    case Code::invalid_context: return "invalid device context";
    case Code::invalid_kernel_source: return "a PTX JIT compilation failed";
    case Code::invalid_handle: return "invalid resource handle";
    case Code::illegal_state: return "the operation is not valid in the current state";
    case Code::not_found: return "named symbol not found";
    case Code::not_ready: return "device not ready";
    case Code::illegal_address: return "an illegal memory access was encountered";
    case Code::launch_failure: return "unspecified launch failure";
    case Code::not_permitted: return "operation not permitted";
    case Code::not_supported: return "operation not supported";
    case Code::capture_unsupported: return "operation not permitted when stream is capturing";
    case Code::capture_invalidated: return "operation failed due to a previous error during capture";
    case Code::capture_merge: return "operation would result in a merge of separate capture sequences";
    case Code::capture_unmatched: return "capture was not ended in the same stream as it began";
    case Code::capture_unjoined: return "capturing stream has unjoined work";
    case Code::capture_isolation: return "dependency created on uncaptured work in another stream";
    case Code::capture_implicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case Code::captured_event: return "operation not permitted on an event last recorded in a capturing stream";
    case Code::capture_wrong_thread: return "attempt to terminate a thread-local capture sequence from another thread";
    case Code::graph_exec_update_failure:
      return "the graph update was not performed because it included changes which violated constraints";
    case Code::unknown: return "unknown error";
  }
  return "unknown error";
}

Status native_status(const StatusNaming& naming, int native, std::string call, std::string message) {
  Status status;
  status.code = native == 0 ? Code::success : naming.code(native);
  // A nonzero native code is a failure even where the backend's mapping says otherwise.
  if (native != 0 && status.code == Code::success) status.code = Code::unknown;
  status.native_code = native;
  status.name = naming.name(native);
  status.sticky = naming.sticky(native);
  status.call = std::move(call);
  status.message = message.empty() ? std::string(code_description(status.code)) : std::move(message);
  return status;
}

Status local_status(const StatusNaming& naming, Code code, std::string call, std::string message) {
  Status status = native_status(naming, naming.native(code), std::move(call), std::move(message));
  status.code = code;
  return status;
}

std::string failure_text(const Status& status) {
  std::string text = status.call + " failed: " + status.name + " (" + std::to_string(status.native_code) + ")";
  if (!status.message.empty()) text += ": " + status.message;
  return text;
}

std::string status_summary(const Status& status) {
  return status.name + ", status " + std::to_string(status.native_code);
}

void throw_status(const Status& status) {
  std::string text = failure_text(status);
  if (status.sticky)
    text += "; the device is lost (a sticky error leaves the driver's context unusable): every later call on it "
            "is refused; close it and open a new device (on a real GPU, a new process)";
  raise(status.sticky ? ErrorKind::DeviceLost : ErrorKind::Driver, text,
        {{"code", std::int64_t{status.native_code}}, {"status", status.name}, {"call", status.call},
         {"driver_message", status.message}, {"lifecore_status", std::string(code_name(status.code))}});
}

}  // namespace lifecore::driver
