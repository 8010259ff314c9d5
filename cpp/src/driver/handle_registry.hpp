// The native objects one Driver owns, keyed by the native pointer's value (which is also
// the neutral handle, so interop gets the real native stream). A handle this driver did not
// create, or already destroyed, is refused with a Status before any native call sees it:
// a stale or foreign handle is bad input, never a crash.
#pragma once

#include <algorithm>
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
  // function comes from) lets mark_owned_by mark it together with its owner. A dying entry
  // of the same address was destroyed already (the driver gave its address out again).
  template <class Owner = std::uintptr_t>
  Handle adopt(Native native, Owner owner = {}) {
    std::lock_guard lock(mutex_);
    live_[key(native)] = Slot{static_cast<std::uintptr_t>(owner), false};
    return static_cast<Handle>(key(native));
  }
  // Ok and *out set when `handle` is live; else invalid_handle naming the call.
  Status find(Handle handle, const char* call, Native* out) const {
    if (!contains(handle)) return refusal(call);
    *out = reinterpret_cast<Native>(static_cast<std::uintptr_t>(handle));
    return Status::success();
  }
  bool contains(Handle handle) const {
    std::lock_guard lock(mutex_);
    const auto it = live_.find(static_cast<std::uintptr_t>(handle));
    return static_cast<std::uintptr_t>(handle) != 0 && it != live_.end() && !it->second.dying;
  }
  // Destroys the native object behind `handle` through `destroy` (a Native -> Status), the
  // handle marked dying first, so no other call reaches it: a driver gives a destroyed
  // object's address to the next object created, perhaps on another thread before this call
  // settles, and that object's entry must survive. A failed destroy makes the handle live
  // again without allocating (a table that grew meanwhile is never rehashed for it); a handle
  // not live is refused as find refuses it, before any native call.
  template <class F>
  Status release(Handle handle, const char* call, F&& destroy) {
    const auto k = static_cast<std::uintptr_t>(handle);
    {
      std::lock_guard lock(mutex_);
      const auto it = live_.find(k);
      if (k == 0 || it == live_.end() || it->second.dying) return refusal(call);
      it->second.dying = true;
    }
    Status status = destroy(reinterpret_cast<Native>(k));
    settle_one(k, status.ok());
    return status;
  }

  // An owner's handles (a module's functions), marked dying before the owner's destroy for
  // the same reason; settle forgets them once that destroy succeeded, or makes them live again.
  template <class Owner>
  std::vector<std::uintptr_t> mark_owned_by(Owner owner) {
    std::lock_guard lock(mutex_);
    const auto owned = [&](const auto& entry) {
      return entry.second.owner == static_cast<std::uintptr_t>(owner) && !entry.second.dying;
    };
    std::vector<std::uintptr_t> marked;
    marked.reserve(static_cast<std::size_t>(std::count_if(live_.begin(), live_.end(), owned)));  // no throw after
    for (auto& entry : live_) {
      if (!owned(entry)) continue;
      entry.second.dying = true;
      marked.push_back(entry.first);
    }
    return marked;
  }
  void settle(const std::vector<std::uintptr_t>& marked, bool destroyed) noexcept {
    for (const std::uintptr_t k : marked) settle_one(k, destroyed);
  }
  std::vector<Native> take_all() {
    std::lock_guard lock(mutex_);
    std::vector<Native> all;
    for (const auto& entry : live_)
      if (!entry.second.dying) all.push_back(reinterpret_cast<Native>(entry.first));
    live_.clear();
    return all;
  }

 private:
  struct Slot {
    std::uintptr_t owner;  // its owner's handle (0: none)
    bool dying;            // its destroy has begun: no call reaches it
  };

  static std::uintptr_t key(Native native) { return reinterpret_cast<std::uintptr_t>(native); }
  Status refusal(const char* call) const {
    return local_status(naming_, Code::invalid_handle, call,
                        std::string("not a live ") + what_ + " of this device (destroyed, or from another device)");
  }
  // Erasing or clearing a flag allocates nothing. An entry adopted again since (not dying) is
  // a new object at the destroyed one's address: it stays.
  void settle_one(std::uintptr_t k, bool destroyed) noexcept {
    std::lock_guard lock(mutex_);
    const auto it = live_.find(k);
    if (it == live_.end() || !it->second.dying) return;
    if (destroyed) live_.erase(it);
    else it->second.dying = false;
  }

  const char* what_;
  const StatusNaming& naming_;
  mutable std::mutex mutex_;
  std::unordered_map<std::uintptr_t, Slot> live_;
};

}  // namespace lifecore::driver
