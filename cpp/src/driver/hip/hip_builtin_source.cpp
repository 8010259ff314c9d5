#include "driver/hip/hip_builtin_source.hpp"

namespace lifecore::driver::hip {

std::string_view builtin_source() {
  return R"HIP(
extern "C" __global__ void axpy_f32(unsigned int n, float a, const float* x, float* y) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void scale_f32(unsigned int n, float a, const float* x, float* out) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i];
}

extern "C" __global__ void add_f32(unsigned int n, const float* x, const float* y, float* out) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
}

extern "C" __global__ void axpy_info_f32(const unsigned int* info, const float* x, float* y) {
  unsigned int n = info[0];
  float a = __builtin_bit_cast(float, info[1]);
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)HIP";
}

}  // namespace lifecore::driver::hip
