// Where the KV arena's memory comes from. The coordinator hands out pages as block ids of
// one arena per domain (sequence/block_arena.hpp); a PageMemory supplies the arena's chunks
// (one allocation per domain at creation, one per growth) and nothing per page.
// HostPageMemory reserves address ranges only (accounting for device=None and tests); a
// device-backed one lives in src/sequence/device_arena_memory.hpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace lifecore::sequence {

struct PageExtent {
  std::uint64_t address = 0;  // device (or synthetic) address of the first byte
  std::uint64_t bytes = 0;
  std::uint64_t handle = 0;  // the memory's own name for the chunk (a device's arena id)
};

class PageMemory {
 public:
  virtual ~PageMemory() = default;
  // One arena chunk of exactly `bytes`; throws lifecore::Error when the memory cannot be had
  // (out of memory, an injected fault, a closed device), and nothing changes.
  virtual PageExtent allocate(std::size_t bytes) = 0;
  virtual void release(const PageExtent& extent) noexcept = 0;
  // Asked (under the coordinator's lock) before block ids are taken for an admission or an
  // extension: false makes that take a physical deferral (a testing hook on host memory).
  virtual bool take_permitted() noexcept { return true; }
  virtual const char* kind() const noexcept = 0;
  // Whether its chunks' addresses name memory (a device's); host accounting's are its own
  // numbering, which extents report as 0.
  virtual bool has_addresses() const noexcept { return true; }
  // True once the memory's device is closed: no page is handed out after that (the
  // coordinator refuses with ClosedError); pages handed out before go back on release.
  virtual bool closed() const noexcept { return false; }
  // Why it is closed, where a refusal should say more than that (a device opened before this
  // process forked); empty otherwise.
  virtual std::string closed_reason() const { return {}; }
  // Calls `on_close` once when the memory's device closes (at once if it is closed); the watch
  // lasts while the returned token lives. Memory without a device never closes: no token.
  virtual std::shared_ptr<void> watch_close(std::function<void()> on_close) {
    (void)on_close;
    return nullptr;
  }
  // Counters for page_memory_stats: chunks allocated in all, and frees the memory refused.
  std::uint64_t allocations() const noexcept { return allocations_.load(); }
  std::uint64_t failed_releases() const noexcept { return failed_releases_.load(); }

 protected:
  std::atomic<std::uint64_t> allocations_{0};
  std::atomic<std::uint64_t> failed_releases_{0};
};

// Synthetic, never-reused-while-live addresses for the chunks; can be told to fail the next
// block takes (the physical deferral path).
class HostPageMemory final : public PageMemory {
 public:
  PageExtent allocate(std::size_t bytes) override;
  void release(const PageExtent& extent) noexcept override;
  bool take_permitted() noexcept override;
  const char* kind() const noexcept override { return "host"; }
  bool has_addresses() const noexcept override { return false; }

  void fail_next_allocations(std::uint64_t count) noexcept { failures_pending_.store(count); }
  std::uint64_t live_bytes() const noexcept { return live_bytes_.load(); }
  std::uint64_t live_extents() const noexcept { return live_extents_.load(); }

 private:
  std::atomic<std::uint64_t> next_address_{0x1000};
  std::atomic<std::uint64_t> live_bytes_{0};
  std::atomic<std::uint64_t> live_extents_{0};
  std::atomic<std::uint64_t> failures_pending_{0};
};

}  // namespace lifecore::sequence
