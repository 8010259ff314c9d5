#include "lifecore/runtime/pooled_allocator.hpp"

#include <string>
#include <utility>

#include "lifecore/error.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/stream.hpp"

namespace lifecore::runtime {

PooledAllocator& PooledAllocator::instance() {
  static PooledAllocator* allocator = new PooledAllocator();  // outlives every static destructor
  return *allocator;
}

void PooledAllocator::route(const std::shared_ptr<Stream>& stream) {
  if (!stream) raise(ErrorKind::InvalidArgument, "route: the stream is None");
  stream->device()->check_open("route");  // named as this call's refusal
  const std::uintptr_t handle = stream->native_handle();
  std::lock_guard lock(mutex_);
  auto it = routes_.find(handle);
  if (it != routes_.end()) {
    auto current = it->second.lock();
    if (current == stream) return;
    if (current && !current->device()->closed())
      raise(ErrorKind::InvalidArgument, "route: native stream " + std::to_string(handle) +
                                            " is already routed to another stream (unroute it first)");
  }
  routes_[handle] = stream;
}

bool PooledAllocator::unroute(const Stream& stream) {
  std::lock_guard lock(mutex_);
  for (auto it = routes_.begin(); it != routes_.end(); ++it) {
    if (it->second.lock().get() != &stream) continue;
    routes_.erase(it);
    return true;
  }
  return false;
}

void* PooledAllocator::allocate(std::size_t bytes, std::uintptr_t native_stream) noexcept {
  std::shared_ptr<Stream> stream;
  {
    std::lock_guard lock(mutex_);
    auto it = routes_.find(native_stream);
    if (it != routes_.end()) stream = it->second.lock();
    if (!stream) {
      if (it != routes_.end()) routes_.erase(it);  // the stream is gone
      ++counts_.unknown_stream;
      return nullptr;
    }
  }
  std::shared_ptr<Buffer> buffer;
  std::uintptr_t address = 0;
  try {
    buffer = stream->alloc_lent(bytes);  // outside our lock: it takes the stream's and the pool's
    address = static_cast<std::uintptr_t>(buffer->ptr());
  } catch (...) {
    buffer.reset();
    std::lock_guard lock(mutex_);
    ++counts_.refused;
    return nullptr;
  }
  std::shared_ptr<Buffer> stale;
  {
    std::lock_guard lock(mutex_);
    try {
      auto [it, inserted] = lent_.try_emplace(LoanKey{native_stream, address}, buffer);
      if (!inserted) {
        // Only after a device close returned the old memory unreleased: the address is new memory now.
        stale = std::move(it->second);
        counts_.live_bytes -= stale->nbytes();
        --counts_.live;
        it->second = buffer;
      }
    } catch (...) {
      ++counts_.refused;
      return nullptr;  // `buffer` goes back to the pool as it leaves
    }
    ++counts_.allocations;
    ++counts_.live;
    counts_.live_bytes += bytes;
  }
  return reinterpret_cast<void*>(address);
}

void PooledAllocator::release(void* ptr, std::uintptr_t native_stream) noexcept {
  std::shared_ptr<Buffer> buffer;
  {
    std::lock_guard lock(mutex_);
    auto it = lent_.find(LoanKey{native_stream, reinterpret_cast<std::uintptr_t>(ptr)});
    if (it == lent_.end()) {
      ++counts_.unknown_pointer;
      return;
    }
    buffer = std::move(it->second);
    lent_.erase(it);
    ++counts_.releases;
    --counts_.live;
    counts_.live_bytes -= buffer->nbytes();
  }
  buffer.reset();  // outside our lock: the stream queues the slice behind its next fence
}

PooledAllocatorStats PooledAllocator::stats() const {
  std::lock_guard lock(mutex_);
  PooledAllocatorStats out = counts_;
  out.streams = 0;
  for (const auto& [handle, stream] : routes_)  // a stream of a closed device is routed no more
    if (const auto live = stream.lock(); live && !live->device()->closed()) ++out.streams;
  return out;
}

}  // namespace lifecore::runtime
