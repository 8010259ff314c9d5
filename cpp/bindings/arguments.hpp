// Checked conversion of Python arguments, for bindings whose parameters arrive as handles.
// Every public entry point answers a wrong type or an out-of-range number with a lifecore
// error that names the call and the argument: LifecoreTypeError (also a TypeError) for a
// wrong type, bool included where a number is expected (True is not a count), and
// LifecoreOverflowError (also an OverflowError and a ValueError) for a number outside what
// the argument can hold. Range rules narrower than the type stay in the core.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "lifecore/error.hpp"

namespace lifecore::bindings {

inline std::string type_name_of(nb::handle h) { return nb::type_name(h.type()).c_str(); }

inline std::string argument_label(const char* call, const char* name) {
  return std::string(call) + ": argument '" + name + "'";
}

// A range's end as a reader takes it in: the 64- and 32-bit type limits as powers of two
// (2**64 - 1, not 18446744073709551615), any other number as itself.
inline std::string bound_text(std::int64_t value) {
  if (value == std::numeric_limits<std::int64_t>::min()) return "-2**63";
  if (value == std::numeric_limits<std::int64_t>::max()) return "2**63 - 1";
  if (value == std::numeric_limits<std::int32_t>::min()) return "-2**31";
  if (value == std::numeric_limits<std::int32_t>::max()) return "2**31 - 1";
  if (value == std::numeric_limits<std::uint32_t>::max()) return "2**32 - 1";
  return std::to_string(value);
}
inline std::string bound_text(std::uint64_t value) {
  if (value == std::numeric_limits<std::uint64_t>::max()) return "2**64 - 1";
  if (value <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    return bound_text(static_cast<std::int64_t>(value));
  return std::to_string(value);
}

// "Type: message" of a Python exception (the type alone when its text is empty or cannot be
// read), for a lifecore error that quotes what user code raised. A lone surrogate, which
// UTF-8 cannot encode, is kept as its backslash escape.
inline std::string python_error_summary(const nb::python_error& e) {
  std::string summary = nb::type_name(e.type()).c_str();
  PyObject* text = PyObject_Str(e.value().ptr());
  if (!text) {
    PyErr_Clear();
    return summary;
  }
  PyObject* encoded = PyUnicode_Check(text) ? PyUnicode_AsEncodedString(text, "utf-8", "backslashreplace") : nullptr;
  Py_DECREF(text);
  if (!encoded) {
    PyErr_Clear();
    return summary;
  }
  const Py_ssize_t size = PyBytes_Size(encoded);  // the limited API's: the macros are not in it
  const char* data = PyBytes_AsString(encoded);
  if (data && size > 0) summary += ": " + std::string(data, static_cast<std::size_t>(size));
  Py_DECREF(encoded);
  return summary;
}

// Whether `h` is taken where the stubs say Sequence: a list or tuple, or another object that
// reads by index (a deque, a range, a Sequence of the caller's); never a str, bytes or
// bytearray, whose items are characters. An iterator is not one (it reads once).
inline bool is_item_sequence(nb::handle h) {
  PyObject* o = h.ptr();
  if (PyList_Check(o) || PyTuple_Check(o)) return true;
  if (PyUnicode_Check(o) || PyBytes_Check(o) || PyByteArray_Check(o) || PyDict_Check(o)) return false;
  return PySequence_Check(o) == 1;
}

// The items of a sequence as a tuple the caller holds for the whole call. Reading the
// caller's list in place while Python code runs (an item's __index__ or __dlpack__, a list
// subclass's __iter__, another thread while the interpreter lock is let go) could see it grow
// past the count taken, shrink, or drop an item whose converted form is still in use.
// Python's own refusal to read it (a TypeError for a 0-d NumPy array, NotImplementedError for a
// memoryview of several dimensions, MemoryError or OverflowError for a __len__ past what memory
// holds) is a LifecoreTypeError naming `label` and quoting it; anything else its own code
// raised (a list subclass's __iter__, Ctrl-C) passes as it is.
inline nb::tuple sequence_snapshot(nb::handle sequence, const std::string& label) {
  PyObject* items = PySequence_Tuple(sequence.ptr());
  if (items) return nb::steal<nb::tuple>(items);
  nb::python_error error;
  const bool unreadable = error.matches(PyExc_TypeError) || error.matches(PyExc_NotImplementedError) ||
                          error.matches(PyExc_MemoryError) || error.matches(PyExc_OverflowError);
  if (!unreadable) throw error;
  raise(ErrorKind::TypeMismatch, label + " could not be read as a sequence (" + python_error_summary(error) + ")");
}

// The numbers of a list Python code answered (a backend's shape, an array's
// __array_interface__), each converted as nb::cast converts one, read from a snapshot: an
// item's __index__ may change the list, which nanobind's caster reads in place. Anything but a
// list goes to the caster as it is (a tuple cannot change; another sequence it copies itself).
template <typename T>
std::vector<T> numbers_of(nb::handle value) {
  if (!PyList_Check(value.ptr())) return nb::cast<std::vector<T>>(value);
  PyObject* snapshot = PySequence_Tuple(value.ptr());
  if (!snapshot) throw nb::python_error();
  const nb::tuple items = nb::steal<nb::tuple>(snapshot);
  std::vector<T> out;
  out.reserve(nb::len(items));
  for (nb::handle item : items) out.push_back(nb::cast<T>(item));
  return out;
}

// numbers_of, or false where a value is not numbers (an Exception its own code raised
// included; an interrupt stays one).
template <typename T>
bool try_numbers_of(nb::handle value, std::vector<T>& out) {
  try {
    out = numbers_of<T>(value);
    return true;
  } catch (const nb::cast_error&) {
    return false;
  } catch (nb::python_error& error) {
    if (!error.matches(PyExc_Exception)) throw;
    return false;
  }
}

// `module` as an interned Python name, made once per name (a handful: numpy, numpy.ma, torch)
// and kept for the process, under the interpreter lock: a lookup of a module not loaded yet,
// which a guarded call's argument may ask for, makes no string from C text.
inline PyObject* module_name(const char* module) {
  static std::vector<std::pair<std::string, PyObject*>> names;
  for (const auto& [text, name] : names)
    if (text == module) return name;
  PyObject* name = PyUnicode_InternFromString(module);
  if (name) names.emplace_back(module, name);
  return name;
}

// The attribute `name` of the module `module` once that module is loaded (no instance of its
// types can exist before), else null; looked up until found, then kept in `found` with its
// reference, good for the process.
inline PyObject* loaded_attribute(const char* module, const char* name, PyObject*& found) {
  if (found) return found;
  PyObject* key = module_name(module);
  PyObject* loaded = key ? PyImport_GetModule(key) : nullptr;  // a new reference; null while not loaded
  if (!loaded) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject* attribute = PyObject_GetAttrString(loaded, name);
  Py_DECREF(loaded);
  if (!attribute) PyErr_Clear();
  found = attribute;  // the reference is kept
  return found;
}

// loaded_attribute, a type (else null).
inline PyTypeObject* loaded_type(const char* module, const char* name, PyTypeObject*& found) {
  if (found) return found;
  PyObject* attribute = nullptr;
  if (!loaded_attribute(module, name, attribute)) return nullptr;
  if (!PyType_Check(attribute)) {
    Py_DECREF(attribute);
    return nullptr;
  }
  found = reinterpret_cast<PyTypeObject*>(attribute);  // the reference is kept
  return found;
}

// NumPy's bool type: NumPy before 2.3 still lets __index__ read its bool as a number (with a
// DeprecationWarning).
inline PyTypeObject* numpy_bool_type() {
  static PyTypeObject* found = nullptr;
  return loaded_type("numpy", "bool_", found);
}

// NumPy's masked array (numpy.ma, which NumPy loads with itself): its buffer and its DLPack
// export show the data without the mask.
inline bool is_numpy_masked_array(nb::handle h) {
  static PyTypeObject* found = nullptr;
  PyTypeObject* type = loaded_type("numpy.ma", "MaskedArray", found);
  return type != nullptr && PyObject_TypeCheck(h.ptr(), type);
}

// Whether a buffer's struct format (PEP 3118) holds Python object references ('O', as a NumPy
// object array exports): their bytes are addresses of live objects, never data to copy to a
// device, nor to write over. Field names (between colons) are not codes.
inline bool format_holds_objects(const char* format) noexcept {
  if (format == nullptr) return false;
  bool in_name = false;
  for (const char* c = format; *c != '\0'; ++c) {
    if (*c == ':') in_name = !in_name;
    else if (!in_name && *c == 'O') return true;
  }
  return false;
}

// Whether `h` exports a buffer with `flags` (PyBUF_*): a probe, let go at once and leaving no
// error set, that names the cause (read-only, Fortran order) once a stricter request failed.
inline bool exports_buffer(nb::handle h, int flags) {
  Py_buffer probe;
  if (PyObject_GetBuffer(h.ptr(), &probe, flags) != 0) {
    PyErr_Clear();
    return false;
  }
  PyBuffer_Release(&probe);
  return true;
}

// Releases `view` and raises LifecoreTypeError when it holds Python objects: "<subject> holds
// Python objects (buffer format '...'): <why>".
inline void refuse_object_buffer(Py_buffer& view, const std::string& subject, const char* why) {
  if (!format_holds_objects(view.format)) return;
  const std::string format = view.format;
  PyBuffer_Release(&view);
  raise(ErrorKind::TypeMismatch, subject + " holds Python objects (buffer format '" + format + "'): " + why);
}

// torch.Tensor, once torch is loaded (no tensor exists before).
inline PyTypeObject* torch_tensor_type() {
  static PyTypeObject* type = nullptr;
  return loaded_type("torch", "Tensor", type);
}

inline bool is_numpy_bool(nb::handle h) {
  PyTypeObject* type = numpy_bool_type();
  return type != nullptr && Py_TYPE(h.ptr()) == type;
}

// NumPy's scalar types (numpy.generic): its numbers, and its bool (is_numpy_bool).
inline bool is_numpy_scalar(nb::handle h) {
  static PyTypeObject* found = nullptr;
  PyTypeObject* type = loaded_type("numpy", "generic", found);
  return type != nullptr && PyObject_TypeCheck(h.ptr(), type);
}

// getattr(h, name), or null when it raised an Exception (an interrupt stays one).
inline nb::object attribute_or_null(nb::handle h, const char* name) {
  PyObject* attribute = PyObject_GetAttrString(h.ptr(), name);
  if (!attribute) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) throw nb::python_error();
    PyErr_Clear();
    return {};
  }
  return nb::steal(attribute);
}

// Whether the text object `text` is one of `names`, with no Python call.
inline bool text_is(nb::handle text, std::initializer_list<const char*> names) {
  if (!PyUnicode_Check(text.ptr())) return false;
  for (const char* name : names)
    if (PyUnicode_CompareWithASCIIString(text.ptr(), name) == 0) return true;
  return false;
}

// Whether `h` is another library's bool: NumPy's bool scalar, or an array-like whose dtype is
// bool (a 0-d torch bool tensor's __index__ reads torch.tensor(True) as 1). Looked at only
// past the exact int, float and bool checks, and without a Python call for NumPy's scalars,
// torch's tensors and dtypes with a `kind` (NumPy's): a NumPy dtype's str is Python code,
// which made every NumPy number argument microseconds slower.
inline bool is_foreign_bool(nb::handle h) {
  if (is_numpy_bool(h)) return true;
  if (is_numpy_scalar(h)) return false;
  const nb::object dtype = attribute_or_null(h, "dtype");  // a tensor subclass's may raise: no bool it can say
  if (!dtype.is_valid()) return false;
  static PyTypeObject* torch_dtype = nullptr;
  static PyObject* torch_bool = nullptr;
  if (PyTypeObject* type = loaded_type("torch", "dtype", torch_dtype); type && PyObject_TypeCheck(dtype.ptr(), type))
    return dtype.ptr() == loaded_attribute("torch", "bool", torch_bool);
  if (const nb::object kind = attribute_or_null(dtype, "kind"); kind.is_valid())
    return text_is(kind, {"b"});  // NumPy's and its likes' dtypes: 'b' is bool
  // Another library's dtype: its name.
  PyObject* name = PyObject_Str(dtype.ptr());
  if (!name) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) throw nb::python_error();
    PyErr_Clear();
    return false;
  }
  return text_is(nb::steal(name), {"bool", "torch.bool"});
}

// The int `h` stands for: an int, or anything with __index__ (a NumPy or torch integer, as the
// runtime's and the capture's counts take them), never a bool, NumPy's or torch's included.
// An invalid object when `h` is none of these, a float or a many-element array among them
// (their __index__ refuses with TypeError); any other error of __index__ propagates.
inline nb::object index_of(nb::handle h) {
  if (PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr())) return nb::borrow(h);
  if (PyBool_Check(h.ptr()) || !PyIndex_Check(h.ptr()) || is_foreign_bool(h)) return {};
  if (is_numpy_masked_array(h)) return {};  // its __index__ reads the value beneath its mask
  PyObject* index = PyNumber_Index(h.ptr());
  if (!index) {
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw nb::python_error();
    PyErr_Clear();
    return {};
  }
  return nb::steal(index);
}

// index_of(h), or LifecoreTypeError naming the argument. A count read from an array is a count
// like any other.
inline nb::object integer_argument(nb::handle h, const char* call, const char* name) {
  nb::object index = index_of(h);
  if (!index.is_valid()) {
    if (is_numpy_masked_array(h))
      raise(ErrorKind::InvalidArgument, argument_label(call, name) +
                                            " is a NumPy masked array, whose value beneath the mask would be read: "
                                            "pass an int");
    raise(ErrorKind::TypeMismatch, argument_label(call, name) + " must be an int, got " + type_name_of(h));
  }
  return index;
}

// An integer (see integer_argument) within [min, max]; `max` above INT64_MAX is not
// representable here, use uint_argument. Above `max` is an overflow; below `min` too when
// `min` is a type's limit (an int32 or int64 argument, which no semantic minimum is), else an
// invalid argument (a count below 1, a negative size).
inline std::int64_t int_argument(nb::handle arg, const char* call, const char* name,
                                 std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                                 std::int64_t max = std::numeric_limits<std::int64_t>::max()) {
  const nb::object integer = integer_argument(arg, call, name);
  const nb::handle h = integer;
  int overflow = 0;
  long long value = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
  if (overflow == 0 && value == -1 && PyErr_Occurred()) throw nb::python_error();
  if (overflow != 0 || value < min || value > max) {
    std::string shown = nb::str(h).c_str();
    const bool below_type = value < min && min <= std::numeric_limits<std::int32_t>::min();
    raise(overflow != 0 || value > max || below_type ? ErrorKind::Overflow : ErrorKind::InvalidArgument,
          argument_label(call, name) + " must be between " + bound_text(min) + " and " + bound_text(max) +
              ", got " + shown);
  }
  return value;
}

// The int `integer` (index_of's) as an int64, or nullopt past 64 bits; an invalid object
// (index_of found no integer) is nullopt too.
inline std::optional<std::int64_t> int64_of(const nb::object& integer) {
  if (!integer.is_valid()) return std::nullopt;
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(integer.ptr(), &overflow);
  if (overflow == 0 && value == -1 && PyErr_Occurred()) throw nb::python_error();
  if (overflow != 0) return std::nullopt;
  return value;
}

// A count of tokens or pages whose lower bound the core checks in its own words (0 and a
// negative count name the call's rule): refused here only past int64, saying the range a count
// may take (1 to 2**63 - 1), where int_argument would state int64's.
inline std::int64_t positive_count_argument(nb::handle arg, const char* call, const char* name) {
  const nb::object integer = integer_argument(arg, call, name);
  const std::optional<std::int64_t> value = int64_of(integer);
  if (!value) int_argument(integer, call, name, 1);  // raises
  return *value;
}

// A non-negative integer (see integer_argument) up to `max`.
inline std::uint64_t uint_argument(nb::handle arg, const char* call, const char* name,
                                   std::uint64_t max = std::numeric_limits<std::uint64_t>::max(),
                                   std::uint64_t min = 0) {
  const nb::object integer = integer_argument(arg, call, name);
  const nb::handle h = integer;
  const bool negative = PyObject_RichCompareBool(h.ptr(), nb::int_(0).ptr(), Py_LT) == 1;
  unsigned long long value = 0;
  bool too_big = false;
  if (!negative) {
    value = PyLong_AsUnsignedLongLong(h.ptr());
    if (value == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      too_big = true;
    }
  }
  if (negative || too_big || value < min || value > max) {
    std::string shown = nb::str(h).c_str();
    raise(too_big || value > max ? ErrorKind::Overflow : ErrorKind::InvalidArgument,
          argument_label(call, name) + " must be between " + bound_text(min) + " and " + bound_text(max) +
              ", got " + shown);
  }
  return value;
}

// Whether `h` is a real number other than a bool: an int, a float, or a numbers.Real (where
// NumPy registers its integer and floating types; numpy.bool_ is not one).
inline bool is_real_number(nb::handle h) {
  if (PyBool_Check(h.ptr())) return false;
  if (PyFloat_Check(h.ptr()) || PyLong_Check(h.ptr())) return true;
  // Kept for the process's life: a static object would be released after the interpreter.
  static const nb::handle real = nb::object(nb::module_::import_("numbers").attr("Real")).release();
  const int is_real = PyObject_IsInstance(h.ptr(), real.ptr());
  if (is_real < 0) throw nb::python_error();
  return is_real == 1;
}

// `h` as a double, or why not, named: an OverflowError (an int past a double's range) is
// LifecoreOverflowError, a TypeError or another Exception its __float__ raised is
// LifecoreTypeError or InvalidArgumentError quoting it, and an interrupt stays one.
inline double float_value(nb::handle h, const char* call, const char* name) {
  const double value = PyFloat_AsDouble(h.ptr());
  if (value != -1.0 || !PyErr_Occurred()) return value;
  nb::python_error error;
  if (error.matches(PyExc_OverflowError))
    raise(ErrorKind::Overflow, argument_label(call, name) + " is too large for a float");
  if (!error.matches(PyExc_Exception)) throw error;
  raise(error.matches(PyExc_TypeError) ? ErrorKind::TypeMismatch : ErrorKind::InvalidArgument,
        argument_label(call, name) + " could not be read as a float (" + python_error_summary(error) + ")");
}

// A real number (see is_real_number), finite unless `allow_infinite`; NaN is always refused.
inline double real_argument(nb::handle h, const char* call, const char* name, bool allow_infinite = false) {
  if (!is_real_number(h))
    raise(ErrorKind::TypeMismatch, argument_label(call, name) + " must be a number, got " + type_name_of(h));
  const double value = float_value(h, call, name);
  if (std::isnan(value) && allow_infinite)
    raise(ErrorKind::InvalidArgument, argument_label(call, name) + " must be a number, not NaN");
  if (std::isnan(value) || (!allow_infinite && std::isinf(value)))
    raise(ErrorKind::InvalidArgument, argument_label(call, name) + " must be a finite number, got " +
                                          std::string(nb::str(h).c_str()));
  return value;
}

// A wait's timeout in seconds: None, or a real number (an int, a float, a NumPy number; never
// a bool). An integer too large for a float is as good as infinite (and a hugely negative one
// is negative).
inline std::optional<double> timeout_argument(nb::handle arg, const char* call) {
  if (arg.is_none()) return std::nullopt;
  // An integer; an object whose __index__ refuses (a 0-d float array) is read as a number below.
  const nb::object integer =
      !PyBool_Check(arg.ptr()) && (PyLong_Check(arg.ptr()) || PyIndex_Check(arg.ptr())) ? index_of(arg) : nb::object();
  if (integer.is_valid()) {
    const nb::handle h = integer;
    const int negative = PyObject_RichCompareBool(h.ptr(), nb::int_(0).ptr(), Py_LT);
    if (negative < 0) throw nb::python_error();
    if (negative)  // named as given: as a double -2**63 - 1 read "got -9223372036854775808", and below it "-inf"
      raise(ErrorKind::InvalidArgument, std::string(call) + ": timeout must not be negative, got " +
                                            nb::cast<std::string>(nb::str(h)));
    const double value = PyLong_AsDouble(h.ptr());
    if (value == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return std::numeric_limits<double>::infinity();  // too large for a float: a deadline no clock reaches
    }
    return value;
  }
  return real_argument(arg, call, "timeout", /*allow_infinite=*/true);
}

// A bool (an int is not a flag).
inline bool bool_argument(nb::handle h, const char* call, const char* name) {
  if (!PyBool_Check(h.ptr()))
    raise(ErrorKind::TypeMismatch, argument_label(call, name) + " must be a bool, got " + type_name_of(h));
  return h.ptr() == Py_True;
}

// A str.
inline std::string str_argument(nb::handle h, const char* call, const char* name) {
  if (!PyUnicode_Check(h.ptr()))
    raise(ErrorKind::TypeMismatch, argument_label(call, name) + " must be a str, got " + type_name_of(h));
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(h.ptr(), &size);
  if (!data) {
    nb::python_error error;  // a lone surrogate, which UTF-8 cannot hold
    if (!error.matches(PyExc_UnicodeError)) throw error;
    raise(ErrorKind::InvalidArgument,
          argument_label(call, name) + " must be text UTF-8 can encode (" + python_error_summary(error) + ")");
  }
  return std::string(data, static_cast<std::size_t>(size));
}

// An instance of bound type T (a reference into the Python object).
template <class T>
T& object_argument(nb::handle h, const char* call, const char* name, const char* expected) {
  if (!nb::isinstance<T>(h))
    raise(ErrorKind::TypeMismatch, argument_label(call, name) + " must be " + expected + ", got " + type_name_of(h));
  return nb::cast<T&>(h);
}

}  // namespace lifecore::bindings
