// Translates lifecore::Error into the exception classes of lifecore.errors, by kind.
// The classes are defined in Python (python/lifecore/errors.py) so they carry docstrings
// and attributes; they are looked up once, on the first error.
#include <nanobind/stl/string.h>

#include <array>
#include <mutex>

#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "lifecore/error.hpp"

namespace lifecore::bindings {
namespace {

constexpr std::array<const char*, 14> class_names{
    "LifecoreError",      "InvalidArgumentError",    "LifecoreTypeError",   "CaptureStateError",
    "CaptureRefusedError", "DriverError",            "BackendUnavailableError", "StaleAuthorityError",
    "CapacityError",      "BudgetExceededError",     "AdmissionError",      "SessionStateError",
    "ClosedError",        "CaptureSessionError"};

PyObject* class_for(ErrorKind kind) {
  static PyObject* classes[class_names.size()] = {};
  static std::once_flag loaded;
  std::call_once(loaded, [] {
    nb::module_ errors = nb::module_::import_("lifecore.errors");
    for (std::size_t i = 0; i < class_names.size(); ++i)
      classes[i] = errors.attr(class_names[i]).inc_ref().ptr();  // kept for the process lifetime
  });
  auto index = static_cast<std::size_t>(kind);
  return index < class_names.size() ? classes[index] : classes[0];
}

void raise_python(const Error& error) {
  nb::object type = nb::borrow(class_for(error.kind()));
  nb::object instance = type(nb::str(error.what()));
  for (const auto& [name, value] : error.attributes()) {
    nb::object py_value = std::visit([](const auto& v) { return nb::cast(v); }, value);
    nb::setattr(instance, name.c_str(), py_value);
  }
  PyErr_SetObject(type.ptr(), instance.ptr());
}

}  // namespace

void init_errors(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& error) {
      raise_python(error);
    }
  });
}

}  // namespace lifecore::bindings
