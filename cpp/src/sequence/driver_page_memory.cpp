#include "sequence/driver_page_memory.hpp"

#include "lifecore/error.hpp"

namespace lifecore::sequence {

DriverPageMemory::DriverPageMemory(std::shared_ptr<driver::Driver> driver, std::function<bool()> device_closed)
    : driver_(std::move(driver)), device_closed_(std::move(device_closed)) {
  if (!driver_) raise(ErrorKind::InvalidArgument, "DriverPageMemory: a driver is required");
}

bool DriverPageMemory::allocate(std::size_t bytes, PageExtent* out) noexcept {
  if (closed()) return false;  // never a page of a closed device (the coordinator refuses first)
  driver::DevicePtr ptr = 0;
  // A failed allocation (out of memory, an injected fault) is capacity pressure: the caller
  // turns it into a deferral.
  if (!driver_->mem_alloc(bytes, &ptr).ok()) return false;
  out->address = ptr;
  out->bytes = bytes;
  live_bytes_.fetch_add(bytes);
  live_extents_.fetch_add(1);
  allocations_.fetch_add(1);
  return true;
}

void DriverPageMemory::release(const PageExtent& extent) noexcept {
  // Nothing to do about a failed free in a release path but count it.
  if (!driver_->mem_free(extent.address).ok()) failed_releases_.fetch_add(1);
  live_bytes_.fetch_sub(extent.bytes);
  live_extents_.fetch_sub(1);
}

}  // namespace lifecore::sequence
