// Thread tokens: unique per thread, never reused, and a thread that exited is known to have:
// a software recording whose thread is gone may then be ended by another thread.
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include "lifecore/thread_token.hpp"
#include "test_support.hpp"

using lifecore::thread_has_exited;
using lifecore::thread_token;

int main() {
  const std::uint64_t mine = thread_token();
  CHECK(mine != 0 && thread_token() == mine && !thread_has_exited(mine));
  CHECK(!thread_has_exited(0));
  std::set<std::uint64_t> seen{mine};
  for (int i = 0; i < 8; ++i) {
    std::uint64_t theirs = 0;
    bool alive_inside = false;
    std::thread worker([&] {
      theirs = thread_token();
      alive_inside = !thread_has_exited(theirs);
    });
    worker.join();
    CHECK(alive_inside && theirs != 0 && seen.insert(theirs).second);  // never reused
    CHECK(thread_has_exited(theirs));
  }
  CHECK(!thread_has_exited(mine));
  return lifecore::test_support::finish("thread_token_test");
}
