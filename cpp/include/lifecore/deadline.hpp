// A deadline some seconds from now on the steady clock, for every wait that takes a timeout.
// The seconds arrive as a double: converting one the clock cannot hold (infinity, 1e300) to
// the clock's integer ticks is undefined behaviour, and in practice a deadline in the past
// (a wait that gives up at once), so the range is checked in floating point first.
#pragma once

#include <chrono>
#include <optional>

namespace lifecore {

using Deadline = std::optional<std::chrono::steady_clock::time_point>;

// None, infinity and a timeout beyond what the clock can represent have no deadline (they wait
// like None); NaN or a negative timeout is InvalidArgumentError, its message starting with
// `operation`.
Deadline deadline_after(std::optional<double> timeout_seconds, const char* operation);

}  // namespace lifecore
