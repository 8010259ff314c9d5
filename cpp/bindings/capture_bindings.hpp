// The capture area's binding files, called in order by init_capture, and the checked
// conversions they share (an argument arrives as a handle and is converted with its name).
#pragma once

#include <cstdint>
#include <optional>

#include "arguments.hpp"
#include "bindings.hpp"

namespace lifecore::bindings {

void init_capture_plans(nb::module_& m);
void init_capture_interventions(nb::module_& m);
void init_capture_session(nb::module_& m);

// None or a non-negative int (never a bool) that fits in 64 bits.
inline std::optional<std::uint64_t> optional_uint_argument(nb::handle h, const char* call, const char* name) {
  if (h.is_none()) return std::nullopt;
  return uint_argument(h, call, name);
}

// A bool (an int is not a flag).
inline bool bool_argument(nb::handle h, const char* call, const char* name) {
  if (!PyBool_Check(h.ptr()))
    raise(ErrorKind::TypeMismatch, argument_label(call, name) + " must be a bool, got " + type_name_of(h));
  return h.ptr() == Py_True;
}

}  // namespace lifecore::bindings
