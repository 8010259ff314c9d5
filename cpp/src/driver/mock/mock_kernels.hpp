// The built-in kernels as C++ loops over one "thread" per element: i < n and
// i < grid.x * block.x, as the PTX versions guard them. Every pointer range a kernel touches
// is checked against the live allocations before it runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lifecore/driver/builtin_kernels.hpp"
#include "driver/mock/mock_address_space.hpp"
#include "driver/mock/mock_status.hpp"

namespace lifecore::driver::mock {

// Where a piece of device work runs: the memory, the call to name in a failed Status, and
// the code of a refused access (illegal_address on a stream, invalid_value when synchronous).
struct ExecContext {
  AddressSpace& memory;
  const std::string& call;
  Code access_error;
};

// Runs the kernel body for `threads` threads (grid.x * block.x) with already-validated args.
using KernelBody = Status (*)(const std::vector<KernelArg>& args, std::uint64_t threads, const ExecContext& context);

struct MockKernel {
  const BuiltinKernel* signature;
  KernelBody body;
};

const MockKernel* find_mock_kernel(std::string_view name);
// "axpy_f32, scale_f32, ..." for messages.
std::string mock_kernel_names();

}  // namespace lifecore::driver::mock
