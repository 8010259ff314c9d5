// The records every live sequence keeps, held to their sizes: the memory target (about 1 KB
// a live sequence with its Python handles, plus 4 bytes a block) is met with little room, so
// a field added to one of them should be a decision, not an accident. The bounds are those
// of libstdc++ on a 64-bit target (other standard libraries lay out std::string and
// std::shared_ptr differently); elsewhere the test says so and checks the allocation only.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <thread>
#include <variant>

#include "lifecore/sequence/backing.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/request_id.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "sequence/session_state.hpp"
#include "sequence_test_support.hpp"
#include "test_support.hpp"

using namespace lifecore::sequence;

namespace {

#if defined(__GLIBCXX__) && UINTPTR_MAX == UINT64_MAX
constexpr bool sizes_known = true;
// With their shared_ptr control blocks (16 bytes): 232, 192, 88 and 72 bytes requested.
static_assert(sizeof(SessionState) <= 216, "a live session's state grew");
static_assert(sizeof(SequenceBacking) <= 176, "a live sequence's backing grew");
static_assert(sizeof(RequestId) == sizeof(void*), "a request id holder grew");
static_assert(sizeof(AdmittedSequenceResources) <= 72, "a live sequence's resources grew");
static_assert(sizeof(BackingSnapshot) <= 56, "a backing snapshot grew");
#else
constexpr bool sizes_known = false;
#endif

// What one admission and one open session allocate, counted through operator new on a thread
// whose record caches are empty: the backing, its id storage, its request id (one text the
// backing and the session state share), the initial snapshot, the resources and the session
// state (the session itself is the caller's). A seventh allocation per live sequence would
// show here on any standard library.
std::atomic<std::size_t> allocations{0};
std::atomic<bool> counting{false};

void admission_and_open_allocate_six_records() {
  auto c = lifecore::test_support::kv_coordinator(256);
  {  // the coordinator's own tables made, outside the count
    auto warm = c->admit({"warm", 16, 2048, {}});
    auto session = std::get<Admitted>(warm).resources->open_session_here();
  }
  std::size_t counted = 0;
  std::thread fresh([&] {
    counting = true;
    {
      auto decision = c->admit({"counted", 16, 2048, {}});
      auto session = std::get<Admitted>(decision).resources->open_session_here();
      counting = false;
      counted = allocations.load();
      CHECK(session.step(16) == BackingOutcome::current);
    }
  });
  fresh.join();
  std::printf("allocations for one admitted and open sequence: %zu\n", counted);
  CHECK(counted == 6);
}

}  // namespace

void* operator new(std::size_t size) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

int main() {
  if (!sizes_known) std::printf("record sizes: not libstdc++ on a 64-bit target, bounds not checked\n");
  admission_and_open_allocate_six_records();
  return lifecore::test_support::finish("sequence_record_sizes_test");
}
