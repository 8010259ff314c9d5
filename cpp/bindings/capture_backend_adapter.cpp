#include "capture_backend_adapter.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <string>

#include "arguments.hpp"
#include "bindings.hpp"
#include "lifecore/checked.hpp"

namespace lifecore::bindings {

using namespace lifecore::capture;

namespace {

// The interrupt held for the session call running on this thread (a strong reference).
thread_local PyObject* held_interrupt = nullptr;

// A backend's exception becomes a FAILED record whose message keeps only "what: Type: text"
// (or an error whose __cause__ it is). Whoever debugs a backend wants its traceback: it goes to
// the "lifecore.capture" logger at DEBUG, and costs one isEnabledFor call when that is off.
void log_backend_failure(const std::string& message, nb::handle exception) noexcept {
  try {
    // Kept for the process's life: a static object would be released after the interpreter.
    static const nb::handle logger =
        nb::object(nb::module_::import_("logging").attr("getLogger")("lifecore.capture")).release();
    if (!nb::cast<bool>(logger.attr("isEnabledFor")(10)))  // logging.DEBUG
      return;
    logger.attr("debug")("%s (the backend's traceback follows; the record keeps only this line)",
                         nb::str(message.c_str(), message.size()), nb::arg("exc_info") = exception);
  } catch (...) {
    PyErr_Clear();  // a logging failure must not replace the backend's
  }
}

template <typename F>
auto call_backend(PythonCause* cause, const char* what, F&& f) -> decltype(f()) {
  if (interrupt_pending()) throw BackendFailure{std::string(what) + ": not called, the capture was interrupted"};
  try {
    return f();
  } catch (nb::python_error& e) {
    // "what: Type: message"; the traceback stays with the exception (the error's __cause__)
    // and goes to the log at DEBUG.
    std::string message = std::string(what) + ": " + python_error_summary(e);
    if (!e.matches(PyExc_Exception)) {
      hold_interrupt(e.value());
    } else {
      if (cause) cause->record(e.value(), message);
      log_backend_failure(message, e.value());
    }
    throw BackendFailure{message};
  } catch (const nb::cast_error&) {
    throw BackendFailure{std::string(what) + " returned a value of the wrong type"};
  }
}

// Interned method names: looked up once per process instead of once per call.
nb::handle name(const char* text) { return nb::handle(PyUnicode_InternFromString(text)); }

nb::handle shape_name() { static nb::handle n = name("shape"); return n; }
nb::handle dtype_name() { static nb::handle n = name("dtype"); return n; }
nb::handle estimate_name() { static nb::handle n = name("estimate"); return n; }
nb::handle transform_name() { static nb::handle n = name("transform"); return n; }
nb::handle native_bytes_name() { static nb::handle n = name("native_bytes"); return n; }
nb::handle intervene_name() { static nb::handle n = name("intervene"); return n; }
nb::handle describe_name() { static nb::handle n = name("describe"); return n; }
nb::handle summary_statistics_name() { static nb::handle n = name("summary_statistics"); return n; }
nb::handle replacement_mismatch_name() { static nb::handle n = name("replacement_mismatch"); return n; }

// backend.<name>(args...) without building a bound method per call (PyObject_VectorcallMethod
// looks the function up on the type and passes the backend as its first argument).
template <typename... Args>
nb::object call_method(nb::handle backend, nb::handle name, Args... args) {
  PyObject* stack[] = {backend.ptr(), nb::handle(args).ptr()...};
  // No PY_VECTORCALL_ARGUMENTS_OFFSET: the stack has no slot before it for the callee to use.
  PyObject* result = PyObject_VectorcallMethod(name.ptr(), stack, sizeof...(Args) + 1, nullptr);
  if (!result) throw nb::python_error();
  return nb::steal(result);
}

// A shape as extents; a tuple (NumPy's shape, torch.Size) is read without a conversion.
std::vector<std::uint64_t> extents(nb::handle value) {
  if (!PyTuple_Check(value.ptr())) return numbers_of<std::uint64_t>(value);
  Py_ssize_t n = NB_TUPLE_GET_SIZE(value.ptr());
  std::vector<std::uint64_t> out(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = NB_TUPLE_GET_ITEM(value.ptr(), i);
    unsigned long long extent = PyLong_Check(item) ? PyLong_AsUnsignedLongLong(item) : (unsigned long long)-1;
    if (extent == (unsigned long long)-1 && (!PyLong_Check(item) || PyErr_Occurred())) {
      PyErr_Clear();
      throw BackendFailure{"backend.describe returned a shape that is not a tuple of extents"};
    }
    out[static_cast<std::size_t>(i)] = extent;
  }
  return out;
}

// [min, max, mean, std] of `count` finite values, as a summary payload. Read from a snapshot
// of the list: converting an item that is not a float runs its __float__, which could change
// the list under a borrowed item. A conversion's Python error is raised (the call's cause).
CapturePayload finite_summary(nb::handle values, std::uint64_t count) {
  if (NB_LIST_GET_SIZE(values.ptr()) != 4)
    throw BackendFailure{"backend.summary_statistics returned a list of " + std::to_string(NB_LIST_GET_SIZE(values.ptr())) +
                         " values; the short form is [min, max, mean, std]"};
  nb::object items = nb::steal(PyList_AsTuple(values.ptr()));
  if (!items) throw nb::python_error();
  if (NB_TUPLE_GET_SIZE(items.ptr()) != 4)
    throw BackendFailure{"backend.summary_statistics changed its list while it was read"};
  double statistics[4];
  for (Py_ssize_t i = 0; i < 4; ++i) {
    PyObject* item = NB_TUPLE_GET_ITEM(items.ptr(), i);
    statistics[i] = PyFloat_AsDouble(item);
    if (statistics[i] == -1.0 && PyErr_Occurred()) throw nb::python_error();
    if (!std::isfinite(statistics[i]))
      throw BackendFailure{"backend.summary_statistics returned a list with a non-finite value; the short form is "
                           "only for regions whose values are all finite (return CapturePayload.summary otherwise)"};
  }
  return CapturePayload::summary_of(count, 0, statistics[0], statistics[1], statistics[2], statistics[3]);
}

}  // namespace

namespace {

// The last backend type accepted, borrowed: its weak reference's callback forgets it when the
// type goes (a type freed and another made at its address must not pass for it), and no
// strong reference keeps a user's backend class, and all its methods reach, for ever.
PyObject* accepted_type = nullptr;
PyObject* accepted_ref = nullptr;  // the weak reference to it (strong), replaced with it

PyObject* forget_accepted_type(PyObject* /*self*/, PyObject* ref) {
  if (ref == accepted_ref) accepted_type = nullptr;
  Py_RETURN_NONE;
}

PyMethodDef forget_accepted_type_def = {"_forget_accepted_backend_type", forget_accepted_type, METH_O, nullptr};

// Remembers `type` (it has transform itself), or nothing where it takes no weak reference.
void remember_accepted_type(PyObject* type) {
  static PyObject* callback = PyCFunction_New(&forget_accepted_type_def, nullptr);  // kept: it is the weakref's
  if (callback == nullptr) {
    PyErr_Clear();
    return;
  }
  PyObject* ref = PyWeakref_NewRef(type, callback);
  if (ref == nullptr) {
    PyErr_Clear();
    return;
  }
  PyObject* previous = accepted_ref;
  accepted_ref = ref;
  accepted_type = type;
  Py_XDECREF(previous);  // a dropped weak reference calls nothing
}

}  // namespace

void require_capture_backend(nb::handle backend, const char* call, const char* argument) {
  // Remembered only when the type itself has the method (then every instance has it); an
  // instance that carries its own is checked each call.
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(backend.ptr()));
  if (type == accepted_type) return;
  auto refuse = [&](const std::string& why) {
    raise(ErrorKind::TypeMismatch, argument_label(call, argument) +
                                       " must be a capture backend (a TorchBackend, a NumpyBackend, or an object with "
                                       "the backend methods), got " + why + " (nothing was changed)");
  };
  if (PyType_Check(backend.ptr()))
    refuse("the class " + nb::cast<std::string>(nb::handle(backend).attr("__name__")) + " itself: pass an instance");
  nb::object transform = nb::getattr(backend, transform_name(), nb::none());
  if (!PyCallable_Check(transform.ptr())) refuse(type_name_of(backend));
  nb::object on_type = nb::getattr(nb::handle(type), transform_name(), nb::none());
  if (!PyCallable_Check(on_type.ptr())) return;
  remember_accepted_type(type);
}

bool interrupt_pending() { return held_interrupt != nullptr; }

void hold_interrupt(nb::handle exception) {
  if (!held_interrupt) held_interrupt = exception.inc_ref().ptr();
}

void drop_interrupt() {
  PyObject* held = held_interrupt;
  held_interrupt = nullptr;
  Py_XDECREF(held);
}

void raise_held_interrupt() {
  PyObject* held = held_interrupt;
  if (!held) return;
  held_interrupt = nullptr;
  // The instance keeps its traceback; raised as it was.
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(held)), held);
  Py_DECREF(held);
  throw nb::python_error();
}

void raise_keeping_cause(const Error& error, const PythonCause& cause) {
  if (!cause.exception || cause.text.empty() || error.message().find(cause.text) == std::string::npos)
    throw;  // not caused by the recorded exception: the usual translation
  nb::object instance = python_exception(error);
  PyException_SetCause(instance.ptr(), cause.exception.inc_ref().ptr());  // steals the reference
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(instance.ptr())), instance.ptr());
  throw nb::python_error();
}

CaptureUsage usage_from_python(nb::handle value) {
  if (value.is_none()) throw BackendFailure{"backend returned an unknown estimate (None); unknown is never zero"};
  CaptureUsage* usage = nullptr;
  if (nb::try_cast<CaptureUsage*>(value, usage) && usage) return *usage;
  auto items = numbers_of<std::uint64_t>(value);
  if (items.size() != 4) throw BackendFailure{"an estimate needs four numbers"};
  return {items[0], items[1], items[2], items[3]};
}

std::optional<TensorFacts> PythonCaptureBackend::describe(TensorHandle tensor) {
  if (describes_ < 0) describes_ = nb::hasattr(backend_, describe_name()) ? 1 : 0;
  if (describes_ == 0) return std::nullopt;
  return call_backend(&cause_, "backend.describe", [&] {
    nb::object value;
    try {
      value = call_method(backend_, describe_name(), static_cast<PyObject*>(tensor));
    } catch (nb::python_error& e) {
      // The backend's own argument check (LifecoreTypeError, as the bundled backends' require
      // raises it, naming the call and the argument): no tensor of its kind, the caller's
      // mistake. Any other error, a plain TypeError of a bug in describe included, is the
      // backend's: it fails the records.
      if (!e.matches(class_for(ErrorKind::TypeMismatch))) throw;
      std::string message = nb::cast<std::string>(nb::str(e.value()));
      cause_.record(e.value(), message);
      throw TensorRefused{message};
    }
    if (!PyTuple_Check(value.ptr()) || NB_TUPLE_GET_SIZE(value.ptr()) != 3)
      throw BackendFailure{"backend.describe must return (shape, itemsize, on_host)"};
    TensorFacts facts;
    facts.shape = extents(nb::handle(NB_TUPLE_GET_ITEM(value.ptr(), 0)));
    facts.itemsize = nb::cast<std::uint64_t>(nb::handle(NB_TUPLE_GET_ITEM(value.ptr(), 1)));
    PyObject* on_host = NB_TUPLE_GET_ITEM(value.ptr(), 2);
    if (!PyBool_Check(on_host)) throw BackendFailure{"backend.describe must return on_host as a bool"};
    facts.on_host = on_host == Py_True;
    if (facts.itemsize == 0) throw BackendFailure{"backend.describe returned itemsize 0; an unknown size is never zero"};
    return facts;
  });
}

std::vector<std::uint64_t> PythonCaptureBackend::shape(TensorHandle tensor) {
  return call_backend(&cause_, "backend.shape", [&] {
    return numbers_of<std::uint64_t>(backend_.attr(shape_name())(nb::handle(static_cast<PyObject*>(tensor))));
  });
}

ValueDtype PythonCaptureBackend::dtype(TensorHandle tensor) {
  return call_backend(&cause_, "backend.dtype", [&] {
    auto name = nb::cast<std::string>(backend_.attr(dtype_name())(nb::handle(static_cast<PyObject*>(tensor))));
    if (name == "floating") return ValueDtype::floating;
    if (name == "integer") return ValueDtype::integer;
    if (name == "boolean") return ValueDtype::boolean;
    return ValueDtype::unknown;
  });
}

nb::object PythonCaptureBackend::request_object(const TransformRequest& request) {
  // A copy, so a backend that keeps the request never sees freed memory.
  if (request.serial != 0 && request.serial == cached_serial_) return cached_request_;
  nb::object converted = nb::cast(request, nb::rv_policy::copy);
  cached_serial_ = request.serial;
  cached_request_ = converted;
  return converted;
}

CaptureUsage PythonCaptureBackend::estimate(TensorHandle tensor, const TransformRequest& request) {
  return call_backend(&cause_, "backend.estimate", [&] {
    return usage_from_python(
        call_method(backend_, estimate_name(), static_cast<PyObject*>(tensor), request_object(request)));
  });
}

CapturePayload PythonCaptureBackend::transform(TensorHandle tensor, const TransformRequest& request) {
  const bool summary = request.kind == TransformKind::summary;
  if (summary && summarizes_ < 0) summarizes_ = nb::hasattr(backend_, summary_statistics_name()) ? 1 : 0;
  const bool short_form = summary && summarizes_ == 1;
  const char* method = short_form ? "backend.summary_statistics" : "backend.transform";
  return call_backend(&cause_, method, [&] {
    nb::object result = call_method(backend_, short_form ? summary_statistics_name() : transform_name(),
                                    static_cast<PyObject*>(tensor), request_object(request));
    // The short form: the four statistics of a region whose values are all finite, as a list;
    // it spares the backend building a payload on the per-point path. The session never asks
    // for an empty region's summary, so the count is the region's, at least 1.
    if (short_form && PyList_CheckExact(result.ptr())) {
      std::optional<std::uint64_t> count = 1;
      for (const std::uint64_t extent : request.selected_shape) count = checked::mul(count, extent);
      if (!count) throw BackendFailure{std::string(method) + ": the region has more elements than a uint64 holds"};
      return finite_summary(result, *count);
    }
    CapturePayload* payload = nullptr;
    if (!nb::try_cast<CapturePayload*>(result, payload, false) || !payload)
      throw BackendFailure{std::string(method) + " returned a value of the wrong type" +
                           (short_form ? " (a list [min, max, mean, std] or a CapturePayload)" : "")};
    if (short_form && payload->kind != PayloadKind::summary)
      throw BackendFailure{std::string(method) + " returned a payload that is not a summary"};
    // A payload nothing else refers to is about to be freed: take its contents, copy nothing.
    // Only one the instance owns: a view into another object's payload (a delivered record's
    // evidence, read through its property) is that record's, however few refer to the view.
    if (Py_REFCNT(result.ptr()) == 1 && nb::inst_state(result).second) return std::move(*payload);
    return *payload;
  });
}

std::uint64_t PythonCaptureBackend::native_bytes(TensorHandle tensor, const TransformRequest& request) {
  if (!nb::hasattr(backend_, native_bytes_name()))
    throw BackendFailure{"backend has no native_bytes, required by the physical native byte limit"};
  return call_backend(&cause_, "backend.native_bytes", [&] {
    nb::object value = backend_.attr(native_bytes_name())(nb::handle(static_cast<PyObject*>(tensor)), request_object(request));
    if (value.is_none()) throw BackendFailure{"backend returned unknown native bytes (None); unknown is never zero"};
    return nb::cast<std::uint64_t>(value);
  });
}

TensorHandle PythonCaptureBackend::intervene(TensorHandle tensor, const InterventionRequest& request) {
  return call_backend(&cause_, "backend.intervene", [&] {
    nb::object result = backend_.attr(intervene_name())(nb::handle(static_cast<PyObject*>(tensor)),
                                                   nb::cast(request, nb::rv_policy::copy));
    if (result.is_none()) throw BackendFailure{"backend.intervene returned None"};
    kept_.push_back(result);
    return static_cast<TensorHandle>(result.ptr());
  });
}

std::optional<std::string> PythonCaptureBackend::replacement_mismatch(TensorHandle original, TensorHandle replacement) {
  return call_backend(&cause_, "backend.replacement_mismatch", [&]() -> std::optional<std::string> {
    if (!nb::hasattr(backend_, replacement_mismatch_name())) return std::nullopt;  // optional: the facts' checks stand
    nb::object why = call_method(backend_, replacement_mismatch_name(), static_cast<PyObject*>(original),
                                 static_cast<PyObject*>(replacement));
    if (why.is_none()) return std::nullopt;
    if (!PyUnicode_Check(why.ptr()))
      throw BackendFailure{"backend.replacement_mismatch must return None or a str saying what differs, got " +
                           type_name_of(why)};
    std::string text = nb::cast<std::string>(why);
    if (text.empty()) return std::nullopt;  // an empty phrase names no difference, as None does
    return text;
  });
}

CaptureUsage PythonInterventionEstimator::estimate(TensorHandle tensor, const TransformRequest& request) {
  return call_backend(nullptr, "estimator.estimate", [&] {
    return usage_from_python(
        estimator_.attr(estimate_name())(nb::handle(static_cast<PyObject*>(tensor)), nb::cast(request, nb::rv_policy::copy)));
  });
}

}  // namespace lifecore::bindings
