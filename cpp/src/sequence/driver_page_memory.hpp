// Pages from a device's memory through the driver floor (mem_alloc / mem_free).
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "lifecore/sequence/page_memory.hpp"
#include "lifecore/driver/driver.hpp"

namespace lifecore::sequence {

class DriverPageMemory final : public PageMemory {
 public:
  // `device_closed` tells whether the device these pages belong to is closed (null: a device
  // of its own, never closed under it). Once it is, nothing more is allocated; pages handed
  // out before still go back to the driver, which this object keeps alive.
  explicit DriverPageMemory(std::shared_ptr<driver::Driver> driver, std::function<bool()> device_closed = {});
  bool allocate(std::size_t bytes, PageExtent* out) noexcept override;
  void release(const PageExtent& extent) noexcept override;
  const char* kind() const noexcept override { return "driver"; }
  bool closed() const noexcept override { return device_closed_ && device_closed_(); }
  const std::shared_ptr<driver::Driver>& driver() const noexcept { return driver_; }
  // Counters so tests can prove that nothing leaks and nothing is allocated after close.
  std::uint64_t live_bytes() const noexcept { return live_bytes_.load(); }
  std::uint64_t live_extents() const noexcept { return live_extents_.load(); }
  std::uint64_t allocations() const noexcept { return allocations_.load(); }
  std::uint64_t failed_releases() const noexcept { return failed_releases_.load(); }

 private:
  std::shared_ptr<driver::Driver> driver_;
  std::function<bool()> device_closed_;
  std::atomic<std::uint64_t> live_bytes_{0};
  std::atomic<std::uint64_t> live_extents_{0};
  std::atomic<std::uint64_t> allocations_{0};
  std::atomic<std::uint64_t> failed_releases_{0};
};

}  // namespace lifecore::sequence
