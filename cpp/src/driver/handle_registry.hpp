// The native objects one Driver owns, keyed by the native pointer's value (which is also
// the neutral handle, so interop gets the real CUstream / hipStream_t). A handle this
// driver did not create, or already destroyed, is refused with a Status before any
// native call sees it: a stale or foreign handle is bad input, never a crash.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "lifecore/driver/status.hpp"

namespace lifecore::driver {

template <class Native>
class HandleRegistry {
 public:
  // `naming` reports the refusal the backend's way.
  HandleRegistry(const char* what, const StatusNaming& naming) : what_(what), naming_(naming) {}

  void add(Native native) {
    std::lock_guard lock(mutex_);
    live_.insert(reinterpret_cast<std::uintptr_t>(native));
  }
  // Ok and *out set when `handle` is live; else invalid_handle naming the call.
  Status find(std::uintptr_t handle, const char* call, Native* out) const {
    std::lock_guard lock(mutex_);
    if (handle == 0 || live_.count(handle) == 0) {
      return local_status(naming_, Code::invalid_handle, call,
                          std::string("not a live ") + what_ + " of this device (destroyed, or from another device)");
    }
    *out = reinterpret_cast<Native>(handle);
    return Status::success();
  }
  void remove(Native native) {
    std::lock_guard lock(mutex_);
    live_.erase(reinterpret_cast<std::uintptr_t>(native));
  }
  std::vector<Native> take_all() {
    std::lock_guard lock(mutex_);
    std::vector<Native> all;
    for (auto handle : live_) all.push_back(reinterpret_cast<Native>(handle));
    live_.clear();
    return all;
  }

 private:
  const char* what_;
  const StatusNaming& naming_;
  mutable std::mutex mutex_;
  std::unordered_set<std::uintptr_t> live_;
};

}  // namespace lifecore::driver
