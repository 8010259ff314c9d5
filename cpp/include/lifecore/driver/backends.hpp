// Which backends exist, whether each can start here, and opening one device of one; both
// read the backend registry (registry.hpp), so nothing here names a backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lifecore/driver/driver.hpp"

namespace lifecore::driver {

// Each registered backend's probe, in the registry's order, with its interop facts.
std::vector<BackendInfo> list_backends();
// A registered backend's name, or "auto": the available backend of the highest priority.
std::shared_ptr<Driver> open_driver(const std::string& backend, int ordinal);

}  // namespace lifecore::driver
