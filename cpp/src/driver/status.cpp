#include "lifecore/driver/status.hpp"

#include <array>
#include <utility>

namespace lifecore::driver {
namespace {

struct KnownStatus {
  int code;
  std::string_view cuda;
  std::string_view hip;
  std::string_view description;
};

constexpr std::array<KnownStatus, 27> known_statuses{{
    {0, "CUDA_SUCCESS", "hipSuccess", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "hipErrorInvalidValue", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "hipErrorOutOfMemory", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "hipErrorNotInitialized", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "hipErrorNoDevice", "no device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "hipErrorInvalidDevice", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "hipErrorInvalidImage", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "hipErrorInvalidContext", "invalid device context"},
    {218, "CUDA_ERROR_INVALID_PTX", "hipErrorInvalidKernelFile", "a PTX JIT compilation failed"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "hipErrorInvalidHandle", "invalid resource handle"},
    {401, "CUDA_ERROR_ILLEGAL_STATE", "hipErrorIllegalState", "the operation is not valid in the current state"},
    {500, "CUDA_ERROR_NOT_FOUND", "hipErrorNotFound", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "hipErrorNotReady", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "hipErrorIllegalAddress", "an illegal memory access was encountered"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "hipErrorLaunchFailure", "unspecified launch failure"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "hipErrorNotPermitted", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "hipErrorNotSupported", "operation not supported"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "hipErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "hipErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {902, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "hipErrorStreamCaptureMerge",
     "operation would result in a merge of separate capture sequences"},
    {903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "hipErrorStreamCaptureUnmatched",
     "capture was not ended in the same stream as it began"},
    {904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "hipErrorStreamCaptureUnjoined",
     "capturing stream has unjoined work"},
    {905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "hipErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "hipErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {907, "CUDA_ERROR_CAPTURED_EVENT", "hipErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing stream"},
    {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "hipErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "hipErrorGraphExecUpdateFailure",
     "the graph update was not performed because it included changes which violated constraints"},
}};

const KnownStatus* find(int code) {
  for (const auto& known : known_statuses)
    if (known.code == code) return &known;
  return nullptr;
}

}  // namespace

std::string cuda_status_name(int code) {
  if (const auto* known = find(code)) return std::string(known->cuda);
  if (code == status_code::unknown) return "CUDA_ERROR_UNKNOWN";
  return "CUDA_ERROR_" + std::to_string(code);
}

std::string hip_status_name(int code) {
  if (const auto* known = find(code)) return std::string(known->hip);
  if (code == status_code::unknown) return "hipErrorUnknown";
  return "hipError" + std::to_string(code);
}

std::string_view status_description(int code) {
  if (const auto* known = find(code)) return known->description;
  return "unknown error";
}

bool cuda_sticky(int code) {
  switch (code) {
    case 700: case 702: case 710: case 714: case 715: case 716: case 717: case 718: case 719: case 911:
      return true;
    default:
      return false;
  }
}

bool hip_sticky(int code) {
  switch (code) {
    case 700: case 702: case 710: case 719:
      return true;
    default:
      return false;
  }
}

Status make_status(int code, std::string call, std::string message) {
  Status status;
  status.code = code;
  status.sticky = cuda_sticky(code);
  status.name = cuda_status_name(code);
  status.call = std::move(call);
  status.message = message.empty() ? std::string(status_description(code)) : std::move(message);
  return status;
}

void throw_status(const Status& status) {
  std::string text = status.call + " failed: " + status.name + " (" + std::to_string(status.code) + ")";
  if (!status.message.empty()) text += ": " + status.message;
  if (status.sticky)
    text += "; the device is lost (a sticky error leaves the driver's context unusable): every later call on it "
            "is refused; close it and open a new device (on a real GPU, a new process)";
  raise(status.sticky ? ErrorKind::DeviceLost : ErrorKind::Driver, text,
        {{"code", std::int64_t{status.code}}, {"status", status.name}, {"call", status.call},
         {"driver_message", status.message}});
}

}  // namespace lifecore::driver
