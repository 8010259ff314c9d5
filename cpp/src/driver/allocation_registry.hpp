// The device memory one Driver allocated and has not freed. Freeing an address that is not
// the start of a live allocation of this driver is refused with a Status before the native
// free sees it (a double or foreign free is bad input, never heap corruption). A free that
// fails leaves the allocation live without allocating.
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

  // Registers a fresh allocation and returns its address. A dying entry at the same address
  // was freed already (the driver gave the address out again): it becomes the new one.
  DevicePtr adopt(DevicePtr pointer) {
    std::lock_guard lock(mutex_);
    const auto it = std::find_if(live_.begin(), live_.end(), [&](const Entry& e) { return e.pointer == pointer; });
    if (it != live_.end()) it->dying = false;
    else live_.push_back(Entry{pointer, false});
    return pointer;
  }
  // Ok and marked dying when `pointer` is live (no other free reaches it); else invalid_value
  // naming the call. The caller's native free follows, then settle.
  Status begin_free(DevicePtr pointer, const char* call) {
    std::lock_guard lock(mutex_);
    const auto it = std::find_if(live_.begin(), live_.end(), [&](const Entry& e) { return e.pointer == pointer; });
    if (it == live_.end() || it->dying)
      return local_status(naming_, Code::invalid_value, call, "not a live allocation of this device");
    it->dying = true;
    return Status::success();
  }
  // Forgets a freed allocation, or makes it live again when its free failed; allocates nothing.
  void settle(DevicePtr pointer, bool freed) noexcept {
    std::lock_guard lock(mutex_);
    const auto it = std::find_if(live_.begin(), live_.end(), [&](const Entry& e) { return e.pointer == pointer; });
    if (it == live_.end() || !it->dying) return;  // adopted again since: a new allocation
    if (!freed) {
      it->dying = false;
      return;
    }
    *it = live_.back();
    live_.pop_back();
  }
  std::vector<DevicePtr> take_all() {
    std::lock_guard lock(mutex_);
    std::vector<DevicePtr> all;
    for (const Entry& e : live_)
      if (!e.dying) all.push_back(e.pointer);
    live_.clear();
    return all;
  }

 private:
  struct Entry {
    DevicePtr pointer;
    bool dying;  // its free has begun
  };

  const StatusNaming& naming_;
  std::mutex mutex_;
  std::vector<Entry> live_;
};

}  // namespace lifecore::driver
