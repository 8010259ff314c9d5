// How the CUDA backend's registry entry opens a device; the entry itself, cuda_backend(), is
// declared with the other built-in backends.
#pragma once

#include <memory>

#include "driver/registered_backends.hpp"

namespace lifecore::driver::cuda {

// One device of the CUDA driver (cuda_driver.cpp).
std::shared_ptr<Driver> open_cuda(int ordinal);

}  // namespace lifecore::driver::cuda
