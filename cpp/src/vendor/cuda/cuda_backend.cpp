// Placeholder until the cuda backend lands: always unavailable, never crashes.
#include "vendor/backends.hpp"

namespace lifecore::vendor {

BackendInfo probe_cuda() {
  BackendInfo info;
  info.name = "cuda";
  info.reason = "the cuda backend is not built into this version of lifecore";
  return info;
}

std::shared_ptr<Driver> open_cuda(int) { raise(ErrorKind::BackendUnavailable, "cuda: " + probe_cuda().reason); }

}  // namespace lifecore::vendor
