// KV arena chunks from a runtime Device: each chunk is one exact-size arena of the device's
// memory manager (counted by memory_stats, outside the pools and every capture window), and
// can be lent out as a Buffer for zero-copy tensor views.
#pragma once

#include <memory>

#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/sequence/page_memory.hpp"

namespace lifecore::sequence {

class DeviceArenaMemory final : public PageMemory {
 public:
  // `device` is kept open while this lives (an engine holding only the coordinator must not
  // find it closed); once closed explicitly, nothing more is allocated (its close returned
  // every arena).
  explicit DeviceArenaMemory(std::shared_ptr<runtime::Device> device);
  PageExtent allocate(std::size_t bytes) override;
  void release(const PageExtent& extent) noexcept override;
  const char* kind() const noexcept override { return "driver"; }
  bool closed() const noexcept override;
  std::string closed_reason() const override;
  std::shared_ptr<void> watch_close(std::function<void()> on_close) override;
  // A Buffer over `chunk` that holds its arena: the memory outlives the coordinator while the
  // buffer (or a view of it) lives. ClosedError once the device is closed.
  std::shared_ptr<runtime::Buffer> lend(const PageExtent& chunk) const;
  const std::shared_ptr<runtime::Device>& device() const noexcept { return device_; }

 private:
  std::shared_ptr<runtime::Device> device_;
};

}  // namespace lifecore::sequence
