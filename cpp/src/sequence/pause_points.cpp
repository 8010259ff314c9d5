#include "lifecore/sequence/pause_points.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace lifecore::sequence::pause_points {
namespace {

struct Gate {
  std::atomic<bool> armed{false};
  std::mutex mutex;
  std::condition_variable changed;
  Point point = Point::extension_prepared;
  bool reached = false;  // a thread is stopped at the point
  bool released = false;
};

Gate& gate() {
  static Gate g;
  return g;
}

}  // namespace

void arm(Point point) {
  Gate& g = gate();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.point = point;
  g.reached = false;
  g.released = false;
  g.armed.store(true, std::memory_order_release);
  g.changed.notify_all();
}

bool wait_until_reached(double timeout_seconds) {
  Gate& g = gate();
  std::unique_lock<std::mutex> lock(g.mutex);
  return g.changed.wait_for(lock, std::chrono::duration<double>(timeout_seconds), [&] { return g.reached; });
}

void resume() { disarm(); }

void disarm() {
  Gate& g = gate();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.armed.store(false, std::memory_order_release);
  g.released = true;
  g.changed.notify_all();
}

bool armed() noexcept { return gate().armed.load(std::memory_order_relaxed); }

void reach(Point point) noexcept {
  Gate& g = gate();
  if (!g.armed.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lock(g.mutex);
  if (!g.armed.load(std::memory_order_acquire) || g.point != point || g.reached) return;
  g.reached = true;  // only the first thread stops; later ones pass
  g.changed.notify_all();
  g.changed.wait(lock, [&] { return g.released; });
}

}  // namespace lifecore::sequence::pause_points
