#include "lifecore/driver/registry.hpp"

#include <algorithm>
#include <deque>
#include <mutex>

#include "driver/registered_backends.hpp"
#include "lifecore/error.hpp"

namespace lifecore::driver {

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<const BackendDescriptor*> backends;
  std::deque<BackendDescriptor> added;  // runtime registrations; a deque keeps their addresses
};

std::string quoted_names(const std::vector<const BackendDescriptor*>& backends) {
  std::string text;
  for (std::size_t i = 0; i < backends.size(); ++i) {
    if (i > 0) text += i + 1 == backends.size() ? " or " : ", ";
    text += "'" + backends[i]->name + "'";
  }
  return text;
}

void validate(const BackendDescriptor& d, const std::vector<const BackendDescriptor*>& known) {
  if (d.name.empty()) raise(ErrorKind::InvalidArgument, "register_backend: the backend needs a name");
  if (d.name == "auto") raise(ErrorKind::InvalidArgument, "register_backend: 'auto' is reserved for the automatic choice");
  // The tooling addresses a backend by its name in lists ("a,b"), targets ("name/hardware") and
  // environment variables: a lowercase letter, then lowercase letters, digits and '_'.
  const bool addressable = d.name[0] >= 'a' && d.name[0] <= 'z' &&
                           std::all_of(d.name.begin(), d.name.end(), [](char c) {
                             return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
                           });
  if (!addressable)
    raise(ErrorKind::InvalidArgument, "register_backend: '" + d.name + "' is no backend name the tooling can address "
                                      "(a lowercase letter, then lowercase letters, digits and '_')");
  if (d.name == "host")
    raise(ErrorKind::InvalidArgument, "register_backend: 'host' is reserved (the sequence lifecycle's host-accounting "
                                      "target)");
  for (const auto* other : known)
    if (other->name == d.name)
      raise(ErrorKind::InvalidArgument, "register_backend: a backend named '" + d.name + "' is already registered");
  if (!d.probe || !d.open)
    raise(ErrorKind::InvalidArgument, "register_backend: backend '" + d.name + "' needs both probe and open");
  if (d.code_object_kinds.empty())
    raise(ErrorKind::InvalidArgument, "register_backend: backend '" + d.name + "' loads no code object kind "
                                      "(code_object_kinds is empty; the built-in kernels are 'builtin')");
  const StatusNaming& n = d.naming;
  if (n.code == nullptr || n.native == nullptr || n.name == nullptr || n.sticky == nullptr)
    raise(ErrorKind::InvalidArgument,
          "register_backend: backend '" + d.name + "' needs a complete status naming (code, native, name, sticky)");
}

Registry& registry() {
  static Registry* instance = [] {
    auto* r = new Registry;  // never destroyed: drivers may outlive static destruction order
#define LIFECORE_BACKEND(name) r->backends.push_back(&name##_backend());
#include "driver/registered_backends.inc"
#undef LIFECORE_BACKEND
    return r;
  }();
  return *instance;
}

}  // namespace

std::vector<const BackendDescriptor*> registered_backends() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.backends;
}

std::vector<std::string> registered_backend_names() {
  std::vector<std::string> names;
  for (const auto* d : registered_backends()) names.push_back(d->name);
  return names;
}

const BackendDescriptor* find_backend(std::string_view name) {
  for (const auto* d : registered_backends())
    if (d->name == name) return d;
  return nullptr;
}

const BackendDescriptor& backend_descriptor(std::string_view name) {
  if (const auto* d = find_backend(name)) return *d;
  raise(ErrorKind::InvalidArgument,
        "unknown backend '" + std::string(name) + "': expected 'auto', " + quoted_names(registered_backends()));
}

const BackendDescriptor& register_backend(BackendDescriptor descriptor) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  validate(descriptor, r.backends);
  const BackendDescriptor& added = r.added.emplace_back(std::move(descriptor));
  r.backends.push_back(&added);
  return added;
}

}  // namespace lifecore::driver
