// The lock of one sequence session's state. Held for tens of nanoseconds (a decode step, a
// block-table row) and almost never contended: one thread drives a session. So it is a
// test-and-set lock whose release is a plain store, not a mutex whose release is another
// atomic read-modify-write (which also waits for the critical section's stores to drain):
// on a batch of 256 sessions that is a sixth of a decode iteration's bookkeeping. A waiter
// spins briefly, then yields its time slice instead of sleeping; nothing blocking ever runs
// under it (no driver call, no wait for a lock another thread may hold long, no GIL): a step
// that extends under it takes the coordinator's lock only if it is free (and otherwise lets go
// and takes the general path), and waiters' locks only to signal them.
// A sequence's backing guards its ids with one too: one byte where a std::mutex takes forty,
// in a record every live sequence has.
#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <immintrin.h>
#endif

namespace lifecore::sequence {

class SessionLock {
 public:
  SessionLock() = default;
  SessionLock(const SessionLock&) = delete;
  SessionLock& operator=(const SessionLock&) = delete;

  void lock() noexcept {
    if (!held_.exchange(true, std::memory_order_acquire)) return;
    lock_contended();
  }
  bool try_lock() noexcept {
    return !held_.load(std::memory_order_relaxed) && !held_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  void lock_contended() noexcept {
    for (unsigned spins = 0;; ++spins) {
      // Read until it looks free, then try: a waiter does not keep taking the line away.
      while (held_.load(std::memory_order_relaxed)) {
        if (spins++ < 128) {
          pause();
        } else {
          std::this_thread::yield();
        }
      }
      if (!held_.exchange(true, std::memory_order_acquire)) return;
    }
  }
  static void pause() noexcept {
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::atomic<bool> held_{false};
};

}  // namespace lifecore::sequence
