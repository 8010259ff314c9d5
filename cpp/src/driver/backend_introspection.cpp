#include "driver/backend_introspection.hpp"

#include "lifecore/error.hpp"
#include "driver/cuda/cuda_loader.hpp"
#include "driver/hip/hip_loader.hpp"

namespace lifecore::driver {

std::vector<std::pair<std::string, bool>> backend_symbols(const std::string& backend) {
  if (backend == "cuda") return cuda::cuda_runtime().symbols;
  if (backend == "hip") return hip::hip_runtime().symbols;
  raise(ErrorKind::InvalidArgument, "backend_symbols: expected 'cuda' or 'hip', got '" + backend + "'");
}

}  // namespace lifecore::driver
