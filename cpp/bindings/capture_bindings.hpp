// The capture area's binding files, called in order by init_capture.
#pragma once

#include "bindings.hpp"

namespace lifecore::bindings {

void init_capture_plans(nb::module_& m);
void init_capture_interventions(nb::module_& m);
void init_capture_session(nb::module_& m);

}  // namespace lifecore::bindings
