#include "lifecore/runtime/capture_registry.hpp"

#include <mutex>
#include <utility>
#include <vector>

#include "lifecore/error.hpp"
#include "runtime/hex_text.hpp"

namespace lifecore::runtime {
namespace {

struct Entry {
  std::shared_ptr<const RecordingMark> mark;
  std::uint64_t thread = 0;  // thread_token() of the thread that began the recording
  // Weak: a domain that went (its driver destroyed) took its captures with it, and its address
  // may then name a new one.
  std::weak_ptr<const void> domain;
  driver::CaptureMode mode = driver::CaptureMode::thread_local_;
  std::uintptr_t native_stream = 0;
  std::string thread_name;
  std::weak_ptr<RecordingOwner> owner;  // what ends the recording if its thread exits first

  // The stream still holds the recording this thread began, on a device that is not lost, in a
  // domain that still exists.
  bool live() const noexcept {
    if (mark->thread.load(std::memory_order_acquire) != thread || domain.expired()) return false;
    return !(mark->device_lost && mark->device_lost->load(std::memory_order_acquire));
  }
  // In `where`: the token is locked for the comparison, so its address cannot name another domain.
  bool in(const void* where) const noexcept {
    std::shared_ptr<const void> token = domain.lock();
    return token && token.get() == where;
  }
  LiveRecording describe(bool this_thread) const { return {native_stream, thread_name, mode, this_thread}; }
};

bool dead(const Entry& entry) noexcept { return !entry.live(); }

// This thread's recordings whose Stream went on another thread: this thread alone may end them,
// and does so at its first consultation after, before anything it recorded refuses it a call.
void end_left_recordings(std::vector<Entry>& own) noexcept {
  for (const Entry& entry : own) {
    if (entry.mark->left.load(std::memory_order_acquire) == nullptr) continue;
    std::unique_ptr<LeftRecording> left(entry.mark->left.exchange(nullptr, std::memory_order_acq_rel));
    if (left) left->end_here(const_cast<RecordingMark&>(*entry.mark));  // the stream that published it is gone
  }
}

// This thread's recordings (thread_local and global mode): only this thread touches the list,
// and it goes with the thread. Not ended from its destructor: by then the thread's other
// thread_local objects, which an abort uses (a driver's capture-mode state), may be gone; an
// embedder ends them earlier (end_this_threads_recordings).
std::vector<Entry>& own_entries() {
  thread_local std::vector<Entry> entries;
  return entries;
}

// Every thread's global-mode recordings. `size` is entries.size(), stored under the lock, so a
// thread sees an empty list without taking it.
struct GlobalEntries {
  std::mutex mutex;
  std::vector<Entry> entries;
  std::atomic<std::size_t> size{0};
};

GlobalEntries& global_entries() {
  static auto* global = new GlobalEntries;  // never destroyed: a thread may consult it during exit
  return *global;
}

void add_entry(Entry entry) {
  const std::shared_ptr<const RecordingMark> mark = entry.mark;
  // An earlier entry of the same stream is replaced, not kept beside it (a stream captured in
  // a loop would otherwise pile up entries that all look live).
  auto stale = [&](const Entry& e) { return dead(e) || e.mark == mark; };
  std::vector<Entry>& own = own_entries();
  std::erase_if(own, stale);
  own.push_back(entry);
  if (entry.mode != driver::CaptureMode::global) return;
  GlobalEntries& global = global_entries();
  std::lock_guard lock(global.mutex);
  std::erase_if(global.entries, stale);
  global.entries.push_back(std::move(entry));
  global.size.store(global.entries.size(), std::memory_order_release);
}

}  // namespace

PublishedCaptureState::PublishedCaptureState(std::shared_ptr<const std::atomic<bool>> device_lost)
    : mark_(std::make_shared<RecordingMark>()) {
  mark_->device_lost = std::move(device_lost);
}

void PublishedCaptureState::publish() noexcept {
  if (!state_.is_recording()) {
    mark_->thread.store(0, std::memory_order_release);
  } else if (mark_->thread.load(std::memory_order_relaxed) == 0) {
    mark_->thread.store(thread_token(), std::memory_order_release);
  }
}

namespace capture_registry {

// The thread is going, and after it no thread could end these (the driver ends such a capture
// only where it began).
void end_this_threads_recordings() noexcept {
  // Taken out first: an abort consults the registry, which must find a list it can change.
  std::vector<Entry> mine;
  mine.swap(own_entries());
  end_left_recordings(mine);
  for (const Entry& entry : mine) {
    // Still this thread's recording, whatever became of its device (a closed or lost one's
    // stream has its own way to end it): live() would skip one whose domain went.
    if (entry.mark->thread.load(std::memory_order_acquire) != entry.thread) continue;
    if (const std::shared_ptr<RecordingOwner> owner = entry.owner.lock()) owner->end_recording_of_exiting_thread();
  }
}

void add(const std::shared_ptr<RecordingMark>& mark, const std::shared_ptr<const void>& domain,
         driver::CaptureMode mode, std::uintptr_t native_stream, const std::string& thread,
         std::weak_ptr<RecordingOwner> owner) noexcept {
  if (mode == driver::CaptureMode::relaxed) return;
  try {
    add_entry(Entry{mark, thread_token(), domain, mode, native_stream, thread, std::move(owner)});
  } catch (...) {
    // Out of memory: this recording is not refused up front; the driver still refuses the call.
  }
}

void remove(const RecordingMark* mark) noexcept {
  auto listed = [&](const Entry& e) { return e.mark.get() == mark; };
  std::erase_if(own_entries(), listed);
  GlobalEntries& global = global_entries();
  if (global.size.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(global.mutex);
  std::erase_if(global.entries, listed);
  global.size.store(global.entries.size(), std::memory_order_release);
}

std::optional<LiveRecording> find_conflict(const void* domain, const RecordingMark* target) {
  std::vector<Entry>& own = own_entries();
  if (!own.empty()) {
    end_left_recordings(own);
    std::erase_if(own, dead);
    for (const Entry& entry : own)
      if (entry.mark.get() != target && entry.in(domain)) return entry.describe(true);
  }
  GlobalEntries& global = global_entries();
  if (global.size.load(std::memory_order_acquire) == 0) return std::nullopt;
  const std::uint64_t me = thread_token();
  std::lock_guard lock(global.mutex);
  std::erase_if(global.entries, dead);
  global.size.store(global.entries.size(), std::memory_order_release);
  for (const Entry& entry : global.entries)
    if (entry.thread != me && entry.mark.get() != target && entry.in(domain)) return entry.describe(false);
  return std::nullopt;
}

void refuse(const char* op, std::string_view does, const LiveRecording& recording) {
  const std::string mode = driver::capture_mode_name(recording.mode);
  std::string message = std::string(op) + ": stream " + hex_text(recording.stream) + " is recording a graph capture ";
  if (recording.this_thread) {
    message += "on this thread (capture_mode '" + mode + "'), and this call " + std::string(does) +
               ", which the driver forbids on a thread while its capture records (that capture would be "
               "invalidated). Nothing was changed: end or abort that capture first (outside relaxed mode a thread "
               "records on one stream at a time; a Stream dropped while recording lives on in its buffers, whose "
               ".stream gives it back), or use capture_mode='relaxed'";
  } else {
    message += "in capture_mode 'global' on thread " + recording.thread + ", and this call " + std::string(does) +
               ", which the driver forbids on every thread while a global capture records (that capture would be "
               "invalidated). Nothing was changed: call it once that capture has ended, or use "
               "capture_mode='thread_local' (only the capturing thread is restricted) or 'relaxed'";
  }
  raise(ErrorKind::CaptureState, message,
        {{"cause", std::string(recording.this_thread ? "recording_on_this_thread" : "global_recording")},
         {"recording_stream", static_cast<std::int64_t>(recording.stream)},  // user-space addresses and ids fit
         {"recording_thread", recording.thread}});
}

void check(const char* op, std::string_view does, const void* domain, const RecordingMark* target) {
  if (auto recording = find_conflict(domain, target)) refuse(op, does, *recording);
}

bool forbids(const void* domain, const RecordingMark* target) noexcept {
  try {
    return find_conflict(domain, target).has_value();
  } catch (...) {
    return true;
  }
}

}  // namespace capture_registry
}  // namespace lifecore::runtime
