// Placeholder until the mock driver lands.
#include "vendor/backends.hpp"

namespace lifecore::vendor {

BackendInfo probe_mock() {
  BackendInfo info;
  info.name = "mock";
  info.reason = "the mock backend is not built yet";
  return info;
}

std::shared_ptr<Driver> open_mock(int) { raise(ErrorKind::BackendUnavailable, "mock: " + probe_mock().reason); }

}  // namespace lifecore::vendor
