// Makes nanobind's own argument failures lifecore errors, for every bound function at once.
//
// When no overload of a bound function accepts the arguments, nanobind raises a plain
// TypeError ("incompatible function arguments"), and it accepts a bool wherever an int or a
// float is expected (True is not a count). Neither is a lifecore error. Instead of converting
// arguments by hand in every binding, the package guards each bound function once, at import
// (lifecore._call_guard): the function's vectorcall entry is replaced by one that
//   - on success costs a scan of the arguments for a bool (a pointer compare each),
//   - refuses a bool where the function's signature takes only numbers, and
//   - turns nanobind's overload failure into the LifecoreTypeError / LifecoreOverflowError that
//     lifecore._call_guard.explain builds (naming the argument and what it expects), and
//   - puts the call's name in front of a DriverError (which names only the driver call) and of
//     a capture refusal that names none (lifecore._call_guard.name_operation).
// Hot paths (launch, step, observe, replay) pay no Python call; the Python side only runs when
// a call is refused anyway.
#include <array>
#include <cstddef>
#include <string>
#include <utility>

#include "arguments.hpp"
#include "bindings.hpp"
#include "lifecore/error.hpp"

namespace lifecore::bindings {
namespace {

using Vectorcall = PyObject* (*)(PyObject*, PyObject* const*, size_t, PyObject*);

// nanobind picks each function's dispatcher from a handful of static functions; one guarded
// wrapper per (dispatcher, bool policy) pair, so the wrapper needs no per-call lookup.
constexpr std::size_t max_dispatchers = 8;
Vectorcall dispatchers[max_dispatchers] = {};
std::size_t dispatcher_count = 0;

// lifecore._call_guard.check_bools or .explain, looked up on each (refused) call: a reference
// kept in a static would keep the package's objects alive past the interpreter's shutdown.
nb::object python_half(const char* name) {
  return nb::module_::import_("lifecore._call_guard").attr(name);
}

// Where a function object keeps its vectorcall entry. nanobind's function objects start with
// the variable-size header followed by that entry (the type's tp_vectorcall_offset says so;
// the limited API cannot read the offset, so it uses the same layout).
Vectorcall* vectorcall_slot(PyObject* func) {
#if defined(Py_LIMITED_API)
  return reinterpret_cast<Vectorcall*>(reinterpret_cast<char*>(func) + sizeof(PyVarObject));
#else
  return reinterpret_cast<Vectorcall*>(reinterpret_cast<char*>(func) + Py_TYPE(func)->tp_vectorcall_offset);
#endif
}

// How many positional arguments a call has. nanobind's constructor path marks a trusted
// `self` with the bit below the arguments-offset flag, which is not part of the count.
Py_ssize_t positional_count(size_t nargsf) {
  return static_cast<Py_ssize_t>(nargsf & ~(PY_VECTORCALL_ARGUMENTS_OFFSET | (PY_VECTORCALL_ARGUMENTS_OFFSET >> 1)));
}

// The call's arguments as Python values: a tuple and a dict of keywords (or None).
bool pack_arguments(PyObject* const* args, size_t nargsf, PyObject* kwnames, nb::object& positional,
                    nb::object& keywords) {
  const Py_ssize_t nargs = positional_count(nargsf);
  positional = nb::steal(PyTuple_New(nargs));
  if (!positional.is_valid()) return false;
  for (Py_ssize_t i = 0; i < nargs; ++i) PyTuple_SetItem(positional.ptr(), i, nb::borrow(args[i]).release().ptr());
  keywords = nb::none();
  if (kwnames != nullptr) {
    keywords = nb::steal(PyDict_New());
    if (!keywords.is_valid()) return false;
    const Py_ssize_t count = PyTuple_Size(kwnames);
    for (Py_ssize_t i = 0; i < count; ++i)
      if (PyDict_SetItem(keywords.ptr(), PyTuple_GetItem(kwnames, i), args[nargs + i]) != 0) return false;
  }
  return true;
}

// A bool reached a function whose signature has a number-only parameter: let the Python side
// decide (it knows which parameters take a bool). Returns false with the error set to refuse.
bool bools_accepted(PyObject* func, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  nb::object positional, keywords;
  if (!pack_arguments(args, nargsf, kwnames, positional, keywords)) return false;
  try {
    python_half("check_bools")(nb::handle(func), positional, keywords);
  } catch (nb::python_error& error) {
    error.restore();
    return false;
  } catch (...) {  // nothing may unwind into the interpreter's call machinery
    PyErr_NoMemory();
    return false;
  }
  return true;
}

// The Python half (naming, explaining) raised `failed` while the call's own error (`type`,
// `value`, `traceback`, owned) waited. What a signal handler raises there (KeyboardInterrupt,
// SystemExit: anything that is no Exception) must not be lost: it becomes the error, with the
// call's own as its context, the three references are consumed and true is returned. An
// Exception is the Python half's own failure: false, and the caller keeps its error.
bool interrupted(nb::python_error& failed, PyObject*& type, PyObject*& value, PyObject*& traceback) {
  if (failed.matches(PyExc_Exception)) return false;
  failed.restore();
  PyObject *signal_type = nullptr, *signal_value = nullptr, *signal_traceback = nullptr;
  PyErr_Fetch(&signal_type, &signal_value, &signal_traceback);
  PyErr_NormalizeException(&signal_type, &signal_value, &signal_traceback);
  if (signal_value != nullptr && value != nullptr) {
    PyException_SetContext(signal_value, value);  // steals the reference
    value = nullptr;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  type = value = traceback = nullptr;
  PyErr_Restore(signal_type, signal_value, signal_traceback);
  return true;
}

// A DriverError names the driver call that failed, and a capture session's refusals often name
// no call at all; name_operation puts the caller's lifecore call in front (the error, its type
// and traceback stay; a failure there keeps it as is). Any other error passes untouched. The
// error is fetched first: finding LifecoreError may import lifecore.errors, which must not run
// with an exception set.
void name_operation(PyObject* func) {
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (value != nullptr) {
    try {
      if (PyErr_GivenExceptionMatches(type, class_for(ErrorKind::Lifecore)))
        python_half("name_operation")(nb::handle(func), nb::handle(value));
    } catch (nb::python_error& failed) {  // naming is a courtesy: the driver's error stands
      if (interrupted(failed, type, value, traceback)) return;
    } catch (...) {
    }
    PyErr_Clear();
  }
  PyErr_Restore(type, value, traceback);
}

// The dispatcher failed with a TypeError: if it was nanobind's own "incompatible function
// arguments" (or the translator's nameless wrong-type floor), replace it with the lifecore
// error that explain() builds; any other error passes through untouched.
void translate_failure(PyObject* func, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (!PyErr_ExceptionMatches(PyExc_TypeError)) {
    name_operation(func);
    return;
  }
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (value == nullptr) {
    PyErr_Restore(type, value, traceback);
    return;
  }
  nb::object positional, keywords;
  PyObject* replacement = nullptr;
  if (pack_arguments(args, nargsf, kwnames, positional, keywords)) {
    try {
      replacement = python_half("explain")(nb::handle(func), positional, keywords, nb::handle(value)).release().ptr();
    } catch (nb::python_error& failed) {
      if (interrupted(failed, type, value, traceback)) return;
      replacement = nullptr;  // explain itself failed: keep nanobind's error
    } catch (...) {
      replacement = nullptr;
    }
  }
  if (replacement == nullptr || replacement == Py_None) {  // not nanobind's failure (or explain failed)
    Py_XDECREF(replacement);
    PyErr_Clear();
    PyErr_Restore(type, value, traceback);
    return;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(replacement)), replacement);
  Py_DECREF(replacement);
}

// Whether the argument is a bool of Python's or torch's (a torch bool tensor: nanobind reads a
// count through __index__, which takes torch.tensor(True) as 1); -1 with the error set when
// reading a tensor's dtype was interrupted. Most arguments are answered by their type alone:
// an int, str, bytes, tuple, list, dict or float, None, or one of lifecore's own objects is no
// tensor, and only a torch tensor pays a read of its dtype.
int is_a_bool(PyObject* arg) noexcept {
  if (Py_IS_TYPE(arg, &PyBool_Type)) return 1;
  constexpr unsigned long builtin = Py_TPFLAGS_LONG_SUBCLASS | Py_TPFLAGS_UNICODE_SUBCLASS | Py_TPFLAGS_BYTES_SUBCLASS |
                                    Py_TPFLAGS_TUPLE_SUBCLASS | Py_TPFLAGS_LIST_SUBCLASS | Py_TPFLAGS_DICT_SUBCLASS;
  if ((PyType_GetFlags(Py_TYPE(arg)) & builtin) != 0 || arg == Py_None || PyFloat_Check(arg) || nb::inst_check(arg))
    return 0;
  PyTypeObject* tensor = torch_tensor_type();
  if (tensor == nullptr || !PyObject_TypeCheck(arg, tensor)) return 0;
  try {
    return is_foreign_bool(nb::handle(arg)) ? 1 : 0;
  } catch (nb::python_error& error) {
    error.restore();
    return -1;
  }
}

template <std::size_t I, bool CheckBools>
PyObject* guarded(PyObject* func, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if constexpr (CheckBools) {
    const Py_ssize_t count = positional_count(nargsf) + (kwnames ? PyTuple_Size(kwnames) : 0);
    for (Py_ssize_t i = 0; i < count; ++i) {
      const int bool_here = is_a_bool(args[i]);
      if (bool_here < 0) return nullptr;
      if (bool_here) {
        if (!bools_accepted(func, args, nargsf, kwnames)) return nullptr;
        break;
      }
    }
  }
  PyObject* result = dispatchers[I](func, args, nargsf, kwnames);
  if (result == nullptr) translate_failure(func, args, nargsf, kwnames);
  return result;
}

template <std::size_t... I>
constexpr auto make_table(std::index_sequence<I...>, bool check_bools) {
  return check_bools ? std::array<Vectorcall, max_dispatchers>{&guarded<I, true>...}
                     : std::array<Vectorcall, max_dispatchers>{&guarded<I, false>...};
}

const std::array<Vectorcall, max_dispatchers> with_bool_check =
    make_table(std::make_index_sequence<max_dispatchers>{}, true);
const std::array<Vectorcall, max_dispatchers> without_bool_check =
    make_table(std::make_index_sequence<max_dispatchers>{}, false);

bool is_guarded(Vectorcall entry) {
  for (std::size_t i = 0; i < max_dispatchers; ++i)
    if (entry == with_bool_check[i] || entry == without_bool_check[i]) return true;
  return false;
}

// Installs the guard on one bound function (idempotent).
void guard_function(nb::handle func, bool check_bools_here) {
  std::string kind = nb::type_name(func.type()).c_str();
  if (kind != "nanobind.nb_func" && kind != "nanobind.nb_method")
    raise(ErrorKind::TypeMismatch, "_guard_function: not a bound function: " + kind);
  Vectorcall* slot = vectorcall_slot(func.ptr());
  if (is_guarded(*slot)) return;
  std::size_t index = 0;
  while (index < dispatcher_count && dispatchers[index] != *slot) ++index;
  if (index == dispatcher_count) {
    if (dispatcher_count == max_dispatchers)
      raise(ErrorKind::InvalidArgument, "_guard_function: more nanobind dispatchers than expected");
    dispatchers[dispatcher_count++] = *slot;
  }
  *slot = check_bools_here ? with_bool_check[index] : without_bool_check[index];
}

// Classes without a constructor: nanobind's type call raises a plain TypeError ("no
// constructor defined"); the guarded type call turns it into a LifecoreTypeError through explain.
Vectorcall type_dispatcher = nullptr;

PyObject* guarded_construction(PyObject* type, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  PyObject* result = type_dispatcher(type, args, nargsf, kwnames);
  if (result == nullptr) translate_failure(type, args, nargsf, kwnames);
  return result;
}

// Where a bound class keeps its call entry. The full API names it (tp_vectorcall). The limited
// API hides it: nanobind keeps it in its own per-type data, at the offset its metaclass declares
// as __vectorcalloffset__, which reads as the entry itself; the one word of the class object
// holding that value is the slot (none, or more than one, and the class stays unguarded).
Vectorcall* type_call_slot(nb::handle cls) {
#if defined(Py_LIMITED_API)
  nb::object entry = nb::getattr(cls, "__vectorcalloffset__", nb::none());
  if (entry.is_none()) return nullptr;
  void* value = PyLong_AsVoidPtr(entry.ptr());
  const Py_ssize_t size = PyLong_AsSsize_t(nb::getattr(cls.type(), "__basicsize__").ptr());
  if (value == nullptr || size <= 0) {
    PyErr_Clear();
    return nullptr;
  }
  Vectorcall* found = nullptr;
  auto* words = reinterpret_cast<void**>(cls.ptr());
  for (Py_ssize_t i = 0; i < size / static_cast<Py_ssize_t>(sizeof(void*)); ++i) {
    if (words[i] != value) continue;
    if (found != nullptr) return nullptr;  // ambiguous: leave the class alone
    found = reinterpret_cast<Vectorcall*>(&words[i]);
  }
  return found;
#else
  return &reinterpret_cast<PyTypeObject*>(cls.ptr())->tp_vectorcall;
#endif
}

// Guards construction of one bound class; false where it cannot, so the package can say which
// classes keep nanobind's error.
bool guard_type(nb::handle cls) {
  if (!PyType_Check(cls.ptr())) raise(ErrorKind::TypeMismatch, "_guard_type: not a class");
  Vectorcall* slot = type_call_slot(cls);
  if (slot == nullptr || *slot == nullptr) return false;
  if (*slot == &guarded_construction) return true;
  if (type_dispatcher == nullptr) type_dispatcher = *slot;
  if (*slot != type_dispatcher) return false;  // not nanobind's: leave it
  *slot = &guarded_construction;
  return true;
}

}  // namespace

void init_call_guard(nb::module_& m) {
  using namespace nb::literals;
  m.def("_guard_function", &guard_function, "func"_a, "check_bools"_a,
        "Internal (lifecore._call_guard): guards one bound function; see the package's call guard.");
  m.def("_guard_type", &guard_type, "cls"_a,
        "Internal (lifecore._call_guard): guards the construction of one bound class; False if it cannot.");
}

}  // namespace lifecore::bindings
