#include "bindings.hpp"

namespace lifecore::bindings {

void init_capture(nb::module_&) {}  // placeholder until the capture area lands

}  // namespace lifecore::bindings
