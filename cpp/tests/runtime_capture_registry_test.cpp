// The capture registry: which recordings forbid the calling thread an unsafe call, checked
// against each stream's published state when consulted (never a count a missed path could leave
// wrong): a recording that ended, a lost device, a relaxed mode, another domain, the target's
// own recording, another thread's thread_local recording and a domain that went forbid nothing;
// this thread's recordings and any thread's global one do, also after the thread that began it
// exited when nothing is left to end it; a thread about to exit ends what it still records
// through the recording's owner (the Stream), on that thread (end_this_threads_recordings).
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "lifecore/error.hpp"
#include "lifecore/runtime/capture_registry.hpp"
#include "test_support.hpp"

using lifecore::driver::CaptureMode;
using lifecore::runtime::PublishedCaptureState;
namespace registry = lifecore::runtime::capture_registry;

namespace {

// Two capture domains, as Driver::capture_domain() hands them out.
const std::shared_ptr<const void> domain_token = std::make_shared<const int>(0);
const std::shared_ptr<const void> other_domain_token = std::make_shared<const int>(0);
const void* const domain = domain_token.get();
const void* const other_domain = other_domain_token.get();

// A stream's state as Stream keeps it: recording on the calling thread, listed in `mode`.
struct Recording {
  std::shared_ptr<std::atomic<bool>> lost = std::make_shared<std::atomic<bool>>(false);
  PublishedCaptureState state{lost};

  void begin(CaptureMode mode, std::uintptr_t native = 7, const std::shared_ptr<const void>& in = domain_token,
             std::weak_ptr<lifecore::runtime::RecordingOwner> owner = {}) {
    state.prepare(0);
    state.begin();
    registry::add(state.mark(), in, mode, native, "me", std::move(owner));
  }
};

// What a Stream does for a thread that exits recording: aborts, there; counts where it ran.
struct AbortingOwner final : lifecore::runtime::RecordingOwner {
  Recording* recording = nullptr;
  std::atomic<int> calls{0};
  std::atomic<std::uint64_t> ran_on{0};

  void end_recording_of_exiting_thread() noexcept override {
    ++calls;
    ran_on = lifecore::runtime::thread_token();
    recording->state.abort();
  }
};

bool conflict(const lifecore::runtime::RecordingMark* target = nullptr, const void* where = domain) {
  return registry::find_conflict(where, target).has_value();
}

}  // namespace

int main() {
  // The mark follows the state: set on entering CAPTURE, cleared on leaving it, set again when a
  // recording is put back.
  {
    Recording r;
    CHECK(r.state.mark()->thread.load() == 0);
    r.state.prepare(3);
    CHECK(r.state.mark()->thread.load() == 0);
    r.state.begin();
    CHECK(r.state.mark()->thread.load() == lifecore::runtime::thread_token());
    const lifecore::StreamCaptureState recording = r.state;
    (void)r.state.end(3);
    CHECK(r.state.mark()->thread.load() == 0);
    r.state.set(recording);
    CHECK(r.state.is_recording() && r.state.mark()->thread.load() == lifecore::runtime::thread_token());
    r.state.abort();
    CHECK(r.state.mark()->thread.load() == 0);
  }

  // This thread's recording forbids calls elsewhere in its domain, not on its own stream, not in
  // another domain; once it ends (end, abort) nothing is forbidden.
  for (CaptureMode mode : {CaptureMode::thread_local_, CaptureMode::global}) {
    Recording r;
    r.begin(mode, 42);
    auto found = registry::find_conflict(domain, nullptr);
    CHECK(found && found->stream == 42 && found->this_thread && found->mode == mode && found->thread == "me");
    CHECK(!conflict(r.state.mark().get()));
    CHECK(!conflict(nullptr, other_domain));
    (void)r.state.end(0);
    CHECK(!conflict());
    r.begin(mode);  // the same stream again: listed once, ended once
    CHECK(conflict());
    r.state.abort();
    CHECK(!conflict());
  }

  // A relaxed recording forbids nothing.
  {
    Recording r;
    r.begin(CaptureMode::relaxed);
    CHECK(!conflict());
  }

  // A lost device's recordings went with its context.
  {
    Recording r;
    r.begin(CaptureMode::global);
    CHECK(conflict());
    r.lost->store(true);
    CHECK(!conflict());
  }

  // A domain that went (an emulated driver destroyed) took its captures with it, though the
  // streams' states still say recording (a capture left open when its device closed): its
  // address may name a new domain, which they must not forbid anything in.
  for (CaptureMode mode : {CaptureMode::thread_local_, CaptureMode::global}) {
    auto gone = std::make_shared<const int>(0);
    const void* address = gone.get();
    Recording r;
    r.begin(mode, 7, gone);
    CHECK(conflict(nullptr, address));
    gone.reset();
    CHECK(!conflict(nullptr, address));
    CHECK(!conflict());
    r.state.abort();
  }

  // A stream that goes away ends its recording first (Stream::shutdown); its state going with it
  // leaves nothing listed.
  {
    auto r = std::make_unique<Recording>();
    r->begin(CaptureMode::thread_local_);
    r->state.abort();
    r.reset();
    CHECK(!conflict());
  }

  // Another thread's recordings: its thread_local one forbids this thread nothing; its global
  // one forbids every thread until it ends, also after that thread exited (nobody else can end
  // it, so the driver keeps forbidding).
  {
    Recording local, global;
    std::thread([&] { local.begin(CaptureMode::thread_local_); }).join();
    CHECK(!conflict());
    std::thread([&] { global.begin(CaptureMode::global, 9); }).join();
    auto found = registry::find_conflict(domain, nullptr);
    CHECK(found && found->stream == 9 && !found->this_thread && found->mode == CaptureMode::global);
    CHECK(!conflict(global.state.mark().get()));
    CHECK(!conflict(nullptr, other_domain));
    global.state.abort();  // as the stream does when its device closes or it is destroyed
    CHECK(!conflict());
    local.state.abort();
  }

  // A thread about to exit with recordings open ends them through their owners, on that
  // thread: then neither its global recording forbids another thread anything, nor is any
  // stream left recording a capture nobody could end. One already ended, or whose owner went,
  // is left alone; the list is empty after.
  for (CaptureMode mode : {CaptureMode::thread_local_, CaptureMode::global}) {
    Recording open, ended, orphan;
    auto owner = std::make_shared<AbortingOwner>();
    auto ended_owner = std::make_shared<AbortingOwner>();
    owner->recording = &open;
    ended_owner->recording = &ended;
    std::uint64_t recorder = 0;
    std::thread([&] {
      recorder = lifecore::runtime::thread_token();
      open.begin(mode, 11, domain_token, owner);
      ended.begin(mode, 12, domain_token, ended_owner);
      ended.state.abort();
      auto gone = std::make_shared<AbortingOwner>();
      gone->recording = &orphan;
      orphan.begin(mode, 13, domain_token, gone);
      gone.reset();  // its owner went first: nothing can end it here
      registry::end_this_threads_recordings();
      CHECK(!conflict());  // unlisted, the orphan too (its thread is going)
    }).join();
    CHECK(owner->calls.load() == 1 && owner->ran_on.load() == recorder);
    CHECK(!open.state.is_recording());
    CHECK(ended_owner->calls.load() == 0);
    CHECK(orphan.state.is_recording());  // its owner went first: nothing could end it here
    if (mode == CaptureMode::global) CHECK(conflict());
    orphan.state.abort();
    CHECK(!conflict());
  }

  // refuse() names the recording and changes nothing; check() raises only on a conflict.
  {
    Recording r;
    r.begin(CaptureMode::thread_local_, 0x2a);
    try {
      registry::check("sync", "synchronizes this stream", domain, nullptr);
      CHECK(!"expected a refusal");
    } catch (const lifecore::Error& error) {
      CHECK(error.kind() == lifecore::ErrorKind::CaptureState);
      CHECK(lifecore::test_support::contains(error.what(), "sync: stream 0x2a is recording a graph capture on this "
                                                           "thread (capture_mode 'thread_local')"));
    }
    registry::check("sync", "synchronizes this stream", domain, r.state.mark().get());
    r.state.abort();
    registry::check("sync", "synchronizes this stream", domain, nullptr);
  }

  // Many threads recording, ending and consulting at once (global entries under the lock).
  {
    std::vector<std::thread> threads;
    std::atomic<int> wrong{0};
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 2000; ++i) {
          Recording r;
          r.begin(t % 2 ? CaptureMode::global : CaptureMode::thread_local_);
          if (!conflict()) ++wrong;                       // its own recording forbids
          if (conflict(nullptr, other_domain)) ++wrong;   // never across domains
          r.state.abort();
        }
      });
    }
    for (auto& thread : threads) thread.join();
    CHECK(wrong.load() == 0);
    CHECK(!conflict());
  }
  return lifecore::test_support::finish("runtime_capture_registry_test");
}
