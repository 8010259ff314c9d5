#include "lifecore/thread_token.hpp"

#include <atomic>

namespace lifecore {

std::uint64_t thread_token() noexcept {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t token = next.fetch_add(1, std::memory_order_relaxed);
  return token;
}

}  // namespace lifecore
