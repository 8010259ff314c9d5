#include "bindings.hpp"

namespace lifecore::bindings {

void init_sequence(nb::module_&) {}  // placeholder until the sequence area lands

}  // namespace lifecore::bindings
