// Deterministic pause points for tests of the prepare -> publish races of the sequence core
// (a cancel or a close that lands between preparing pages and publishing them). Production
// never arms one: reaching an unarmed point costs one relaxed atomic load. Armed, the first
// thread to reach the point stops there until resume() (or disarm()), so a test can act in
// the window and then let the thread go on, instead of hoping a race happens.
#pragma once

#include <cstdint>
#include <optional>

namespace lifecore::sequence::pause_points {

enum class Point : std::uint8_t {
  extension_prepared,  // try_ensure_backing_covers: pages prepared and claimed, not yet published
};

// The next thread to reach `point` stops there. Replaces any earlier arming.
void arm(Point point);
// Blocks until a thread stopped at the armed point (true) or `timeout_seconds` passed (false).
bool wait_until_reached(double timeout_seconds);
// Lets the stopped thread go on and disarms.
void resume();
// Disarms; a stopped thread goes on.
void disarm();
// Whether a point is armed (a caller that holds an interpreter lock lets go of it then, or
// the stopped thread would block the test that resumes it).
bool armed() noexcept;
// Called by the core where a point is.
void reach(Point point) noexcept;

}  // namespace lifecore::sequence::pause_points
