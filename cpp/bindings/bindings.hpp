// One init_<area> per binding file; module.cpp calls them in order, each with the submodule of
// its area (lifecore._core.driver, .runtime, .sequence, .capture; errors at the top). Bindings
// only translate: argument conversion, GIL release around blocking calls, errors to Python
// exceptions.
#pragma once

#include <nanobind/nanobind.h>

#include <chrono>
#include <string>
#include <thread>

#include "lifecore/error.hpp"

namespace lifecore::bindings {

namespace nb = nanobind;

void init_errors(nb::module_& m);
void init_driver(nb::module_& m);
void init_runtime(nb::module_& m);
void init_sequence(nb::module_& m);
void init_capture(nb::module_& m);

// A core string as Python text: the whole of it (a NUL included, where a C string would end),
// with bytes that are not UTF-8 kept as backslash escapes rather than failing.
nb::str python_text(const std::string& text);
// The lifecore.errors exception of `error` (its class by kind, its attributes set), not raised.
// The lifecore.errors class of `kind` (borrowed: held for the process's lifetime).
PyObject* class_for(ErrorKind kind);
nb::object python_exception(const Error& error);
// Sets the Python exception of `error`'s kind (lifecore.errors), with its attributes: for the
// few entries written as plain CPython methods, outside nanobind's exception translation.
void raise_python(const Error& error);
// Inside a catch block of such an entry: the exception in flight as its Python error (a
// lifecore error as its class, a Python error restored, bad_alloc as MemoryError, another as
// RuntimeError). Never throws.
void restore_python_error() noexcept;

// `with` on an object already ended (closed, destroyed, released): refused, as Python refuses
// `with` on a closed file, instead of a block whose every call fails. `state` says how it ended.
[[noreturn]] inline void refuse_ended_enter(const char* type, const char* state) {
  raise(ErrorKind::Closed, std::string(type) + ".__enter__: " + state + "; a with block needs one that is not");
}

// Takes the interpreter lock back after a blocking call made without it. At exit the
// interpreter ends a daemon thread that asks for the lock (Python 3.11 to 3.13: pthread_exit,
// whose unwinding would reach a noexcept frame, nanobind's dispatch or a destructor, and abort
// the whole process); such a thread parks here instead, as Python 3.14 parks it, and goes with
// the process.
inline void restore_interpreter(PyThreadState* state) noexcept {
  try {
    PyEval_RestoreThread(state);
  } catch (...) {  // the exit's unwinding of this thread: never rethrown, never left
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
}

// nb::gil_scoped_release, but a thread the exit ends parks (restore_interpreter). Every
// binding releases the interpreter lock through this.
class GilRelease {
 public:
  GilRelease() noexcept : state_(PyEval_SaveThread()) {}
  ~GilRelease() { restore_interpreter(state_); }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_;
};

}  // namespace lifecore::bindings
