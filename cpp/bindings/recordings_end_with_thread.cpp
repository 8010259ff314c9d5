// A Python thread's recordings end with its thread state. Outside relaxed mode only the thread
// that began a capture may end it, so a thread that exits recording would leave its stream
// recording for good; the core ends a thread's recordings when asked on that thread
// (capture_registry::end_this_threads_recordings), never from a thread_local destructor. The
// interpreter clears a thread's state dict on that thread before a join returns (at
// finalization too, for the main thread); an entry of lifecore's there asks then.
//
// Only for a thread the threading module started (or the main thread): a thread Python did not
// start gets a thread state for each call into Python (an embedder's worker, a ctypes callback),
// cleared when that call returns while the thread lives on and may still end its recording.
// And only on that thread: at finalization the interpreter clears its daemon threads' states
// from the main thread, whose own recordings are not theirs to end.
#include "recordings_end_with_thread.hpp"

#include <cstdint>
#include <new>

#include "lifecore/runtime/capture_registry.hpp"
#include "lifecore/thread_token.hpp"

namespace lifecore::bindings {
namespace {

constexpr const char* key = "lifecore.recordings_end_with_thread";

// The capsule holds the token of the thread whose state it is in (never null, as a capsule's
// pointer must be).
void end_recordings(PyObject* capsule) noexcept {
  auto* owner = static_cast<std::uint64_t*>(PyCapsule_GetPointer(capsule, key));
  if (owner == nullptr) {
    PyErr_Clear();
    return;
  }
  if (*owner == thread_token()) runtime::capture_registry::end_this_threads_recordings();
  delete owner;
}

// Whether the threading module started this thread (or it is the main thread): listed in
// threading._active as anything but a _DummyThread (what threading makes up for a thread it did
// not start). Unsure (threading not imported, an attribute missing), no.
bool started_by_threading() noexcept {
  PyObject* threading = PyImport_GetModule(nanobind::str("threading").ptr());  // new reference, or null
  if (threading == nullptr) {
    PyErr_Clear();
    return false;
  }
  bool started = false;
  PyObject* active = PyObject_GetAttrString(threading, "_active");
  PyObject* dummy = PyObject_GetAttrString(threading, "_DummyThread");
  PyObject* ident = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
  if (active != nullptr && dummy != nullptr && ident != nullptr && PyDict_Check(active)) {
    PyObject* thread = PyDict_GetItemWithError(active, ident);  // borrowed
    started = thread != nullptr && PyObject_IsInstance(thread, dummy) == 0;
  }
  PyErr_Clear();
  Py_XDECREF(ident);
  Py_XDECREF(dummy);
  Py_XDECREF(active);
  Py_DECREF(threading);
  return started;
}

}  // namespace

void end_recordings_with_this_thread() noexcept {
  PyObject* dict = PyThreadState_GetDict();  // borrowed; null without a thread state
  if (dict == nullptr) return;                // no thread state to go with: left to the thread
  PyObject* present = PyDict_GetItemString(dict, key);  // borrowed, never raises
  if (present != nullptr || !started_by_threading()) return;
  auto* owner = new (std::nothrow) std::uint64_t(thread_token());
  if (owner == nullptr) return;  // out of memory: left to the thread, as on any other thread
  PyObject* capsule = PyCapsule_New(owner, key, &end_recordings);
  if (capsule == nullptr) {
    delete owner;
    PyErr_Clear();
    return;
  }
  if (PyDict_SetItemString(dict, key, capsule) != 0) PyErr_Clear();  // the capsule's release deletes the token
  Py_DECREF(capsule);
}

}  // namespace lifecore::bindings
