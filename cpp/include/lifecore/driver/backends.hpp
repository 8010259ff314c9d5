// Which backends exist, whether each can start here, and opening one device of one.
// Each backend folder defines its probe_* and open_* pair; nothing else names a backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lifecore/driver/driver.hpp"

namespace lifecore::driver {

BackendInfo probe_mock();
BackendInfo probe_cuda();
BackendInfo probe_hip();

// Each throws lifecore::Error(ErrorKind::BackendUnavailable, reason) when it cannot start,
// and ErrorKind::InvalidArgument for an ordinal out of range.
std::shared_ptr<Driver> open_mock(int ordinal);
std::shared_ptr<Driver> open_cuda(int ordinal);
std::shared_ptr<Driver> open_hip(int ordinal);

// mock, cuda, hip, in that order.
std::vector<BackendInfo> list_backends();
// "mock" | "cuda" | "hip" | "auto" (cuda, then hip, then mock).
std::shared_ptr<Driver> open_driver(const std::string& backend, int ordinal);

}  // namespace lifecore::driver
