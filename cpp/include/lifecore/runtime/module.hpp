// A module of user kernels loaded on one device: PTX text (JIT-compiled by the driver), a
// cubin, a fat binary or a HIP code object. module.function(name, params) hands out Kernels
// that Stream::launch checks and issues exactly like the built-ins. Each Kernel keeps its
// module alive; unload() (also on the last reference, or device close) retires it.
// The driver unload is deferred while a graph or a capture window of the device could still
// hold one of its functions, because a replay of an unloaded function is undefined behaviour.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "lifecore/runtime/kernel.hpp"
#include "lifecore/driver/driver.hpp"

namespace lifecore::runtime {

class Device;

class Module : public std::enable_shared_from_this<Module> {
 public:
  // PTX text; a DriverError naming the call carries the JIT's log when it does not compile.
  static std::shared_ptr<Module> from_ptx(const std::shared_ptr<Device>& device, const std::string& text);
  // A binary image; its kind (cubin, fatbin, code object) comes from the backend and the
  // magic bytes. InvalidArgumentError for an empty or unrecognised image.
  static std::shared_ptr<Module> from_image(const std::shared_ptr<Device>& device, std::string bytes);
  // Which ImageKind `bytes` is, by the backend's image formats; false when unrecognised.
  static bool image_kind_of(const driver::BackendDescriptor& backend, const std::string& bytes, driver::ImageKind* out);

  Module(std::shared_ptr<Device> device, driver::ModuleHandle handle, driver::ImageKind kind);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The kernel `name` with parameter kinds `params` ("u32", "f32", "ptr", ... optionally
  // "name: kind"). Where the driver can tell the parameter sizes they are checked against
  // `params`; without `params` they are inferred from the sizes (8 bytes: ptr, 4 bytes: u32);
  // where the driver cannot tell, `params` is required.
  std::shared_ptr<Kernel> function(const std::string& name, const std::optional<std::vector<std::string>>& params);
  // Idempotent: later launches of its kernels raise ClosedError.
  void unload() noexcept;
  bool alive() const;
  const std::shared_ptr<Device>& device() const noexcept { return device_; }
  driver::ImageKind kind() const noexcept { return kind_; }
  const char* kind_name() const;

  // For Device::function: the function to launch on `device`, after the checks (same device,
  // module loaded, device open).
  driver::FunctionHandle launchable(const Device& device, const Kernel& kernel) const;

 private:
  static std::shared_ptr<Module> load(const std::shared_ptr<Device>& device, driver::ModuleImage image,
                                      const char* op);

  std::shared_ptr<Device> device_;
  const driver::ModuleHandle handle_;
  const driver::ImageKind kind_;
  mutable std::mutex mutex_;
  bool loaded_ = true;
};

}  // namespace lifecore::runtime
