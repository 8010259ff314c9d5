#include "lifecore/driver/builtin_kernels.hpp"

namespace lifecore::driver {

const std::vector<BuiltinKernel>& builtin_kernels() {
  static const std::vector<BuiltinKernel> kernels{
      {"axpy_f32", {ArgKind::u32, ArgKind::f32, ArgKind::pointer, ArgKind::pointer}, {"n", "a", "x", "y"},
       "y[i] = a * x[i] + y[i]", 1u << 2},
      {"scale_f32", {ArgKind::u32, ArgKind::f32, ArgKind::pointer, ArgKind::pointer}, {"n", "a", "x", "out"},
       "out[i] = a * x[i]", 1u << 2},
      {"add_f32", {ArgKind::u32, ArgKind::pointer, ArgKind::pointer, ArgKind::pointer}, {"n", "x", "y", "out"},
       "out[i] = x[i] + y[i]", (1u << 1) | (1u << 2)},
      {"axpy_info_f32", {ArgKind::pointer, ArgKind::pointer, ArgKind::pointer}, {"info", "x", "y"},
       "y[i] = a * x[i] + y[i], with n = info[0] and a = bit_cast<float>(info[1]) read from a metadata buffer",
       1u << 1, -1, 4, 2},  // info comes from the info cache, never from the caller: n, then a's bits
  };
  return kernels;
}

const BuiltinKernel* find_builtin_kernel(std::string_view name) {
  for (const auto& kernel : builtin_kernels())
    if (kernel.name == name) return &kernel;
  return nullptr;
}

}  // namespace lifecore::driver
