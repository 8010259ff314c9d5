// A Python thread's recordings end with its thread state, not later with its operating system
// thread. Outside relaxed mode only the thread that began a capture may end it, so the core ends
// what a thread still records as that thread goes (capture_registry). For a Python thread the
// core alone would do it when the operating system thread exits, which is after Thread.join()
// has returned: a joiner could still find the stream recording. The interpreter clears a
// thread's state dict before a join returns (at finalization too, for the main thread); an
// entry of lifecore's there ends the thread's recordings as it goes.
#include "recordings_end_with_thread.hpp"

#include "lifecore/runtime/capture_registry.hpp"

namespace lifecore::bindings {
namespace {

constexpr const char* key = "lifecore.recordings_end_with_thread";
char marker = 0;  // a capsule's pointer may not be null

void end_recordings(PyObject*) noexcept { runtime::capture_registry::end_this_threads_recordings(); }

}  // namespace

void end_recordings_with_this_thread() noexcept {
  PyObject* dict = PyThreadState_GetDict();  // borrowed; null without a thread state
  if (dict == nullptr) return;                // the core still ends them at the thread's exit
  PyObject* present = PyDict_GetItemString(dict, key);  // borrowed, never raises
  if (present != nullptr) return;
  PyObject* capsule = PyCapsule_New(&marker, key, &end_recordings);
  if (capsule == nullptr || PyDict_SetItemString(dict, key, capsule) != 0) PyErr_Clear();  // out of memory: as above
  Py_XDECREF(capsule);
}

}  // namespace lifecore::bindings
