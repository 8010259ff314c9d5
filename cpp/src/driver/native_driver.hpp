// The base of a Driver over a native library whose calls return an int status, 0 meaning
// success. Every call runs with the driver's device current on the calling thread (a native
// library keeps the current device per thread, and a program's threads come and go), its
// result becomes a Status named the backend's way, and a neutral handle reaches the native
// object only while it is live. The backend says how its device is made current and how a
// failed result is named; its operations stay written out against its own library.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "driver/handle_registry.hpp"
#include "lifecore/driver/driver.hpp"

namespace lifecore::driver {

class NativeDriver : public Driver {
 protected:
  // Makes this driver's device current on the calling thread; a failure names `for_call`.
  // `*previous` gets what was current before (the backend's own encoding of a context or a
  // device) when it had to switch, and is left empty when the device already was current.
  virtual Status enter_device(const char* for_call, std::optional<std::uintptr_t>* previous) const = 0;
  // Makes `previous` (from enter_device) current again.
  virtual void leave_device(std::uintptr_t previous) const noexcept = 0;
  // The Status of a failed native result of `call`.
  virtual Status failure(int native, const char* call) const = 0;

  // The driver's device current on this thread for a scope, and what the thread had current
  // before put back at its end: another library on the thread (torch, CuPy, on another device
  // perhaps) keeps the current device it chose. Free when the device already is current.
  class OnDevice {
   public:
    OnDevice(const NativeDriver& driver, const char* for_call)
        : driver_(driver), status_(driver.enter_device(for_call, &previous_)) {}
    ~OnDevice() {
      if (previous_) driver_.leave_device(*previous_);
    }
    OnDevice(const OnDevice&) = delete;
    OnDevice& operator=(const OnDevice&) = delete;
    const Status& status() const noexcept { return status_; }

   private:
    const NativeDriver& driver_;
    std::optional<std::uintptr_t> previous_;
    Status status_;
  };

  Status checked(int native, const char* call) const {
    return native == 0 ? Status::success() : failure(native, call);
  }
  // Runs `native_call` (returning the native result) with the device current.
  template <class F>
  Status current(const char* call, F&& native_call) const {
    OnDevice on_device(*this, call);
    if (!on_device.status().ok()) return on_device.status();
    return checked(native_call(), call);
  }
  // Passes the native object behind `handle` to `native_call`, with the device current; a
  // stale handle fails before the call.
  template <class Native, class Handle, class F>
  Status on(const HandleRegistry<Native, Handle>& registry, Handle handle, const char* call, F&& native_call) const {
    Native native;
    if (Status s = registry.find(handle, call, &native); !s.ok()) return s;
    return current(call, [&] { return native_call(native); });
  }
  // The same with two native objects (an event and the stream it is recorded on); either
  // handle being stale fails before the call.
  template <class N1, class H1, class N2, class H2, class F>
  Status on(const HandleRegistry<N1, H1>& first_registry, H1 first, const HandleRegistry<N2, H2>& second_registry,
            H2 second, const char* call, F&& native_call) const {
    N1 first_native;
    N2 second_native;
    if (Status s = first_registry.find(first, call, &first_native); !s.ok()) return s;
    if (Status s = second_registry.find(second, call, &second_native); !s.ok()) return s;
    return current(call, [&] { return native_call(first_native, second_native); });
  }
  // Runs `native_create` (which writes a new native object through its argument) with the
  // device current; the object gets a handle, in *out, only once that succeeded.
  template <class Native, class Handle, class F>
  Status create(HandleRegistry<Native, Handle>& registry, Handle* out, const char* call, F&& native_create) {
    Native native = nullptr;
    Status status = current(call, [&] { return native_create(&native); });
    if (status.ok()) *out = registry.adopt(native);
    return status;
  }
  // Waits, through `synchronize` (a native stream -> its native result), for each of `streams`
  // that records no capture: synchronizing one that does, live or invalidated, is illegal, and a
  // failed query counts as recording. For a teardown: its failures have no one to go to.
  template <class Native, class F>
  void synchronize_idle(const std::vector<Native>& streams, F&& synchronize) {
    for (Native stream : streams) {
      CaptureStatus capture = CaptureStatus::none;
      if (stream_capture_status_native(reinterpret_cast<std::uintptr_t>(stream), &capture).ok() &&
          capture == CaptureStatus::none)
        (void)synchronize(stream);
    }
  }
  // Gives `function`, looked up in the module behind `module`, a handle, only while that module
  // lives: an unload begun meanwhile marked the module dying and may have marked its functions
  // before this adoption, so the adoption is taken back and the lookup refused as a stale
  // module's (a function handle never outlives its module's unload).
  template <class Module, class ModuleHandleT, class Function, class FunctionHandleT>
  Status adopt_function(HandleRegistry<Module, ModuleHandleT>& modules,
                        HandleRegistry<Function, FunctionHandleT>& functions, ModuleHandleT module, Function function,
                        const char* call, FunctionHandleT* out) {
    DyingTicket adoption;
    bool fresh = false;
    const FunctionHandleT handle = functions.adopt(function, module, &adoption, &fresh);
    if (modules.contains(module)) {
      *out = handle;
      return Status::success();
    }
    // Only an entry this lookup made: an earlier lookup's handle to the same function is the
    // unload's to settle.
    if (fresh) functions.forget(adoption);
    return modules.not_live(call);
  }
  // Unloads the module behind `handle` through `native_unload` (a native module -> its native
  // result), with the device current. The module is marked dying first (no function is looked
  // up in it from then on), then its functions, whose handles die with it (a driver reuses
  // their addresses); each settles once the native unload is done.
  template <class Module, class ModuleHandleT, class Function, class FunctionHandleT, class F>
  Status unload_module(HandleRegistry<Module, ModuleHandleT>& modules,
                       HandleRegistry<Function, FunctionHandleT>& functions, ModuleHandleT handle, const char* call,
                       F&& native_unload) {
    DyingTicket module;
    if (Status refused = modules.begin_release(handle, call, &module); !refused.ok()) return refused;
    std::vector<DyingTicket> owned;
    try {
      owned = functions.mark_owned_by(handle);
    } catch (...) {
      modules.settle(module, false);
      throw;
    }
    Status status = current(call, [&] { return native_unload(reinterpret_cast<Module>(module.key)); });
    functions.settle(owned, status.ok());
    modules.settle(module, status.ok());
    return status;
  }
  // Destroys the native object behind `handle`, with the device current; the handle is
  // marked dying before the destroy and live again if it fails (HandleRegistry::release says why).
  template <class Native, class Handle, class F>
  Status release(HandleRegistry<Native, Handle>& registry, Handle handle, const char* call, F&& native_destroy) {
    return registry.release(handle, call, [&](Native native) { return current(call, [&] { return native_destroy(native); }); });
  }
};

}  // namespace lifecore::driver
