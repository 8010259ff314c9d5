// Every driver call a device makes goes through this watch, so the first sticky status anyone
// meets loses the device, also where the caller has nobody to report a failure to (a graph's
// upload after its seal, a free at a drop, a capture-mode switch back): the device says it is
// lost at once, and names that call, instead of the next call failing on a dead context.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "driver/forwarding_driver.hpp"
#include "lifecore/driver/driver.hpp"

namespace lifecore::runtime {

// Whether a device is lost, and by which status: shared by the device and its driver's watch,
// which may outlive it (a forked child keeps the driver to exit).
class LostRecord {
 public:
  bool lost() const noexcept { return lost_.load(std::memory_order_acquire); }
  // The flag lost() reads, for those that must see it without holding the device.
  static std::shared_ptr<const std::atomic<bool>> flag(const std::shared_ptr<LostRecord>& record) noexcept {
    return {record, &record->lost_};
  }
  // Records the first sticky status; any other is ignored. Never throws past a failed copy of
  // the status's text: the flag is set first.
  void note(const driver::Status& status) noexcept {
    if (!status.sticky || lost()) return;
    std::lock_guard lock(mutex_);
    if (!lost_.load(std::memory_order_relaxed)) {
      try {
        reason_ = status.name + " (" + std::to_string(status.native_code) + ") from " + status.call;
        status_ = status;
      } catch (...) {  // out of memory for the text: still lost, with less said
      }
    }
    lost_.store(true, std::memory_order_release);
  }
  // The status that lost the device and its one-line reason (empty while it is not lost).
  std::pair<std::string, driver::Status> cause() const {
    std::lock_guard lock(mutex_);
    return {reason_, status_};
  }

 private:
  std::atomic<bool> lost_{false};
  mutable std::mutex mutex_;
  std::string reason_;
  driver::Status status_;
};

// The vendor driver, each status it returns noted in the device's LostRecord first. Not
// final: a test driver overrides one call of it.
class LostWatch : public driver::ForwardingDriver {
 public:
  LostWatch(std::shared_ptr<driver::Driver> inner, std::shared_ptr<LostRecord> record)
      : ForwardingDriver(std::move(inner)), record_(std::move(record)) {}

 protected:
  driver::Status passed(driver::Status status) override {
    record_->note(status);
    return status;
  }

 private:
  std::shared_ptr<LostRecord> record_;
};

}  // namespace lifecore::runtime
