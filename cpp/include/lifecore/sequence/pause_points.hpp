// The sequence core's pause points (lifecore/pause_points.hpp), for tests of its prepare ->
// publish races (a cancel or a close that lands between preparing pages and publishing them)
// and of preemption's (a candidate closed by its owner between being looked at and aborted).
#pragma once

#include <cstdint>

#include "lifecore/pause_points.hpp"

namespace lifecore::sequence {

enum class PausePoint : std::uint8_t {
  extension_found_short,  // try_ensure_backing_covers: the one-lock claim found capacity short,
                         // and the three-call path is next (capacity may come back in between)
  extension_prepared,  // try_ensure_backing_covers: pages prepared and claimed, not yet published
  candidate_looked_at,  // preempt_for: a candidate holds wanted capacity, not yet aborted
};

// pause_points::arm(pause_points::Point::extension_prepared), pause_points::reach(...), ...
using pause_points = PausePoints<PausePoint>;

}  // namespace lifecore::sequence
