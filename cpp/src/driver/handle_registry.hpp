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

// Which entry a destroy marked: its address and the adoption it belongs to. An address the
// driver gave out again is another adoption, which a late settle of the old one never touches.
struct DyingTicket {
  std::uintptr_t key = 0;
  std::uint64_t adoption = 0;
};

template <class Native, class Handle>
class HandleRegistry {
 public:
  // `naming` reports the refusal the backend's way.
  HandleRegistry(const char* what, const StatusNaming& naming) : what_(what), naming_(naming) {}

  // Registers `native` and returns its neutral handle. An owner's handle (the module a kernel
  // function comes from) lets mark_owned_by mark it together with its owner. A dying entry
  // of the same address was destroyed already (the driver gave its address out again).
  // `adoption`, when given, says which adoption this is (for forget), and `fresh` whether the
  // address had no entry before (a driver hands out the same function twice).
  template <class Owner = std::uintptr_t>
  Handle adopt(Native native, Owner owner = {}, DyingTicket* adoption = nullptr, bool* fresh = nullptr) {
    std::lock_guard lock(mutex_);
    const std::uint64_t number = ++adoptions_;
    const auto [it, inserted] = live_.insert_or_assign(key(native), Slot{static_cast<std::uintptr_t>(owner), false, number});
    if (adoption) *adoption = DyingTicket{key(native), number};
    if (fresh) *fresh = inserted;
    return static_cast<Handle>(key(native));
  }
  // Takes back one adoption (dying or not); nothing if the address was adopted again since.
  void forget(const DyingTicket& adoption) noexcept {
    std::lock_guard lock(mutex_);
    const auto it = live_.find(adoption.key);
    if (it != live_.end() && it->second.adoption == adoption.adoption) live_.erase(it);
  }
  // Ok and *out set when `handle` is live; else invalid_handle naming the call.
  Status find(Handle handle, const char* call, Native* out) const {
    if (!contains(handle)) return refusal(call);
    *out = reinterpret_cast<Native>(static_cast<std::uintptr_t>(handle));
    return Status::success();
  }
  // What find answers for a handle that is not live.
  Status not_live(const char* call) const { return refusal(call); }
  bool contains(Handle handle) const {
    std::lock_guard lock(mutex_);
    const auto it = live_.find(static_cast<std::uintptr_t>(handle));
    return static_cast<std::uintptr_t>(handle) != 0 && it != live_.end() && !it->second.dying;
  }
  // Marks `handle` dying, so no other call reaches it (find, a second destroy), before its
  // native destroy: a driver gives a destroyed object's address to the next object created,
  // perhaps on another thread before this destroy settles, and that object's entry must
  // survive. A handle not live is refused as find refuses it.
  Status begin_release(Handle handle, const char* call, DyingTicket* ticket) {
    const auto k = static_cast<std::uintptr_t>(handle);
    std::lock_guard lock(mutex_);
    const auto it = live_.find(k);
    if (k == 0 || it == live_.end() || it->second.dying) return refusal(call);
    it->second.dying = true;
    *ticket = DyingTicket{k, it->second.adoption};
    return Status::success();
  }
  // After the native destroy: forgets the entry it marked when the destroy succeeded, or makes
  // it live again when it failed, without allocating (a table that grew meanwhile is never
  // rehashed for it).
  void settle(const DyingTicket& ticket, bool destroyed) noexcept {
    std::lock_guard lock(mutex_);
    const auto it = live_.find(ticket.key);
    if (it == live_.end() || !it->second.dying || it->second.adoption != ticket.adoption) return;
    if (destroyed) live_.erase(it);
    else it->second.dying = false;
  }
  // begin_release, the native destroy through `destroy` (a Native -> Status), settle; before
  // any native call for a handle not live.
  template <class F>
  Status release(Handle handle, const char* call, F&& destroy) {
    DyingTicket ticket;
    if (Status refused = begin_release(handle, call, &ticket); !refused.ok()) return refused;
    Status status = destroy(reinterpret_cast<Native>(ticket.key));
    settle(ticket, status.ok());
    return status;
  }

  // An owner's handles (a module's functions), marked dying for the same reason once the
  // owner itself is (so no new one is adopted for it meanwhile); settle each after the
  // owner's destroy.
  template <class Owner>
  std::vector<DyingTicket> mark_owned_by(Owner owner) {
    std::lock_guard lock(mutex_);
    const auto owned = [&](const auto& entry) {
      return entry.second.owner == static_cast<std::uintptr_t>(owner) && !entry.second.dying;
    };
    std::vector<DyingTicket> marked;
    marked.reserve(static_cast<std::size_t>(std::count_if(live_.begin(), live_.end(), owned)));  // no throw after
    for (auto& entry : live_) {
      if (!owned(entry)) continue;
      entry.second.dying = true;
      marked.push_back(DyingTicket{entry.first, entry.second.adoption});
    }
    return marked;
  }
  void settle(const std::vector<DyingTicket>& marked, bool destroyed) noexcept {
    for (const DyingTicket& ticket : marked) settle(ticket, destroyed);
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
    std::uintptr_t owner;    // its owner's handle (0: none)
    bool dying;              // its destroy has begun: no call reaches it
    std::uint64_t adoption;  // which adoption of the address this is
  };

  static std::uintptr_t key(Native native) { return reinterpret_cast<std::uintptr_t>(native); }
  Status refusal(const char* call) const {
    return local_status(naming_, Code::invalid_handle, call,
                        std::string("not a live ") + what_ + " of this device (destroyed, or from another device)");
  }

  const char* what_;
  const StatusNaming& naming_;
  mutable std::mutex mutex_;
  std::unordered_map<std::uintptr_t, Slot> live_;
  std::uint64_t adoptions_ = 0;  // 2**64 adoptions are never made
};

}  // namespace lifecore::driver
