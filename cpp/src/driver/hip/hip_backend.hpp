// How the HIP backend's registry entry opens a device; the entry itself, hip_backend(), is
// declared with the other built-in backends.
#pragma once

#include <memory>

#include "driver/registered_backends.hpp"

namespace lifecore::driver::hip {

// One device of the HIP runtime (hip_driver.cpp).
std::shared_ptr<Driver> open_hip(int ordinal);

}  // namespace lifecore::driver::hip
