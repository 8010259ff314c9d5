#include "driver/cuda/cuda_status.hpp"

#include <utility>

namespace lifecore::driver::cuda {
namespace {

bool cuda_sticky(int native) {
  switch (native) {
    case 700: case 702: case 710: case 714: case 715: case 716: case 717: case 718: case 719: case 911:
      return true;
    default:
      return false;
  }
}

}  // namespace

const StatusNaming& cuda_naming() {
  static const StatusNaming naming{
      [](int native) { return code_in(cuda_statuses, native); },
      [](Code code) { return cuda_native(code); },
      [](int native) { return name_in(cuda_statuses, native, "CUDA_ERROR_"); },
      cuda_sticky,
  };
  return naming;
}

Status cuda_local_status(Code code, const char* call, std::string message) {
  return local_status(cuda_naming(), code, call, std::move(message));
}

}  // namespace lifecore::driver::cuda
