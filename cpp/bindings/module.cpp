#include "bindings.hpp"

NB_MODULE(_core, m) {
  m.doc() = "lifecore's C++ core (use the lifecore package, not this module)";
  lifecore::bindings::init_errors(m);
  lifecore::bindings::init_vendor(m);
  lifecore::bindings::init_runtime(m);
  lifecore::bindings::init_sequence(m);
  lifecore::bindings::init_capture(m);
}
