#include "bindings.hpp"

namespace lifecore::bindings {

void init_runtime(nb::module_&) {}  // placeholder until the runtime area lands

}  // namespace lifecore::bindings
