// The extents a built-in kernel's pointers must have. A built-in reads or writes element i of
// each pointer it is given for i = blockIdx.x * blockDim.x + threadIdx.x below n: min(n,
// grid.x * block.x) elements (y and z repeat the same indices); a Buffer or tensor smaller than that would be an illegal
// address on a device (a sticky error: the context is lost) or a silent write past the buffer
// into its neighbours in the pool. So a launch refuses it before anything is issued.
#pragma once

#include <cstddef>

#include "lifecore/runtime/info_cache.hpp"
#include "lifecore/runtime/kernel.hpp"

namespace lifecore::runtime {

// InvalidArgumentError for fewer info words than the kernel reads, naming the first tensor
// whose element type is not the kernel's, or naming the first pointer argument (args[i] is
// parameter i + offset, offset 1 when info words fill parameter 0) that holds fewer bytes
// than the elements the launch covers. Does nothing for a user kernel,
// and leaves an n that is not a u32 to the launch's own checks.
void check_builtin_extents(const Kernel& kernel, driver::Dim3 grid, driver::Dim3 block, const LaunchArg* args,
                           std::size_t count, const InfoWords* info, std::size_t offset);

}  // namespace lifecore::runtime
