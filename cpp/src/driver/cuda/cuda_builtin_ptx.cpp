#include "driver/cuda/cuda_builtin_ptx.hpp"

namespace lifecore::driver::cuda {
namespace {

// Hand-written rather than generated, so the build needs no CUDA compiler. Each kernel
// computes i = ctaid.x * ntid.x + tid.x and returns when i >= n.
constexpr std::string_view ptx = R"PTX(
.version 7.0
.target sm_52
.address_size 64

.visible .entry axpy_f32(.param .u32 n, .param .f32 a, .param .u64 x, .param .u64 y)
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .reg .f32 %f<6>;
  .reg .b64 %rd<8>;
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.u32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra axpy_done;
  ld.param.f32 %f1, [a];
  ld.param.u64 %rd1, [x];
  ld.param.u64 %rd2, [y];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd1, %rd3;
  add.s64 %rd5, %rd2, %rd3;
  ld.global.f32 %f2, [%rd4];
  ld.global.f32 %f3, [%rd5];
  mul.rn.f32 %f4, %f1, %f2;
  add.rn.f32 %f5, %f4, %f3;
  st.global.f32 [%rd5], %f5;
axpy_done:
  ret;
}

.visible .entry scale_f32(.param .u32 n, .param .f32 a, .param .u64 x, .param .u64 out)
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<8>;
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.u32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra scale_done;
  ld.param.f32 %f1, [a];
  ld.param.u64 %rd1, [x];
  ld.param.u64 %rd2, [out];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd1, %rd3;
  add.s64 %rd5, %rd2, %rd3;
  ld.global.f32 %f2, [%rd4];
  mul.rn.f32 %f3, %f1, %f2;
  st.global.f32 [%rd5], %f3;
scale_done:
  ret;
}

.visible .entry add_f32(.param .u32 n, .param .u64 x, .param .u64 y, .param .u64 out)
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<10>;
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.u32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra add_done;
  ld.param.u64 %rd1, [x];
  ld.param.u64 %rd2, [y];
  ld.param.u64 %rd3, [out];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  cvta.to.global.u64 %rd3, %rd3;
  mul.wide.u32 %rd4, %r5, 4;
  add.s64 %rd5, %rd1, %rd4;
  add.s64 %rd6, %rd2, %rd4;
  add.s64 %rd7, %rd3, %rd4;
  ld.global.f32 %f1, [%rd5];
  ld.global.f32 %f2, [%rd6];
  add.rn.f32 %f3, %f1, %f2;
  st.global.f32 [%rd7], %f3;
add_done:
  ret;
}

.visible .entry axpy_info_f32(.param .u64 info, .param .u64 x, .param .u64 y)
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .reg .f32 %f<6>;
  .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [info];
  cvta.to.global.u64 %rd1, %rd1;
  ld.global.u32 %r1, [%rd1];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.u32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra axpy_info_done;
  ld.global.f32 %f1, [%rd1+4];
  ld.param.u64 %rd2, [x];
  ld.param.u64 %rd3, [y];
  cvta.to.global.u64 %rd2, %rd2;
  cvta.to.global.u64 %rd3, %rd3;
  mul.wide.u32 %rd4, %r5, 4;
  add.s64 %rd5, %rd2, %rd4;
  add.s64 %rd6, %rd3, %rd4;
  ld.global.f32 %f2, [%rd5];
  ld.global.f32 %f3, [%rd6];
  mul.rn.f32 %f4, %f1, %f2;
  add.rn.f32 %f5, %f4, %f3;
  st.global.f32 [%rd6], %f5;
axpy_info_done:
  ret;
}
)PTX";

}  // namespace

std::string_view builtin_ptx() { return ptx; }

}  // namespace lifecore::driver::cuda
