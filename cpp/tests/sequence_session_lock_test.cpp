// The session lock under contention: threads that each take it many times, some with
// try_lock, never overlap inside it (a plain counter comes out exact, and a flag set inside
// is never seen set on entry). ThreadSanitizer checks the same in CI.
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "lifecore/sequence/session_lock.hpp"
#include "test_support.hpp"

using lifecore::sequence::SessionLock;

namespace {

void excludes_every_other_holder() {
  SessionLock lock;
  long counter = 0;  // guarded by `lock` only
  bool inside = false;
  std::atomic<int> overlaps{0};
  constexpr int threads = 4, rounds = 20000;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (int i = 0; i < rounds; ++i) {
        if ((i + t) % 7 == 0) {
          while (!lock.try_lock()) std::this_thread::yield();
        } else {
          lock.lock();
        }
        if (inside) overlaps.fetch_add(1);
        inside = true;
        ++counter;
        inside = false;
        lock.unlock();
      }
    });
  for (auto& w : workers) w.join();
  CHECK(counter == static_cast<long>(threads) * rounds);
  CHECK(overlaps.load() == 0);
}

void try_lock_fails_while_held() {
  SessionLock lock;
  CHECK(lock.try_lock());
  CHECK(!lock.try_lock());
  bool other = true;
  std::thread([&] { other = lock.try_lock(); }).join();
  CHECK(!other);
  lock.unlock();
  { std::lock_guard<SessionLock> guard(lock); }
  CHECK(lock.try_lock());
  lock.unlock();
}

}  // namespace

int main() {
  excludes_every_other_holder();
  try_lock_fails_while_held();
  return lifecore::test_support::finish("sequence_session_lock_test");
}
