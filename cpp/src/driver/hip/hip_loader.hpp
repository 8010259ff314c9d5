// The HIP runtime (and hiprtc, when present), loaded once per process: the libraries, the
// resolved entry points, and whether the backend can start here (with the reason).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "lifecore/driver/driver.hpp"
#include "driver/hip/hip_abi.hpp"
#include "driver/hip/hip_status.hpp"
#include "driver/hip/hip_symbols.hpp"

namespace lifecore::driver::hip {

struct HipApi {
#define LIFECORE_HIP_MEMBER(member, required) hip_abi::PFN_##member member = nullptr;
  LIFECORE_HIP_SYMBOLS(LIFECORE_HIP_MEMBER)
#undef LIFECORE_HIP_MEMBER
};

struct HiprtcApi {
#define LIFECORE_HIPRTC_MEMBER(member) hip_abi::PFN_##member member = nullptr;
  LIFECORE_HIPRTC_SYMBOLS(LIFECORE_HIPRTC_MEMBER)
#undef LIFECORE_HIPRTC_MEMBER
};

struct HipRuntime {
  BackendInfo info;  // what the backend's probe reports
  HipApi api;        // valid when info.available
  // Every entry of the symbol table and whether it resolved (introspection and tests).
  std::vector<std::pair<std::string, bool>> symbols;
  bool resolved_through_get_proc_address = false;
  bool hiprtc_available = false;
  std::string hiprtc_reason;  // why the built-in kernels cannot be compiled, when they cannot
  std::string hiprtc_library;
  HiprtcApi hiprtc;
};

// Loads and initialises the runtime at the first call; cached, thread-safe, never throws.
const HipRuntime& hip_runtime();

// A native code as a vendor Status with HIP's names (the capture errors keep theirs).
Status hip_status(const HipApi& api, hip_abi::hipError_t error, const char* call);
// A Status produced by lifecore itself (not by the runtime), named the HIP way.
Status hip_local_status(Code code, const char* call, std::string message);

}  // namespace lifecore::driver::hip
