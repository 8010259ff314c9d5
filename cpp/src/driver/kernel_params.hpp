// A kernel launch's parameter array as the native launch calls take it (void** kernelParams).
// Each argument lives in its own 8-byte slot; the driver copies the parameter's size from the
// slot's start, which on a little-endian host is the value itself.
#pragma once

#include <cstdint>
#include <vector>

#include "lifecore/driver/driver.hpp"

namespace lifecore::driver {

class KernelParams {
 public:
  explicit KernelParams(const std::vector<KernelArg>& args) : slots_(args.size()), pointers_(args.size()) {
    for (std::size_t i = 0; i < args.size(); ++i) {
      slots_[i] = args[i].bits;
      pointers_[i] = &slots_[i];
    }
  }
  KernelParams(const KernelParams&) = delete;
  KernelParams& operator=(const KernelParams&) = delete;

  // nullptr for a kernel without parameters.
  void** data() { return pointers_.empty() ? nullptr : pointers_.data(); }

 private:
  std::vector<std::uint64_t> slots_;
  std::vector<void*> pointers_;
};

}  // namespace lifecore::driver
