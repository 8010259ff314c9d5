#include "runtime/blocking_wait.hpp"

#include <atomic>

namespace lifecore::runtime {
namespace {
std::atomic<void* (*)()> release_hook{nullptr};
std::atomic<void (*)(void*)> reacquire_hook{nullptr};
}  // namespace

void set_blocking_wait_hooks(BlockingWaitHooks hooks) noexcept {
  reacquire_hook.store(hooks.reacquire, std::memory_order_release);
  release_hook.store(hooks.release, std::memory_order_release);
}

BlockingWait::BlockingWait() noexcept {
  if (auto release = release_hook.load(std::memory_order_acquire)) token_ = release();
}

BlockingWait::~BlockingWait() {
  if (token_ != nullptr) reacquire_hook.load(std::memory_order_acquire)(token_);
}

}  // namespace lifecore::runtime
