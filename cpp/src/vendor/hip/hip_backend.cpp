// Placeholder until the hip backend lands: always unavailable, never crashes.
#include "vendor/backends.hpp"

namespace lifecore::vendor {

BackendInfo probe_hip() {
  BackendInfo info;
  info.name = "hip";
  info.reason = "the hip backend is not built into this version of lifecore";
  return info;
}

std::shared_ptr<Driver> open_hip(int) { raise(ErrorKind::BackendUnavailable, "hip: " + probe_hip().reason); }

}  // namespace lifecore::vendor
