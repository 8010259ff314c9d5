// The backend registry: each backend described once, by its own folder, in one descriptor
// (name, role, probe, open, status naming, code-object kinds, interop facts, auto priority).
// Everything above the backend folders reads the registry instead of naming a backend.
// The backends built into lifecore are one line each in cpp/src/driver/registered_backends.inc.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lifecore/driver/driver.hpp"
#include "lifecore/driver/status.hpp"

namespace lifecore::driver {

// How Module.from_image recognises a binary: an image starting with `magic` is of `kind`.
struct ImageFormat {
  ImageKind kind = ImageKind::cubin;
  std::string magic;
};

// DLPack's DLDeviceType numbers for the devices lifecore hands out memory of.
namespace dlpack_device {
inline constexpr int cpu = 1;
inline constexpr int cuda = 2;
inline constexpr int rocm = 10;
}  // namespace dlpack_device

struct BackendDescriptor {
  std::string name;  // what Device(name) and lifecore.backends() use
  // An emulated device on host memory that offers fault injection and the test hooks: tests
  // that need those ask the registry for this role instead of naming a backend.
  bool emulated = false;
  // Whether the backend can start here, and why not; never throws.
  std::function<BackendInfo()> probe;
  // One device; throws lifecore::Error(BackendUnavailable) when it cannot start and
  // InvalidArgument for an ordinal out of range.
  std::function<std::shared_ptr<Driver>(int ordinal)> open;
  StatusNaming naming;
  // The module images the driver loads; ImageKind::builtin loads the built-in kernels.
  std::vector<ImageKind> code_object_kinds;
  // How from_image tells the binary kinds apart; the first match wins.
  std::vector<ImageFormat> image_formats;
  // Interop facts: DLPack's device type for the memory, whether a buffer offers
  // __cuda_array_interface__, and the torch device string (torch's HIP builds use its CUDA name).
  int dlpack_device_type = dlpack_device::cpu;
  bool cuda_array_interface = false;
  std::string torch_device = "cpu";
  // "auto" opens the available backend of the highest priority (the earlier one on a tie).
  int auto_priority = 0;
  // The loader's symbol table and whether each entry resolved (diagnostics); empty when
  // the backend loads no library.
  std::function<std::vector<std::pair<std::string, bool>>()> symbols;
};

// Every backend, built-in ones first in the list's order, then runtime registrations.
std::vector<const BackendDescriptor*> registered_backends();
std::vector<std::string> registered_backend_names();
// nullptr when no backend has that name.
const BackendDescriptor* find_backend(std::string_view name);
// Throws InvalidArgument naming the registered backends when no backend has that name.
const BackendDescriptor& backend_descriptor(std::string_view name);

// Adds a backend at run time: for tests and for embedding lifecore with a backend of one's
// own. Refuses (InvalidArgument, nothing registered) an empty name, "auto", a name already
// registered, and a descriptor without probe, open or a complete status naming. The
// descriptor lives until the process ends.
const BackendDescriptor& register_backend(BackendDescriptor descriptor);

}  // namespace lifecore::driver
