// The built-in kernels every backend offers under the same names and parameters
// (mock: C++ functions; cuda: PTX; hip: hiprtc). One thread per element:
// i = blockIdx.x * blockDim.x + threadIdx.x, guarded by i < n.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "lifecore/driver/driver.hpp"

namespace lifecore::driver {

struct BuiltinKernel {
  std::string_view name;
  std::vector<ArgKind> params;
  std::vector<std::string_view> param_names;
  std::string_view summary;
  // Bit i: parameter i is a pointer the kernel only reads, which a caller may give a read-only
  // tensor ("const ptr"). axpy_info_f32's info is read only too, but never the caller's.
  std::uint32_t read_only = 0;
  // How many elements of `element_bytes` each pointer the caller gives must hold: the value of
  // parameter `count_param`, or with `count_param` < 0 the first info word (axpy_info_f32's n).
  // A launch checks every caller's pointer against it before anything is issued.
  int count_param = 0;
  std::uint32_t element_bytes = 4;
  // The info words the kernel reads (axpy_info_f32: n, then the bits of a); fewer would read
  // past its metadata buffer.
  std::uint32_t info_words = 0;
  // The type of the elements the caller's pointers hold, as DLPack names it: a tensor of another
  // type passed for one would be read as this one, so a launch refuses it.
  std::string_view element_type = "float32";
};

// axpy_f32(n: u32, a: f32, x: const f32*, y: f32*)           y[i] = a * x[i] + y[i]
// scale_f32(n: u32, a: f32, x: const f32*, out: f32*)        out[i] = a * x[i]
// add_f32(n: u32, x: const f32*, y: const f32*, out: f32*)   out[i] = x[i] + y[i]
// axpy_info_f32(info: u32*, x: const f32*, y: f32*)          like axpy_f32 with n = info[0], a = bits of info[1]
//   (the metadata words come from the runtime's info cache: Stream.launch(..., info=[...]))
const std::vector<BuiltinKernel>& builtin_kernels();
const BuiltinKernel* find_builtin_kernel(std::string_view name);

}  // namespace lifecore::driver
