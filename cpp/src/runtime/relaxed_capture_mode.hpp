// This thread in relaxed capture mode for a scope, then back to the mode it had: its waits
// and frees in between neither invalidate a capture recording elsewhere nor are refused by
// it. Where the driver cannot switch, the mode stays as it was (status() says why).
#pragma once

#include "lifecore/driver/driver.hpp"

namespace lifecore::runtime {

class RelaxedCaptureMode {
 public:
  explicit RelaxedCaptureMode(driver::Driver& driver) : driver_(driver) {
    status_ = driver_.thread_exchange_capture_mode(&previous_);
    engaged_ = status_.ok();
  }
  ~RelaxedCaptureMode() {
    if (engaged_) (void)driver_.thread_exchange_capture_mode(&previous_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

  bool engaged() const noexcept { return engaged_; }
  // Of the switch into relaxed mode.
  const driver::Status& status() const noexcept { return status_; }

 private:
  driver::Driver& driver_;
  driver::CaptureMode previous_ = driver::CaptureMode::relaxed;
  driver::Status status_;
  bool engaged_ = false;
};

}  // namespace lifecore::runtime
