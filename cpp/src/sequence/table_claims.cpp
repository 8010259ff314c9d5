#include "lifecore/sequence/table_claims.hpp"

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "lifecore/error.hpp"
#include "lifecore/runtime/buffer.hpp"

namespace lifecore::sequence {
namespace {

// A range of host memory (device null), or of a Buffer's device memory: while the Buffer is
// alive its address is its own, and a freed one's address may come back to another Buffer.
struct Claim {
  std::uint64_t id;
  const void* device;  // the Buffer's device; null for host memory
  std::weak_ptr<runtime::Buffer> buffer;
  std::uint64_t address;
  std::size_t bytes;
};

struct Claims {
  std::mutex mutex;
  std::vector<Claim> live;  // a few tables at a time: a scan
  std::atomic<std::size_t> count{0};  // live.size(), read without the lock by the writers' check
  std::uint64_t next_id = 1;
};

Claims& claims() {
  static Claims* all = new Claims();  // never destroyed: a table may go after static destruction
  return *all;
}

bool overlaps(std::uint64_t a, std::size_t a_bytes, std::uint64_t b, std::size_t b_bytes) noexcept {
  if (a_bytes == 0 || b_bytes == 0) return false;
  return a < b ? b - a < a_bytes : a - b < b_bytes;  // no wrap: distances, not ends
}

// Throws when [address, + bytes) on `device` (null: host) shares a byte with a live claim.
void refuse_locked(const Claims& all, const void* device, std::uint64_t address, std::size_t bytes, const char* call,
                   const char* as) {
  for (const Claim& c : all.live) {
    if (c.device != device || !overlaps(c.address, c.bytes, address, bytes)) continue;
    if (device) {
      const auto buffer = c.buffer.lock();
      if (!buffer || !buffer->alive()) continue;  // a freed Buffer claims nothing
    }
    raise(ErrorKind::InvalidArgument,
          std::string(call) + ": argument 'out' is the memory of a live DecodeTable, which writes only what changed " +
              "since its last call: " + as + " would leave rows showing ids it no longer knows of; use that table, "
              "or let it go first (nothing was written)");
  }
}

std::uint64_t buffer_address(const runtime::Buffer& buffer, const char* call) { return buffer.ptr(call); }

}  // namespace

TableClaim::TableClaim(const void* data, std::size_t bytes, const char* call) {
  Claims& all = claims();
  std::lock_guard lock(all.mutex);
  const auto address = reinterpret_cast<std::uint64_t>(data);
  refuse_locked(all, nullptr, address, bytes, call, "a second table over it");
  id_ = all.next_id++;
  all.live.push_back({id_, nullptr, {}, address, bytes});
  all.count.store(all.live.size(), std::memory_order_release);
}

TableClaim::TableClaim(std::shared_ptr<runtime::Buffer> buffer, std::size_t bytes, const char* call) {
  const std::uint64_t address = buffer_address(*buffer, call);
  const void* device = buffer->device().get();
  Claims& all = claims();
  std::lock_guard lock(all.mutex);
  refuse_locked(all, device, address, bytes, call, "a second table over it");
  id_ = all.next_id++;
  all.live.push_back({id_, device, buffer, address, bytes});
  all.count.store(all.live.size(), std::memory_order_release);
}

TableClaim::~TableClaim() {
  Claims& all = claims();
  std::lock_guard lock(all.mutex);
  for (auto it = all.live.begin(); it != all.live.end(); ++it)
    if (it->id == id_) {
      all.live.erase(it);
      all.count.store(all.live.size(), std::memory_order_release);
      return;
    }
}

void refuse_a_claimed_table(const void* data, std::size_t bytes, const char* call) {
  Claims& all = claims();
  if (all.count.load(std::memory_order_acquire) == 0) return;  // no table lives: the common case
  std::lock_guard lock(all.mutex);
  refuse_locked(all, nullptr, reinterpret_cast<std::uint64_t>(data), bytes, call, "a table written over it");
}

void refuse_a_claimed_table(const runtime::Buffer& buffer, std::size_t bytes, const char* call) {
  Claims& all = claims();
  if (all.count.load(std::memory_order_acquire) == 0 || !buffer.alive()) return;  // a freed one: the write refuses it
  const std::uint64_t address = buffer_address(buffer, call);
  std::lock_guard lock(all.mutex);
  refuse_locked(all, buffer.device().get(), address, bytes, call, "a table written over it");
}

}  // namespace lifecore::sequence
