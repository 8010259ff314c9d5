// A subscription to the exact sources of a deferral. It keeps the epochs observed when the
// decision was taken and those read at registration: should_retry() is true when either
// moved, which closes the race between a decision and its registration (a release that
// lands in between is never lost).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "lifecore/deadline.hpp"
#include "lifecore/sequence/capacity.hpp"

namespace lifecore::sequence {

class AdmissionCoordinator;

struct WaiterState {
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t wakes = 0;  // notifications received
  bool closed = false;
  // Hooks called on every wake and on close, under `mutex` (and the coordinator's lock): each
  // must only signal (e.g. write a byte to a non-blocking descriptor), never block, never call
  // back into the core. Removed under `mutex`, so one is never called after remove_notify.
  // One per awaiter: several event loops (or tasks) may await one registration.
  std::vector<std::pair<std::uint64_t, std::function<void()>>> hooks;
  std::uint64_t next_hook = 0;
  void notify_locked() const {
    for (const auto& hook : hooks) hook.second();
  }
};

class CapacityWaitRegistration {
 public:
  CapacityWaitRegistration(std::shared_ptr<AdmissionCoordinator> coordinator, WaitCondition observed,
                           std::vector<std::uint64_t> registered, std::shared_ptr<WaiterState> state);
  ~CapacityWaitRegistration();
  CapacityWaitRegistration(const CapacityWaitRegistration&) = delete;
  CapacityWaitRegistration& operator=(const CapacityWaitRegistration&) = delete;

  struct Recheck {
    bool changed_since_observation = false;
    bool changed_since_registration = false;
  };
  // Throws CapacityError (EpochRegression) if an epoch went backwards, ClosedError naming `op`
  // once nothing holds the coordinator.
  Recheck recheck(const char* op = "recheck") const;
  bool should_retry(const char* op = "should_retry") const {
    Recheck r = recheck(op);
    return r.changed_since_observation || r.changed_since_registration;
  }
  using Deadline = lifecore::Deadline;
  // The deadline `timeout_seconds` from now (lifecore::deadline_after): None, infinity, and a
  // timeout beyond what the clock can represent have none; NaN or a negative timeout is
  // InvalidArgumentError.
  static Deadline deadline_after(std::optional<double> timeout_seconds);
  enum class SliceResult : std::uint8_t { retry, timed_out, pending };
  // Waits at most `slice` and never past `deadline`: retry once should_retry(), timed_out at
  // the deadline, pending when the slice ended first (the caller may check for an interrupt
  // and call again). ClosedError, naming `op`, when the coordinator, or its device, is closed.
  SliceResult wait_slice(const Deadline& deadline, std::chrono::nanoseconds slice, const char* op = "wait");
  // Blocks until should_retry() (true) or the timeout (false); ClosedError when the
  // coordinator closes. Call without any interpreter lock held.
  bool wait(std::optional<double> timeout_seconds);
  std::uint64_t wake_count() const;
  bool closed() const;
  const WaitCondition& observed() const noexcept { return observed_; }
  const std::vector<std::uint64_t>& registered_epochs() const noexcept { return registered_; }
  // Unsubscribes now (also done on destruction); calls the notify hook once, so an event
  // loop waiting on it rechecks.
  void cancel() noexcept;
  // True once cancel() ran: nothing signals it any more.
  bool cancelled() const noexcept { return !subscribed_.load(std::memory_order_acquire); }
  // Adds a hook called when this registration is signalled, cancelled or its coordinator (or
  // the coordinator's device) closes, and returns its key: lets an event loop wait without a
  // thread. remove_notify(key) removes it (an unknown key is ignored). A hook runs under the
  // registration's lock, and when capacity moves under the coordinator's too (and may under a
  // session's, when a step's take of ids fails part way and gives them back): it must only
  // signal (write a byte, notify a condition), never call the sequence core.
  std::uint64_t add_notify(std::function<void()> hook);
  void remove_notify(std::uint64_t key) noexcept;

 private:
  // Weak: a registration left in a variable does not keep its coordinator (and the arena's
  // memory) alive. When the coordinator goes, its destructor closes every registration.
  std::shared_ptr<AdmissionCoordinator> coordinator_or_closed(const char* op) const;
  std::weak_ptr<AdmissionCoordinator> coordinator_;
  WaitCondition observed_;
  std::vector<std::uint64_t> registered_;
  std::shared_ptr<WaiterState> state_;
  std::atomic<bool> subscribed_{true};
};

}  // namespace lifecore::sequence
