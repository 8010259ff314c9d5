// The toy backend's registry entry, for tests only: everything a backend tells the registry,
// in one place. `lifecore::driver::register_backend(toy::describe_toy())` is the one line.
#pragma once

#include <memory>

#include "lifecore/driver/registry.hpp"
#include "toy_driver.hpp"
#include "toy_status.hpp"

namespace toy {

inline constexpr int device_count = 1;

inline drv::BackendInfo toy_probe() {
  drv::BackendInfo info;
  info.available = true;
  info.reason = "a test-only device on host memory";
  info.device_count = device_count;
  info.device_name = "toy device";
  return info;
}

inline std::shared_ptr<drv::Driver> toy_open(int ordinal) {
  if (ordinal < 0 || ordinal >= device_count)
    lifecore::raise(lifecore::ErrorKind::InvalidArgument, "toy: device ordinal " + std::to_string(ordinal) + " is out of range");
  return std::make_shared<ToyDriver>(drv::backend_descriptor(lifecore::test_support::emulated_backend()).open(ordinal));
}

inline drv::BackendDescriptor describe_toy() {
  return drv::BackendDescriptor{
      .name = "toy",
      .probe = toy_probe,
      .open = toy_open,
      .naming = toy_naming(),
      .code_object_kinds = {drv::ImageKind::builtin},
      .image_formats = {},
      .dlpack_device_type = drv::dlpack_device::cpu,
      .cuda_array_interface = false,
      .torch_device = "cpu",
      .auto_priority = 0,  // never preferred by "auto" over a real backend
      .symbols = {},
  };
}

// The toy's entry once it is registered.
inline const drv::BackendDescriptor& toy_descriptor() { return drv::backend_descriptor("toy"); }

}  // namespace toy
