#include "lifecore/runtime/stream.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <sstream>
#include <thread>

#include "common/address_range.hpp"
#include "lifecore/error.hpp"
#include "runtime/blocking_wait.hpp"
#include "runtime/hex_text.hpp"
#include "runtime/launch_extents.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/pause_points.hpp"
#include "runtime/relaxed_capture_mode.hpp"

namespace lifecore::runtime {
namespace {


std::vector<ErrorAttribute> status_attributes(const driver::Status& status) {
  return {{"code", std::int64_t{status.native_code}}, {"status", status.name}, {"call", status.call},
          {"lifecore_status", std::string(driver::code_name(status.code))}};
}

std::string thread_text(std::thread::id id) {
  std::ostringstream out;
  out << id;
  return out.str();
}

// Makes the native stream `consumer` wait, on the device, for an ordering event that
// `record(event)` records on the producer; the event goes at once (an enqueued wait outlives it).
template <class Record>
driver::Status wait_on_device(driver::Driver& driver, std::uintptr_t consumer, Record&& record) {
  driver::EventHandle event{};
  if (auto status = driver.event_create(&event, driver::EventTiming::disabled); !status.ok()) return status;
  driver::Status status = record(event);
  if (status.ok()) status = driver.stream_wait_event(consumer, event);
  (void)driver.event_destroy(event);
  return status;
}

// The producer stream a memory argument names, if any (runtime/foreign_memory.hpp).
void note_producer(const MemoryRef& ref, std::string_view argument, std::vector<ProducerStream>* producers) {
  if (ref.foreign != nullptr && ref.foreign->producer_stream)
    producers->push_back(ProducerStream{*ref.foreign->producer_stream, argument});
}

}  // namespace

// The stream's lock. For a call named `op`, refused with ClosedError in a process forked after
// the device opened, before it is taken: a thread of the parent may have held it as the process
// forked (through a sync or a read, as long as the device takes), and nothing in the child
// would ever let it go. The calls that cannot raise (a drop, a destructor's wait) return first.
// As it is let go, what the call changed is republished for the status properties.
class Stream::Locked {
 public:
  explicit Locked(const Stream& stream) : stream_(stream), lock_(stream.mutex_) {}
  Locked(const Stream& stream, const char* op)
      : stream_(stream), lock_((stream.device_->check_not_forked(op), stream.mutex_)) {}
  ~Locked() { stream_.publish_status(); }  // before lock_ lets go
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;

 private:
  const Stream& stream_;
  LockWithoutStalling<std::mutex> lock_;
};

void Stream::publish_status() const noexcept {
  const bool capturing = recorder_ && recorder_->driver_capturing();  // recorder_ goes with a left capture
  const std::uint64_t thread = state_.is_recording() ? capture_thread_ : 0;
  // Written only under mutex_, which the caller holds: read here without status_mutex_.
  const StreamCaptureState& state = state_;
  if (status_.state == state && status_.driver_capturing == capturing && status_.thread == thread &&
      status_.prepared_window == prepared_window_)
    return;
  std::lock_guard<std::mutex> lock(status_mutex_);
  status_.state = state;
  status_.driver_capturing = capturing;
  status_.prepared_window = prepared_window_;
  if (status_.thread != thread) {
    status_.thread = thread;
    try {
      status_.thread_text = thread != 0 ? capture_thread_text_ : std::string();
    } catch (...) {
      status_.thread_text.clear();  // out of memory: the thread goes unnamed, the state is still right
    }
  }
}

Stream::Stream(std::shared_ptr<Device> device, driver::StreamHandle handle)
    : device_(std::move(device)),
      driver_(device_->driver()),
      handle_(handle),
      recorder_(device_->hardware_graphs() ? make_driver_recorder(driver_, handle_) : make_op_list_recorder()),
      capture_domain_(driver_.capture_domain()),
      state_(device_->lost_flag()) {}

Stream::~Stream() {
  pause_points::reach(pause_points::Point::stream_dropped);
  BlockingWait blocking;  // the last reference may be dropped from Python: shutdown waits for the stream
  shutdown();
  if (left_by_close_) leave_capture_to_its_thread();
}

namespace {

// A Stream's capture its last reference left to the recording thread (see LeftRecording). The
// driver is held (the recorder refers to it, and a capture outlives its device where the
// context does, as CUDA's primary context may); the device only weakly, for its count.
class LeftStreamRecording final : public LeftRecording {
 public:
  LeftStreamRecording(std::shared_ptr<driver::Driver> driver, std::weak_ptr<Device> device,
                      driver::StreamHandle handle, std::unique_ptr<Recorder> recorder)
      : driver_(std::move(driver)), device_(std::move(device)), handle_(handle), recorder_(std::move(recorder)) {}

  // Never ended: its thread exited (this runs among that thread's exit destructors) or the
  // process is ending. The capture stays the driver's, the documented leak, and so does the
  // driver: its teardown is not run from there.
  ~LeftStreamRecording() override {
    if (!recorder_) return;
    static auto* kept = new std::vector<std::shared_ptr<void>>;  // never destroyed, as the capture
    static std::mutex kept_mutex;
    try {
      std::lock_guard lock(kept_mutex);
      kept->reserve(kept->size() + 2);  // then neither push_back below can fail
      kept->push_back(std::move(driver_));
      kept->push_back(std::shared_ptr<Recorder>(std::move(recorder_)));  // it refers to the driver kept
    } catch (...) {
      // Out of memory: let go as any owner would.
    }
  }

  void end_here(RecordingMark& mark) noexcept override {
    // As Stream::end_capture_left_by_close: ended or not, nobody else could end it.
    if (recorder_->driver_capturing()) (void)recorder_->abandon();
    recorder_->forget();
    (void)driver_->stream_destroy(handle_);
    if (const std::shared_ptr<Device> device = device_.lock()) device->capture_left_ended();
    mark.thread.store(0, std::memory_order_release);
    recorder_.reset();  // ended: what it held goes now
  }

 private:
  std::shared_ptr<driver::Driver> driver_;
  std::weak_ptr<Device> device_;
  driver::StreamHandle handle_;
  std::unique_ptr<Recorder> recorder_;  // its window discarded: it holds no staging, only the driver's capture
};

}  // namespace

void Stream::leave_capture_to_its_thread() noexcept {
  const std::shared_ptr<RecordingMark>& mark = state_.mark();
  try {
    auto left = std::make_unique<LeftStreamRecording>(device_->shared_driver(), device_, handle_, std::move(recorder_));
    delete mark->left.exchange(left.release(), std::memory_order_acq_rel);  // none before: set once
  } catch (...) {
    // Out of memory: the capture stays with the driver, its thread refused as before.
  }
}

std::uintptr_t Stream::native_handle(const char* op) {
  Locked lock(*this, op);
  check_usable(op);
  return driver_.stream_native_handle(handle_);
}

void Stream::check_usable(const char* op) {
  if (left_by_close_ && thread_token() == capture_thread_) {
    end_capture_left_by_close();
    raise(ErrorKind::Closed, std::string(op) +
                                 ": the device is closed (the capture this thread had open on this stream is now ended)");
  }
  if (dead_ || device_->closed()) raise(ErrorKind::Closed, std::string(op) + ": the device is closed");
  if (device_->lost()) {
    // The context went, and the driver's capture with it: the window goes too (nothing it
    // recorded will run), so no call finds the stream recording a capture that is gone.
    if (state_.is_active()) forget_recording(/*discard=*/true);
    device_->check_not_lost(op);
  }
  if (joined_by_producer_) {
    if (captured_by_driver())
      raise(ErrorKind::CaptureState, std::string(op) +
                                         ": this stream joined another library's graph capture (a tensor's producer "
                                         "ordered it inside that capture), so its work would be recorded there, not "
                                         "run; every call on it is refused until that capture ends");
    joined_by_producer_ = false;  // that capture ended: the stream is the driver's own again
  }
}

bool Stream::captured_by_driver() {
  driver::CaptureStatus status = driver::CaptureStatus::none;
  std::uint64_t id = 0;
  check_status(driver_.stream_capture_info(handle_, &status, &id));
  return status != driver::CaptureStatus::none;
}

void Stream::check_not_joined_by_producer(const char* op) {
  Locked lock(*this, op);
  // Recording: the export was handed no stream (-1). Closed: the call itself says so.
  if (state_.is_recording() || dead_ || device_->closed() || !captured_by_driver()) return;
  joined_by_producer_ = true;
  raise(ErrorKind::CaptureState,
        std::string(op) +
            ": a tensor's producer, asked to order this stream after its own (DLPack's stream=), made it join a "
            "graph capture of its own (torch does inside torch.cuda.graph): this stream's work would be recorded "
            "there, not run. Nothing was issued, and every call on this stream is refused until that capture ends; "
            "pass tensors to lifecore outside the other library's capture");
}

void Stream::check_producer_stream_before_export(std::uintptr_t producer_current, const char* op,
                                                  std::string_view argument, std::string_view library) {
  Locked lock(*this, op);
  check_usable(op);
  if (producer_current == driver_.stream_native_handle(handle_)) return;
  const std::string lib(library);
  check_native_not_capturing(producer_current, op,
                             "argument '" + std::string(argument) + "' is a " + lib + " array, and " + lib +
                                 "'s current stream",
                             "its export would make this stream wait there and join that capture, which could then "
                             "not end. " + lib + "'s capture is left whole; call lifecore outside it");
}

void Stream::check_capture_thread(const char* op) const {
  if (!state_.is_recording() || device_->capture_mode() == driver::CaptureMode::relaxed) return;
  if (thread_token() == capture_thread_) return;
  const std::string me = thread_text(std::this_thread::get_id());
  raise(ErrorKind::CaptureState,
        std::string(op) + ": the recording on this stream was begun by thread " + capture_thread_text_ +
            ", and in capture_mode '" + driver::capture_mode_name(device_->capture_mode()) +
            "' only that thread may end or abort it (this is " +
            (me == capture_thread_text_ ? "a later thread given the same id: that thread exited"
                                        : "thread " + me) +
            "); nothing was changed. Use capture_mode='relaxed' to end captures from any thread");
}

bool Stream::holds_capture(WindowId cycle) const {
  if (device_->forked()) return false;
  std::lock_guard<std::mutex> lock(status_mutex_);
  // A lost device's captures went with its context, as capture_state says.
  return !device_->lost() && status_.state.is_active() && status_.prepared_window == cycle;
}

bool Stream::holds_cycle(std::optional<WindowId> cycle) const noexcept {
  return !cycle || (state_.is_active() && prepared_window_ == *cycle);
}

void Stream::require_cycle(const char* op, std::optional<WindowId> cycle) const {
  if (holds_cycle(cycle)) return;
  raise(ErrorKind::CaptureState,
        std::string(op) + ": the capture this call prepared on the stream was aborted by another call (from "
                          "another thread) before this one; " +
            (state_.is_active() ? "the capture the stream now holds is another's, and was left as it is"
                                : "the stream is out of capture") +
            "; nothing was changed");
}

void Stream::check_not_recording_elsewhere(const char* op, std::string_view does) const {
  capture_registry::check(op, does, capture_domain_.get(), state_.mark().get());
}

bool Stream::recording_elsewhere() const noexcept {
  return capture_registry::forbids(capture_domain_.get(), state_.mark().get());
}

void Stream::check_status(const driver::Status& status) { device_->check_status(status); }

void Stream::throw_driver(const driver::Status& status) {
  device_->note_status(status);
  driver::throw_status(status);
}

// The four reports below answer in a forked child as a closed device's stream does (nothing
// recording, nothing queued) without the lock, so a repr or a log line never raises there.
// The three status reports read what the last call published (status_), never waiting for
// the stream's lock.
StreamCaptureState Stream::capture_state() const {
  if (device_->forked()) return StreamCaptureState{};
  std::lock_guard<std::mutex> lock(status_mutex_);
  // A lost device's captures went with its context; the window goes at the stream's next call.
  if (device_->lost()) return StreamCaptureState{};
  return status_.state;
}

std::uint64_t Stream::errors_queued() const {
  if (device_->forked()) return 0;
  Locked lock(*this);
  return errors_.pushed();
}

bool Stream::driver_capturing() const {
  if (device_->forked()) return false;
  std::lock_guard<std::mutex> lock(status_mutex_);
  return !device_->lost() && status_.driver_capturing;
}

std::string Stream::capture_thread() const {
  if (device_->forked()) return {};
  std::lock_guard<std::mutex> lock(status_mutex_);
  // As capture_state reads it: a lost device's capture names no thread.
  return status_.state.is_recording() && !device_->lost() ? status_.thread_text : std::string();
}

// ---- errors, fences, staging -----------------------------------------------------------

void Stream::check_host_work(const char* op) const {
  if (!state_.is_recording()) return;
  if (std::string refusal = recorder_->host_work_refusal(op); !refusal.empty())
    raise(ErrorKind::CaptureState, refusal);
}

bool Stream::refuse_host_work_lazily(const char* op) {
  if (!state_.is_recording()) return false;
  std::string refusal = recorder_->host_work_refusal(op);
  if (refusal.empty()) return false;
  // Refused lazily: a graph missing this work would be worse than a late diagnostic.
  queue_error(Error(ErrorKind::CaptureState, refusal));
  return true;
}

void Stream::queue_error(Error error) {
  errors_.push(std::move(error), active_window(), state_.owner());
}

void Stream::queue_failure(const driver::Status& status) {
  device_->note_status(status);
  try {
    driver::throw_status(status);
  } catch (Error& error) {
    queue_error(std::move(error));
  }
}

void Stream::flush_fenced() {
  // Collecting queries the fences, a call the driver forbids this thread while a recording on
  // another stream forbids its unsafe calls (the query would invalidate that recording): what
  // the queue holds waits for a later flush or sync.
  if (recording_elsewhere()) return;
  if (auto status = drop_.flush(driver_, handle_); !status.ok()) queue_failure(status);
  collect_fenced();
}

void Stream::collect_fenced() {
  RelaxedCaptureMode relaxed(driver_);  // its own fences: another library's capture stays whole (stream.hpp)
  drop_.collect(driver_);
}

void Stream::after_issue() {
  if (++issued_since_flush_ < DropQueue::flush_threshold) return;
  issued_since_flush_ = 0;
  // While the driver captures, a fence would itself be captured and querying it is illegal:
  // the flush waits for end_capture.
  if (driver_captures()) return;
  if (drop_.pending() > 0 || drop_.in_flight() > 0) flush_fenced();
}

driver::Status Stream::synchronize_and_release() {
  driver::Status status = driver_.stream_synchronize(handle_);
  if (status.ok()) {
    drop_.release_all(driver_);
    issued_since_flush_ = 0;
  }
  return status;
}

void Stream::keep_staging(Staging staging) {
  if (driver_captures()) {
    // The copy is a node of the graph: every replay re-reads this host memory.
    recorder_->retain(std::move(staging));
  } else {
    drop_.push([staging = std::move(staging)]() mutable { staging.reset(); });
  }
}

void Stream::touch(const Buffer& buffer) { touch(buffer.slice(), buffer.stream().get()); }

void Stream::touch(SliceId slice, const Stream* owner) {
  if (window_ != 0 && state_.is_active()) device_->memory().touch(slice, window_);
  // The owner's fence does not cover work queued here: without a pin, a Buffer dropped now
  // would return its slice once the owner's own work is done, and the next allocation could
  // be written while this stream's work still uses it (what torch leaves to record_stream).
  // Recorded work is not queued: the graph retains what its recording touched.
  if (owner == this || state_.is_recording()) return;
  MemoryManager* memory = &device_->memory();
  if (!memory->pin(slice)) return;
  try {
    drop_.push_memory([memory, slice] { memory->unpin(slice); });
  } catch (...) {
    memory->unpin(slice);
    throw;
  }
}

void Stream::check_native_not_capturing(std::uintptr_t native, const char* op, const std::string& whose,
                                        std::string_view why) {
  driver::CaptureStatus status = driver::CaptureStatus::none;
  const driver::Status answer = driver_.stream_capture_status_native(native, &status);
  // The legacy default stream while a blocking stream captures: recording or waiting there
  // fails alike, and invalidates that capture.
  const bool implicit = answer.code == driver::Code::capture_implicit;
  if (!implicit) check_status(answer);
  if (!implicit && status == driver::CaptureStatus::none) return;
  const std::string state = implicit ? "is the legacy default stream while a blocking stream is being captured"
                            : status == driver::CaptureStatus::active
                                ? "is being captured into a graph (another library's capture)"
                                : "is in a capture that was invalidated and not yet ended";
  raise(ErrorKind::CaptureState, std::string(op) + ": " + whose + ", native stream " + hex_text(native) + ", " +
                                     state + ": " + std::string(why) + "; nothing was issued");
}

void Stream::wait_for_producers(std::vector<ProducerStream>& producers, const char* op) {
  if (producers.empty() || state_.is_recording()) return;
  // Stable: of arguments sharing a producer stream, a refusal names the first.
  std::stable_sort(producers.begin(), producers.end(),
                   [](const ProducerStream& a, const ProducerStream& b) { return a.stream < b.stream; });
  producers.erase(std::unique(producers.begin(), producers.end(),
                              [](const ProducerStream& a, const ProducerStream& b) { return a.stream == b.stream; }),
                  producers.end());
  const std::uintptr_t own = driver_.stream_native_handle(handle_);
  // Every producer is asked before any wait is issued, so a refusal leaves nothing behind.
  for (const ProducerStream& producer : producers) {
    if (producer.stream == own) continue;
    check_native_not_capturing(producer.stream, op,
                               "argument '" + std::string(producer.argument) + "' comes from the producer's stream",
                               "ordering this stream after it would make this stream join that capture (its "
                               "work recorded there, not run); issue this call outside that capture");
  }
  for (const ProducerStream& producer : producers) {
    if (producer.stream == own) continue;  // stream order already puts its work first
    check_status(wait_on_device(driver_, own, [&](driver::EventHandle event) {
      return driver_.event_record_native(event, producer.stream);
    }));
  }
}

void Stream::keep_hold(std::shared_ptr<void> hold) {
  if (!hold) return;
  if (state_.is_recording()) {
    window_holds_.push_back(std::move(hold));  // every replay uses it: the graph keeps it
  } else {
    drop_.push([hold = std::move(hold)]() mutable { hold.reset(); });
  }
}

driver::DevicePtr Stream::upload_info(const InfoWords& words) {
  const std::size_t bytes = words.size() * sizeof(std::uint32_t);
  driver::DevicePtr ptr = 0;
  const bool recording = driver_captures();
  // Outside it the upload allocates and waits on the host.
  if (!recording) check_not_recording_elsewhere("launch", "uploads new info words (a driver allocation, then a host wait)");
  // Inside a driver capture this allocation becomes a memory node (the capture is then
  // refused): warmup is what puts the entry in the cache before the window opens.
  driver::Status status;
  if (recording) {
    status = driver_.mem_alloc_async(bytes, handle_, &ptr);
  } else {
    RelaxedCaptureMode relaxed(driver_);  // leaves another library's capture alone (stream.hpp)
    status = driver_.mem_alloc(bytes, &ptr);
  }
  check_status(status);
  auto staging = std::make_shared<std::vector<std::uint8_t>>(bytes);
  std::memcpy(staging->data(), words.data(), bytes);
  if (auto copied = driver_.memcpy_htod_async(ptr, staging->data(), bytes, handle_); !copied.ok()) {
    if (recording) {
      (void)driver_.mem_free_async(ptr, handle_);  // a memory node of this capture: freed in stream order
    } else {
      RelaxedCaptureMode relaxed(driver_);
      (void)driver_.mem_free(ptr);
    }
    throw_driver(copied);
  }
  if (!recording) {
    // The cache shares this buffer with every stream of the device the moment it returns, and
    // nothing orders another stream's launch after this stream's copy: without this wait a
    // launch elsewhere could read the buffer before the words land (and run with n = 0).
    // A miss is rare (entries are reused), so waiting for the copy here is cheap.
    if (auto waited = wait_for_upload(); !waited.ok()) {
      Device* device = device_.get();
      drop_.push([device, ptr, staging] { device->free_info_buffer(ptr); });  // the copy may still run
      throw_driver(waited);
    }
    return ptr;  // the copy ran: the staging can go
  }
  keep_staging(std::move(staging));
  return ptr;
}

driver::Status Stream::wait_for_upload() {
  // An event right after the copy: waiting on it does not pick up unrelated asynchronous
  // errors of the stream (those surface at the next read or sync, as always).
  driver::EventHandle event{};
  if (auto status = driver_.event_create(&event, driver::EventTiming::disabled); !status.ok()) return status;
  driver::Status status = driver_.event_record(event, handle_);
  if (status.ok()) {
    RelaxedCaptureMode relaxed(driver_);  // a host wait of a stream that does not record (stream.hpp)
    status = driver_.event_synchronize(event);
  }
  (void)driver_.event_destroy(event);
  return status;
}

void Stream::drop_slice(SliceId slice, bool settle_now) {
  if (device_->forked()) return;  // the parent's memory (and maybe its held lock: Locked)
  Locked lock(*this);
  drop_slice_locked(slice);
  // Never while this stream records (a host wait would end its capture): the drop then waits
  // for the next fence or sync, as any other. A recording elsewhere is left whole by relaxed
  // mode, as a dropped stream's own wait leaves it.
  if (settle_now && !dead_ && !device_->closed() && drop_.pending() > 0 && !state_.is_recording()) {
    BlockingWait blocking;  // a destructor from Python too: no other thread stalls behind the wait
    RelaxedCaptureMode relaxed(driver_);  // another library's capture elsewhere stays whole (stream.hpp)
    (void)synchronize_and_release();      // a failure leaves the drop queued, for the next sync
  }
}

void Stream::drop_slice_locked(SliceId slice) noexcept {
  const bool lent = lent_slices_.erase(slice) > 0;
  if (dead_ || device_->closed()) return;  // the device returned all its memory
  MemoryManager* memory = &device_->memory();
  memory->mark_dropped(slice);  // an address into it is a freed buffer's from now, not at the fence
  try {
    // Dropped during the recording: its next allocation may reuse the slice in stream order. Not
    // one lent to another library, whose kernels may have used it on a stream of their own.
    if (!lent && state_.is_recording() && window_ != 0 && memory->unbind_in_recording(slice, window_)) return;
    drop_.push_memory([memory, slice] { memory->unbind(slice); });
  } catch (const std::bad_alloc&) {
    // No room to queue the drop (out of host memory; a Buffer's destructor gets here): the
    // slice stays bound until the device closes, where unbinding it now could hand memory that
    // queued work still reads to another stream.
  }
}

// ---- eager operations ------------------------------------------------------------------

std::shared_ptr<Buffer> Stream::alloc(std::int64_t nbytes) {
  const std::size_t total = device_->total_memory();
  if (nbytes <= 0 || static_cast<std::uint64_t>(nbytes) > total)
    raise(ErrorKind::InvalidArgument, "alloc: nbytes must be between 1 and the device's memory (" +
                                          std::to_string(total) + " bytes), got " + std::to_string(nbytes));
  Locked lock(*this, "alloc");
  return alloc_locked(static_cast<std::size_t>(nbytes), true, "alloc");
}

std::shared_ptr<Buffer> Stream::alloc_lent(std::size_t nbytes) {
  const std::size_t total = device_->total_memory();
  if (nbytes == 0 || nbytes > total)
    raise(ErrorKind::InvalidArgument, "alloc_lent: nbytes must be between 1 and the device's memory (" +
                                          std::to_string(total) + " bytes), got " + std::to_string(nbytes));
  // Declared before the lock, so a buffer a failed insert leaves goes after the lock is let
  // go: its destructor drops its slice under that lock.
  std::shared_ptr<Buffer> buffer;
  Locked lock(*this, "alloc_lent");
  buffer = alloc_locked(nbytes, false, "alloc_lent");
  lent_slices_.insert(buffer->slice());
  return buffer;
}

namespace {

// Carried out of the pool's lock, to be answered there before the pool is asked once more: a
// miss while drops of this stream wait behind a fence (collected first, without waiting), and
// a driver allocation refused for want of memory (Stream::reclaim_for_allocation).
struct HoldsDrops {};
struct OutOfDeviceMemory {};

}  // namespace

void Stream::reclaim_for_allocation() {
  // The stream's lock is held: no embedding lock may be let go and taken back here (a thread
  // parked taking it back would keep this lock for ever); Stream.alloc's binding waits without
  // it from the start.
  {
    RelaxedCaptureMode relaxed(driver_);  // a host wait of a stream that does not record (stream.hpp)
    (void)synchronize_and_release();      // a failure is the stream's next error; the retry answers
  }
  device_->memory().cleanup();  // what the pool keeps free goes back: the request may be another size
}

std::shared_ptr<Buffer> Stream::alloc_locked(std::size_t nbytes, bool memory_nodes, const char* op) {
  check_usable(op);
  const bool in_driver_capture = driver_captures();
  bool collected = false, reclaimed = false;
  auto allocate = [&](std::size_t bytes) {
    SliceAllocation made;
    if (in_driver_capture) {
      if (!memory_nodes)
        raise(ErrorKind::Lifecore, std::string(op) + ": the pool holds no free slice of " + std::to_string(bytes) +
                                       " bytes for this recording, and a new allocation inside a driver capture "
                                       "would be a memory node the caller could not keep; warm up with the same "
                                       "allocations before begin_capture");
      // The pool could not serve it inside the window: the driver records a memory node,
      // which end_capture refuses (the graph could not be relaunched).
      check_status(driver_.mem_alloc_async(bytes, handle_, &made.ptr));
      made.memory_node = true;
    } else {
      check_not_recording_elsewhere(op, "needs a new driver allocation (the pool holds no free slice of " +
                                            std::to_string(bytes) + " bytes)");
      if (!collected && !state_.is_recording() && (drop_.in_flight() > 0 || drop_.pending_memory() > 0)) throw HoldsDrops{};
      RelaxedCaptureMode relaxed(driver_);  // leaves another library's capture alone (stream.hpp)
      driver::Status status = driver_.mem_alloc(bytes, &made.ptr);
      if (status.code == driver::Code::out_of_memory && !reclaimed && !state_.is_recording()) throw OutOfDeviceMemory{};
      check_status(status);
      if (state_.is_recording()) ++window_allocations_;  // a software window's: what a driver's graph refuses
    }
    return made;
  };
  // Each answer is given once (its flag stops the lambda asking again), so the pool is asked at
  // most three times.
  MemoryManager::Reservation reservation;
  for (;;) {
    try {
      reservation = device_->memory().reserve(nbytes, active_window(), allocate);
      break;
    } catch (HoldsDrops&) {
      // Drops behind a fence may be done: fence the ones not yet behind one (a stream whose
      // work another library issues, torch's through the pooled allocator, reaches no fence of
      // its own) and collect, which never waits, before a new driver allocation grows the pool.
      collected = true;
      flush_fenced();
    } catch (OutOfDeviceMemory&) {
      // Memory dropped on this stream waits for the work queued before the drop; a device full
      // of it is not full. As a caching allocator does, wait for that work, give the pool's
      // free slices back, and ask once more; a second refusal is the caller's error.
      collected = reclaimed = true;
      reclaim_for_allocation();
    }
  }
  // A software recording's new allocation is what a driver's would record as a memory node: the
  // same rules, so what passes on software graphs passes on a device (only this stream may use
  // it, in the window; the window, refused at its end, frees it).
  const bool memory_node = reservation.allocated && (in_driver_capture || state_.is_recording());
  std::shared_ptr<Buffer> buffer;
  try {
    // Room first: a Buffer dropped here would take this stream's lock, held, in its destructor.
    if (memory_node && window_node_buffers_.size() == window_node_buffers_.capacity())
      window_node_buffers_.reserve(std::max<std::size_t>(8, 2 * window_node_buffers_.size()));
    buffer = std::make_shared<Buffer>(shared_from_this(), reservation.id, reservation.ptr, nbytes);
  } catch (...) {
    drop_slice_locked(reservation.id);  // no Buffer holds the slice: give it back as its drop would
    throw;
  }
  if (memory_node) {
    buffer->mark_memory_node();
    window_node_buffers_.push_back(buffer);  // cannot throw: room was made
  }
  return buffer;
}

namespace {

[[noreturn]] void refuse_recorded_write(const char* op, std::string_view what) {
  raise(ErrorKind::CaptureState,
        std::string(op) + ": " + std::string(what) +
            " goes to a Buffer whose stream is recording a capture: the copy would be recorded, and every replay "
            "would write what it holds now again. Nothing was changed: write it outside the capture, before each "
            "replay (the captured work reads it from the Buffer)");
}

}  // namespace

void Stream::check_write_not_recorded(const char* op, std::string_view what) const {
  Locked lock(*this, op);
  if (state_.is_recording()) refuse_recorded_write(op, what);
}

void Stream::write_unrecorded(Buffer& buffer, const void* data, std::size_t bytes, const char* op,
                              std::string_view what, std::size_t offset) {
  Locked lock(*this, op);
  check_usable(op);
  if (state_.is_recording()) refuse_recorded_write(op, what);
  write_locked(buffer, data, bytes, op, offset);
}

void Stream::write(Buffer& buffer, const void* data, std::size_t bytes) {
  Locked lock(*this, "write");
  check_usable("write");
  write_locked(buffer, data, bytes);
}

void Stream::write_locked(Buffer& buffer, const void* data, std::size_t bytes, const char* op, std::size_t offset) {
  driver::DevicePtr ptr = buffer.use(*this, op);
  if (offset > buffer.nbytes())
    raise(ErrorKind::InvalidArgument, std::string(op) + ": offset " + std::to_string(offset) + " is past the buffer's " +
                                          std::to_string(buffer.nbytes()) + " bytes");
  if (bytes == 0 || bytes > buffer.nbytes() - offset)
    raise(ErrorKind::InvalidArgument, std::string(op) + ": data must hold between 1 and " +
                                          std::to_string(buffer.nbytes() - offset) + " bytes (the buffer's size" +
                                          (offset ? " past the offset" : "") + "), got " + std::to_string(bytes));
  ptr += offset;  // within the buffer: checked above
  if (refuse_host_work_lazily(op)) return;
  auto staging = std::make_shared<std::vector<std::uint8_t>>(bytes);
  std::memcpy(staging->data(), data, bytes);
  touch(buffer);
  if (auto status = driver_.memcpy_htod_async(ptr, staging->data(), bytes, handle_); !status.ok()) {
    queue_failure(status);
    drop_.push([staging] {});  // the driver may still hold it until the stream's next fence
  } else {
    keep_staging(std::move(staging));
  }
  after_issue();
}

std::vector<std::uint8_t> Stream::read(const Buffer& buffer) {
  Locked lock(*this, "read");
  check_usable("read");
  driver::DevicePtr ptr = buffer.use(*this, "read");
  check_host_wait("read");
  RelaxedCaptureMode relaxed(driver_);  // a host wait of a stream that does not record (stream.hpp)
  finish_host_wait("read");
  auto staging = std::make_shared<std::vector<std::uint8_t>>(buffer.nbytes());
  if (driver::Status waited = copy_to_host_locked(staging->data(), ptr, staging->size()); !waited.ok()) {
    drop_.push([staging] {});  // the copy may still write it: kept until the next fence, as a write's staging is
    check_status(waited);
  }
  return std::move(*staging);
}

driver::Status Stream::copy_to_host_locked(void* dst, driver::DevicePtr ptr, std::size_t bytes) {
  // On this stream, then waited for: a synchronous copy runs on the legacy default stream, which
  // waits for every blocking stream, and so fails (invalidating it) while another library
  // captures on one, or waits behind that library's work.
  check_status(driver_.memcpy_dtoh_async(dst, ptr, bytes, handle_));  // refused: nothing queued
  return synchronize_and_release();
}

void Stream::fill(Buffer& buffer, std::uint32_t value) { fill(MemoryRef{&buffer, nullptr}, value); }

void Stream::copy(Buffer& dst, const Buffer& src) { copy(MemoryRef{&dst, nullptr}, MemoryRef{&src, nullptr}); }

void Stream::fill(const MemoryRef& dst, std::uint32_t value) {
  Locked lock(*this, "fill");
  check_usable("fill");
  ResolvedMemory target = resolve_memory(*this, dst, "fill", "buf", true);
  if (target.nbytes % 4 != 0)
    raise(ErrorKind::InvalidArgument, dst.buffer ? "fill: the buffer's size must be a multiple of 4 bytes, got " +
                                                       std::to_string(target.nbytes)
                                                 : "fill: argument 'buf' holds " + std::to_string(target.nbytes) +
                                                       " bytes, not a multiple of 4 (fill writes 32-bit words)");
  std::vector<ProducerStream> producers;  // never allocated without a producer stream
  note_producer(dst, "buf", &producers);
  wait_for_producers(producers, "fill");
  if (target.pooled) touch(target.slice, target.owner);
  const std::size_t count = target.nbytes / 4;
  driver::Status status = state_.is_recording() ? recorder_->fill(target.ptr, value, count)
                                                : driver_.memset_d32_async(target.ptr, value, count, handle_);
  if (!status.ok()) queue_failure(status);
  keep_hold(std::move(target.hold));
  if (runtime_records()) return;  // nothing reached the driver
  after_issue();
}

void Stream::copy(const MemoryRef& dst, const MemoryRef& src) {
  Locked lock(*this, "copy");
  check_usable("copy");
  ResolvedMemory to = resolve_memory(*this, dst, "copy", "dst", true);
  ResolvedMemory from = resolve_memory(*this, src, "copy", "src", false);
  if (to.nbytes != from.nbytes)
    raise(ErrorKind::InvalidArgument,
          dst.buffer && src.buffer
              ? "copy: the buffers must have the same size, got " + std::to_string(to.nbytes) + " and " +
                    std::to_string(from.nbytes)
              : "copy: argument 'dst' holds " + std::to_string(to.nbytes) + " bytes and 'src' " +
                    std::to_string(from.nbytes) + "; they must be the same size");
  // A driver copies between disjoint ranges only (what it does with shared bytes is undefined):
  // refused on every backend, so code that passes on the emulated device passes on a GPU.
  const auto overlap = [](std::uint64_t a, std::uint64_t b, std::uint64_t n) { return shares_a_byte(a, n, b, n); };
  // Resolved addresses, and for two foreign ranges their own (each maps on its own where the
  // device maps host memory, so two views of one array resolve apart).
  const bool both_foreign = dst.foreign && src.foreign && dst.foreign->device_type == src.foreign->device_type &&
                            dst.foreign->device_id == src.foreign->device_id;
  const bool resolved_overlap = overlap(to.ptr, from.ptr, to.nbytes);
  if (to.nbytes != 0 &&
      (resolved_overlap || (both_foreign && overlap(dst.foreign->address, src.foreign->address, to.nbytes)))) {
    // The addresses that overlap: the resolved ones, or the producer's own where each mapped apart.
    const std::uint64_t a = resolved_overlap ? to.ptr : dst.foreign->address;
    const std::uint64_t b = resolved_overlap ? from.ptr : src.foreign->address;
    raise(ErrorKind::InvalidArgument,
          "copy: argument 'dst' and 'src' share memory (" + std::to_string(to.nbytes) + "-byte ranges at " +
              hex_text(a) + " and " + hex_text(b) + "): a device copy between overlapping ranges is undefined; "
              "copy through another buffer");
  }
  std::vector<ProducerStream> producers;
  note_producer(dst, "dst", &producers);
  note_producer(src, "src", &producers);
  wait_for_producers(producers, "copy");
  if (to.pooled) touch(to.slice, to.owner);
  if (from.pooled) touch(from.slice, from.owner);
  driver::Status status = state_.is_recording() ? recorder_->copy(to.ptr, from.ptr, to.nbytes)
                                                : driver_.memcpy_dtod_async(to.ptr, from.ptr, to.nbytes, handle_);
  if (!status.ok()) queue_failure(status);
  keep_hold(std::move(to.hold));
  keep_hold(std::move(from.hold));
  if (runtime_records()) return;  // nothing reached the driver
  after_issue();
}

void Stream::launch(const Kernel& kernel, driver::Dim3 grid, driver::Dim3 block, const LaunchArg* args,
                    std::size_t count, const InfoWords* info) {
  const auto& params = kernel.params();
  const std::size_t offset = info ? 1 : 0;
  if (info && (params.empty() || params[0] != driver::ArgKind::pointer))
    raise(ErrorKind::TypeMismatch, "launch: " + kernel.signature() +
                                       " takes no metadata buffer first, so info= cannot be given");
  if (info && info->empty()) raise(ErrorKind::InvalidArgument, "launch: info must hold at least one word");
  // A built-in that reads its counts from a metadata buffer takes them as info= words, held by
  // the info cache: a pointer of the caller's there would carry an n no launch check has seen
  // (and a graph would replay whatever the caller wrote into it later).
  if (!info && kernel.info_words() > 0)
    raise(ErrorKind::InvalidArgument, "launch: " + kernel.signature() + " reads its metadata buffer ('" +
                                          kernel.param_names()[0] + "') from info=: give the " +
                                          std::to_string(kernel.info_words()) + " words (" +
                                          std::string(kernel.summary()) +
                                          ") as info=[...] and the other arguments in the list; a buffer of your "
                                          "own in its place is refused (nothing was issued)");
  if (count + offset != params.size())
    raise(ErrorKind::TypeMismatch, "launch: " + kernel.signature() + " takes " +
                                       std::to_string(params.size() - offset) + " argument(s)" +
                                       (info ? " besides info" : "") + ", got " + std::to_string(count));
  check_builtin_extents(kernel, grid, block, args, count, info, offset);
  Locked lock(*this, "launch");
  check_usable("launch");
  // Reused between launches (under the stream's lock): the hot path allocates nothing.
  std::vector<driver::KernelArg>& converted = launch_args_;
  converted.resize(params.size());
  std::vector<std::pair<SliceId, const Stream*>> foreign_slices;  // tensors recognised as buffers here
  std::vector<std::shared_ptr<void>> holds;    // foreign memory (empty, never allocated, without it)
  std::vector<ProducerStream> producers;       // their producer streams (likewise)
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t param = i + offset;
    const LaunchArg& arg = args[i];
    if (params[param] == driver::ArgKind::pointer) {
      if (arg.kind == LaunchArg::Kind::foreign) {
        // A kernel may write through any pointer it is given but a "const ptr": a read-only
        // tensor is refused anywhere else.
        ResolvedMemory memory = resolve_memory(*this, MemoryRef{nullptr, arg.foreign}, "launch",
                                               std::string(kernel.param_names()[param]), !kernel.reads_only(param));
        converted[param] = driver::KernelArg{driver::ArgKind::pointer, memory.ptr};
        if (memory.pooled) foreign_slices.push_back({memory.slice, memory.owner});
        if (memory.hold) holds.push_back(std::move(memory.hold));
        note_producer(MemoryRef{nullptr, arg.foreign}, kernel.param_names()[param], &producers);
        continue;
      }
      if (arg.kind != LaunchArg::Kind::buffer)
        raise(ErrorKind::TypeMismatch, "launch: " + kernel.signature() + ": argument '" +
                                           std::string(kernel.param_names()[param]) +
                                           "' must be a Buffer or a tensor, got " +
                                           (arg.kind == LaunchArg::Kind::integer ? std::string("int")
                                            : arg.kind == LaunchArg::Kind::real  ? std::string("float")
                                                                                 : std::string(arg.type_name)));
      converted[param] =
          driver::KernelArg{driver::ArgKind::pointer, arg.buffer->use(*this, "launch", kernel.param_names()[param])};
    } else {
      converted[param] = convert_scalar(kernel, param, arg);
    }
  }
  driver::FunctionHandle function = device_->function(kernel);
  wait_for_producers(producers, "launch");  // before the info cache, whose transient entries must be dropped
  InfoCache::Lookup metadata;
  if (info) {
    // Inside a driver capture a new entry's buffer is a memory node, with memory behind it
    // only while the graph runs: the cache keeps it private to this window and drops it when
    // the window ends, so no other stream is ever handed it.
    metadata = device_->info().get(*info, state_.cache_mode(), active_window(),
                                   [this](const InfoWords& words) {
                                     // A software recording's upload is what a driver's records
                                     // as a memory node: counted, so end_capture refuses it too.
                                     if (state_.is_recording() && !driver_captures()) ++window_allocations_;
                                     return upload_info(words);
                                   },
                                   driver_captures());
    converted[0] = driver::KernelArg{driver::ArgKind::pointer, metadata.ptr};
  }
  // Checks passed: from here on the launch is issued (or recorded).
  for (std::size_t i = 0; i < count; ++i)
    if (args[i].kind == LaunchArg::Kind::buffer) touch(*args[i].buffer);
  for (const auto& [slice, owner] : foreign_slices) touch(slice, owner);
  // An evicted entry may still be read by another stream's queued launch, which this stream's
  // fence does not cover: its free (of driver-allocated memory: cuMemFree, hipFree) relies on
  // the driver's implicit synchronization of such a free. Eviction needs more than the cache's
  // 4096 distinct entries.
  for (driver::DevicePtr evicted : metadata.evicted) free_info_after_work(evicted);
  driver::Status status = state_.is_recording() ? recorder_->launch(function, grid, block, converted)
                                                : driver_.launch_kernel(function, grid, block, 0, handle_, converted);
  if (!status.ok()) queue_failure(status);
  for (auto& hold : holds) keep_hold(std::move(hold));
  if (metadata.transient) free_info_after_work(metadata.ptr);
  after_issue();
}

void Stream::check_syncable() {
  check_usable("sync");
  check_host_wait("sync");
}

void Stream::check_host_wait(const char* op, std::string_view does) const {
  check_host_work(op);
  if (driver_captures())
    raise(ErrorKind::CaptureState,
          std::string(op) + ": this stream is recording a graph capture, and a host wait on it would invalidate the "
                            "recording (the driver refuses it); nothing was done: end the capture first");
  check_not_recording_elsewhere(op, does);
}

void Stream::finish_host_wait(const char* op) {
  check_status(synchronize_and_release());
  errors_.surface(op);
}

void Stream::sync() {
  Locked lock(*this, "sync");
  check_syncable();
  RelaxedCaptureMode relaxed(driver_);  // a host wait of a stream that does not record (stream.hpp)
  finish_host_wait("sync");
}

bool Stream::sync_for(std::chrono::nanoseconds slice) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  // Spin on the first polls (most waits are short, and a sleep would add its granularity to
  // each), then sleep doubling to a millisecond, never past the slice.
  constexpr unsigned spinning_polls = 64;
  auto nap = std::chrono::microseconds(20);
  // In a forked child the lock below may never come free: refused before any poll (Locked).
  device_->check_not_forked("sync");
  // Every poll, and the final wait, is a host wait of a stream that does not record (stream.hpp).
  RelaxedCaptureMode relaxed(driver_);
  for (unsigned polls = 0;; ++polls) {
    // Never waits for the lock: another thread may hold it through a blocking wait (a sync or a
    // read of work that takes as long as the device does), and the slice must still end on
    // time. A poll that finds the lock held finds the stream busy.
    if (std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock); lock.owns_lock()) {
      struct Republish {  // as Locked does, before the lock lets go
        const Stream& stream;
        ~Republish() { stream.publish_status(); }
      } republish{*this};
      check_syncable();
      const driver::Status idle = driver_.stream_query(handle_);
      if (idle.ok()) {
        finish_host_wait("sync");  // under the lock nothing was queued since the poll: it returns at once
        return true;
      }
      if (idle.code != driver::Code::not_ready) check_status(idle);  // a fault, or the device lost
    }
    const auto waited = clock::now() - start;
    if (waited >= slice) return false;
    if (polls < spinning_polls) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::min<clock::duration>(nap, slice - waited));
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }
}

// ---- profiling ---------------------------------------------------------------------------

void Stream::destroy_events(ProfileEvents& events) noexcept {
  if (!events.live) return;
  events.live = false;
  // Also once the stream or the device is closed: close() does not know a profile's events, and
  // the driver lives as long as the device object does.
  if (events.start != driver::EventHandle{}) (void)driver_.event_destroy(events.start);
  if (events.end != driver::EventHandle{}) (void)driver_.event_destroy(events.end);
  events.start = events.end = {};
}

Stream::ProfileEvents Stream::profile_start() {
  Locked lock(*this, "profile");
  check_usable("profile");
  // The end waits on the host, which an op list cannot hold.
  check_host_work("profile");
  // Inside a driver recording the start event would be a node of the graph and the stop's wait
  // would invalidate it: no profile there can ever measure, so none starts.
  if (driver_captures())
    raise(ErrorKind::CaptureState,
          "profile: this stream is recording a graph capture, and a profile measures outside one only (its stop "
          "waits on the host, which the driver refuses inside a recording by invalidating it); nothing was done: "
          "end the capture first");
  check_not_recording_elsewhere("profile", "waits on the host for its end event when it stops");
  ProfileEvents events;
  events.live = true;
  driver::Status status = driver_.event_create(&events.start, driver::EventTiming::enabled);
  if (status.ok()) status = driver_.event_create(&events.end, driver::EventTiming::enabled);
  if (status.ok()) status = driver_.event_record(events.start, handle_);
  if (!status.ok()) {
    destroy_events(events);
    throw_driver(status);
  }
  return events;
}

float Stream::profile_stop(ProfileEvents& events) {
  Locked lock(*this, "Profile.stop");
  if (!events.live) raise(ErrorKind::Closed, "Profile.stop: this profile has already stopped");
  // A recording's refusal changes nothing: the profile stays live, to stop once that recording
  // has ended (the stream's own included: it began after the start). Past these, the events go
  // whatever happens (a closed device's among them: the profile can never stop then, and close()
  // does not know its events).
  const bool closing = dead_ || left_by_close_ || device_->closed();  // check_usable refuses below
  if (!closing) check_host_wait("Profile.stop", "waits on the host for its end event");
  struct Release {
    Stream* self;
    ProfileEvents* events;
    ~Release() { self->destroy_events(*events); }
  } release{this, &events};
  check_usable("Profile.stop");
  driver::Status status = driver_.event_record(events.end, handle_);
  if (status.ok()) {
    RelaxedCaptureMode relaxed(driver_);  // a host wait of a stream that does not record (stream.hpp)
    status = driver_.event_synchronize(events.end);
  }
  float milliseconds = 0.0f;
  if (status.ok()) status = driver_.event_elapsed(events.start, events.end, &milliseconds);
  if (!status.ok()) throw_driver(status);
  return milliseconds;
}

void Stream::profile_abandon(ProfileEvents& events) noexcept {
  if (device_->forked()) return;  // the parent's events
  Locked lock(*this);
  destroy_events(events);
}

void Stream::replay(Graph& graph) {
  Locked lock(*this, "replay");
  check_usable("replay");
  // Checked first so a destroyed graph raises at once, also inside a window that refuses replays.
  if (!graph.alive()) raise(ErrorKind::Closed, "replay: the graph was destroyed");
  // Recorded, a replay would make a graph inside the new one, whose memory and life nothing
  // keeps for it (and a driver may refuse it only at the end): refused now, on every backend.
  if (state_.is_recording())
    raise(ErrorKind::CaptureState,
          "replay: the stream records a capture, and a graph replayed into a recording would be a graph inside "
          "another, whose memory and life lifecore does not keep for it: replay it before begin_capture or after "
          "end_capture. Nothing was changed: the recording goes on");
  if (auto status = graph.launch_on(*this, handle_); !status.ok()) queue_failure(status);
  after_issue();
}

bool Stream::wait_for_graph_work() noexcept {
  if (device_->forked()) return true;  // the parent's work: nothing of it runs in this process
  Locked lock(*this);
  // A recording began with a synchronize, and a gone stream's work went with it.
  if (dead_ || device_->closed() || driver_captures()) return true;
  // This stream does not capture, so the wait runs in relaxed mode: no recording elsewhere,
  // lifecore's or another library's, refuses it or is invalidated by it. A driver that cannot
  // switch waits in the thread's mode, unless that would invalidate a recording of lifecore's.
  RelaxedCaptureMode relaxed(driver_);
  if (!relaxed.engaged() && recording_elsewhere()) return false;
  return synchronize_and_release().ok();
}

void Stream::release_after_work(std::shared_ptr<void> hold) noexcept {
  if (device_->forked()) return;  // no work of this stream runs in this process: the hold goes now
  Locked lock(*this);
  if (dead_ || device_->closed()) return;  // its work went with it
  try {
    drop_.push([hold = std::move(hold)]() mutable { hold.reset(); });
  } catch (...) {
    // Nothing to report to; the hold goes now.
  }
}

// ---- the capture lifecycle -------------------------------------------------------------

WindowId Stream::graph_prepare(CaptureOwner owner) {
  Locked lock(*this, "graph_prepare");
  check_usable("graph_prepare");
  StreamCaptureState next = state_;
  next.prepare(owner);  // the rule: refuses an overlapping window, changing nothing
  // Errors queued before the window belong to work outside it: report them now, not inside.
  errors_.surface("graph_prepare");
  const WindowId window = device_->new_window_id();
  // Arm the pools (persistent, touched, priming) and open the window in the info cache, which
  // keeps warm for it every entry cached before it: what throws comes before the state moves.
  device_->memory().capture_begin(window);
  std::vector<driver::DevicePtr> evicted;
  try {
    evicted = device_->info().open_window(window);
  } catch (...) {
    device_->memory().release_retained(device_->memory().capture_end(window));
    throw;
  }
  state_.set(next);
  window_ = window;
  prepared_window_ = window;
  // Over the cache's count before the window opened: released in this stream's order, as a
  // launch's evictions are (out of memory for the queue, one stays allocated: a leak, never a
  // free under queued work).
  for (driver::DevicePtr ptr : evicted) {
    try {
      free_info_after_work(ptr);
    } catch (...) {
    }
  }
  return window;
}

void Stream::free_info_after_work(driver::DevicePtr ptr) {
  Device* device = device_.get();
  drop_.push([device, ptr] { device->free_info_buffer(ptr); });
}

void Stream::begin_capture(std::optional<WindowId> cycle) {
  Locked lock(*this, "begin_capture");
  check_usable("begin_capture");
  require_cycle("begin_capture", cycle);
  StreamCaptureState probe = state_;
  probe.begin();  // the rule first: an out-of-order begin says so whatever records elsewhere
  // Its synchronize below is refused while a recording on another stream forbids it: refused
  // here instead, changing nothing, before the driver could invalidate that recording.
  check_not_recording_elsewhere("begin_capture", "synchronizes this stream before it begins recording");
  state_.begin();  // before any work: a rejected begin must not flush (that would abort a live capture)
  try {
    // Fenced flush of warmup's work: its staging and freed slices are released, and its
    // asynchronous failures surface here rather than inside the window. In relaxed mode: a
    // global-mode recording another thread began since the check above is left alone (this
    // stream does not record yet).
    {
      RelaxedCaptureMode relaxed(driver_);
      check_status(synchronize_and_release());
    }
    errors_.surface("begin_capture");
    device_->memory().capture_priming_end(window_);
    // Another library's kernels may use any slice lent to it: the recording keeps them all.
    for (SliceId slice : lent_slices_) device_->memory().touch(slice, window_);
    // The driver refuses a module load while a stream captures: a capture without warmup
    // must find the built-in kernels already loaded. In relaxed mode, as the synchronize above.
    if (recorder_->in_driver()) {
      RelaxedCaptureMode relaxed(driver_);
      device_->load_builtins();
    }
    const std::uintptr_t native = driver_.stream_native_handle(handle_);
    std::string thread = thread_text(std::this_thread::get_id());
    // Listed first: a call another thread checks from here on is refused up front instead of
    // reaching the driver in the recording's first moments (which, in global mode, it would
    // invalidate).
    capture_registry::add(state_.mark(), capture_domain_, device_->capture_mode(), native, thread, weak_from_this());
    std::string previous_text = std::move(capture_thread_text_);  // no throw from here on
    capture_thread_text_ = std::move(thread);
    try {
      check_status(recorder_->begin(device_->capture_mode()));
    } catch (...) {
      capture_registry::remove(state_.mark().get());
      capture_thread_text_ = std::move(previous_text);
      throw;
    }
    capture_thread_ = thread_token();
    window_allocations_ = 0;
  } catch (...) {
    undo_window();
    state_.abort();
    throw;
  }
}

void Stream::discard_window() noexcept {
  try {
    recorder_->discard();
    if (window_ != 0) {
      device_->info().discard(window_);  // first: allocates nothing, so its pins go whatever fails below
      auto touched = device_->memory().capture_end(window_);
      device_->memory().release_retained(touched);
      (void)errors_.take_window(window_);  // the window's work is discarded with it
    }
    // Marked freed with it: the slice goes back in stream order now, not when the last
    // reference does (and that reference, dropped here, finds nothing left to do under this
    // lock). Its work never ran: should the queue fail to take it, it goes back at once.
    MemoryManager* memory = &device_->memory();
    for (auto& weak : window_node_buffers_) {
      auto buffer = weak.lock();
      if (!buffer || !buffer->mark_dangling()) continue;
      try {
        drop_.push_memory([memory, slice = buffer->slice()] { memory->unbind(slice); });
      } catch (...) {
        memory->unbind(buffer->slice());
      }
    }
    window_node_buffers_.clear();
    window_holds_.clear();  // nothing recorded will run
    window_ = 0;
  } catch (...) {
    // Nothing here reports failure; stay usable whatever happened.
  }
}

void Stream::discard_window_still_capturing() noexcept {
  discard_window();
  window_ = device_->new_window_id();
  window_discarded_ = true;
}

void Stream::undo_window() noexcept {
  discard_window();
  try {
    flush_fenced();  // the flushes deferred while recording
  } catch (...) {
  }
}

void Stream::refuse(const std::string& message, const std::string& cause, const driver::Status* status) {
  undo_window();
  // A sticky status is not a refused recording but a lost device.
  if (status) device_->note_status(*status);
  device_->check_not_lost("end_capture");
  std::vector<ErrorAttribute> attributes{{"cause", cause}};
  if (status) {
    auto more = status_attributes(*status);
    attributes.insert(attributes.end(), more.begin(), more.end());
  }
  throw Error(ErrorKind::CaptureRefused, message, std::move(attributes));
}

namespace {
constexpr std::string_view still_capturing_words = " and the driver still captures on this stream";
}

Error Stream::after_capture_ended(const Error& failure, const char* by) {
  std::vector<ErrorAttribute> attributes = failure.attributes();
  bool still_capturing = false;
  for (auto& [name, value] : attributes)
    if (name == "cause" && std::holds_alternative<std::string>(value) &&
        std::get<std::string>(value) == "driver_still_capturing") {
      value = std::string("driver");
      still_capturing = true;
    }
  const std::string& text = failure.message();
  const std::size_t cut = text.find(still_capturing_words);
  if (!still_capturing || cut == std::string::npos) return failure;
  return Error(failure.kind(),
               text.substr(0, cut) + "; " + by + " aborted the capture after it, which ended the driver capture: " +
                   "nothing was sealed, and the stream is in NO_CAPTURE, ready to capture again",
               std::move(attributes));
}

void Stream::raise_still_capturing(const char* op, const driver::Status& status, ErrorKind kind) {
  std::vector<ErrorAttribute> attributes{{"cause", std::string("driver_still_capturing")}};
  auto more = status_attributes(status);
  attributes.insert(attributes.end(), more.begin(), more.end());
  throw Error(kind,
              std::string(op) + ": ending the driver capture failed (" + driver::status_summary(status) + ", in " + status.call +
                  ")" + std::string(still_capturing_words) + ", so the stream stays in CAPTURE with its window "
                  "discarded (nothing was sealed); call end_capture or abort_capture again from thread " +
                  capture_thread_text_ + " to end it",
              std::move(attributes));
}

void Stream::end_discarded_capture(const char* op, ErrorKind still_capturing) {
  driver::Status status = recorder_->abandon();
  if (recorder_->driver_capturing()) raise_still_capturing(op, status, still_capturing);
  window_discarded_ = false;
  discard_window();  // whatever was recorded since the window was discarded
  state_.abort();
  undo_window();
  if (status.sticky) throw_driver(status);
}

std::shared_ptr<Graph> Stream::end_capture(CaptureOwner caller, std::optional<WindowId> cycle) {
  Locked lock(*this, "end_capture");
  check_usable("end_capture");
  require_cycle("end_capture", cycle);
  if (!state_.is_recording()) {
    StreamCaptureState probe = state_;
    (void)probe.end(caller);  // raises the rule's CaptureStateError
  }
  check_capture_thread("end_capture");
  if (window_discarded_) {
    end_discarded_capture("end_capture", ErrorKind::CaptureRefused);
    raise(ErrorKind::CaptureRefused,
          "end_capture: this window was already discarded when an earlier end or abort could not end the driver "
          "capture; the driver capture is now ended and the stream is out of capture; nothing was sealed",
          {{"cause", std::string("discarded")}});
  }
  const StreamCaptureState recording = state_;
  const CaptureEnd ended = state_.end(caller);  // first: a failed seal can never wedge the stream
  driver::Status ended_status = recorder_->end();
  if (recorder_->driver_capturing()) {
    // The driver still captures: the stream never says NO_CAPTURE while it does.
    state_.set(recording);
    discard_window_still_capturing();
    raise_still_capturing("end_capture", ended_status, ErrorKind::CaptureRefused);
  }
  if (ended_status.sticky) {
    undo_window();
    throw_driver(ended_status);
  }
  std::vector<QueuedError> window_errors = errors_.take_window(window_);

  if (ended.abandoned) refuse(abandoned_capture_message(ended), "abandoned");
  // A driver may invalidate a capture in which a call failed (CUDA documents it for calls it
  // forbids there): the window's own failure, then, is the cause to report.
  const bool invalidated = ended_status.code == driver::Code::capture_invalidated;
  if (!ended_status.ok() && !(invalidated && !window_errors.empty())) {
    if (invalidated)
      refuse("end_capture: the driver invalidated the capture (" + driver::status_summary(ended_status) +
                      "): a call made outside lifecore that the driver cannot record, or forbids while a "
                      "capture records, ran inside the window (lifecore refuses its own up front); nothing was "
                      "sealed",
             "invalidated", &ended_status);
    refuse("end_capture: ending the driver capture failed (" + driver::status_summary(ended_status) + ", in " +
                    ended_status.call + "); nothing was sealed",
           "driver", &ended_status);
  }
  if (!window_errors.empty()) {
    const Error& first = window_errors.front().error;
    std::string message = "end_capture: an operation inside the capture window failed, so the recording is "
                          "incomplete and nothing was sealed: " + first.message() +
                          describe_origin(window_errors.front());
    if (window_errors.size() > 1) message += " (and " + std::to_string(window_errors.size() - 1) + " more)";
    if (invalidated) message += "; the driver invalidated the capture on it (" + driver::status_summary(ended_status) + ")";
    std::vector<ErrorAttribute> attributes{{"cause", std::string("queued_error")}};
    for (const auto& attribute : first.attributes())
      if (attribute.first != "cause") attributes.push_back(attribute);
    undo_window();
    device_->check_not_lost("end_capture");  // the failure inside was a sticky one
    throw Error(ErrorKind::CaptureRefused, message, std::move(attributes));
  }

  if (window_allocations_ > 0)  // only a software recording counts them: a driver's counts its memory nodes
    refuse("end_capture: the capture window made " + std::to_string(window_allocations_) +
               " new allocation(s) (a buffer the pool could not serve, or the upload of a launch's info words "
               "first seen inside the window): with a driver's graphs each is a memory node, which "
               "makes the graph un-relaunchable, so a software capture is rejected the same way (the persistent "
               "pool should have served it: run a warmup after graph_prepare, or one more when a pass reads a "
               "buffer its previous pass allocated, e.g. capture(fn, warmup=2))",
           "memory_nodes");

  Graph::Parts parts;
  parts.device = device_;
  parts.origin = shared_from_this();
  parts.id = device_->new_graph_id();
  SealRefusal refusal;
  parts.recording = recorder_->seal(&refusal);
  if (!parts.recording) {
    if (refusal.status) device_->note_status(*refusal.status);  // before the undo's driver calls
    refuse(refusal.message, refusal.cause, refusal.status ? &*refusal.status : nullptr);
  }
  Recording& sealed = *parts.recording;
  // The graph keeps every slice the recording touched and its info pins (the recording, its staging).
  parts.retained = device_->memory().capture_end(window_);
  parts.holds = std::move(window_holds_);
  window_holds_.clear();
  device_->info().commit(window_, parts.id);
  auto graph = std::make_shared<Graph>(std::move(parts));
  device_->register_graph(graph);
  window_ = 0;
  sealed.upload(driver_, handle_);
  flush_fenced();  // the flushes deferred while recording
  // A sticky status in the upload or the flushes: the seal raises it, as one in its end would
  // (the graph goes with the context).
  device_->check_not_lost("end_capture");
  return graph;
}

void Stream::forget_recording(bool discard) noexcept {
  if (discard) discard_window();
  if (window_ != 0) device_->info().close_window(window_);  // discarded or not, its warm pins go
  window_ = 0;
  state_.abort();
  recorder_->forget();
  window_discarded_ = false;
}

void Stream::abort_capture(std::optional<WindowId> cycle) {
  if (device_->forked()) return;  // nothing of the parent's capture is this process's to end
  Locked lock(*this);
  if (left_by_close_) {
    // The capture close() left to its thread: that thread's abort ends it; any other has nothing to do.
    if (thread_token() == capture_thread_) end_capture_left_by_close();
    return;
  }
  if (!holds_cycle(cycle)) return;  // that capture already ended; the one there now is another's
  if (!state_.is_active()) return;
  if (dead_ || device_->closed() || device_->lost()) {
    // Nothing of the driver's can be ended any more (the device went, or its context is lost).
    forget_recording(/*discard=*/!dead_ && !device_->closed());  // a closed device returned its memory
    return;
  }
  check_capture_thread("abort_capture");
  if (window_discarded_) {
    end_discarded_capture("abort_capture", ErrorKind::Driver);  // as an abort's own failed end says it
    return;
  }
  driver::Status ended_status;
  if (state_.is_recording()) {
    ended_status = recorder_->abandon();
    if (recorder_->driver_capturing()) {
      discard_window_still_capturing();
      raise_still_capturing("abort_capture", ended_status, ErrorKind::Driver);
    }
  }
  undo_window();
  state_.abort();
  if (ended_status.sticky) throw_driver(ended_status);
}

void Stream::end_recording_of_exiting_thread() noexcept {
  try {
    abort_capture();
  } catch (...) {
    // The driver still captures (its end failed), or the device was lost: what abort_capture
    // could do, it did, and no caller is left to tell.
  }
}

void Stream::end_capture_left_by_close() noexcept {
  left_by_close_ = false;
  if (recorder_->driver_capturing()) (void)recorder_->abandon();
  // Ended or not, nobody else could end it: the stream goes now (its window went when it was left).
  forget_recording(/*discard=*/false);
  drop_.release_all(driver_);
  (void)driver_.stream_destroy(handle_);
  device_->capture_left_ended();
}

void Stream::shutdown() noexcept {
  // In a child of fork(): the driver stream and its work are the parent's (and a lock held as
  // the process forked is never released here). Left as they are, with the device's driver.
  if (device_->forked()) {
    drop_.abandon_until_exit();  // its releases take locks of the parent's (the pool's)
    return;
  }
  Locked lock(*this);
  if (left_by_close_ && thread_token() == capture_thread_) {
    end_capture_left_by_close();  // the last reference went on the capturing thread
    return;
  }
  if (dead_) return;  // close() (or an earlier call) shut it down
  dead_ = true;
  // On a closed device too: close() shuts down every stream it takes, so one still alive here
  // was not taken (its last reference went as close took them) and owns its driver stream.
  const bool lost = device_->lost();
  if (recorder_->driver_capturing() && !lost && device_->capture_mode() != driver::CaptureMode::relaxed &&
      thread_token() != capture_thread_) {
    // Another thread's non-relaxed capture: the driver refuses an end from here (capture_wrong_thread), and waiting
    // for that thread could hang. Discard the window, leave the capture to that thread's next call
    // on this stream; nothing it recorded will run, and nothing queued before it still runs
    // (begin_capture synchronized the stream).
    discard_window();
    window_discarded_ = true;
    left_by_close_ = true;
    drop_.release_all(driver_);
    device_->capture_left_open();
    return;
  }
  if (state_.is_active()) {
    if (recorder_->driver_capturing() && !lost) (void)recorder_->abandon();
    forget_recording(/*discard=*/true);
  }
  // Destroyed before the drop queue is released: a driver whose synchronize failed without
  // waiting has, by then, let go of the stream's work and the host memory it reads. Relaxed, so
  // no recording elsewhere (lifecore's or another library's) refuses the wait or is invalidated.
  {
    RelaxedCaptureMode relaxed(driver_);
    (void)driver_.stream_synchronize(handle_);
  }
  (void)driver_.stream_destroy(handle_);
  drop_.release_all(driver_);
}

// ---- zero-copy interop ------------------------------------------------------------------

void Stream::read_into(const Buffer& buffer, void* dst, std::size_t bytes, bool* pending) {
  Locked lock(*this, "read_into");
  check_usable("read_into");
  driver::DevicePtr ptr = buffer.use(*this, "read_into");
  if (bytes != buffer.nbytes())
    raise(ErrorKind::InvalidArgument, "read_into: the target holds " + std::to_string(bytes) +
                                          " bytes, the buffer " + std::to_string(buffer.nbytes()));
  check_host_wait("read_into");
  RelaxedCaptureMode relaxed(driver_);  // a host wait of a stream that does not record (stream.hpp)
  finish_host_wait("read_into");
  if (driver::Status waited = copy_to_host_locked(dst, ptr, bytes); !waited.ok()) {
    if (pending) *pending = true;  // `dst` is the caller's: it keeps it
    check_status(waited);
  }
}

void Stream::check_lendable_locked(const Buffer& buffer, const char* op) {
  check_usable(op);
  (void)buffer.use(*device_, op);
  // Work a window records runs only at replay: a view taken now would read memory the graph
  // has not written yet, and a host wait here would abort a hardware capture.
  if (state_.is_active())
    raise(ErrorKind::CaptureState, std::string(op) +
                                       ": the buffer's stream has a capture window prepared or recording; take views "
                                       "outside it");
}

void Stream::check_lendable(const Buffer& buffer, const char* op) {
  Locked lock(*this, op);
  check_lendable_locked(buffer, op);
}

void Stream::lend(const Buffer& buffer, const std::uintptr_t* consumer_stream, bool no_order, const char* op) {
  Locked lock(*this, op);
  check_lendable_locked(buffer, op);
  // The consumer orders its own work (a recording consumer's runs at replay; another calls
  // sync() first): a wait here would stall the host for nothing it asked.
  if (no_order) return;
  if (consumer_stream == nullptr) {
    check_not_recording_elsewhere(op, "waits for this stream on the host");
    RelaxedCaptureMode relaxed(driver_);  // a host wait of a stream that does not record (stream.hpp)
    finish_host_wait(op);
    return;
  }
  check_native_not_capturing(*consumer_stream, op, "the consumer's stream",
                             "a wait there for this stream's work, which is outside that capture, would make the "
                             "driver invalidate the capture; take the view before the capture begins (it stays valid)");
  check_status(wait_on_device(driver_, *consumer_stream,
                              [&](driver::EventHandle event) { return driver_.event_record(event, handle_); }));
}

}  // namespace lifecore::runtime
