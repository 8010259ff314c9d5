// What a backend that loads a driver library checks before it opens a device: that the
// library loaded and started, and that the ordinal names one of its devices.
#pragma once

#include <string>

#include "lifecore/driver/driver.hpp"
#include "lifecore/error.hpp"

namespace lifecore::driver {

// Throws BackendUnavailable with the probe's reason, or InvalidArgument for an ordinal out of range.
inline void check_can_open(const BackendInfo& info, int ordinal) {
  if (!info.available) raise(ErrorKind::BackendUnavailable, info.name + ": " + info.reason);
  if (ordinal < 0 || ordinal >= info.device_count)
    raise(ErrorKind::InvalidArgument, info.name + " device ordinal " + std::to_string(ordinal) + " is out of range: " +
                                          std::to_string(info.device_count) + " device(s)");
}

}  // namespace lifecore::driver
