#include "driver/mock/mock_address_space.hpp"

#include <cstdint>
#include <cstdlib>

namespace lifecore::driver::mock {

DeviceBlock::DeviceBlock(std::size_t bytes) {
  // calloc: large blocks come from zeroed pages the host maps lazily, so a big allocation
  // costs nothing until touched, and fresh device memory reads as zeros (deterministic).
  // Over-allocated to start on a 256-byte boundary, as a device allocation does (DLPack
  // promises consumers that alignment; JAX copies what lacks it instead of viewing it).
  constexpr std::size_t align = AddressSpace::alignment;
  if (bytes > ~std::size_t{0} - align) return;  // no such host allocation: data() stays null
  allocated_ = std::calloc(bytes + align, 1);
  if (allocated_ == nullptr) return;
  const auto address = reinterpret_cast<std::uintptr_t>(allocated_);
  data_ = static_cast<std::byte*>(allocated_) + (align - address % align) % align;
}

DeviceBlock::~DeviceBlock() {
  if (owned_) std::free(allocated_);
}

AddressSpace::AddressSpace(DevicePtr base, std::size_t limit) : next_(base), limit_(limit) {}

std::size_t AddressSpace::charge(std::size_t bytes) {
  // Saturate (no request wraps around) at a multiple of the alignment, so that every base
  // after a saturated region stays aligned.
  constexpr std::size_t most = ~std::size_t{0} / 2 / alignment * alignment;
  if (bytes > most) return most;
  return (bytes + alignment - 1) / alignment * alignment;
}

// A one-alignment gap after each region: an access one past the end never lands in a neighbour.
// An address space used up (two claimed 2**63-byte host mappings) refuses, rather than wrap onto
// addresses its regions hold.
bool AddressSpace::room_locked(std::size_t bytes) const {
  return std::uint64_t{charge(bytes)} + alignment <= ~std::uint64_t{0} - next_;  // charge saturates at 2**63
}

DevicePtr AddressSpace::take_locked(std::size_t bytes) {
  const DevicePtr ptr = next_;
  next_ += charge(bytes) + alignment;  // room_locked said it fits
  return ptr;
}

DevicePtr AddressSpace::reserve(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (!room_locked(bytes)) return 0;
  const DevicePtr ptr = take_locked(bytes);
  regions_.emplace(ptr, Region{bytes, State::reserved, true, nullptr});
  return ptr;
}

void AddressSpace::release(const std::vector<DevicePtr>& bases) {
  std::lock_guard lock(mutex_);
  for (DevicePtr base : bases) {
    auto it = regions_.find(base);
    if (it == regions_.end() || !it->second.graph_owned) continue;
    if (it->second.state == State::live) {
      it->second.graph_owned = false;
    } else {
      regions_.erase(it);
    }
  }
}

bool AddressSpace::back_locked(Region& region) {
  const std::size_t charged = charge(region.bytes);
  if (charged > limit_ || in_use_ > limit_ - charged) return false;
  auto block = std::make_shared<DeviceBlock>(region.bytes);
  if (block->data() == nullptr) return false;
  region.block = std::move(block);
  region.state = State::live;
  in_use_ += charged;
  ++live_;
  return true;
}

bool AddressSpace::allocate(std::size_t bytes, DevicePtr* out) {
  if (bytes == 0) return false;
  std::lock_guard lock(mutex_);
  Region region{bytes, State::reserved, false, nullptr};
  if (!room_locked(bytes) || !back_locked(region)) return false;
  const DevicePtr ptr = take_locked(bytes);
  regions_.emplace(ptr, std::move(region));
  *out = ptr;
  return true;
}

bool AddressSpace::free(DevicePtr ptr) {
  std::shared_ptr<DeviceBlock> released;  // dropped after the lock: the host free can be slow
  {
    std::lock_guard lock(mutex_);
    auto it = regions_.find(ptr);
    if (it == regions_.end() || it->second.state != State::live || it->second.mapped) return false;
    Region& region = it->second;
    in_use_ -= charge(region.bytes);
    --live_;
    released = std::move(region.block);
    if (region.graph_owned) {
      region.state = State::reserved;  // the graph keeps its address for the next launch
    } else {
      regions_.erase(it);
    }
  }
  return true;
}

bool AddressSpace::is_freeable(DevicePtr ptr) const {
  std::lock_guard lock(mutex_);
  auto it = regions_.find(ptr);
  return it != regions_.end() && it->second.state != State::reserved && !it->second.mapped;
}

bool AddressSpace::map(std::byte* host, std::size_t bytes, DevicePtr* out) {
  if (host == nullptr || bytes == 0) return false;
  std::lock_guard lock(mutex_);
  if (!room_locked(bytes)) return false;
  const DevicePtr ptr = take_locked(bytes);
  Region region{bytes, State::live, false, nullptr};
  region.mapped = true;
  region.block = std::make_shared<DeviceBlock>(host);
  regions_.emplace(ptr, std::move(region));
  *out = ptr;
  return true;
}

bool AddressSpace::unmap(DevicePtr ptr) {
  std::lock_guard lock(mutex_);
  auto it = regions_.find(ptr);
  if (it == regions_.end() || !it->second.mapped) return false;
  regions_.erase(it);
  return true;
}

bool AddressSpace::is_region_base(DevicePtr ptr) const {
  std::lock_guard lock(mutex_);
  return regions_.count(ptr) != 0;
}

bool AddressSpace::claim(const std::vector<DevicePtr>& bases, DevicePtr* busy) {
  std::lock_guard lock(mutex_);
  for (DevicePtr base : bases) {
    auto it = regions_.find(base);
    if (it == regions_.end() || it->second.state != State::reserved) {
      if (busy) *busy = base;
      return false;
    }
  }
  for (DevicePtr base : bases) regions_.find(base)->second.state = State::claimed;
  return true;
}

bool AddressSpace::back(DevicePtr base) {
  std::lock_guard lock(mutex_);
  auto it = regions_.find(base);
  if (it == regions_.end() || it->second.state == State::live) return false;
  if (back_locked(it->second)) return true;
  it->second.state = State::reserved;
  return false;
}

void AddressSpace::unclaim(DevicePtr base) {
  std::lock_guard lock(mutex_);
  auto it = regions_.find(base);
  if (it != regions_.end() && it->second.state == State::claimed) it->second.state = State::reserved;
}

DeviceSpan AddressSpace::resolve(DevicePtr ptr, std::size_t bytes) const {
  std::lock_guard lock(mutex_);
  auto it = regions_.upper_bound(ptr);
  if (it == regions_.begin()) return {};
  --it;
  const Region& region = it->second;
  const std::uint64_t offset = ptr - it->first;
  if (region.state != State::live || offset >= region.bytes || bytes > region.bytes - offset) return {};
  return {region.block, region.block->data() + offset};
}

void AddressSpace::set_limit(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  limit_ = bytes;
}

std::size_t AddressSpace::limit() const {
  std::lock_guard lock(mutex_);
  return limit_;
}

std::size_t AddressSpace::in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}

std::size_t AddressSpace::live_allocations() const {
  std::lock_guard lock(mutex_);
  return live_;
}

}  // namespace lifecore::driver::mock
