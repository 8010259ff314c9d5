// Heap allocations made to fail on purpose: the program's operator new throws std::bad_alloc
// at the allocation `allocations_before_failure` counts down to, so a test can fail each
// allocation of a call in turn. Counted on every thread, or on `counted_thread` alone once a
// test names one (a worker, while the emulated device's threads allocate as they please).
// Include it in one test program's one source file: it replaces the global operator new.
#pragma once

#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>

namespace lifecore::test_support {

// Allocations left before one fails; negative: none fails.
inline std::atomic<long> allocations_before_failure{-1};
// The thread whose allocations count; a default id: every thread's.
inline std::atomic<std::thread::id> counted_thread{};

}  // namespace lifecore::test_support

void* operator new(std::size_t size) {
  using namespace lifecore::test_support;
  const std::thread::id counted = counted_thread.load(std::memory_order_relaxed);
  if ((counted == std::thread::id{} || counted == std::this_thread::get_id()) &&
      allocations_before_failure.load(std::memory_order_relaxed) >= 0 &&
      allocations_before_failure.fetch_sub(1, std::memory_order_relaxed) == 0)
    throw std::bad_alloc();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
