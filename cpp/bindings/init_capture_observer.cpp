// CaptureObserver: one point of one session, ready to be called per forward. The path is
// resolved once and the backend adapter kept across calls, so a hook pays no path lookup,
// and the request the backend sees is converted once while the point's geometry holds. The
// hook form, called once per hooked module per forward, is the type's own call slot: a torch
// forward hook reaches it without a __call__ lookup or nanobind's argument dispatch.
#include <string>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "capture_backend_adapter.hpp"
#include "capture_bindings.hpp"
#include "lifecore/capture/session.hpp"
#include "lifecore/error.hpp"

namespace lifecore::bindings {

using namespace lifecore::capture;

namespace {

struct CaptureObserver {
  nb::object session_object;  // keeps the session alive
  CaptureSession* session;
  std::string path;
  std::vector<std::size_t> selections;
  nb::object backend;
  PythonCaptureBackend adapter;
  nb::object tensor_type;  // an output of exactly this type is observed as is
  nb::object select;       // otherwise select(output) gives the tensor (and raises for none)
  nb::object recomputing;  // when it answers true, the call is a recompute: nothing is observed
  nb::object keep;         // kept alive while the observer lives (whatever placed it as a hook)

  CaptureObserver(nb::object session_object, std::string path, nb::object backend, nb::object tensor_type,
                  nb::object select, nb::object recomputing, nb::object keep)
      : session_object(std::move(session_object)),
        session(nb::inst_ptr<CaptureSession>(this->session_object)),
        path(std::move(path)),
        selections(session->selections_at(this->path)),
        backend(std::move(backend)),
        adapter(this->backend),
        tensor_type(std::move(tensor_type)),
        select(std::move(select)),
        recomputing(std::move(recomputing)),
        keep(std::move(keep)) {}

  void observe(nb::handle tensor) {
    adapter.reset_cause();
    // Forgotten once the call ends: the error it raised holds the exception as __cause__, and
    // kept here, its traceback's frames (which may hold this observer) would be a cycle the
    // collector cannot see.
    struct Forget {
      PythonCaptureBackend& adapter;
      ~Forget() { adapter.reset_cause(); }
    } forget{adapter};
    keeping_cause(adapter.cause(), [&] { session->observe_at(adapter, path, selections, tensor.ptr()); });
  }

  // The forward-hook form: hook(module, args, output).
  void hook(nb::handle output) {
    if (!recomputing.is_none() && nb::bool_(recomputing())) return;
    if (!tensor_type.is_none() && Py_TYPE(output.ptr()) == reinterpret_cast<PyTypeObject*>(tensor_type.ptr()))
      return observe(output);
    if (select.is_none()) return observe(output);
    nb::object tensor = select(output);
    observe(tensor);
  }
};

// The observer holds its session, backend and selector: let the collector see them.
int observer_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  auto* o = nb::inst_ptr<CaptureObserver>(self);
  Py_VISIT(o->session_object.ptr());
  Py_VISIT(o->backend.ptr());
  Py_VISIT(o->tensor_type.ptr());
  Py_VISIT(o->select.ptr());
  Py_VISIT(o->recomputing.ptr());
  Py_VISIT(o->keep.ptr());
  return 0;
}

int observer_clear(PyObject* self) {
  if (!nb::inst_ready(self)) return 0;
  auto* o = nb::inst_ptr<CaptureObserver>(self);
  o->select = nb::none();
  o->tensor_type = nb::none();
  o->recomputing = nb::none();
  o->keep = nb::none();
  return 0;
}

constexpr const char* hook_call = "CaptureObserver.__call__";
constexpr const char* hook_names[3] = {"module", "args", "output"};

// hook(module, args, output): the three arguments positional or by name, each exactly once.
PyObject* hook_output(PyObject* args, PyObject* kwargs) {
  const Py_ssize_t positional = PyTuple_Size(args);
  if (positional > 3)
    raise(ErrorKind::TypeMismatch, std::string(hook_call) + ": takes 3 arguments (module, args, output), got " +
                                       std::to_string(positional) + " positional");
  PyObject* given[3] = {nullptr, nullptr, nullptr};
  for (Py_ssize_t i = 0; i < positional; ++i) given[i] = PyTuple_GetItem(args, i);
  if (kwargs) {
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t position = 0;
    while (PyDict_Next(kwargs, &position, &key, &value)) {
      std::size_t slot = 3;
      for (std::size_t k = 0; k < 3; ++k)
        if (PyUnicode_Check(key) && PyUnicode_CompareWithASCIIString(key, hook_names[k]) == 0) slot = k;
      if (slot == 3)
        raise(ErrorKind::TypeMismatch, std::string(hook_call) + ": unexpected keyword argument " +
                                           nb::cast<std::string>(nb::repr(key)) + " (it takes module, args, output)");
      if (given[slot])
        raise(ErrorKind::TypeMismatch, std::string(hook_call) + ": argument '" + hook_names[slot] + "' given twice");
      given[slot] = value;
    }
  }
  for (std::size_t k = 0; k < 3; ++k)
    if (!given[k])
      raise(ErrorKind::TypeMismatch, std::string(hook_call) + ": missing argument '" + hook_names[k] +
                                         "' (it takes module, args, output)");
  return given[2];
}

PyObject* observer_call(PyObject* self, PyObject* args, PyObject* kwargs) noexcept {
  try {
    if (!nb::inst_ready(self)) raise(ErrorKind::SessionState, std::string(hook_call) + ": the observer is not initialized");
    PyObject* output = hook_output(args, kwargs);
    nb::inst_ptr<CaptureObserver>(self)->hook(output);
    Py_RETURN_NONE;
  } catch (...) {
    restore_python_error();
  }
  return nullptr;
}

PyType_Slot observer_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(observer_traverse)},
                                {Py_tp_clear, reinterpret_cast<void*>(observer_clear)},
                                {Py_tp_call, reinterpret_cast<void*>(observer_call)},
                                {0, nullptr}};

}  // namespace

void init_capture_observer(nb::module_& m) {
  nb::class_<CaptureObserver>(m, "CaptureObserver",
                              "One point of a session, observed per call: CaptureSession.observer(path, backend).",
                              nb::type_slots(observer_slots))
      .def("__repr__", [](const CaptureObserver& o) {
        return "CaptureObserver(" + nb::cast<std::string>(nb::repr(nb::str(o.path.c_str(), o.path.size()))) +
               ", selections=" + std::to_string(o.selections.size()) + ")";
      })
      .def_prop_ro("path", [](const CaptureObserver& o) { return o.path; }, "The path of the point it observes.")
      .def_prop_ro("selected", [](const CaptureObserver& o) { return !o.selections.empty(); },
                   "Whether any selection observes this point (an observer of no selection does nothing).")
      .def("observe", [](CaptureObserver& o, nb::handle tensor) { o.observe(tensor); }, nb::arg("tensor").none(),
           nb::sig("def observe(self, tensor: object) -> None"), "As CaptureSession.observe(backend, path, tensor).");
  // __call__ is the type's call slot (observer_call above); its stub is in stub_patterns.txt.

  // Bound onto the session type here, beside the type it makes.
  nb::type<CaptureSession>().attr("observer") = nb::cpp_function(
      [](nb::handle self, nb::handle path, nb::handle backend, nb::handle tensor_type, nb::handle select,
         nb::handle recomputing, nb::handle keep) {
        const char* call = "CaptureSession.observer";
        // Ready too: CaptureSession.__new__ alone makes an instance with no session in it.
        if (!nb::isinstance<CaptureSession>(self) || !nb::inst_ready(self))
          raise(ErrorKind::TypeMismatch, std::string(call) + ": self must be a CaptureSession (an initialized one)");
        std::string where = str_argument(path, call, "path");
        if (backend.is_none()) raise(ErrorKind::InvalidArgument, argument_label(call, "backend") + " is required");
        require_capture_backend(backend, call, "backend");
        if (!tensor_type.is_none() && !PyType_Check(tensor_type.ptr()))
          raise(ErrorKind::TypeMismatch, argument_label(call, "tensor_type") + " must be a type, got " +
                                             type_name_of(tensor_type));
        if (!select.is_none() && !PyCallable_Check(select.ptr()))
          raise(ErrorKind::TypeMismatch, argument_label(call, "select") + " must be callable, got " + type_name_of(select));
        if (!recomputing.is_none() && !PyCallable_Check(recomputing.ptr()))
          raise(ErrorKind::TypeMismatch, argument_label(call, "recomputing") + " must be callable, got " +
                                             type_name_of(recomputing));
        return CaptureObserver(nb::borrow(self), where, nb::borrow(backend), nb::borrow(tensor_type), nb::borrow(select),
                               nb::borrow(recomputing), nb::borrow(keep));
      },
      nb::is_method(), nb::arg("path").none(), nb::arg("backend").none(), nb::kw_only(),
      nb::arg("tensor_type").none() = nb::none(), nb::arg("select").none() = nb::none(),
      nb::arg("recomputing").none() = nb::none(), nb::arg("keep").none() = nb::none(),
      nb::scope(nb::type<CaptureSession>()), nb::name("observer"),
      nb::sig("def observer(self, path: str, backend: lifecore._stub_types.CaptureBackend, *, tensor_type: type | None = None, "
              "select: collections.abc.Callable[[typing.Any], typing.Any] | None = None, "
              "recomputing: collections.abc.Callable[[], object] | None = None, keep: object | None = None) -> CaptureObserver"),
      "An observer of one point: observer.observe(tensor) is observe(backend, path, tensor) without the per-call "
      "path lookup; the observer is itself a forward hook (module, args, output). An output of exactly "
      "tensor_type is observed as is; any other goes through select(output) when given. As a hook, a call for "
      "which recomputing() (when given) answers true observes nothing: a forward run again in backward, as "
      "activation checkpointing does, whose outputs the step already observed. keep, when given, lives as "
      "long as the observer (what placed it as a hook, found again through the hook). LifecoreTypeError for a "
      "backend without a callable transform.");
}

}  // namespace lifecore::bindings
