#include "capture_bindings.hpp"

namespace lifecore::bindings {

void init_capture(nb::module_& m) {
  nb::module_ capture = m.def_submodule("capture", "Bounded activation capture, interventions and MoE routing");
  init_capture_plans(capture);
  init_capture_interventions(capture);
  init_capture_session(capture);
}

}  // namespace lifecore::bindings
