#include "lifecore/sequence/waiter.hpp"

#include <chrono>
#include <string>

#include "lifecore/error.hpp"
#include "lifecore/sequence/coordinator.hpp"

namespace lifecore::sequence {

CapacityWaitRegistration::CapacityWaitRegistration(std::shared_ptr<AdmissionCoordinator> coordinator,
                                                   WaitCondition observed, std::vector<std::uint64_t> registered,
                                                   std::shared_ptr<WaiterState> state)
    : coordinator_(std::move(coordinator)), observed_(std::move(observed)), registered_(std::move(registered)),
      state_(std::move(state)) {}

CapacityWaitRegistration::~CapacityWaitRegistration() { cancel(); }

std::shared_ptr<AdmissionCoordinator> CapacityWaitRegistration::coordinator_or_closed(const char* op) const {
  auto coordinator = coordinator_.lock();
  if (!coordinator)
    raise(ErrorKind::Closed, std::string(op) + ": the admission coordinator was closed (nothing holds it any more)");
  return coordinator;
}

void CapacityWaitRegistration::cancel() noexcept {
  if (!subscribed_.exchange(false, std::memory_order_acq_rel)) return;
  if (auto coordinator = coordinator_.lock()) coordinator->unregister_waiter(state_.get());  // gone: nothing to leave
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->notify_locked();
}

std::uint64_t CapacityWaitRegistration::add_notify(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  const std::uint64_t key = ++state_->next_hook;  // 2^64 hooks are never added
  state_->hooks.emplace_back(key, std::move(hook));
  return key;
}

void CapacityWaitRegistration::remove_notify(std::uint64_t key) noexcept {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::erase_if(state_->hooks, [key](const auto& hook) { return hook.first == key; });
}

CapacityWaitRegistration::Recheck CapacityWaitRegistration::recheck(const char* op) const {
  const auto now = coordinator_or_closed(op)->epochs_of(observed_.sources);
  Recheck result;
  for (std::size_t i = 0; i < now.size(); ++i) {
    if (now[i] < observed_.epochs[i] || now[i] < registered_[i])
      raise(ErrorKind::Capacity, "capacity epoch regression on a wait condition (epoch went backwards)");
    if (now[i] != observed_.epochs[i]) result.changed_since_observation = true;
    if (now[i] != registered_[i]) result.changed_since_registration = true;
  }
  return result;
}

CapacityWaitRegistration::Deadline CapacityWaitRegistration::deadline_after(std::optional<double> timeout_seconds) {
  return lifecore::deadline_after(timeout_seconds, "wait");
}

CapacityWaitRegistration::SliceResult CapacityWaitRegistration::wait_slice(const Deadline& deadline,
                                                                           std::chrono::nanoseconds slice,
                                                                           const char* op) {
  using Clock = std::chrono::steady_clock;
  std::uint64_t seen;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->closed) raise(ErrorKind::Closed, std::string(op) + ": the admission coordinator (or its device) was closed");
    seen = state_->wakes;
  }
  // A closed device closes its coordinator; nothing will wake this waiter after that.
  if (coordinator_or_closed(op)->closed())
    raise(ErrorKind::Closed, std::string(op) + ": the admission coordinator (or its device) was closed");
  // Wakes are read before the epochs: a release in between changes `wakes`, never lost.
  if (should_retry(op)) return SliceResult::retry;
  const auto now = Clock::now();
  if (deadline && now >= *deadline) return SliceResult::timed_out;
  auto until = now + std::chrono::duration_cast<Clock::duration>(slice);
  if (deadline && *deadline < until) until = *deadline;
  bool woken;
  {
    std::unique_lock<std::mutex> lock(state_->mutex);
    woken = state_->changed.wait_until(lock, until, [&] { return state_->closed || state_->wakes != seen; });
    if (state_->closed) raise(ErrorKind::Closed, std::string(op) + ": the admission coordinator (or its device) was closed");
  }
  if (should_retry(op)) return SliceResult::retry;
  if (!woken && deadline && Clock::now() >= *deadline) return SliceResult::timed_out;
  return SliceResult::pending;
}

bool CapacityWaitRegistration::wait(std::optional<double> timeout_seconds) {
  const Deadline deadline = deadline_after(timeout_seconds);
  // Slices, so a device closed under the waiter is noticed within one.
  for (;;) {
    switch (wait_slice(deadline, std::chrono::milliseconds(100))) {
      case SliceResult::retry: return true;
      case SliceResult::timed_out: return false;
      case SliceResult::pending: break;
    }
  }
}

std::uint64_t CapacityWaitRegistration::wake_count() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->wakes;
}

bool CapacityWaitRegistration::closed() const {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->closed) return true;
  }
  // Signalled once, it is no longer subscribed: a close after that is read from the coordinator.
  const auto coordinator = coordinator_.lock();
  return !coordinator || coordinator->closed();
}

}  // namespace lifecore::sequence
