#include "bindings.hpp"

namespace lifecore::bindings {
void init_call_guard(nb::module_& m);  // call_guard.cpp: used by the package at import
}

NB_MODULE(_core, m) {
  m.doc() = "lifecore's C++ core (use the lifecore package, not this module)";
  lifecore::bindings::init_errors(m);
  lifecore::bindings::init_driver(m);
  lifecore::bindings::init_runtime(m);
  lifecore::bindings::init_sequence(m);
  lifecore::bindings::init_capture(m);
  lifecore::bindings::init_call_guard(m);
}
