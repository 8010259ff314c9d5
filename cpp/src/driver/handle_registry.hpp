// The native objects one Driver owns, keyed by the native pointer's value (which is also
// the neutral handle, so interop gets the real native stream). A handle this driver did not
// create, or already destroyed, is refused with a Status before any native call sees it:
// a stale or foreign handle is bad input, never a crash.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
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
  // Destroys the native object behind `handle` through `destroy` (a Native -> Status), the
  // handle forgotten first: a driver gives a destroyed object's address to the next object
  // created, perhaps on another thread between the destroy and a forget after it, which would
  // then forget that live object. A failed destroy keeps the handle live; a handle not live
  // is refused as find refuses it, before any native call.
  template <class F>
  Status release(Handle handle, const char* call, F&& destroy) {
    Entry entry;
    {
      std::lock_guard lock(mutex_);
      if (static_cast<std::uintptr_t>(handle) != 0) entry = live_.extract(static_cast<std::uintptr_t>(handle));
    }
    if (entry.empty()) {
      Native unused;
      return find(handle, call, &unused);
    }
    Status status = destroy(reinterpret_cast<Native>(static_cast<std::uintptr_t>(handle)));
    if (!status.ok()) restore(std::move(entry));
    return status;
  }

  // What an owner's handles were (a module's functions), forgotten before the owner's destroy
  // for the same reason; restore gives them back if that destroy fails.
  using Entry = typename std::unordered_map<std::uintptr_t, std::uintptr_t>::node_type;
  template <class Owner>
  std::vector<Entry> take_owned_by(Owner owner) {
    std::lock_guard lock(mutex_);
    const auto owned = [&](const auto& entry) { return entry.second == static_cast<std::uintptr_t>(owner); };
    std::vector<Entry> taken;
    taken.reserve(static_cast<std::size_t>(std::count_if(live_.begin(), live_.end(), owned)));  // no throw after
    for (auto it = live_.begin(); it != live_.end();) {
      const auto next = std::next(it);
      if (owned(*it)) taken.push_back(live_.extract(it));
      it = next;
    }
    return taken;
  }
  // Node handles go back without a node's allocation (a rehash may still allocate, and throw).
  void restore(Entry entry) {
    std::lock_guard lock(mutex_);
    live_.insert(std::move(entry));
  }
  void restore(std::vector<Entry>& entries) {
    std::lock_guard lock(mutex_);
    for (auto& entry : entries)
      if (!entry.empty()) live_.insert(std::move(entry));
    entries.clear();
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
