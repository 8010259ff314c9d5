// Translates lifecore::Error into the exception classes of lifecore.errors, by kind.
// The classes are defined in Python (python/lifecore/errors.py) so they carry docstrings
// and attributes; they are looked up once, on the first error.
#include <array>
#include <new>
#include <typeinfo>
#include <mutex>

#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "lifecore/error.hpp"

namespace lifecore::bindings {

PyObject* class_for(ErrorKind kind) {
  static std::array<PyObject*, error_kind_count> classes{};
  static std::once_flag loaded;
  std::call_once(loaded, [] {
    nb::module_ errors = nb::module_::import_("lifecore.errors");
    for (std::size_t i = 0; i < classes.size(); ++i)  // kept for the process lifetime
      classes[i] = errors.attr(error_class_names[i].data()).inc_ref().ptr();
  });
  auto index = static_cast<std::size_t>(kind);
  return index < classes.size() ? classes[index] : classes[0];
}

nb::str python_text(const std::string& text) {
  PyObject* decoded = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace");
  if (!decoded) throw nb::python_error();
  return nb::steal<nb::str>(decoded);
}

nb::object python_exception(const Error& error) {
  // The whole message: a quoted name may hold a NUL, where what() would end it.
  nb::object instance = nb::borrow(class_for(error.kind()))(python_text(error.message()));
  for (const auto& [name, value] : error.attributes())
    nb::setattr(instance, name.c_str(), std::visit([](const auto& v) { return nb::cast(v); }, value));
  return instance;
}

void raise_python(const Error& error) {
  nb::object instance = python_exception(error);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(instance.ptr())), instance.ptr());
}

namespace {

// What a value of the wrong type reaching a conversion inside a binding (e.g. a dict's value)
// raises. Bindings should name the argument themselves; this is the floor, never a RuntimeError.
Error bad_cast_error() {
  return Error(ErrorKind::TypeMismatch,
               "an argument has the wrong type (a value could not be converted to what the call expects)");
}

// `error` as the Python error set; never throws (building the exception may fail too).
void set_python_error(const Error& error) noexcept {
  try {
    raise_python(error);
  } catch (nb::python_error& failed) {  // building the exception failed: that error instead
    failed.restore();
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
  }
}

}  // namespace

void restore_python_error() noexcept {
  try {
    throw;
  } catch (const Error& error) {
    set_python_error(error);
  } catch (nb::python_error& error) {
    error.restore();
  } catch (const std::bad_cast&) {  // as the module's translator answers it
    set_python_error(bad_cast_error());
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "an unknown C++ exception");
  }
}

void init_errors(nb::module_& m) {
  m.def("_error_class_names", [] {
        nb::list names;
        for (std::string_view name : error_class_names) names.append(nb::str(name.data(), name.size()));
        return names;
      }, nb::sig("def _error_class_names() -> list[str]"),
      "The lifecore.errors class of every error kind of the core, in the kinds' order.");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& error) {
      raise_python(error);
    } catch (const std::bad_cast&) {
      raise_python(bad_cast_error());
    }
  });
}

}  // namespace lifecore::bindings
