// Pages from a device's memory through the vendor layer (mem_alloc / mem_free).
#pragma once

#include <memory>

#include "lifecore/sequence/page_memory.hpp"
#include "vendor/driver.hpp"

namespace lifecore::sequence {

class DriverPageMemory final : public PageMemory {
 public:
  explicit DriverPageMemory(std::shared_ptr<vendor::Driver> driver);
  bool allocate(std::size_t bytes, PageExtent* out) noexcept override;
  void release(const PageExtent& extent) noexcept override;
  const char* kind() const noexcept override { return "driver"; }
  const std::shared_ptr<vendor::Driver>& driver() const noexcept { return driver_; }

 private:
  std::shared_ptr<vendor::Driver> driver_;
};

}  // namespace lifecore::sequence
