// Cleanup that a Ctrl-C cannot cut short, for the package's hook owners (lifecore.torch) and
// the reference engine's runs (what a failed run holds goes back).
//
// CPython runs a pending signal handler, which raises KeyboardInterrupt, at the start of any
// Python function and between its bytecodes. A cleanup written in Python (hooks off a model,
// the model let go) can be stopped anywhere, the first instruction of its own frame and of the
// retry loop around it included, and what it had not done yet stays done never. Run from C, the
// loop below has no frame to stop: each run of the cleanup (every step of it safe to repeat)
// that a KeyboardInterrupt stops is run again, and the interrupt is raised once a run completes.
#include <optional>

#include "bindings.hpp"

namespace lifecore::bindings {
namespace {

// More interrupts than this in one cleanup, and the cleanup itself raises one each time (not
// a signal landing in it): the last is raised, what is left undone.
constexpr int most_runs = 1000;

void finish_despite_interrupts(nb::handle release) {
  std::optional<nb::python_error> interrupted;
  for (int run = 0; run < most_runs; ++run) {
    PyObject* result = PyObject_CallObject(release.ptr(), nullptr);
    if (result != nullptr) {
      Py_DECREF(result);
      if (interrupted) throw *interrupted;
      return;
    }
    nb::python_error error;
    if (!error.matches(PyExc_KeyboardInterrupt)) {  // the cleanup's own failure, the interrupt its context
      if (interrupted) PyException_SetContext(error.value().ptr(), Py_NewRef(interrupted->value().ptr()));
      throw error;
    }
    interrupted.emplace(std::move(error));
  }
  throw *interrupted;
}

}  // namespace

void init_interrupt_guard(nb::module_& m) {
  m.def("_finish_despite_interrupts", &finish_despite_interrupts, nb::arg("release"),
        nb::sig("def _finish_despite_interrupts(release: collections.abc.Callable[[], object]) -> None"),
        "Calls release() until a call returns (every step of it safe to repeat), each KeyboardInterrupt "
        "raised inside one run starting another; the interrupt is raised once a run has completed.");
  // A method: a class's `__exit__ = _core._exit_releasing` binds it to the instance, and the
  // `with` statement's exit then runs no Python frame before self._release() is under the loop.
  m.def(
      "_exit_releasing",
      [](nb::handle self, nb::args exc) -> nb::object {
        finish_despite_interrupts(self.attr("_release"));
        return self.attr("_exit_after_release")(*exc);
      },
      nb::is_method(), nb::sig("def _exit_releasing(self: typing.Any, *exc: object) -> None"),
      "A context manager's __exit__: self._release() as _finish_despite_interrupts runs it, then "
      "self._exit_after_release(*exc).");
  // The same for a guard that cleans up only when its block raised (a run giving back what it
  // holds): a block that ended normally calls nothing.
  m.def(
      "_exit_releasing_on_error",
      [](nb::handle self, nb::handle type, nb::handle, nb::handle) {
        if (!type.is_none()) finish_despite_interrupts(self.attr("_release"));
      },
      nb::is_method(), nb::arg("type").none(), nb::arg("value").none(), nb::arg("traceback").none(),
      nb::sig("def _exit_releasing_on_error(self: typing.Any, type: object, value: object, traceback: object) -> None"),
      "A context manager's __exit__ that, when its block raised, runs self._release() as "
      "_finish_despite_interrupts runs it; the block's error then goes on.");
}

}  // namespace lifecore::bindings
