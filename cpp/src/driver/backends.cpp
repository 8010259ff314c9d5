#include "lifecore/driver/backends.hpp"

#include <algorithm>

#include "lifecore/driver/registry.hpp"

namespace lifecore::driver {

namespace {

// A probe must never throw; one that does is one backend unavailable (with why), not a registry
// every caller of list_backends() fails on.
BackendInfo probed(const BackendDescriptor& d) {
  try {
    return d.probe();
  } catch (const std::exception& e) {
    BackendInfo info;
    info.reason = std::string("its probe failed: ") + e.what();
    return info;
  } catch (...) {
    BackendInfo info;
    info.reason = "its probe failed";
    return info;
  }
}

}  // namespace

std::vector<BackendInfo> list_backends() {
  std::vector<BackendInfo> infos;
  for (const auto* d : registered_backends()) {
    BackendInfo info = probed(*d);
    info.name = d->name;
    info.emulated = d->emulated;
    info.dlpack_device_type = d->dlpack_device_type;
    info.cuda_array_interface = d->cuda_array_interface;
    info.torch_device = d->torch_device;
    info.code_object_kinds.clear();  // the descriptor's, whatever the probe filled in
    for (ImageKind kind : d->code_object_kinds) info.code_object_kinds.emplace_back(image_kind_name(kind));
    infos.push_back(std::move(info));
  }
  return infos;
}

std::shared_ptr<Driver> open_driver(const std::string& backend, int ordinal) {
  if (ordinal < 0) raise(ErrorKind::InvalidArgument, "device ordinal must be >= 0, got " + std::to_string(ordinal));
  if (backend != "auto") return backend_descriptor(backend).open(ordinal);
  std::vector<const BackendDescriptor*> by_priority = registered_backends();
  std::stable_sort(by_priority.begin(), by_priority.end(),
                   [](const auto* a, const auto* b) { return a->auto_priority > b->auto_priority; });
  for (const auto* d : by_priority)
    if (probed(*d).available) return d->open(ordinal);
  raise(ErrorKind::BackendUnavailable, "backend 'auto': no registered backend is available here");
}

}  // namespace lifecore::driver
