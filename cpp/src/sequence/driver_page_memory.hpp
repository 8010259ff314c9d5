// Pages from a device's memory through the vendor layer (mem_alloc / mem_free).
#pragma once

#include <functional>
#include <memory>

#include "lifecore/sequence/page_memory.hpp"
#include "vendor/driver.hpp"

namespace lifecore::sequence {

class DriverPageMemory final : public PageMemory {
 public:
  // `device_closed` tells whether the device these pages belong to is closed (null: a device
  // of its own, never closed under it). Once it is, nothing more is allocated; pages handed
  // out before still go back to the driver, which this object keeps alive.
  explicit DriverPageMemory(std::shared_ptr<vendor::Driver> driver, std::function<bool()> device_closed = {});
  bool allocate(std::size_t bytes, PageExtent* out) noexcept override;
  void release(const PageExtent& extent) noexcept override;
  const char* kind() const noexcept override { return "driver"; }
  bool closed() const noexcept override { return device_closed_ && device_closed_(); }
  const std::shared_ptr<vendor::Driver>& driver() const noexcept { return driver_; }

 private:
  std::shared_ptr<vendor::Driver> driver_;
  std::function<bool()> device_closed_;
};

}  // namespace lifecore::sequence
