#include "lifecore/sequence/page_memory.hpp"

#include <algorithm>

#include "lifecore/checked.hpp"

namespace lifecore::sequence {

PageExtent HostPageMemory::allocate(std::size_t bytes) {
  PageExtent out;
  // Addresses advance by the chunk's size rounded to 4 KiB, so live chunks never overlap. A
  // chunk the synthetic address space cannot hold (accounting for absurd sizes) gets address
  // 0: there is no memory behind host pages either way.
  std::uint64_t address = 0;
  if (const auto padded = checked::add(static_cast<std::uint64_t>(bytes), std::uint64_t{4095})) {
    const std::uint64_t span = std::max<std::uint64_t>(*padded & ~std::uint64_t{4095}, 4096);
    std::uint64_t start = next_address_.load();
    for (;;) {
      const auto next = checked::add(start, span);
      if (!next) break;
      if (next_address_.compare_exchange_weak(start, *next)) {
        address = start;
        break;
      }
    }
  }
  out.address = address;
  out.bytes = bytes;
  live_bytes_.fetch_add(bytes);
  live_extents_.fetch_add(1);
  allocations_.fetch_add(1);
  return out;
}

void HostPageMemory::release(const PageExtent& extent) noexcept {
  live_bytes_.fetch_sub(extent.bytes);
  live_extents_.fetch_sub(1);
}

bool HostPageMemory::take_permitted() noexcept {
  std::uint64_t pending = failures_pending_.load();
  while (pending > 0)
    if (failures_pending_.compare_exchange_weak(pending, pending - 1)) return false;
  return true;
}

}  // namespace lifecore::sequence
