// The CUDA backend's registry entry.
#pragma once

#include <memory>

#include "lifecore/driver/registry.hpp"

namespace lifecore::driver {

const BackendDescriptor& cuda_backend();

namespace cuda {
// One device of the CUDA driver (cuda_driver.cpp).
std::shared_ptr<Driver> open_cuda(int ordinal);
}  // namespace cuda

}  // namespace lifecore::driver
