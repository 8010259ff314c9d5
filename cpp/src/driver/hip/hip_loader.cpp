#include "driver/hip/hip_loader.hpp"

#include <cstdlib>
#include <string_view>

#include "driver/dynamic_library.hpp"
#include "driver/symbol_table.hpp"

namespace lifecore::driver::hip {
namespace {

using namespace hip_abi;

void* resolve(const DynamicLibrary& library, PFN_hipGetProcAddress get_proc_address, const char* name) {
  if (get_proc_address != nullptr) {
    void* pointer = nullptr;
    hipDriverProcAddressQueryResult found = 1;
    if (get_proc_address(name, &pointer, hip_abi_version, 0, &found) == hipSuccess &&
        found == HIP_GET_PROC_ADDRESS_SUCCESS && pointer != nullptr)
      return pointer;
  }
  return library.symbol(name);
}

std::string call_failure(const HipApi& api, hipError_t error, const char* call) {
  return failure_text(hip_status(api, error, call));
}

// hiprtc is a library of its own from ROCm 6; ROCm 5's runtime library exports it itself, so
// without a libhiprtc the runtime's own symbols serve (but not in place of a named override).
void load_hiprtc(HipRuntime& runtime, const DynamicLibrary& runtime_library) {
  std::string reason;
  DynamicLibrary own = DynamicLibrary::open(
      "LIFECORE_LIBHIPRTC", {"libhiprtc.so", "libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5"}, &reason);
  const char* override_path = std::getenv("LIFECORE_LIBHIPRTC");
  const bool overridden = override_path != nullptr && override_path[0] != '\0';
  const bool in_runtime = !own.loaded() && !overridden && runtime_library.symbol("hiprtcCompileProgram") != nullptr;
  if (!own.loaded() && !in_runtime) {
    runtime.hiprtc_reason = "no hiprtc, so the built-in kernels cannot be compiled (" + reason +
                            (overridden ? std::string() : "; nor does " + runtime_library.path() + " export it") + ")";
    return;
  }
  const DynamicLibrary& library = in_runtime ? runtime_library : own;
  runtime.hiprtc_library = library.path();
  SymbolTable table;
#define LIFECORE_HIPRTC_RESOLVE(member) table.bind(runtime.hiprtc.member, library.symbol(#member), #member, true, #member);
  LIFECORE_HIPRTC_SYMBOLS(LIFECORE_HIPRTC_RESOLVE)
#undef LIFECORE_HIPRTC_RESOLVE
  if (!table.missing().empty()) {
    runtime.hiprtc_reason = library.path() + " lacks " + table.missing() + ", so the built-in kernels cannot be compiled";
    return;
  }
  runtime.hiprtc_available = true;
}

HipRuntime load() {
  HipRuntime runtime;
  BackendInfo& info = runtime.info;
  info.name = "hip";

  std::string reason;
  DynamicLibrary library = DynamicLibrary::open(
      "LIFECORE_LIBHIP", {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"}, &reason);
  if (!library.loaded()) {
    info.reason = "no HIP runtime: " + reason;
    return runtime;
  }
  info.library = library.path();

  auto get_proc_address = reinterpret_cast<PFN_hipGetProcAddress>(library.symbol("hipGetProcAddress"));
  runtime.resolved_through_get_proc_address = get_proc_address != nullptr;
  HipApi& api = runtime.api;
  SymbolTable table;
#define LIFECORE_HIP_RESOLVE(member, required) \
  table.bind(api.member, resolve(library, get_proc_address, #member), #member, required, #member);
  LIFECORE_HIP_SYMBOLS(LIFECORE_HIP_RESOLVE)
#undef LIFECORE_HIP_RESOLVE
  runtime.symbols = table.take_resolved();

  if (!table.missing().empty()) {
    info.reason = "the HIP runtime " + info.library + " lacks the required entry point " + table.missing();
    return runtime;
  }
  int version = 0;
  if (api.hipDriverGetVersion(&version) == hipSuccess) info.driver_version = version;
  load_hiprtc(runtime, library);

  // Without a GPU, ROCm's runtime fails hipInit (e.g. hipErrorInvalidDevice) and reports
  // no device from hipGetDeviceCount: both mean "no device", not a broken installation.
  hipError_t init = api.hipInit(0);
  int count = 0;
  hipError_t counted = api.hipGetDeviceCount(&count);
  if (counted == hipErrorNoDevice || (counted == hipSuccess && count <= 0)) {
    info.reason = "no HIP device (" + call_failure(api, counted == hipSuccess ? hipErrorNoDevice : counted, "hipGetDeviceCount");
    if (init != hipSuccess) info.reason += "; " + call_failure(api, init, "hipInit");
    info.reason += ")";
    return runtime;
  }
  if (init != hipSuccess) {
    info.reason = call_failure(api, init, "hipInit");
    return runtime;
  }
  if (counted != hipSuccess) {
    info.reason = call_failure(api, counted, "hipGetDeviceCount");
    return runtime;
  }
  info.device_count = count;
  hipDevice_t device = 0;
  char name[256] = {};
  if (api.hipDeviceGet(&device, 0) == hipSuccess && api.hipDeviceGetName(name, sizeof name - 1, device) == hipSuccess)
    info.device_name = name;
  info.available = true;
  if (!runtime.hiprtc_available) info.reason = "notes: " + runtime.hiprtc_reason;
  return runtime;
}

}  // namespace

const HipRuntime& hip_runtime() {
  static const HipRuntime runtime = load();
  return runtime;
}

Status hip_status(const HipApi& api, hipError_t error, const char* call) {
  Status status = native_status(hip_naming(), error, call);
  if (!keeps_table_name(status.code) && api.hipGetErrorName != nullptr) {
    const char* name = api.hipGetErrorName(error);
    // ROCm answers "hipErrorUnknown" for codes it does not know; lifecore's table is better then.
    if (name != nullptr && name[0] != '\0' && (std::string_view(name) != "hipErrorUnknown" || error == hip_native(Code::unknown)))
      status.name = name;
  }
  if (api.hipGetErrorString != nullptr) {
    const char* text = api.hipGetErrorString(error);
    // Some ROCm releases answer with the name again; the description table says more then.
    if (text != nullptr && text[0] != '\0' && std::string_view(text) != "unknown error" && status.name != text)
      status.message = text;
  }
  return status;
}

Status hip_local_status(Code code, const char* call, std::string message) {
  return local_status(hip_naming(), code, call, std::move(message));
}

}  // namespace lifecore::driver::hip
