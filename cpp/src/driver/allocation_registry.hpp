// The device memory one Driver allocated and has not freed. Freeing an address that is not
// the start of a live allocation of this driver is refused with a Status before the native
// free sees it (a double or foreign free is bad input, never heap corruption). A free that
// fails leaves the allocation live without allocating.
#pragma once

#include <algorithm>
#include <cstdint>
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
    const std::uint64_t adoption = ++adoptions_;  // 2**64 allocations are never made
    if (const auto it = find_locked(pointer); it != live_.end()) *it = Entry{pointer, false, adoption};
    else live_.push_back(Entry{pointer, false, adoption});
    return pointer;
  }
  // Ok and marked dying when `pointer` is live (no other free reaches it), *adoption saying
  // which allocation at that address it is; else invalid_value naming the call. The caller's
  // native free follows, then settle.
  Status begin_free(DevicePtr pointer, const char* call, std::uint64_t* adoption) {
    std::lock_guard lock(mutex_);
    const auto it = find_locked(pointer);
    if (it == live_.end() || it->dying)
      return local_status(naming_, Code::invalid_value, call, "not a live allocation of this device");
    it->dying = true;
    *adoption = it->adoption;
    return Status::success();
  }
  // Forgets a freed allocation, or makes it live again when its free failed; allocates nothing.
  // An allocation adopted at the address since is another one, left as it is.
  void settle(DevicePtr pointer, std::uint64_t adoption, bool freed) noexcept {
    std::lock_guard lock(mutex_);
    const auto it = find_locked(pointer);
    if (it == live_.end() || !it->dying || it->adoption != adoption) return;
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
    bool dying;              // its free has begun
    std::uint64_t adoption;  // which allocation at that address this is
  };

  std::vector<Entry>::iterator find_locked(DevicePtr pointer) {
    return std::find_if(live_.begin(), live_.end(), [&](const Entry& e) { return e.pointer == pointer; });
  }

  const StatusNaming& naming_;
  std::mutex mutex_;
  std::vector<Entry> live_;
  std::uint64_t adoptions_ = 0;
};

}  // namespace lifecore::driver
