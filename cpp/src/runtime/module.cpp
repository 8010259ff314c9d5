#include "lifecore/runtime/module.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "lifecore/driver/registry.hpp"
#include "lifecore/error.hpp"
#include "lifecore/runtime/capture_registry.hpp"
#include "lifecore/runtime/device.hpp"
#include "runtime/relaxed_capture_mode.hpp"

namespace lifecore::runtime {
namespace {

bool starts_with(const std::string& bytes, const void* magic, std::size_t size) {
  return bytes.size() >= size && std::memcmp(bytes.data(), magic, size) == 0;
}

// A failed driver call, re-raised with the Python-level operation in front (the attributes —
// code, status, call, driver message — stay those of the driver).
template <class F>
auto with_op(const std::string& op, F&& call) {
  try {
    return call();
  } catch (const Error& error) {
    if (error.kind() != ErrorKind::Driver) throw;
    throw Error(ErrorKind::Driver, op + ": " + error.message(), error.attributes());
  }
}

std::string hex_prefix(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string text;
  for (std::size_t i = 0; i < bytes.size() && i < 8; ++i) {
    auto byte = static_cast<unsigned char>(bytes[i]);
    text += digits[byte >> 4];
    text += digits[byte & 15];
  }
  return text;
}

}  // namespace

bool Module::image_kind_of(const driver::BackendDescriptor& backend, const std::string& bytes, driver::ImageKind* out) {
  for (const auto& format : backend.image_formats) {
    if (starts_with(bytes, format.magic.data(), format.magic.size())) {
      *out = format.kind;
      return true;
    }
  }
  return false;
}

std::shared_ptr<Module> Module::load(const std::shared_ptr<Device>& device, driver::ModuleImage image,
                                     const char* op) {
  device->check_open(op);
  // The driver refuses a load while a capture forbids this thread's unsafe calls, and invalidates
  // that capture: refused here instead, naming it.
  capture_registry::check(op, "loads a module", device->driver().capture_domain().get(), nullptr);
  const driver::ImageKind kind = image.kind;
  driver::ModuleHandle handle = with_op(op, [&] { return device->load_module(image); });
  return std::make_shared<Module>(device, handle, kind);
}

std::shared_ptr<Module> Module::from_ptx(const std::shared_ptr<Device>& device, const std::string& text) {
  if (text.empty()) raise(ErrorKind::InvalidArgument, "Module.from_ptx: the PTX text is empty");
  if (text.find('\0') != std::string::npos)
    raise(ErrorKind::InvalidArgument, "Module.from_ptx: the PTX text contains a NUL character");
  return load(device, driver::ModuleImage{driver::ImageKind::ptx, text}, "Module.from_ptx");
}

std::shared_ptr<Module> Module::from_image(const std::shared_ptr<Device>& device, std::string bytes) {
  device->check_open("Module.from_image");
  if (bytes.empty()) raise(ErrorKind::InvalidArgument, "Module.from_image: the image is empty");
  driver::ImageKind kind{};
  const driver::BackendDescriptor& backend = device->descriptor();
  if (!image_kind_of(backend, bytes, &kind)) {
    std::string kinds;
    for (const auto& format : backend.image_formats) kinds += (kinds.empty() ? "" : " or ") + std::string(driver::image_kind_name(format.kind));
    raise(ErrorKind::InvalidArgument,
          "Module.from_image: unrecognised image (first bytes " + hex_prefix(bytes) + "): the " + backend.name +
              " backend recognises " + (kinds.empty() ? std::string("no binary image") : kinds) +
              "; use Module.from_ptx for PTX text");
  }
  return load(device, driver::ModuleImage{kind, std::move(bytes)}, "Module.from_image");
}

Module::Module(std::shared_ptr<Device> device, driver::ModuleHandle handle, driver::ImageKind kind)
    : device_(std::move(device)), handle_(handle), kind_(kind) {}

Module::~Module() { unload(); }

const char* Module::kind_name() const { return driver::image_kind_name(kind_); }

bool Module::alive() const {
  std::lock_guard lock(mutex_);
  return loaded_ && !device_->closed();
}

void Module::unload() noexcept {
  {
    std::lock_guard lock(mutex_);
    if (!loaded_) return;
    loaded_ = false;
  }
  device_->release_module(handle_);
}

std::shared_ptr<Kernel> Module::function(const std::string& name,
                                         const std::optional<std::vector<std::string>>& params) {
  const std::string op = "Module.function('" + name + "')";
  device_->check_open("Module.function");
  if (!alive()) raise(ErrorKind::Closed, op + ": the module was unloaded");
  if (name.empty()) raise(ErrorKind::InvalidArgument, "Module.function: the kernel name is empty");
  std::vector<driver::ArgKind> kinds;
  std::vector<std::string> names;
  std::vector<bool> read_only;  // "const ptr": a pointer the kernel only reads
  if (params) {
    constexpr const char* blank = " \t\n\r\f\v";
    const auto trim = [&](std::string& s) {
      s.erase(0, s.find_first_not_of(blank));
      s.erase(s.find_last_not_of(blank) + 1);
    };
    // A parameter's name: letters, digits and '_' ("const x: ptr" names no parameter "const x").
    const auto identifier = [](const std::string& s) {
      return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isalnum(c) || c == '_'; });
    };
    for (std::size_t i = 0; i < params->size(); ++i) {
      std::string text = (*params)[i];
      std::string param_name = "p" + std::to_string(i);
      if (auto colon = text.find(':'); colon != std::string::npos) {
        param_name = text.substr(0, colon);
        text = text.substr(colon + 1);
        trim(param_name);
      }
      trim(text);
      const bool reads_only = text.size() > 5 && text.starts_with("const") && std::isspace(static_cast<unsigned char>(text[5]));
      if (reads_only) {
        text.erase(0, 5);
        trim(text);
      }
      driver::ArgKind kind{};
      if (!identifier(param_name) || !arg_kind_from_name(text, &kind) || (reads_only && kind != driver::ArgKind::pointer))
        raise(ErrorKind::InvalidArgument, op + ": parameter " + std::to_string(i) + " '" + (*params)[i] +
                                              "' is not a kind ('ptr', 'const ptr' for one the kernel only reads, "
                                              "'i32', 'u32', 'i64', 'u64', 'f32', 'f64', optionally as 'name: kind')");
      kinds.push_back(kind);
      names.push_back(param_name);
      read_only.push_back(reads_only);
    }
  }
  driver::Driver& driver = device_->driver();
  driver::FunctionHandle function{};
  driver::Status status;
  {
    // Where the driver loads modules lazily the load happens here: in relaxed mode, as the
    // module's own load (Device::load_module), so another library's capture is left whole.
    RelaxedCaptureMode relaxed(driver);
    status = driver.module_get_function(handle_, name, &function);
  }
  if (!status.ok()) {
    if (status.code == driver::Code::not_found && status.message.find(name) == std::string::npos)
      status.message += (status.message.empty() ? "" : ": ") + std::string("no kernel named '") + name + "'";
    with_op(op, [&] { device_->check_status(status); });
  }
  std::vector<std::size_t> sizes;
  driver::Status sized = driver.function_param_sizes(function, &sizes);
  if (!sized.ok() && sized.code != driver::Code::not_supported) with_op(op, [&] { device_->check_status(sized); });
  if (sized.ok() && params) {
    bool same = sizes.size() == kinds.size();
    for (std::size_t i = 0; same && i < sizes.size(); ++i) same = sizes[i] == driver::arg_size(kinds[i]);
    if (!same) {
      std::string driver_sizes, given_sizes;
      for (auto s : sizes) driver_sizes += (driver_sizes.empty() ? "" : ", ") + std::to_string(s);
      for (auto k : kinds) given_sizes += (given_sizes.empty() ? "" : ", ") + std::to_string(driver::arg_size(k));
      raise(ErrorKind::InvalidArgument, op + ": the driver says the kernel takes " + std::to_string(sizes.size()) +
                                            " parameter(s) of [" + driver_sizes + "] bytes, params= gives " +
                                            std::to_string(kinds.size()) + " of [" + given_sizes + "] bytes");
    }
  } else if (sized.ok()) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] != 8 && sizes[i] != 4)
        raise(ErrorKind::InvalidArgument, op + ": parameter " + std::to_string(i) + " is " +
                                              std::to_string(sizes[i]) + " bytes; pass params=[...] with its kind");
      kinds.push_back(sizes[i] == 8 ? driver::ArgKind::pointer : driver::ArgKind::u32);
      names.push_back("p" + std::to_string(i));
    }
  } else if (!params) {
    raise(ErrorKind::InvalidArgument, op + ": the " + device_->backend() +
                                          " driver here cannot tell the kernel's parameters (" + sized.message +
                                          "): pass params=[...], e.g. ['u32', 'f32', 'ptr']");
  }
  return std::make_shared<Kernel>(shared_from_this(), function, name, std::move(kinds), std::move(names),
                                  std::string("user kernel from a ") + kind_name() + " module", std::move(read_only));
}

driver::FunctionHandle Module::launchable(const Device& device, const Kernel& kernel) const {
  if (&device != device_.get())
    raise(ErrorKind::InvalidArgument, "launch: kernel '" + std::string(kernel.name()) +
                                          "' belongs to a module of another device than the stream");
  device.check_open("launch");
  std::lock_guard lock(mutex_);
  if (!loaded_)
    raise(ErrorKind::Closed, "launch: kernel '" + std::string(kernel.name()) + "' belongs to an unloaded module");
  return kernel.user_function();
}

}  // namespace lifecore::runtime
