// The device memory one Driver allocated and has not freed. Freeing an address that is not
// the start of a live allocation of this driver is refused with a Status before the native
// free sees it (a double or foreign free is bad input, never heap corruption).
#pragma once

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "lifecore/driver/driver.hpp"

namespace lifecore::driver {

class AllocationRegistry {
 public:
  // `naming` reports the refusal the backend's way.
  explicit AllocationRegistry(const StatusNaming& naming) : naming_(naming) {}

  // Registers a fresh allocation and returns its address.
  DevicePtr adopt(DevicePtr pointer) {
    std::lock_guard lock(mutex_);
    live_.push_back(pointer);
    return pointer;
  }
  // Ok and forgotten when `pointer` is live; else invalid_value naming the call. A caller whose
  // native free then fails adopts the pointer again.
  Status forget(DevicePtr pointer, const char* call) {
    std::lock_guard lock(mutex_);
    auto it = std::find(live_.begin(), live_.end(), pointer);
    if (it == live_.end()) return local_status(naming_, Code::invalid_value, call, "not a live allocation of this device");
    *it = live_.back();
    live_.pop_back();
    return Status::success();
  }
  std::vector<DevicePtr> take_all() {
    std::lock_guard lock(mutex_);
    return std::exchange(live_, {});
  }

 private:
  const StatusNaming& naming_;
  std::mutex mutex_;
  std::vector<DevicePtr> live_;
};

}  // namespace lifecore::driver
