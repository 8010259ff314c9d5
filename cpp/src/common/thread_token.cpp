#include "lifecore/thread_token.hpp"

#include <atomic>
#include <mutex>
#include <unordered_set>

namespace lifecore {
namespace {

// The tokens of threads that have not exited. Never destroyed: a thread may exit after the
// process's static objects are gone.
struct LiveTokens {
  std::mutex mutex;
  std::unordered_set<std::uint64_t> live;
  std::atomic<bool> untracked{false};  // a thread that could not be noted (out of memory)
};

LiveTokens& live_tokens() {
  static LiveTokens* tokens = new LiveTokens;
  return *tokens;
}

// One per thread that asked for its token: noted live while it is, forgotten as it exits.
struct Liveness {
  explicit Liveness(std::uint64_t token) : token(token) {
    LiveTokens& tokens = live_tokens();
    try {
      std::lock_guard lock(tokens.mutex);
      tokens.live.insert(token);
    } catch (...) {
      tokens.untracked.store(true, std::memory_order_relaxed);
    }
  }
  ~Liveness() {
    LiveTokens& tokens = live_tokens();
    std::lock_guard lock(tokens.mutex);
    tokens.live.erase(token);
  }
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  std::uint64_t token;
};

}  // namespace

std::uint64_t thread_token() noexcept {
  static std::atomic<std::uint64_t> next{1};
  thread_local const Liveness liveness(next.fetch_add(1, std::memory_order_relaxed));
  return liveness.token;
}

bool thread_has_exited(std::uint64_t token) noexcept {
  LiveTokens& tokens = live_tokens();
  // A thread not noted may be alive: none is said to have exited then.
  if (token == 0 || tokens.untracked.load(std::memory_order_relaxed)) return false;
  std::lock_guard lock(tokens.mutex);
  return tokens.live.count(token) == 0;
}

}  // namespace lifecore
