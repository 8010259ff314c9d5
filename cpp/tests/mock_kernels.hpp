// The built-in kernels as the mock-driver test programs use them: looking one up, and the
// launch arguments they take.
#pragma once

#include <bit>
#include <cstdint>
#include <string>

#include "test_support.hpp"
#include "vendor/mock/mock_driver.hpp"

namespace lifecore::test_support {

inline vendor::KernelArg u32(std::uint32_t v) { return {vendor::ArgKind::u32, v}; }
inline vendor::KernelArg f32(float v) { return {vendor::ArgKind::f32, std::bit_cast<std::uint32_t>(v)}; }
inline vendor::KernelArg ptr(vendor::DevicePtr p) { return {vendor::ArgKind::pointer, p}; }

inline vendor::FunctionHandle get_kernel(vendor::MockDriver& d, const std::string& name) {
  vendor::ModuleHandle module{};
  CHECK_OK(d.module_load(vendor::ModuleImage{}, &module));
  vendor::FunctionHandle f{};
  CHECK_OK(d.module_get_function(module, name, &f));
  return f;
}

}  // namespace lifecore::test_support
