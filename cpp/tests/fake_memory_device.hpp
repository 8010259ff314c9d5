// A device for the memory-manager tests: hands out fake addresses, remembers which are live,
// counts allocations and can be told to fail them (out of memory). `gap` leaves room between
// allocations so an address never doubles as the end of the previous one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>

#include "lifecore/error.hpp"
#include "lifecore/runtime/memory_manager.hpp"
#include "test_support.hpp"

namespace lifecore::test_support {

struct FakeMemoryDevice {
  std::uint64_t next = 0x1000;
  std::uint64_t gap = 0;
  std::set<std::uint64_t> live;
  int allocations = 0;
  bool fail = false;

  runtime::MemoryManager::Allocate allocate() {
    return [this](std::size_t bytes) {
      if (fail) raise(ErrorKind::Driver, "out of memory");
      runtime::SliceAllocation made{next, false};
      next += bytes + gap;
      live.insert(made.ptr);
      ++allocations;
      return made;
    };
  }
  runtime::MemoryManager::Free free() {
    return [this](std::uint64_t ptr, bool) { live.erase(ptr); };
  }
};

// Every slice is in exactly one of: in use, retained, free.
inline void check_pool_invariant(const runtime::MemoryManager& mm) {
  auto s = mm.stats();
  CHECK(s.slices == s.slices_in_use + s.slices_retained + s.slices_free);
}

}  // namespace lifecore::test_support
