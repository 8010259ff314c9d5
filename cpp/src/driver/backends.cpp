#include "lifecore/driver/backends.hpp"

namespace lifecore::driver {

std::vector<BackendInfo> list_backends() { return {probe_mock(), probe_cuda(), probe_hip()}; }

std::shared_ptr<Driver> open_driver(const std::string& backend, int ordinal) {
  if (ordinal < 0) raise(ErrorKind::InvalidArgument, "device ordinal must be >= 0, got " + std::to_string(ordinal));
  if (backend == "mock") return open_mock(ordinal);
  if (backend == "cuda") return open_cuda(ordinal);
  if (backend == "hip") return open_hip(ordinal);
  if (backend == "auto") {
    if (probe_cuda().available) return open_cuda(ordinal);
    if (probe_hip().available) return open_hip(ordinal);
    return open_mock(ordinal);
  }
  raise(ErrorKind::InvalidArgument,
        "unknown backend '" + backend + "': expected 'auto', 'mock', 'cuda' or 'hip'");
}

}  // namespace lifecore::driver
