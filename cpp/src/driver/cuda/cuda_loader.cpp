#include "driver/cuda/cuda_loader.hpp"

#include <cstdlib>

#include "lifecore/driver/backends.hpp"
#include "driver/dynamic_library.hpp"
#include "driver/symbol_table.hpp"

namespace lifecore::driver::cuda {
namespace {

using namespace cuda_abi;

// Driver 12.0 is the oldest with cuGetProcAddress_v2, cuGraphExecUpdate's result-info form
// and a PTX JIT for every ISA the built-in kernels use.
constexpr int minimum_driver_version = 12000;

std::string version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

void* resolve(const DynamicLibrary& library, PFN_cuGetProcAddress_v12000 get_proc_address, const char* name,
              int version, const char* versioned) {
  if (get_proc_address != nullptr) {
    void* pointer = nullptr;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (get_proc_address(name, &pointer, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found) == CUDA_SUCCESS &&
        found == CU_GET_PROC_ADDRESS_SUCCESS && pointer != nullptr)
      return pointer;
  }
  return library.symbol(versioned);
}

std::string call_failure(const CudaApi& api, CUresult result, const char* call) {
  return failure_text(cuda_status(api, result, call));
}

CudaRuntime load() {
  CudaRuntime runtime;
  BackendInfo& info = runtime.info;
  info.name = "cuda";

  std::string reason;
  DynamicLibrary library = DynamicLibrary::open("LIFECORE_LIBCUDA", {"libcuda.so.1", "libcuda.so"}, &reason);
  if (!library.loaded()) {
    info.reason = "no CUDA driver: " + reason;
    return runtime;
  }
  info.library = library.path();

  auto get_proc_address = reinterpret_cast<PFN_cuGetProcAddress_v12000>(library.symbol("cuGetProcAddress_v2"));
  CudaApi& api = runtime.api;
  SymbolTable table;
#define LIFECORE_CUDA_RESOLVE(member, name, version, versioned, required)                           \
  table.bind(api.member, resolve(library, get_proc_address, name, version, versioned), #member, required, \
             std::string(name) + " (version " + std::to_string(version) + ", or " + versioned + ")");
  LIFECORE_CUDA_SYMBOLS(LIFECORE_CUDA_RESOLVE)
#undef LIFECORE_CUDA_RESOLVE
  runtime.symbols = table.take_resolved();
  const std::string& missing = table.missing();

  if (api.cuDriverGetVersion == nullptr) {
    info.reason = info.library + " is not a usable CUDA driver: it lacks cuDriverGetVersion";
    return runtime;
  }
  int version = 0;
  if (CUresult result = api.cuDriverGetVersion(&version); result != CUDA_SUCCESS) {
    info.reason = "cuDriverGetVersion failed with code " + std::to_string(result);
    return runtime;
  }
  info.driver_version = version;
  if (version < minimum_driver_version) {
    info.reason = "the CUDA driver is too old: version " + version_text(version) + " (" + std::to_string(version) +
                  "), lifecore needs " + version_text(minimum_driver_version) + " or newer";
    return runtime;
  }
  if (get_proc_address == nullptr) {
    info.reason = info.library + " lacks cuGetProcAddress_v2 although it reports version " + version_text(version);
    return runtime;
  }
  if (!missing.empty()) {
    info.reason = "the CUDA driver lacks the required entry point " + missing;
    return runtime;
  }
  if (api.cuStreamGetCaptureInfo_v3 == nullptr && api.cuStreamGetCaptureInfo_v2 == nullptr) {
    info.reason = "the CUDA driver lacks the required entry point cuStreamGetCaptureInfo (version 12030 or 11030)";
    return runtime;
  }
  if (CUresult result = api.cuInit(0); result != CUDA_SUCCESS) {
    info.reason = result == CUDA_ERROR_NO_DEVICE ? "no CUDA device (" + call_failure(api, result, "cuInit") + ")"
                                                 : call_failure(api, result, "cuInit");
    return runtime;
  }
  int count = 0;
  if (CUresult result = api.cuDeviceGetCount(&count); result != CUDA_SUCCESS) {
    info.reason = result == CUDA_ERROR_NO_DEVICE ? "no CUDA device (" + call_failure(api, result, "cuDeviceGetCount") + ")"
                                                 : call_failure(api, result, "cuDeviceGetCount");
    return runtime;
  }
  info.device_count = count;
  if (count <= 0) {
    info.reason = "no CUDA device (cuDeviceGetCount reports 0)";
    return runtime;
  }
  CUdevice device = 0;
  char name[256] = {};
  if (api.cuDeviceGet(&device, 0) == CUDA_SUCCESS && api.cuDeviceGetName(name, sizeof name - 1, device) == CUDA_SUCCESS)
    info.device_name = name;
  info.available = true;
  std::string notes;
  if (api.cuFuncGetParamInfo == nullptr) notes = "no cuFuncGetParamInfo (kernel parameter sizes unchecked)";
  if (api.cuPointerGetAttribute == nullptr)
    notes += std::string(notes.empty() ? "" : "; ") +
             "no cuPointerGetAttribute (the device of a CUDA-array-interface tensor unchecked)";
  if (!notes.empty()) info.reason = "notes: " + notes;
  return runtime;
}

}  // namespace

const CudaRuntime& cuda_runtime() {
  // A function-local static: initialised once, thread-safe, and the failure paths above
  // never throw, so a broken driver is a reason, never a crash or an exception at import.
  static const CudaRuntime runtime = load();
  return runtime;
}

Status cuda_status(const CudaApi& api, CUresult result, const char* call) {
  Status status = native_status(cuda_naming(), result, call);
  const char* text = nullptr;
  if (!keeps_table_name(status.code) && api.cuGetErrorName != nullptr && api.cuGetErrorName(result, &text) == CUDA_SUCCESS &&
      text != nullptr)
    status.name = text;
  text = nullptr;
  if (api.cuGetErrorString != nullptr && api.cuGetErrorString(result, &text) == CUDA_SUCCESS && text != nullptr)
    status.message = text;
  return status;
}

}  // namespace lifecore::driver::cuda
