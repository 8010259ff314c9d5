#pragma once

#include <nanobind/nanobind.h>

namespace lifecore::bindings {

// With the interpreter lock, after this thread began a recording: on a thread the threading
// module started, its recordings still open when its Python thread state is cleared (its
// function returned or raised; the interpreter's finalization for the main thread) are ended
// then, on this thread, before a join returns. Once per thread; never fails. Another thread's
// recordings stay its own to end before it exits (the documented leak otherwise).
void end_recordings_with_this_thread() noexcept;

}  // namespace lifecore::bindings
