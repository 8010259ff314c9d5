// Deterministic pause points for tests of races: a close or a cancel landing in the window
// between two steps of another thread. A test stops one thread in the window and acts in it
// from another, instead of hoping a race happens. Each area names its points in an enum of its
// own and reaches them through PausePoints<that enum> (lifecore/sequence/pause_points.hpp,
// lifecore/runtime/pause_points.hpp), one gate per area. Production never arms one: reaching
// an unarmed point costs one relaxed atomic load. Armed, the first thread to reach the point
// stops there until resume() (or disarm()).
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace lifecore {

// The gate behind one area's points; a point is its enum value.
class PauseGate {
 public:
  void arm(int point);
  bool wait_until_reached(double timeout_seconds);
  void disarm();
  bool armed() const noexcept { return armed_.load(std::memory_order_relaxed); }
  void reach(int point) noexcept;

 private:
  std::atomic<bool> armed_{false};
  std::mutex mutex_;
  std::condition_variable changed_;
  int point_ = 0;
  bool reached_ = false;  // a thread is stopped at the point
  bool released_ = false;
};

template <class PointEnum>
struct PausePoints {
  using Point = PointEnum;
  // The next thread to reach `point` stops there. Replaces any earlier arming.
  static void arm(Point point) { gate().arm(static_cast<int>(point)); }
  // Blocks until a thread stopped at the armed point (true) or `timeout_seconds` passed (false);
  // an infinite or huge timeout waits without a deadline, NaN or a negative one is refused.
  static bool wait_until_reached(double timeout_seconds) { return gate().wait_until_reached(timeout_seconds); }
  // Lets the stopped thread go on and disarms.
  static void resume() { gate().disarm(); }
  // Disarms; a stopped thread goes on.
  static void disarm() { gate().disarm(); }
  // Whether a point is armed (a caller that holds an interpreter lock lets go of it then, or
  // the stopped thread would block the test that resumes it).
  static bool armed() noexcept { return gate().armed(); }
  // Called by the core where a point is.
  static void reach(Point point) noexcept { gate().reach(static_cast<int>(point)); }

 private:
  static PauseGate& gate() {
    static PauseGate g;
    return g;
  }
};

}  // namespace lifecore
