#include "lifecore/process_fork.hpp"

#include <atomic>
#include <new>
#include <utility>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#include <unistd.h>
#endif

namespace lifecore {
namespace {

std::atomic<std::uint64_t> generation{0};

#if defined(__unix__) || defined(__APPLE__)
// Runs in the child alone, right after fork(): only an atomic store, which is async-signal-safe.
void count_fork_in_child() noexcept { generation.fetch_add(1, std::memory_order_relaxed); }

// Registered as the library loads, before anything can have recorded a generation.
[[maybe_unused]] const bool registered = [] { return ::pthread_atfork(nullptr, nullptr, count_fork_in_child) == 0; }();
#endif

// A list only ever pushed to, reachable from here (so a leak checker counts it as kept, not lost).
struct Kept {
  std::shared_ptr<void> object;
  Kept* next = nullptr;
};
std::atomic<Kept*> kept{nullptr};

}  // namespace

std::uint64_t fork_generation() noexcept { return generation.load(std::memory_order_relaxed); }

void keep_until_exit(std::shared_ptr<void> object) noexcept {
  auto* node = new (std::nothrow) Kept{nullptr, kept.load(std::memory_order_relaxed)};
  if (node == nullptr) {
    // No memory even for the node: the reference is leaked instead, overwritten without being
    // released, so its count never drops to zero.
    ::new (static_cast<void*>(&object)) std::shared_ptr<void>();
    return;
  }
  node->object = std::move(object);
  while (!kept.compare_exchange_weak(node->next, node, std::memory_order_release, std::memory_order_relaxed)) {
  }
}

long current_process_id() noexcept {
#if defined(__unix__) || defined(__APPLE__)
  return static_cast<long>(::getpid());
#else
  return 0;
#endif
}

}  // namespace lifecore
