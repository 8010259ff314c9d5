// The mock device's memory: fake device addresses (never 0, aligned to 256, never reused)
// mapped to host storage. Every access resolves through here, so an access outside a live
// allocation is caught instead of touching host memory nobody owns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "lifecore/driver/driver.hpp"

namespace lifecore::driver::mock {

// Host storage of one allocation. Work in flight holds it by shared_ptr, so freeing an
// allocation while a kernel still reads it cannot pull the bytes from under that kernel.
class DeviceBlock {
 public:
  explicit DeviceBlock(std::size_t bytes);  // data() is null when host memory ran out
  // Another owner's host memory (map_host): never freed here.
  explicit DeviceBlock(std::byte* borrowed) noexcept : data_(borrowed), owned_(false) {}
  ~DeviceBlock();
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  std::byte* data() const noexcept { return data_; }

 private:
  std::byte* data_ = nullptr;   // 256-byte aligned where owned, as a device allocation is
  void* allocated_ = nullptr;   // what the host allocator returned (freed), where owned
  bool owned_ = true;
};

// The host bytes behind a checked device range; `data` is null when the range was refused.
struct DeviceSpan {
  std::shared_ptr<DeviceBlock> block;
  std::byte* data = nullptr;
};

class AddressSpace {
 public:
  static constexpr std::size_t alignment = 256;

  // `base`: the first address handed out (distinct per device, so mixed-up pointers fail).
  AddressSpace(DevicePtr base, std::size_t limit);

  // A live allocation of `bytes` > 0; false when it would pass the limit or the host is out.
  bool allocate(std::size_t bytes, DevicePtr* out);
  // Frees the live allocation starting at `ptr`; false when there is none.
  bool free(DevicePtr ptr);
  // Another owner's host bytes under an address of their own (map_host): live for every
  // access, never charged against the limit, never freed by free(), only by unmap().
  bool map(std::byte* host, std::size_t bytes, DevicePtr* out);
  // False when `ptr` is not the base of a mapping.
  bool unmap(DevicePtr ptr);
  // True when `ptr` is the base of a live allocation or of a graph allocation a launch claimed.
  bool is_freeable(DevicePtr ptr) const;
  // True when `ptr` is the base of any region, live or reserved.
  bool is_region_base(DevicePtr ptr) const;

  // Graph memory (CUDA's memory-alloc nodes): the address is fixed when the node is captured
  // and backed only between the node's execution and the matching free.
  // 0 once the address space is used up.
  DevicePtr reserve(std::size_t bytes);
  // A graph's memory nodes once no graph, executable graph or capture holds them: a reserved
  // address goes back to the space; an allocation still live (a launch made it, nothing freed
  // it) is an ordinary one from now on, gone at its free.
  void release(const std::vector<DevicePtr>& bases);
  // Marks every reservation as claimed by a launch, all or nothing. False (nothing changed)
  // when one is claimed or live already; *busy then names it.
  bool claim(const std::vector<DevicePtr>& bases, DevicePtr* busy);
  // claimed (or unclaimed) -> live. False when already live, or when the memory limit or the
  // host refuses (then unclaimed).
  bool back(DevicePtr base);
  // claimed -> unclaimed, for a launch that stopped before reaching the node.
  void unclaim(DevicePtr base);

  // The host bytes behind [ptr, ptr + bytes) when that range lies inside one live allocation.
  DeviceSpan resolve(DevicePtr ptr, std::size_t bytes) const;

  void set_limit(std::size_t bytes);
  std::size_t limit() const;
  std::size_t in_use() const;             // bytes charged to live allocations
  std::size_t live_allocations() const;

 private:
  enum class State : std::uint8_t { live, reserved, claimed };
  struct Region {
    std::size_t bytes = 0;
    State state = State::live;
    bool graph_owned = false;
    std::shared_ptr<DeviceBlock> block;  // non-null exactly when live
    bool mapped = false;                 // another owner's host bytes (map)
  };
  static std::size_t charge(std::size_t bytes);
  bool back_locked(Region& region);

  mutable std::mutex mutex_;
  std::map<DevicePtr, Region> regions_;
  DevicePtr next_;
  // Whether a region of `bytes` fits below the top of the address space; then take_locked gives
  // its base and moves next_ past it.
  bool room_locked(std::size_t bytes) const;
  DevicePtr take_locked(std::size_t bytes);
  std::size_t limit_;
  std::size_t in_use_ = 0;
  std::size_t live_ = 0;
};

}  // namespace lifecore::driver::mock
