// An allocator another library (torch's caching allocator, through a pluggable-allocator ABI)
// can pool over, so the memory it takes inside a capture window is lifecore's: each request
// names a native stream, and a stream that opted in (route) serves it as a Buffer lent from
// its own memory manager (Stream::alloc_lent). Inside an armed window that slice comes from the
// persistent pool and is primed or touched like any Buffer, and every recording on the stream
// retains what is still lent, so the recorded pass allocates nothing and the graph keeps what
// the other library's kernels use. release hands the Buffer back: its slice returns to the
// pool after the stream's fence.
// Process-wide (the C ABI has no context argument), thread-safe, never throws from allocate or
// release: a refusal is a null pointer and a counter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace lifecore::runtime {

class Buffer;
class Stream;

struct PooledAllocatorStats {
  std::uint64_t allocations = 0;     // requests served
  std::uint64_t releases = 0;        // lent memory handed back
  std::uint64_t live = 0;            // lent now
  std::uint64_t live_bytes = 0;      // their requested sizes
  std::uint64_t unknown_stream = 0;  // requests naming a stream that is not routed (null returned)
  std::uint64_t refused = 0;         // requests a routed stream refused: size 0 or too large, closed device,
                                     // out of memory, a pool miss inside a driver capture (null returned)
  std::uint64_t unknown_pointer = 0; // releases of a pointer this allocator did not lend (ignored)
  std::uint64_t streams = 0;         // streams routed now
};

class PooledAllocator {
 public:
  // The process's one instance; never destroyed (a release may come at interpreter exit).
  static PooledAllocator& instance();

  // Requests naming the stream's native handle are served by it from now on. Idempotent for
  // the same stream; InvalidArgumentError when another live stream holds that handle (no
  // driver gives two live streams one handle: a guard, not a case), ClosedError when the
  // stream's device is closed.
  void route(const std::shared_ptr<Stream>& stream);
  // No new requests are served by the stream; what it lent stays valid until released.
  // False when it was not routed.
  bool unroute(const Stream& stream);

  // `bytes` from the stream routed under `native_stream`, or null (counted).
  void* allocate(std::size_t bytes, std::uintptr_t native_stream) noexcept;
  // Hands lent memory back (the slice returns to the pool after its stream's fence); the
  // stream is the one it was allocated for (emulated devices reuse addresses, so the pair
  // names a loan). An unknown loan is counted and ignored.
  void release(void* ptr, std::uintptr_t native_stream) noexcept;

  PooledAllocatorStats stats() const;

 private:
  PooledAllocator() = default;

  mutable std::mutex mutex_;
  std::unordered_map<std::uintptr_t, std::weak_ptr<Stream>> routes_;
  struct LoanKey {
    std::uintptr_t stream = 0;
    std::uintptr_t address = 0;
    bool operator==(const LoanKey&) const = default;
  };
  struct LoanHash {
    std::size_t operator()(const LoanKey& key) const noexcept {
      return std::hash<std::uintptr_t>{}(key.address) ^ (std::hash<std::uintptr_t>{}(key.stream) * 31);
    }
  };
  std::unordered_map<LoanKey, std::shared_ptr<Buffer>, LoanHash> lent_;
  PooledAllocatorStats counts_;
};

}  // namespace lifecore::runtime
