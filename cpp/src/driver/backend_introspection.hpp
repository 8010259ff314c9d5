// What a backend's loader resolved, for diagnostics (`lifecore info`) and the loader tests.
// Kept apart from backends.hpp: nothing in the runtime needs it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "lifecore/driver/registry.hpp"
#include "lifecore/error.hpp"

namespace lifecore::driver {

// Each entry of the backend's symbol table and whether it resolved, in table order; empty
// when the library itself could not be loaded. Throws InvalidArgument for an unknown backend
// and for one that loads no library.
inline std::vector<std::pair<std::string, bool>> backend_symbols(const std::string& backend) {
  const BackendDescriptor& d = backend_descriptor(backend);
  if (!d.symbols) raise(ErrorKind::InvalidArgument, "backend '" + backend + "' loads no library: it has no symbol table");
  return d.symbols();
}

}  // namespace lifecore::driver
