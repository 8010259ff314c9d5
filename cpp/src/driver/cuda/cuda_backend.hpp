// The CUDA backend's registry entry and what it is made of.
#pragma once

#include <memory>
#include <vector>

#include "lifecore/driver/registry.hpp"

namespace lifecore::driver {

const BackendDescriptor& cuda_backend();

namespace cuda {
// One device of the CUDA driver (cuda_driver.cpp).
std::shared_ptr<Driver> open_cuda(int ordinal);
// How CUDA's binaries are told apart: an ELF file is a cubin; a fat binary has its own magic.
// The mock recognises the same (it speaks CUDA's language).
const std::vector<ImageFormat>& cuda_image_formats();
}  // namespace cuda

}  // namespace lifecore::driver
