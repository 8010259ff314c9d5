// The descriptors of the backends built into lifecore, declared once from
// registered_backends.inc: each backend's folder defines its `<name>_backend()`.
#pragma once

#include "lifecore/driver/registry.hpp"

namespace lifecore::driver {

#define LIFECORE_BACKEND(name) const BackendDescriptor& name##_backend();
#include "driver/registered_backends.inc"
#undef LIFECORE_BACKEND

}  // namespace lifecore::driver
