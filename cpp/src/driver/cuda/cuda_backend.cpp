// The CUDA backend as the registry sees it.
#include "driver/cuda/cuda_backend.hpp"

#include "driver/cuda/cuda_loader.hpp"
#include "driver/cuda/cuda_status.hpp"

namespace lifecore::driver {

const BackendDescriptor& cuda_backend() {
  static const BackendDescriptor descriptor{
      .name = "cuda",
      .probe = [] { return cuda::cuda_runtime().info; },
      .open = cuda::open_cuda,
      .naming = cuda::cuda_naming(),
      .code_object_kinds = {ImageKind::builtin, ImageKind::ptx, ImageKind::cubin, ImageKind::fatbin},
      // An ELF file is a cubin; a fat binary starts with 0xBA55ED50, little-endian.
      .image_formats = {{ImageKind::cubin, std::string("\x7f" "ELF", 4)},
                        {ImageKind::fatbin, std::string("\x50\xED\x55\xBA", 4)}},
      .dlpack_device_type = dlpack_device::cuda,
      .cuda_array_interface = true,
      .torch_device = "cuda",
      .auto_priority = 30,
      .symbols = [] { return cuda::cuda_runtime().symbols; },
  };
  return descriptor;
}

}  // namespace lifecore::driver
