// The capture area's binding files, called in order by init_capture, and the checked
// conversions they share: every argument arrives as a handle and is converted with the
// call's and the argument's name, so a wrong type is a LifecoreTypeError, a number out of
// range a LifecoreOverflowError / InvalidArgumentError, never nanobind's overload error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "arguments.hpp"
#include "bindings.hpp"

namespace lifecore::bindings {

void init_capture_plans(nb::module_& m);
void init_capture_interventions(nb::module_& m);
void init_capture_session(nb::module_& m);
void init_capture_payloads(nb::module_& m);
void init_capture_observer(nb::module_& m);

// A count: an int or anything with __index__ (a NumPy integer), never a bool, within 64 bits.
inline std::uint64_t count_argument(nb::handle h, const char* call, const char* name) {
  return uint_argument(h, call, name);
}

// None or a count.
inline std::optional<std::uint64_t> optional_uint_argument(nb::handle h, const char* call, const char* name) {
  if (h.is_none()) return std::nullopt;
  return count_argument(h, call, name);
}

// A real number (int or float, never a bool, NumPy's or torch's included). Finiteness is the
// core's rule, not checked here.
inline double number_argument(nb::handle h, const char* call, const char* name) {
  const bool exact = PyFloat_CheckExact(h.ptr()) || (PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr()));
  if (!exact && (PyBool_Check(h.ptr()) ||
                 !(PyFloat_Check(h.ptr()) || PyLong_Check(h.ptr()) || PyIndex_Check(h.ptr()) ||
                   PyObject_HasAttrString(h.ptr(), "__float__")) ||
                 is_foreign_bool(h)))
    raise(ErrorKind::TypeMismatch, argument_label(call, name) + " must be a number, got " + type_name_of(h));
  return float_value(h, call, name);
}

// Converts one argument to T, naming it on refusal: counts, flags, numbers, strings,
// optionals (None), sequences (a list or tuple, each item named name[i]) and bound types.
template <class T>
struct ArgumentOf {
  static T from(nb::handle h, const char* call, const std::string& name) {
    if constexpr (std::is_same_v<T, bool>) {
      return bool_argument(h, call, name.c_str());
    } else if constexpr (std::is_same_v<T, std::uint64_t>) {
      return count_argument(h, call, name.c_str());
    } else if constexpr (std::is_same_v<T, std::uint32_t>) {
      std::uint64_t value = count_argument(h, call, name.c_str());
      if (value > UINT32_MAX)
        raise(ErrorKind::Overflow, argument_label(call, name.c_str()) + " must be at most " + std::to_string(UINT32_MAX));
      return static_cast<std::uint32_t>(value);
    } else if constexpr (std::is_same_v<T, double>) {
      return number_argument(h, call, name.c_str());
    } else if constexpr (std::is_same_v<T, std::string>) {
      return str_argument(h, call, name.c_str());
    } else {
      nb::handle type = nb::type<T>();
      if (!type.is_valid() || !nb::isinstance(h, type))
        raise(ErrorKind::TypeMismatch, argument_label(call, name.c_str()) + " must be a " +
                                           (type.is_valid() ? std::string(nb::type_name(type).c_str()) : "?") +
                                           ", got " + type_name_of(h));
      return nb::cast<T>(h);
    }
  }
};

template <class T>
struct ArgumentOf<std::optional<T>> {
  static std::optional<T> from(nb::handle h, const char* call, const std::string& name) {
    if (h.is_none()) return std::nullopt;
    return ArgumentOf<T>::from(h, call, name);
  }
};

template <class T>
struct ArgumentOf<std::vector<T>> {
  static std::vector<T> from(nb::handle h, const char* call, const std::string& name) {
    if (PyUnicode_Check(h.ptr()) || PyBytes_Check(h.ptr()) || !PySequence_Check(h.ptr()))
      raise(ErrorKind::TypeMismatch, argument_label(call, name.c_str()) + " must be a list, got " + type_name_of(h));
    // A snapshot: an item's __index__ may change the caller's list while it is read.
    const nb::tuple items = sequence_snapshot(h, argument_label(call, name.c_str()));
    const std::size_t size = items.size();
    std::vector<T> out;
    out.reserve(size);
    for (std::size_t i = 0; i < size; ++i)
      out.push_back(ArgumentOf<T>::from(items[i], call, name + "[" + std::to_string(i) + "]"));
    return out;
  }
};

template <class T>
T argument(nb::handle h, const char* call, const char* name) {
  return ArgumentOf<T>::from(h, call, name);
}

}  // namespace lifecore::bindings
