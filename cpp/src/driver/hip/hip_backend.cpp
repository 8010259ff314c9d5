// The HIP backend as the registry sees it.
#include "driver/hip/hip_backend.hpp"

#include "driver/hip/hip_loader.hpp"
#include "driver/hip/hip_status.hpp"

namespace lifecore::driver {

const BackendDescriptor& hip_backend() {
  static const BackendDescriptor descriptor{
      .name = "hip",
      .probe = [] { return hip::hip_runtime().info; },
      .open = hip::open_hip,
      .naming = hip::hip_naming(),
      .code_object_kinds = {ImageKind::builtin, ImageKind::code_object, ImageKind::fatbin},
      // An ELF file is a code object; HIP's fat binaries are clang offload bundles.
      .image_formats = {{ImageKind::code_object, std::string("\x7f" "ELF", 4)},
                        {ImageKind::fatbin, "__CLANG_OFFLOAD_BUNDLE__"}},
      .dlpack_device_type = dlpack_device::rocm,
      .cuda_array_interface = false,
      .torch_device = "cuda",  // torch's HIP builds name the GPU "cuda"
      .auto_priority = 20,
      .symbols = [] { return hip::hip_runtime().symbols; },
  };
  return descriptor;
}

}  // namespace lifecore::driver
