#include "driver/hip/hip_status.hpp"

namespace lifecore::driver::hip {
namespace {

bool hip_sticky(int native) {
  switch (native) {
    case 700: case 702: case 710: case 719:
      return true;
    default:
      return false;
  }
}

}  // namespace

const StatusNaming& hip_naming() {
  static const StatusNaming naming{
      [](int native) { return code_in(hip_statuses, native); },
      [](Code code) { return hip_native(code); },
      [](int native) { return name_in(hip_statuses, native, "hipError"); },
      hip_sticky,
  };
  return naming;
}

}  // namespace lifecore::driver::hip
