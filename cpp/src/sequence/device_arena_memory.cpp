#include "sequence/device_arena_memory.hpp"

#include "lifecore/error.hpp"
#include "lifecore/runtime/capture_registry.hpp"
#include "lifecore/runtime/stream.hpp"
#include "runtime/relaxed_capture_mode.hpp"

namespace lifecore::sequence {

DeviceArenaMemory::DeviceArenaMemory(std::shared_ptr<runtime::Device> device) : device_(std::move(device)) {
  if (!device_) raise(ErrorKind::InvalidArgument, "DeviceArenaMemory: a device is required");
}

bool DeviceArenaMemory::closed() const noexcept { return device_->closed(); }

std::string DeviceArenaMemory::closed_reason() const { return device_->forked() ? device_->forked_text() : std::string(); }

std::shared_ptr<void> DeviceArenaMemory::watch_close(std::function<void()> on_close) {
  return device_->watch_close(std::move(on_close));
}

PageExtent DeviceArenaMemory::allocate(std::size_t bytes) {
  runtime::Device* device = device_.get();
  device->check_open("AdmissionCoordinator");
  // A driver allocation is a call the driver forbids this thread while a capture of its own
  // records (outside relaxed mode): refused up front, as a stream's allocation is, instead of
  // invalidating that recording.
  runtime::capture_registry::check("AdmissionCoordinator", "needs a driver allocation for its KV arena",
                                   device->driver().capture_domain().get(), nullptr);
  auto made = device->memory().reserve_arena(bytes, [&](std::size_t n) {
    runtime::SliceAllocation allocation;
    // Relaxed: another library's global capture elsewhere is left whole (runtime/stream.hpp).
    runtime::RelaxedCaptureMode relaxed(device->driver());
    const driver::Status status = device->driver().mem_alloc(n, &allocation.ptr);
    device->note_status(status);
    driver::check(status);
    return allocation;
  });
  allocations_.fetch_add(1);
  return {made.ptr, bytes, made.id};
}

void DeviceArenaMemory::release(const PageExtent& extent) noexcept {
  // A closed device returned every arena already.
  if (!device_->closed()) device_->memory().release_arena(extent.handle);
}

std::shared_ptr<runtime::Buffer> DeviceArenaMemory::lend(const PageExtent& chunk) const {
  device_->check_open("arena");
  std::shared_ptr<runtime::Stream> stream = device_->stream();
  if (!device_->memory().hold_arena(chunk.handle)) raise(ErrorKind::Closed, "arena: the arena's memory was returned");
  auto buffer = std::make_shared<runtime::Buffer>(std::move(stream), chunk.handle, chunk.address, chunk.bytes);
  buffer->mark_arena_hold();
  return buffer;
}

}  // namespace lifecore::sequence
