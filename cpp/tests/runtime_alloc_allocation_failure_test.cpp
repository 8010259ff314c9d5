// An allocation that runs out of host memory part way (std::bad_alloc at each of its heap
// allocations in turn, through operator new) leaves the stream usable and the pool as it was:
// a Buffer made and then dropped inside the call took the stream's lock, held, in its
// destructor (alloc_lent hung for ever), and a slice reserved before the Buffer could be made
// stayed bound to no Buffer until the device closed. Swept for alloc, alloc_lent, and an
// alloc inside a recording (whose new allocation is a memory node the window keeps).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <new>
#include <string>
#include <thread>

#include "failing_allocations.hpp"
#include "runtime_test_support.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::runtime;

namespace {

using test_support::allocations_before_failure;

enum class Way { alloc, alloc_lent, alloc_recorded };

const char* name_of(Way way) {
  switch (way) {
    case Way::alloc: return "alloc";
    case Way::alloc_lent: return "alloc_lent";
    case Way::alloc_recorded: return "alloc in a recording";
  }
  return "?";
}

// Fails the call's k-th allocation; the number of failures seen, or -1 once the call made
// fewer than k allocations (the sweep's end).
int sweep(Way way) {
  int failures_seen = 0;
  for (long k = 0;; ++k) {
    auto device = test_support::open_mock();
    auto stream = device->stream();
    {  // the pool holds a free slice of the size, and the stream its structures
      auto warm = stream->alloc(4096);
      warm->free();
      stream->sync();
    }
    if (way == Way::alloc_recorded) {
      stream->graph_prepare(0);
      stream->begin_capture();
    }
    const auto before = device->memory().stats();
    std::promise<std::string> done;
    auto answer = done.get_future();
    std::thread worker([&] {
      test_support::counted_thread.store(std::this_thread::get_id());
      allocations_before_failure.store(k);
      std::string what = "made";
      try {
        // A size the pool holds no slice of, inside the recording: a new allocation.
        auto b = way == Way::alloc_lent ? stream->alloc_lent(4096)
                                        : stream->alloc(way == Way::alloc_recorded ? 8192 : 4096);
        allocations_before_failure.store(-1);
        if (way != Way::alloc_recorded) b->free();
      } catch (const std::bad_alloc&) {
        what = "bad_alloc";
      } catch (const std::exception& e) {
        what = e.what();
      }
      allocations_before_failure.store(-1);
      done.set_value(what);
    });
    if (answer.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      std::fprintf(stderr, "%s: the call did not return after its allocation %ld failed (a lock taken twice?)\n",
                   name_of(way), k);
      std::fflush(stderr);
      std::_Exit(1);  // the worker holds the stream's lock for ever: nothing else can run
    }
    worker.join();
    const std::string what = answer.get();
    if (what == "made") {
      if (way == Way::alloc_recorded) stream->abort_capture();
      return failures_seen;
    }
    CHECK(what == "bad_alloc");
    ++failures_seen;
    if (way == Way::alloc_recorded) {
      CHECK(stream->capture_state().is_recording());  // the recording goes on: only the call failed
      stream->abort_capture();
    }
    stream->sync();
    const auto after = device->memory().stats();
    if (way != Way::alloc_recorded) {
      CHECK(after.slices_in_use == before.slices_in_use);  // no slice bound to no Buffer
    }
    // Usable after it: an allocation and a free go through.
    auto again = stream->alloc(4096);
    again->free();
    stream->sync();
    if (device->memory().stats().slices_in_use != before.slices_in_use) {
      std::fprintf(stderr, "%s, allocation %ld failed: %zu slices in use after, %zu before\n", name_of(way), k,
                   static_cast<std::size_t>(device->memory().stats().slices_in_use),
                   static_cast<std::size_t>(before.slices_in_use));
      CHECK(false);
    }
  }
}

}  // namespace

int main() {
  for (Way way : {Way::alloc, Way::alloc_lent, Way::alloc_recorded}) {
    const int failures = sweep(way);
    std::printf("%s: %d allocation failures swept\n", name_of(way), failures);
    CHECK(failures >= 1);  // the Buffer's own allocation at least
  }
  return test_support::finish("runtime_alloc_allocation_failure_test");
}
