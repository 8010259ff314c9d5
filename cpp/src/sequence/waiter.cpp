#include "lifecore/sequence/waiter.hpp"

#include <chrono>

#include "lifecore/error.hpp"
#include "lifecore/sequence/coordinator.hpp"

namespace lifecore::sequence {

CapacityWaitRegistration::CapacityWaitRegistration(std::shared_ptr<AdmissionCoordinator> coordinator,
                                                   WaitCondition observed, std::vector<std::uint64_t> registered,
                                                   std::shared_ptr<WaiterState> state)
    : coordinator_(std::move(coordinator)), observed_(std::move(observed)), registered_(std::move(registered)),
      state_(std::move(state)) {}

CapacityWaitRegistration::~CapacityWaitRegistration() { cancel(); }

void CapacityWaitRegistration::cancel() noexcept {
  if (!subscribed_) return;
  subscribed_ = false;
  coordinator_->unregister_waiter(state_.get());
}

CapacityWaitRegistration::Recheck CapacityWaitRegistration::recheck() const {
  const auto now = coordinator_->epochs_of(observed_.sources);
  Recheck result;
  for (std::size_t i = 0; i < now.size(); ++i) {
    if (now[i] < observed_.epochs[i] || now[i] < registered_[i])
      raise(ErrorKind::Capacity, "capacity epoch regression on a wait condition (epoch went backwards)");
    if (now[i] != observed_.epochs[i]) result.changed_since_observation = true;
    if (now[i] != registered_[i]) result.changed_since_registration = true;
  }
  return result;
}

bool CapacityWaitRegistration::wait(std::optional<double> timeout_seconds) {
  if (timeout_seconds && *timeout_seconds < 0) raise(ErrorKind::InvalidArgument, "wait: timeout must not be negative");
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_seconds.value_or(0.0)));
  for (;;) {
    std::uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (state_->closed) raise(ErrorKind::Closed, "wait: the admission coordinator was closed");
      seen = state_->wakes;
    }
    // Wakes are read before the epochs: a release in between changes `wakes`, never lost.
    if (should_retry()) return true;
    std::unique_lock<std::mutex> lock(state_->mutex);
    auto woken = [&] { return state_->closed || state_->wakes != seen; };
    if (timeout_seconds) {
      if (!state_->changed.wait_until(lock, deadline, woken)) {
        lock.unlock();
        return should_retry();
      }
    } else {
      state_->changed.wait(lock, woken);
    }
    if (state_->closed) raise(ErrorKind::Closed, "wait: the admission coordinator was closed");
  }
}

std::uint64_t CapacityWaitRegistration::wake_count() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->wakes;
}

bool CapacityWaitRegistration::closed() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->closed;
}

}  // namespace lifecore::sequence
