// The built-in kernels (builtin_kernels.hpp) as HIP C++ source, compiled by hiprtc at first use.
#pragma once

#include <string_view>

namespace lifecore::driver::hip {

std::string_view builtin_source();
// Options for hiprtc: no contraction of a * x + y into an FMA, so results match the mock.
inline constexpr const char* builtin_compile_options[] = {"-O3", "-ffp-contract=off"};

}  // namespace lifecore::driver::hip
