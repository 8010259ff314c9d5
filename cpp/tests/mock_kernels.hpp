// The built-in kernels as the mock-driver test programs use them: looking one up, and the
// launch arguments they take.
#pragma once

#include <bit>
#include <cstdint>
#include <string>

#include "test_support.hpp"
#include "driver/mock/mock_driver.hpp"

namespace lifecore::test_support {

inline driver::KernelArg u32(std::uint32_t v) { return {driver::ArgKind::u32, v}; }
inline driver::KernelArg f32(float v) { return {driver::ArgKind::f32, std::bit_cast<std::uint32_t>(v)}; }
inline driver::KernelArg ptr(driver::DevicePtr p) { return {driver::ArgKind::pointer, p}; }

inline driver::FunctionHandle get_kernel(driver::MockDriver& d, const std::string& name) {
  driver::ModuleHandle module{};
  CHECK_OK(d.module_load(driver::ModuleImage{}, &module));
  driver::FunctionHandle f{};
  CHECK_OK(d.module_get_function(module, name, &f));
  return f;
}

}  // namespace lifecore::test_support
