// The native objects one Driver owns, keyed by the native pointer's value (which is also
// the neutral handle, so interop gets the real native stream). A handle this driver did not
// create, or already destroyed, is refused with a Status before any native call sees it:
// a stale or foreign handle is bad input, never a crash.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "lifecore/driver/status.hpp"

namespace lifecore::driver {

template <class Native, class Handle>
class HandleRegistry {
 public:
  // `naming` reports the refusal the backend's way.
  HandleRegistry(const char* what, const StatusNaming& naming) : what_(what), naming_(naming) {}

  // Registers `native` and returns its neutral handle. An owner's handle (the module a kernel
  // function comes from) lets remove_owned_by forget it together with its owner.
  template <class Owner = std::uintptr_t>
  Handle adopt(Native native, Owner owner = {}) {
    std::lock_guard lock(mutex_);
    live_[key(native)] = static_cast<std::uintptr_t>(owner);
    return static_cast<Handle>(key(native));
  }
  // Ok and *out set when `handle` is live; else invalid_handle naming the call.
  Status find(Handle handle, const char* call, Native* out) const {
    if (!contains(handle)) {
      return local_status(naming_, Code::invalid_handle, call,
                          std::string("not a live ") + what_ + " of this device (destroyed, or from another device)");
    }
    *out = reinterpret_cast<Native>(static_cast<std::uintptr_t>(handle));
    return Status::success();
  }
  bool contains(Handle handle) const {
    std::lock_guard lock(mutex_);
    return static_cast<std::uintptr_t>(handle) != 0 && live_.count(static_cast<std::uintptr_t>(handle)) != 0;
  }
  void remove(Handle handle) {
    std::lock_guard lock(mutex_);
    live_.erase(static_cast<std::uintptr_t>(handle));
  }
  template <class Owner>
  void remove_owned_by(Owner owner) {
    std::lock_guard lock(mutex_);
    std::erase_if(live_, [&](const auto& entry) { return entry.second == static_cast<std::uintptr_t>(owner); });
  }
  std::vector<Native> take_all() {
    std::lock_guard lock(mutex_);
    std::vector<Native> all;
    for (const auto& entry : live_) all.push_back(reinterpret_cast<Native>(entry.first));
    live_.clear();
    return all;
  }

 private:
  static std::uintptr_t key(Native native) { return reinterpret_cast<std::uintptr_t>(native); }

  const char* what_;
  const StatusNaming& naming_;
  mutable std::mutex mutex_;
  std::unordered_map<std::uintptr_t, std::uintptr_t> live_;  // handle -> its owner's handle (0: none)
};

}  // namespace lifecore::driver
