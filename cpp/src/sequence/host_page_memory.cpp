#include "lifecore/sequence/page_memory.hpp"

#include <algorithm>

#include "lifecore/checked.hpp"

namespace lifecore::sequence {

bool HostPageMemory::allocate(std::size_t bytes, PageExtent* out) noexcept {
  std::uint64_t pending = failures_pending_.load();
  while (pending > 0)
    if (failures_pending_.compare_exchange_weak(pending, pending - 1)) return false;
  // Addresses advance by the extent's size rounded to 4 KiB, so live extents never overlap;
  // a size or an address range that would wrap is memory this pool cannot hand out.
  const auto padded = checked::add(static_cast<std::uint64_t>(bytes), std::uint64_t{4095});
  if (!padded) return false;
  const std::uint64_t span = std::max<std::uint64_t>(*padded & ~std::uint64_t{4095}, 4096);
  std::uint64_t address = next_address_.load();
  for (;;) {
    const auto next = checked::add(address, span);
    if (!next) return false;
    if (next_address_.compare_exchange_weak(address, *next)) break;
  }
  out->address = address;
  out->bytes = bytes;
  live_bytes_.fetch_add(bytes);
  live_extents_.fetch_add(1);
  allocations_.fetch_add(1);
  return true;
}

void HostPageMemory::release(const PageExtent& extent) noexcept {
  live_bytes_.fetch_sub(extent.bytes);
  live_extents_.fetch_sub(1);
}

}  // namespace lifecore::sequence
