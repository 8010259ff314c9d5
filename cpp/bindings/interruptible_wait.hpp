// A wait a Python caller can interrupt: the core waits in slices of at most `signal_slice`
// without the GIL, and between slices, holding it, a pending signal handler runs, so Ctrl-C
// raises KeyboardInterrupt within one slice. What a slice waits for is the core's.
#pragma once

#include <chrono>
#include <optional>

#include "bindings.hpp"

namespace lifecore::bindings {

// The longest a slice keeps a pending signal waiting.
inline constexpr std::chrono::milliseconds signal_slice{50};

// Calls `slice()` without the GIL until it answers (a non-empty std::optional<bool>), and
// returns the answer; a signal handler that raises ends the wait with its exception.
template <class Slice>
bool wait_in_slices(Slice&& slice) {
  for (;;) {
    std::optional<bool> answer;
    {
      GilRelease release;
      answer = slice();
    }
    if (answer) return *answer;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  }
}

}  // namespace lifecore::bindings
