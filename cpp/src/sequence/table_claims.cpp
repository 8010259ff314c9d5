#include "lifecore/sequence/table_claims.hpp"

#include <atomic>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/address_range.hpp"
#include "lifecore/error.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/device.hpp"

namespace lifecore::sequence {
namespace {

// Where bytes are: host memory (device null), or a device's own addresses.
struct Place {
  const void* device = nullptr;
  std::uint64_t address = 0;
};

struct Claim {
  std::uint64_t id = 0;
  Place place;
  std::size_t bytes = 0;
  bool of_buffer = false;
  std::weak_ptr<runtime::Buffer> buffer;                      // a Buffer's: claims nothing once freed
  std::shared_ptr<const TableClaim::StillThere> still_there;  // a given array's: nothing once moved
};

struct Claims {
  std::mutex mutex;
  std::vector<Claim> live;            // a few tables at a time: a scan
  std::atomic<std::size_t> count{0};  // live.size(), read without the lock by the writers' check
  std::uint64_t next_id = 1;
  void counted() { count.store(live.size(), std::memory_order_release); }
};

Claims& claims() {
  static Claims* all = new Claims();  // never destroyed: a table may go after static destruction
  return *all;
}

// A Buffer's bytes: its host bytes where its device's memory is host memory, so that a host
// view of it meets its claim; else its device address.
Place place_of(const runtime::Buffer& buffer, std::size_t bytes, const char* call) {
  const driver::DevicePtr ptr = buffer.ptr(call);
  driver::HostView view;
  if (bytes != 0 && buffer.device()->driver().host_view(ptr, bytes, &view).ok() && view.data)
    return {nullptr, reinterpret_cast<std::uint64_t>(view.data)};
  return {buffer.device().get(), ptr};
}

[[noreturn]] void refuse(const char* call, const char* as) {
  raise(ErrorKind::InvalidArgument,
        std::string(call) + ": argument 'out' is the memory of a live DecodeTable, which writes only what changed " +
            "since its last call: " + as + " would leave rows showing ids it no longer knows of; use that table, or " +
            "let it go first (nothing was written)");
}

// Throws when [place, + bytes) shares a byte with a live claim. A host table's claim is asked
// whether its memory is still there, without the lock (the question may run the array's own
// code): one whose memory moved claims nothing now.
void refuse_claimed(Claims& all, Place place, std::size_t bytes, const char* call, const char* as) {
  std::vector<std::shared_ptr<const TableClaim::StillThere>> ask;
  {
    std::lock_guard lock(all.mutex);
    for (const Claim& c : all.live) {
      if (c.place.device != place.device || !shares_a_byte(c.place.address, c.bytes, place.address, bytes)) continue;
      if (c.of_buffer) {
        const auto buffer = c.buffer.lock();
        if (!buffer || !buffer->alive()) continue;  // a freed Buffer's memory is no table's
        refuse(call, as);
      }
      if (!c.still_there) refuse(call, as);  // the table's own array: it cannot move
      ask.push_back(c.still_there);
    }
  }
  for (const auto& still_there : ask)
    if ((*still_there)()) refuse(call, as);
}

std::uint64_t add(Claims& all, Claim claim) {
  std::lock_guard lock(all.mutex);
  claim.id = all.next_id++;
  all.live.push_back(std::move(claim));
  all.counted();
  return all.live.back().id;
}

}  // namespace

TableClaim::TableClaim(const void* data, std::size_t bytes, const char* call,
                       std::shared_ptr<const StillThere> still_there) {
  Claims& all = claims();
  const Place place{nullptr, reinterpret_cast<std::uint64_t>(data)};
  refuse_claimed(all, place, bytes, call, "a second table over it");
  id_ = add(all, Claim{0, place, bytes, false, {}, std::move(still_there)});
}

TableClaim::TableClaim(std::shared_ptr<runtime::Buffer> buffer, std::size_t bytes, const char* call) {
  Claims& all = claims();
  const Place place = place_of(*buffer, bytes, call);
  refuse_claimed(all, place, bytes, call, "a second table over it");
  id_ = add(all, Claim{0, place, bytes, true, buffer, nullptr});
}

TableClaim::~TableClaim() {
  Claims& all = claims();
  Claim gone;  // let go after the lock: its question holds the array, whose release may run its code
  std::lock_guard lock(all.mutex);
  for (auto it = all.live.begin(); it != all.live.end(); ++it)
    if (it->id == id_) {
      gone = std::move(*it);
      all.live.erase(it);
      all.counted();
      return;
    }
}

void refuse_a_claimed_table(const void* data, std::size_t bytes, const char* call) {
  Claims& all = claims();
  if (all.count.load(std::memory_order_acquire) == 0) return;  // no table lives: the common case
  refuse_claimed(all, {nullptr, reinterpret_cast<std::uint64_t>(data)}, bytes, call, "a table written over it");
}

void refuse_a_claimed_table(const runtime::Buffer& buffer, std::size_t bytes, const char* call) {
  Claims& all = claims();
  if (all.count.load(std::memory_order_acquire) == 0 || !buffer.alive()) return;  // a freed one: the write refuses it
  refuse_claimed(all, place_of(buffer, bytes, call), bytes, call, "a table written over it");
}

}  // namespace lifecore::sequence
