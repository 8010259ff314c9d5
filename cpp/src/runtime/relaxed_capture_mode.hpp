// This thread in relaxed capture mode for a scope, then back to the mode it had: its waits
// and frees in between neither invalidate a capture recording elsewhere nor are refused by
// it. Where the driver cannot switch, the mode stays as it was (status() says why).
#pragma once

#include "lifecore/driver/driver.hpp"

namespace lifecore::runtime {

class RelaxedCaptureMode {
 public:
  // `engage` false leaves the thread's mode alone (the caller knows nothing records).
  explicit RelaxedCaptureMode(driver::Driver& driver, bool engage = true) : driver_(driver) {
    if (engage) status_ = driver_.thread_exchange_capture_mode(&previous_);
    engaged_ = engage && status_.ok();
  }
  ~RelaxedCaptureMode() {
    if (engaged_) (void)driver_.thread_exchange_capture_mode(&previous_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

  bool engaged() const noexcept { return engaged_; }
  // Of the switch into relaxed mode (success when it was not asked for).
  const driver::Status& status() const noexcept { return status_; }

 private:
  driver::Driver& driver_;
  driver::CaptureMode previous_ = driver::CaptureMode::relaxed;
  driver::Status status_;
  bool engaged_ = false;
};

}  // namespace lifecore::runtime
