// Which streams record a graph capture, per thread and (capture_mode 'global') per process, so
// that a call the driver forbids while a capture records (a synchronization, a driver
// allocation: CUDA's "potentially unsafe" calls) is refused up front instead of being let
// through to invalidate that capture.
//
// CUDA's rule, which HIP and the mock follow: in the driver's default thread mode a thread may
// not make such a call while it has a thread_local or global capture of its own, nor while any
// thread has a global capture; a relaxed capture forbids nothing. The rule spans a capture
// domain (Driver::capture_domain(): the process for CUDA and HIP, one device for the mock); an
// entry holds its domain's token weakly, and a domain gone (a mock device destroyed) took its
// captures with it.
//
// Nothing here is a count that a missed path could leave wrong: the registry keeps entries,
// and each is checked against its stream's own state (a RecordingMark the stream publishes)
// whenever it is consulted; an entry whose stream no longer records under that thread is
// dropped then. Each thread's entries are its own (thread-local: nothing to lock, gone with
// the thread); global-mode entries are also in one process-wide list under a lock. Consulting
// takes no stream's lock and is two loads when nothing records.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "lifecore/driver/driver.hpp"
#include "lifecore/thread_token.hpp"
#include "lifecore/runtime/stream_capture_state.hpp"

namespace lifecore::runtime {

using lifecore::thread_token;  // thread_token.hpp

// A recording whose Stream went while it recorded, its last reference dropped on another thread
// than the one recording: outside relaxed mode only that thread may end the driver's capture,
// so the stream leaves what ends it with its mark, for that thread's next consultation.
class LeftRecording {
 public:
  virtual ~LeftRecording() = default;  // never ended (its thread made no call again): no driver call, nothing torn down
  // On the thread that began the recording: ends the capture (its graph discarded), lets go of
  // the driver stream, and clears `mark` (the recording is over).
  virtual void end_here(struct RecordingMark& mark) noexcept = 0;
};

// What holds a recording (the Stream): a thread about to exit with a thread_local or global
// recording still open ends it through this (end_this_threads_recordings). Outside relaxed mode
// the driver ends a capture only on the thread that began it, so once that thread is gone
// nothing could end it, and the stream would stay recording for good.
class RecordingOwner {
 public:
  // On the exiting thread that began the recording: aborts it (its graph discarded), or does
  // nothing where there is nothing to end. Never throws.
  virtual void end_recording_of_exiting_thread() noexcept = 0;

 protected:
  ~RecordingOwner() = default;
};

// What a stream publishes for threads that hold no lock on it: the token of the thread whose
// recording it holds (0 while it records nothing), and its device's lost flag (a lost device's
// captures went with its context).
struct RecordingMark {
  std::atomic<std::uint64_t> thread{0};
  std::shared_ptr<const std::atomic<bool>> device_lost;
  // Set once, as the stream goes (see LeftRecording); taken by the recording thread. Owned.
  mutable std::atomic<LeftRecording*> left{nullptr};

  RecordingMark() = default;
  RecordingMark(const RecordingMark&) = delete;
  RecordingMark& operator=(const RecordingMark&) = delete;
  ~RecordingMark() { delete left.exchange(nullptr); }
};

// A stream's StreamCaptureState with its RecordingMark kept in step: every change of the state
// goes through this type, which republishes the mark, so the two cannot disagree.
class PublishedCaptureState {
 public:
  explicit PublishedCaptureState(std::shared_ptr<const std::atomic<bool>> device_lost);

  operator const StreamCaptureState&() const noexcept { return state_; }
  bool is_recording() const noexcept { return state_.is_recording(); }
  bool is_active() const noexcept { return state_.is_active(); }
  std::optional<CaptureOwner> owner() const noexcept { return state_.owner(); }
  CacheMode cache_mode() const noexcept { return state_.cache_mode(); }

  void prepare(CaptureOwner owner) { state_.prepare(owner); publish(); }
  void begin() { state_.begin(); publish(); }
  CaptureEnd end(CaptureOwner caller) {
    CaptureEnd ended = state_.end(caller);
    publish();
    return ended;
  }
  void abort() noexcept {
    state_.abort();
    publish();
  }
  // A state made from this one: graph_prepare's (checked before the errors it surfaces), or a
  // recording put back (its driver end failed and the driver still captures).
  void set(const StreamCaptureState& state) noexcept {
    state_ = state;
    publish();
  }
  const std::shared_ptr<RecordingMark>& mark() const noexcept { return mark_; }

 private:
  // Entering CAPTURE marks the calling thread (begin runs on the recording thread, and a
  // recording is put back only by the thread that began it); leaving it clears the mark.
  void publish() noexcept;

  StreamCaptureState state_;
  std::shared_ptr<RecordingMark> mark_;
};

// A recording that forbids the calling thread a call, as a refusal names it.
struct LiveRecording {
  std::uintptr_t stream = 0;  // the recording stream's native handle (Stream.handle)
  std::string thread;         // the thread that began it, as the standard library prints it
  driver::CaptureMode mode = driver::CaptureMode::thread_local_;
  bool this_thread = false;   // begun by the calling thread (else: another thread's global one)
};

namespace capture_registry {

// The calling thread is about to begin recording on the stream that published `mark` (its
// state already recording), in `mode`, within `domain` (Driver::capture_domain()): listed
// before the driver begins, so no other thread's call checked after this one reaches the
// driver inside the new recording. A relaxed recording forbids nothing and is not kept. Never
// fails (out of memory, the recording goes unlisted: the driver still refuses what it forbids).
// `owner` (held weakly) is what end_this_threads_recordings ends it through.
void add(const std::shared_ptr<RecordingMark>& mark, const std::shared_ptr<const void>& domain,
         driver::CaptureMode mode, std::uintptr_t native_stream, const std::string& thread,
         std::weak_ptr<RecordingOwner> owner) noexcept;

// The calling thread is about to exit: ends every recording it still holds, through each one's
// owner (and those whose Stream went, see LeftRecording), and unlists them. The embedder calls
// it while the thread is still whole (the Python binding: as a threading thread's state is
// cleared, before its join returns). Not from a thread_local destructor: an abort uses other
// thread_local state (a driver's capture mode), which may be destroyed by then.
void end_this_threads_recordings() noexcept;

// Unlists the calling thread's recording on the stream that published `mark`: its driver begin
// failed, and what undoes the window must not be refused by it.
void remove(const RecordingMark* mark) noexcept;

// The live recording in `domain` (the address of a live Driver::capture_domain() token) that forbids the calling thread a potentially unsafe driver
// call acting on the stream that published `target` (nullptr: on no stream): one of this
// thread's own (thread_local or global), else another thread's global one (as the driver's
// default thread mode, global, sees it). `target`'s own recording is not counted: what a call
// on a recording stream does is that stream's rule. Takes no stream's lock.
std::optional<LiveRecording> find_conflict(const void* domain, const RecordingMark* target);

// Raises CaptureStateError for `op` (which `does` what the driver forbids while `recording`
// records: "synchronizes this stream", ...), naming the recording and what to do; the caller
// has changed nothing. Attributes: cause ("recording_on_this_thread" or "global_recording"),
// recording_stream (its Stream.handle) and recording_thread.
[[noreturn]] void refuse(const char* op, std::string_view does, const LiveRecording& recording);

// refuse() when find_conflict(domain, target) finds a recording.
void check(const char* op, std::string_view does, const void* domain, const RecordingMark* target);

// Whether find_conflict(domain, target) finds a recording, for a caller that cannot be refused
// (a wait or a free lifecore makes for itself) and so switches to relaxed mode or postpones
// instead. Unsure (out of memory naming the recording), it answers yes: relaxed mode costs two
// calls, a wrong answer the other way invalidates a capture.
bool forbids(const void* domain, const RecordingMark* target) noexcept;

}  // namespace capture_registry
}  // namespace lifecore::runtime
