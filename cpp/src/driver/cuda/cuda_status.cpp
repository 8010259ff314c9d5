#include "driver/cuda/cuda_status.hpp"

#include <utility>

namespace lifecore::driver::cuda {
namespace {

// "Any further work returns the same error" (226 contained, 721 tensor memory leak) or "the
// process must be terminated and relaunched" (810 MPS client terminated), as cuda.h says.
constexpr std::array cuda_sticky{226, 700, 702, 710, 714, 715, 716, 717, 718, 719, 721, 810, 911};
constexpr NativeStatusTable cuda_table{cuda_statuses, "CUDA_ERROR_", cuda_sticky};

}  // namespace

const StatusNaming& cuda_naming() { return table_naming<cuda_table>(); }

Status cuda_local_status(Code code, const char* call, std::string message) {
  return local_status(cuda_naming(), code, call, std::move(message));
}

}  // namespace lifecore::driver::cuda
