// The CUDA driver, loaded once per process: the library, its resolved entry points, and
// whether the backend can start here (with the exact reason when it cannot).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "driver/cuda/cuda_abi.hpp"
#include "driver/cuda/cuda_status.hpp"
#include "driver/cuda/cuda_symbols.hpp"
#include "lifecore/driver/driver.hpp"

namespace lifecore::driver::cuda {

struct CudaApi {
#define LIFECORE_CUDA_MEMBER(member, name, version, versioned, required) \
  cuda_abi::PFN_##member member = nullptr;
  LIFECORE_CUDA_SYMBOLS(LIFECORE_CUDA_MEMBER)
#undef LIFECORE_CUDA_MEMBER
};

struct CudaRuntime {
  BackendInfo info;   // what the backend's probe reports
  CudaApi api;        // valid when info.available
  // Every entry of the symbol table and whether it resolved (introspection and tests).
  std::vector<std::pair<std::string, bool>> symbols;
};

// Loads and initialises the driver at the first call; cached, thread-safe, never throws.
const CudaRuntime& cuda_runtime();

// A native result as a vendor Status: the driver's own name and description when it knows
// the code, else lifecore's table.
Status cuda_status(const CudaApi& api, cuda_abi::CUresult result, const char* call);

}  // namespace lifecore::driver::cuda
