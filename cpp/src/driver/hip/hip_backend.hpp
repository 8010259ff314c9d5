// The HIP backend's registry entry.
#pragma once

#include <memory>

#include "lifecore/driver/registry.hpp"

namespace lifecore::driver {

const BackendDescriptor& hip_backend();

namespace hip {
// One device of the HIP runtime (hip_driver.cpp).
std::shared_ptr<Driver> open_hip(int ordinal);
}  // namespace hip

}  // namespace lifecore::driver
