// The built-in kernels (builtin_kernels.hpp) as PTX text for the CUDA driver's JIT.
#pragma once

#include <string_view>

namespace lifecore::driver::cuda {

// PTX ISA 7.0 for sm_52: every driver lifecore accepts (12.0+) JITs it for its devices.
// Multiplies and adds use .rn without fusing, so results match the mock bit for bit.
std::string_view builtin_ptx();

}  // namespace lifecore::driver::cuda
