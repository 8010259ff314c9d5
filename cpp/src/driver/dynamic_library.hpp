// Loading a vendor's shared library at run time, so that lifecore has no link-time (or
// build-time) dependency on any GPU toolkit. A library that is not there is a reason, not
// an error: the backend reports it as unavailable.
#pragma once

#include <string>
#include <vector>

namespace lifecore::driver {

class DynamicLibrary {
 public:
  DynamicLibrary() = default;

  // An environment override, when set, is the only candidate tried (a wrong override must
  // not silently fall back to another driver). Otherwise each candidate is first looked up
  // among the libraries already loaded in the process (RTLD_NOLOAD: reuse the driver a
  // framework loaded), then loaded. On failure returns an unloaded library and sets *reason.
  static DynamicLibrary open(const char* env_override, const std::vector<std::string>& candidates,
                             std::string* reason);

  bool loaded() const noexcept { return handle_ != nullptr; }
  // The path the dynamic loader resolved (or the name that was opened).
  const std::string& path() const noexcept { return path_; }
  void* symbol(const char* name) const noexcept;

  // Libraries stay loaded for the life of the process: a GPU driver does not unload cleanly
  // and function pointers into it are cached.

 private:
  void* handle_ = nullptr;
  std::string path_;
};

}  // namespace lifecore::driver
