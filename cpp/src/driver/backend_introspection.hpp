// What a backend's loader resolved, for diagnostics (`lifecore info`) and the loader tests.
// Kept apart from backends.hpp: nothing in the runtime needs it.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lifecore::driver {

// Each entry of the backend's symbol table ("cuda" or "hip") and whether it resolved, in
// table order; empty when the library itself could not be loaded. Loads the library on
// first use (cached like probe_*). Throws InvalidArgument for another name.
std::vector<std::pair<std::string, bool>> backend_symbols(const std::string& backend);

}  // namespace lifecore::driver
