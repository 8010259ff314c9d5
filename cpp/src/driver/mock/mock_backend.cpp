// The mock backend as the registry sees it: always available, two emulated devices on host
// memory behind fake device addresses.
#include "driver/mock/mock_driver.hpp"
#include "driver/mock/mock_status.hpp"
#include "lifecore/driver/registry.hpp"

namespace lifecore::driver {
namespace {

BackendInfo probe_mock() {
  BackendInfo info;
  info.available = true;
  info.reason = "an emulated device on host memory";
  info.driver_version = MockDriver::version;
  info.device_count = MockDriver::device_count;
  info.device_name = MockDriver::device_label;
  return info;
}

std::shared_ptr<Driver> open_mock(int ordinal) {
  if (ordinal < 0 || ordinal >= MockDriver::device_count)
    raise(ErrorKind::InvalidArgument, "device ordinal " + std::to_string(ordinal) + " is out of range (the mock has " +
                                          std::to_string(MockDriver::device_count) + " devices: 0 to " +
                                          std::to_string(MockDriver::device_count - 1) + ")");
  return std::make_shared<MockDriver>(ordinal);
}

}  // namespace

const BackendDescriptor& mock_backend() {
  static const BackendDescriptor descriptor{
      .name = "mock",
      .emulated = true,
      .probe = probe_mock,
      .open = open_mock,
      .naming = mock::mock_naming(),
      .code_object_kinds = {ImageKind::builtin},
      // It tells CUDA's binaries apart as that driver does (an ELF file is a cubin; a fat
      // binary starts with 0xBA55ED50, little-endian), and refuses them as it loads them.
      .image_formats = {{ImageKind::cubin, std::string("\x7f" "ELF", 4)},
                        {ImageKind::fatbin, std::string("\x50\xED\x55\xBA", 4)}},
      .dlpack_device_type = dlpack_device::cpu,
      .cuda_array_interface = false,
      .torch_device = "cpu",
      .auto_priority = 10,
      .symbols = {},
  };
  return descriptor;
}

}  // namespace lifecore::driver
