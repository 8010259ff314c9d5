#include "driver/dynamic_library.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>

namespace lifecore::driver {
namespace {

std::string resolved_path(void* handle, const std::string& fallback) {
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && map->l_name[0] != '\0')
    return map->l_name;
  return fallback;
}

std::string last_dl_error() {
  const char* text = dlerror();
  return text ? text : "unknown dynamic loader error";
}

}  // namespace

DynamicLibrary DynamicLibrary::open(const char* env_override, const std::vector<std::string>& candidates,
                                    std::string* reason) {
  DynamicLibrary library;
  if (env_override != nullptr) {
    const char* value = std::getenv(env_override);
    if (value != nullptr && value[0] != '\0') {
      dlerror();
      library.handle_ = dlopen(value, RTLD_NOW | RTLD_LOCAL);
      if (library.handle_ == nullptr) {
        *reason = std::string("cannot load ") + value + " (from " + env_override + "): " + last_dl_error();
        return library;
      }
      library.path_ = resolved_path(library.handle_, value);
      return library;
    }
  }
  for (const auto& name : candidates) {
    library.handle_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (library.handle_ != nullptr) {
      library.path_ = resolved_path(library.handle_, name);
      return library;
    }
  }
  std::string errors;
  for (const auto& name : candidates) {
    dlerror();
    library.handle_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library.handle_ != nullptr) {
      library.path_ = resolved_path(library.handle_, name);
      return library;
    }
    if (!errors.empty()) errors += "; ";
    errors += last_dl_error();
  }
  *reason = "cannot load any of";
  for (const auto& name : candidates) *reason += " " + name;
  *reason += ": " + errors;
  return library;
}

void* DynamicLibrary::symbol(const char* name) const noexcept {
  if (handle_ == nullptr) return nullptr;
  return dlsym(handle_, name);
}

}  // namespace lifecore::driver
