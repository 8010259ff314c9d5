#include "capture_bindings.hpp"

namespace lifecore::bindings {

void init_capture(nb::module_& m) {
  init_capture_plans(m);
  init_capture_payloads(m);
  init_capture_interventions(m);
  init_capture_session(m);
  init_capture_observer(m);
}

}  // namespace lifecore::bindings
