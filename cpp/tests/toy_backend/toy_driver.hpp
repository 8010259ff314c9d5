// The toy backend's Driver, for tests only: a device on host memory that borrows the emulated
// backend's device (opened through the registry, like any user of a backend) and reports every
// status with the toy's own numbering and names. Fault injection takes the toy's numbers.
#pragma once

#include <memory>
#include <string>

#include "../test_support.hpp"
#include "driver/forwarding_driver.hpp"
#include "lifecore/driver/registry.hpp"
#include "toy_status.hpp"

namespace toy {

namespace drv = lifecore::driver;

const drv::BackendDescriptor& toy_descriptor();

class ToyFaults final : public drv::FaultInjection {
 public:
  explicit ToyFaults(drv::FaultInjection* inner) : inner_(inner) {}
  void inject(drv::Operation op, int code, std::uint64_t after, std::uint64_t times) override {
    // A toy number becomes the emulation's number for the same lifecore code.
    const drv::StatusNaming& naming = drv::backend_descriptor(lifecore::test_support::emulated_backend()).naming;
    const int emulated = code == 0 ? 0 : naming.native(toy_code(code));
    inner_->inject(op, emulated, after, times);
  }
  void clear() override { inner_->clear(); }
  std::uint64_t call_count(drv::Operation op) const override { return inner_->call_count(op); }

 private:
  drv::FaultInjection* inner_;
};

class ToyDriver final : public drv::ForwardingDriver {
 public:
  explicit ToyDriver(std::shared_ptr<drv::Driver> inner)
      : ForwardingDriver(std::move(inner)), faults_(inner_->fault_injection()) {}

  const drv::BackendDescriptor& backend() const override { return toy_descriptor(); }
  // The toy's own capture domain (its backend's), not the emulation's it borrows.
  std::shared_ptr<const void> capture_domain() const override { return drv::Driver::capture_domain(); }
  drv::FaultInjection* fault_injection() override { return &faults_; }

  drv::Status device_name(std::string* out) override {
    drv::Status s = inner_->device_name(out);
    if (s.ok()) *out = "toy device";
    return passed(s);
  }

 private:
  // The emulation's status in the toy's words: lifecore's code stays, the native number,
  // name and stickiness become the toy's; the call is renamed "toy" + the emulation's.
  drv::Status passed(drv::Status status) override {
    if (status.ok()) return status;
    return drv::local_status(toy_naming(), status.code, "toy:" + status.call, status.message);
  }

  ToyFaults faults_;
};

}  // namespace toy
