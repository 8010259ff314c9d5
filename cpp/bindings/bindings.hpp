// One init_<area> per binding file; module.cpp calls them in order, each with the submodule of
// its area (lifecore._core.driver, .runtime, .sequence, .capture; errors at the top). Bindings
// only translate: argument conversion, GIL release around blocking calls, errors to Python
// exceptions.
#pragma once

#include <nanobind/nanobind.h>

#include "lifecore/error.hpp"

namespace lifecore::bindings {

namespace nb = nanobind;

void init_errors(nb::module_& m);
void init_driver(nb::module_& m);
void init_runtime(nb::module_& m);
void init_sequence(nb::module_& m);
void init_capture(nb::module_& m);

// The lifecore.errors exception of `error` (its class by kind, its attributes set), not raised.
nb::object python_exception(const Error& error);
// Sets the Python exception of `error`'s kind (lifecore.errors), with its attributes: for the
// few entries written as plain CPython methods, outside nanobind's exception translation.
void raise_python(const Error& error);

}  // namespace lifecore::bindings
