#include "lifecore/pause_points.hpp"

#include <chrono>

#include "lifecore/deadline.hpp"

namespace lifecore {

void PauseGate::arm(int point) {
  std::lock_guard<std::mutex> lock(mutex_);
  point_ = point;
  reached_ = false;
  released_ = false;
  armed_.store(true, std::memory_order_release);
  changed_.notify_all();
}

bool PauseGate::wait_until_reached(double timeout_seconds) {
  // Never wait_for(duration<double>): an infinite or huge timeout would convert to a wrapped
  // deadline and give up at once.
  const Deadline deadline = deadline_after(timeout_seconds, "pause wait");
  std::unique_lock<std::mutex> lock(mutex_);
  const auto reached = [&] { return reached_; };
  if (!deadline) {
    changed_.wait(lock, reached);
    return true;
  }
  return changed_.wait_until(lock, *deadline, reached);
}

void PauseGate::disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_.store(false, std::memory_order_release);
  released_ = true;
  changed_.notify_all();
}

void PauseGate::reach(int point) noexcept {
  if (!armed_.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lock(mutex_);
  if (!armed_.load(std::memory_order_acquire) || point_ != point || reached_) return;
  reached_ = true;  // only the first thread stops; later ones pass
  changed_.notify_all();
  changed_.wait(lock, [&] { return released_; });
}

}  // namespace lifecore
