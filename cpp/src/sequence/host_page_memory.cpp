#include "lifecore/sequence/page_memory.hpp"

namespace lifecore::sequence {

bool HostPageMemory::allocate(std::size_t bytes, PageExtent* out) noexcept {
  std::uint64_t pending = failures_pending_.load();
  while (pending > 0)
    if (failures_pending_.compare_exchange_weak(pending, pending - 1)) return false;
  // Addresses advance by the extent's size rounded to 4 KiB, so live extents never overlap.
  const std::uint64_t span = (static_cast<std::uint64_t>(bytes) + 4095) & ~std::uint64_t{4095};
  out->address = next_address_.fetch_add(span ? span : 4096);
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
