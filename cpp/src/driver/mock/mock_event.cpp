#include "driver/mock/mock_event.hpp"

namespace lifecore::driver::mock {

std::uint64_t EventState::begin_record() {
  std::lock_guard lock(mutex_);
  return ++recorded_;
}

void EventState::complete(std::uint64_t generation) {
  {
    std::lock_guard lock(mutex_);
    if (generation <= completed_) return;  // a newer record already completed
    completed_ = generation;
    timestamp_ = Clock::now();
  }
  completed_cv_.notify_all();
}

bool EventState::ever_recorded() const {
  std::lock_guard lock(mutex_);
  return recorded_ != 0;
}

bool EventState::done() const {
  std::lock_guard lock(mutex_);
  return completed_ >= recorded_;
}

void EventState::wait() const {
  std::unique_lock lock(mutex_);
  const std::uint64_t target = recorded_;
  completed_cv_.wait(lock, [&] { return completed_ >= target; });
}

EventState::Clock::time_point EventState::timestamp() const {
  std::lock_guard lock(mutex_);
  return timestamp_;
}

std::uint64_t EventState::latest_generation() const {
  std::lock_guard lock(mutex_);
  return recorded_;
}

void EventState::wait_for(std::uint64_t generation) const {
  std::unique_lock lock(mutex_);
  completed_cv_.wait(lock, [&] { return completed_ >= generation; });
}

}  // namespace lifecore::driver::mock
