// SequenceSession.step as a plain CPython method (METH_FASTCALL). A decode loop calls it once per
// sequence per token, and there the general dispatch of a bound function (argument casters,
// overload resolution, an enum looked up by value) costs more than the step itself: this entry
// reads the session and the int directly and hands back the BackingOutcome members it fetched
// once. Translation only; the step is SequenceSession::step. Its stub signature is in
// stub_patterns.txt.
#include <string>

#include "arguments.hpp"
#include "bindings.hpp"
#include "lifecore/error.hpp"
#include "lifecore/sequence/pause_points.hpp"
#include "lifecore/sequence/session.hpp"

namespace lifecore::bindings {
namespace {

using namespace lifecore::sequence;

constexpr std::size_t outcome_count = 4;
PyObject* outcome_members[outcome_count] = {};  // BackingOutcome's members, kept for the process lifetime

// The one argument, positional or as tokens=.
PyObject* tokens_argument(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Py_ssize_t named = kwnames ? PyTuple_Size(kwnames) : 0;
  if (nargs == 1 && named == 0) return args[0];
  if (nargs == 0 && named == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GetItem(kwnames, 0), "tokens") == 0)
    return args[0];
  raise(ErrorKind::TypeMismatch, "step() takes one argument, tokens (an int), got " + std::to_string(nargs) +
                                     " positional and " + std::to_string(named) + " keyword arguments");
}

PyObject* step(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) noexcept {
  try {
    PyObject* tokens = tokens_argument(args, nargs, kwnames);
    // The method descriptor already checked that `self` is a SequenceSession (the class is final).
    if (!nb::inst_ready(self)) raise(ErrorKind::SessionState, "step: the SequenceSession is not initialized");
    auto* session = nb::inst_ptr<SequenceSession>(self);
    // An exact int is the common case, read without integer_argument's checks for bools and
    // subclasses. Past int64 either way, the refusal says what a token count may be.
    std::int64_t t = 0;
    int overflow = 1;
    if (PyLong_CheckExact(tokens)) t = PyLong_AsLongLongAndOverflow(tokens, &overflow);
    if (overflow != 0) t = positive_count_argument(tokens, "step", "tokens");
    BackingOutcome outcome;
    // No GIL release: an extension takes ids from the arena, never calls the driver (only a
    // test's armed pause point may stop the thread).
    if (!pause_points::armed()) {
      outcome = session->step(t);
    } else {
      GilRelease release;
      outcome = session->step(t);
    }
    PyObject* member = outcome_members[static_cast<std::size_t>(outcome)];
    Py_INCREF(member);
    return member;
  } catch (...) {
    restore_python_error();
  }
  return nullptr;
}

PyMethodDef step_method = {
    "step", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(step)), METH_FASTCALL | METH_KEYWORDS,
    // The typed signature first, as nanobind writes its functions' docstrings.
    "step(self, tokens: int) -> BackingOutcome\n\n"
    "One decode step's bookkeeping: cover `tokens`, the sequence's whole length after this step (prompt and "
    "generated tokens, not the count of new ones), extending a whole page at a time up to the fit; acquire and "
    "commit a frame. Returns CURRENT or EXTENDED (committed), or RETRY_REQUIRED / BACKING_DEFERRED (nothing changed; "
    "see step_deferral). InvalidArgumentError for tokens < 1, CapacityError above the fit, SessionStateError unless "
    "open with no frame or flight live, ClosedError once closed."};

}  // namespace

void init_sequence_step(nb::module_& m) {
  nb::object outcome = m.attr("BackingOutcome");
  const char* names[outcome_count] = {"CURRENT", "EXTENDED", "RETRY_REQUIRED", "BACKING_DEFERRED"};
  for (std::size_t i = 0; i < outcome_count; ++i) {
    nb::object member = outcome.attr(names[i]);
    if (nb::cast<int>(member.attr("value")) != static_cast<int>(i))
      raise(ErrorKind::Lifecore, std::string("BackingOutcome.") + names[i] + " is out of step with the core's order");
    outcome_members[i] = member.release().ptr();
  }
  nb::object session_type = m.attr("SequenceSession");
  nb::object descriptor = nb::steal(PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(session_type.ptr()), &step_method));
  if (!descriptor) throw nb::python_error();
  nb::setattr(session_type, "step", descriptor);
}

}  // namespace lifecore::bindings
