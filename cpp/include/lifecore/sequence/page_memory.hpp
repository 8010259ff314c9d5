// Where KV pages come from. The coordinator accounts capacity logically; a PageMemory hands
// out the physical extents behind it. HostPageMemory reserves address ranges only (an
// accounting-only pool for device=None and tests); a driver-backed one lives in
// src/sequence/driver_page_memory.hpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace lifecore::sequence {

struct PageExtent {
  std::uint64_t address = 0;  // device (or synthetic) address of the first byte
  std::uint64_t bytes = 0;
};

class PageMemory {
 public:
  virtual ~PageMemory() = default;
  // False when the memory cannot be had now (out of memory, an injected fault): the caller
  // answers with a deferral, never an error.
  virtual bool allocate(std::size_t bytes, PageExtent* out) noexcept = 0;
  virtual void release(const PageExtent& extent) noexcept = 0;
  virtual const char* kind() const noexcept = 0;
  // True once the memory's device is closed: no page is handed out after that (the
  // coordinator refuses with ClosedError); pages handed out before go back on release.
  virtual bool closed() const noexcept { return false; }
};

// Synthetic, never-reused-while-live addresses; counts what is live so tests can prove that
// nothing leaks, and can be told to fail the next allocations.
class HostPageMemory final : public PageMemory {
 public:
  bool allocate(std::size_t bytes, PageExtent* out) noexcept override;
  void release(const PageExtent& extent) noexcept override;
  const char* kind() const noexcept override { return "host"; }

  void fail_next_allocations(std::uint64_t count) noexcept { failures_pending_.store(count); }
  std::uint64_t live_bytes() const noexcept { return live_bytes_.load(); }
  std::uint64_t live_extents() const noexcept { return live_extents_.load(); }
  std::uint64_t allocations() const noexcept { return allocations_.load(); }

 private:
  std::atomic<std::uint64_t> next_address_{0x1000};
  std::atomic<std::uint64_t> live_bytes_{0};
  std::atomic<std::uint64_t> live_extents_{0};
  std::atomic<std::uint64_t> allocations_{0};
  std::atomic<std::uint64_t> failures_pending_{0};
};

}  // namespace lifecore::sequence
