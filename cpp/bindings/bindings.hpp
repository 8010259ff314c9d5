// One init_<area> per binding file; module.cpp calls them in order, each with the submodule of
// its area (lifecore._core.driver, .runtime, .sequence, .capture; errors at the top). Bindings
// only translate: argument conversion, GIL release around blocking calls, errors to Python
// exceptions.
#pragma once

#include <nanobind/nanobind.h>

namespace lifecore::bindings {

namespace nb = nanobind;

void init_errors(nb::module_& m);
void init_driver(nb::module_& m);
void init_runtime(nb::module_& m);
void init_sequence(nb::module_& m);
void init_capture(nb::module_& m);

}  // namespace lifecore::bindings
