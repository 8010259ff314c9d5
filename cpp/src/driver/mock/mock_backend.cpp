// The mock backend's entry points: always available, two emulated devices.
#include "lifecore/driver/backends.hpp"
#include "driver/mock/mock_driver.hpp"

namespace lifecore::driver {

BackendInfo probe_mock() {
  BackendInfo info;
  info.name = "mock";
  info.available = true;
  info.reason = "an emulated device on host memory";
  info.driver_version = MockDriver::version;
  info.device_count = MockDriver::device_count;
  info.device_name = MockDriver::device_label;
  return info;
}

std::shared_ptr<Driver> open_mock(int ordinal) {
  if (ordinal < 0 || ordinal >= MockDriver::device_count)
    raise(ErrorKind::InvalidArgument, "mock: device ordinal " + std::to_string(ordinal) + " is out of range (the mock has " +
                                          std::to_string(MockDriver::device_count) + " devices)");
  return std::make_shared<MockDriver>(ordinal);
}

}  // namespace lifecore::driver
