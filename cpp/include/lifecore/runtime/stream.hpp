// A device stream and its graph-capture lifecycle. The ordering rule is StreamCaptureState's;
// this class supplies the work each transition brackets, in the order that keeps every failure
// path safe (see graph_prepare / begin_capture / end_capture), plus the per-stream drop queue
// and error queue. What a window records, and how, is its Recorder's (recorder.hpp): driver
// capture or an op list, chosen once by the device's graphs mode. One mutex serialises the stream's operations; blocking driver calls
// (synchronize) happen under it but never under a device-wide lock.
//
// Threads (docs/graph-capture-threads.md): in thread_local and global capture mode only the
// thread that began a recording may end or abort it (another thread is refused up front and
// nothing changes); in relaxed mode any thread may. Outside relaxed mode a call the driver forbids
// while a capture records (a synchronization, a driver allocation) is refused up front, changing
// nothing, when a recording on another stream forbids it to the calling thread (that thread's
// own recording, or any thread's global one: runtime/capture_registry.hpp); so a thread begins
// recording on one stream at a time. A recording lifecore does not know (another library's)
// is left whole: the host waits (fence queries, upload and profile waits included), driver
// allocations and frees, and module loads and unloads lifecore makes outside a recording of its
// own run in relaxed capture mode, where the driver neither refuses them nor invalidates that
// capture. The stream keeps the driver's side of the
// window as a fact of its own: while the driver still captures (its end failed, or close()
// came from another thread) the stream stays in CAPTURE, and the capturing thread's next end
// or abort ends the driver capture.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "lifecore/runtime/capture_registry.hpp"
#include "lifecore/runtime/stream_capture_state.hpp"
#include "lifecore/runtime/drop_queue.hpp"
#include "lifecore/runtime/foreign_memory.hpp"
#include "lifecore/runtime/graph.hpp"
#include "lifecore/runtime/info_cache.hpp"
#include "lifecore/runtime/kernel.hpp"
#include "lifecore/runtime/memory_manager.hpp"
#include "lifecore/runtime/recorder.hpp"
#include "lifecore/runtime/stream_errors.hpp"
#include "lifecore/driver/driver.hpp"

namespace lifecore::runtime {

class Buffer;
class Device;

// A foreign tensor's producer stream (its native pointer) and the argument that named it.
struct ProducerStream {
  std::uintptr_t stream = 0;
  std::string_view argument;  // points into storage that outlives the call
};

class Stream : public std::enable_shared_from_this<Stream>, public RecordingOwner {
 public:
  Stream(std::shared_ptr<Device> device, driver::StreamHandle handle);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  const std::shared_ptr<Device>& device() const noexcept { return device_; }
  // The driver stream's native pointer; refused (check_usable) naming `op`, the call that asks.
  std::uintptr_t native_handle(const char* op = "handle");

  // nbytes in 1 .. the device's total memory, else InvalidArgumentError.
  std::shared_ptr<Buffer> alloc(std::int64_t nbytes);
  // A Buffer lent to another library's caching allocator (runtime/pooled_allocator.hpp): the
  // same slice and window bookkeeping as alloc, with two differences. That library's kernels
  // run on this stream out of lifecore's sight, so every recording begun while the Buffer lives
  // touches its slice (the graph retains it). And inside a driver capture a pool miss is
  // refused (LifecoreError) instead of becoming a memory node: the other library keeps the
  // memory past the window, and a node's memory goes with a refused recording.
  std::shared_ptr<Buffer> alloc_lent(std::size_t nbytes);
  // Asynchronous: `data` is copied to staging host memory first. 0 < bytes <= buffer.nbytes.
  void write(Buffer& buffer, const void* data, std::size_t bytes);
  // CaptureStateError naming `op`, nothing changed, while this stream records: `what` is a
  // write of the host's state now (a block table), and recorded, every replay would write that
  // state again, whatever it has become. Checked before the caller changes anything.
  void check_write_not_recorded(const char* op, std::string_view what) const;
  // write(), refused as check_write_not_recorded is (nothing written) when the stream records
  // now: the check and the copy are one hold of the stream, so a capture another thread begins
  // after the caller's own check can never record the copy.
  // `offset`: where in the buffer the bytes go (a table's rows that changed).
  void write_unrecorded(Buffer& buffer, const void* data, std::size_t bytes, const char* op, std::string_view what,
                        std::size_t offset = 0);
  // Synchronizes the stream, then copies the buffer out.
  std::vector<std::uint8_t> read(const Buffer& buffer);
  // 32-bit pattern over the whole buffer (nbytes % 4 == 0).
  void fill(Buffer& buffer, std::uint32_t value);
  // Device to device, same size.
  void copy(Buffer& dst, const Buffer& src);
  // The same, where either may be another library's tensor (runtime/foreign_memory.hpp):
  // a view of a buffer of this device is that buffer; foreign memory is held until the
  // stream's next fence, or by the graph when recorded.
  void fill(const MemoryRef& dst, std::uint32_t value);
  void copy(const MemoryRef& dst, const MemoryRef& src);
  void launch(const Kernel& kernel, driver::Dim3 grid, driver::Dim3 block, const LaunchArg* args,
              std::size_t count, const InfoWords* info);
  void sync();
  // One slice of a bounded sync: polls the driver until the stream is idle or `slice` has
  // passed, holding the stream's lock only for each poll (so other threads queue meanwhile, and
  // their work is waited for too) and never waiting for it (a poll that finds another thread
  // holding it, blocked in a sync say, finds the stream busy). True once idle: then exactly
  // what sync() does on success has happened (what the stream's fence held is released, a
  // queued failure surfaces). False if still busy; nothing changed. The caller loops, checking
  // its deadline and interrupts between slices. Refused where sync() is, with the same errors.
  bool sync_for(std::chrono::nanoseconds slice);

  // Profiling (see Profile): a start event recorded now, an end event recorded at stop, waited
  // on, and the time between them. A profile measures outside a recording only: a recording of
  // this stream, software or hardware, refuses its start, and its stop while the stream records
  // (the driver would refuse the wait and invalidate the capture), with nothing changed: the
  // recording goes on, and a refused stop can be made again once it has ended. A driver failure
  // destroys the events and leaves the stream usable.
  struct ProfileEvents {
    driver::EventHandle start{};
    driver::EventHandle end{};
    bool live = false;
  };
  ProfileEvents profile_start();
  // Blocks until the end event has run (call it without the GIL); returns milliseconds.
  float profile_stop(ProfileEvents& events);
  // Destroys the events without waiting (the profiled work failed); never fails.
  void profile_abandon(ProfileEvents& events) noexcept;

  // NO_CAPTURE -> PREPARE. Returns what names the capture it prepared: a caller driving one
  // capture through several calls (capture_graph) passes it to the calls below as `cycle`, so
  // that a capture put in its place since (another thread's abort, then its own prepare) is
  // never begun, ended or aborted in its name. Without a cycle they act on whatever is there.
  WindowId graph_prepare(CaptureOwner owner);
  // PREPARE -> CAPTURE. With a cycle no longer this stream's: CaptureStateError, nothing changed.
  void begin_capture(std::optional<WindowId> cycle = std::nullopt);
  // CAPTURE -> NO_CAPTURE, sealing a graph. From a thread other than the capturing one in
  // thread_local / global mode: CaptureStateError, nothing changed. When the driver's end fails
  // and the driver still captures, the window is discarded but the stream stays in CAPTURE
  // (driver_capturing()); the capturing thread's next end_capture or abort_capture ends it.
  // With a cycle no longer this stream's: CaptureStateError, nothing changed.
  std::shared_ptr<Graph> end_capture(CaptureOwner caller, std::optional<WindowId> cycle = std::nullopt);
  // Back to NO_CAPTURE from anywhere, undoing the window. Refused like end_capture from another
  // thread (CaptureStateError); a DriverError when the driver still captures afterwards (the
  // stream then stays in CAPTURE: call it again); a DeviceLostError after a sticky status.
  // With a cycle no longer this stream's: nothing (that capture already ended).
  void abort_capture(std::optional<WindowId> cycle = std::nullopt);
  // The thread that began this stream's recording (outside relaxed mode) is exiting with it
  // still open: abort_capture from there, its errors dropped (nothing else could end it).
  void end_recording_of_exiting_thread() noexcept override;
  StreamCaptureState capture_state() const;
  // Whether the stream still holds the capture `cycle` (graph_prepare's answer) names.
  bool holds_capture(WindowId cycle) const;
  // Errors this stream ever queued for a later call to raise (never decreases).
  std::uint64_t errors_queued() const;
  // Whether the driver holds a capture on this stream (hardware graphs): true from a successful
  // begin until the driver's capture is known to be ended.
  bool driver_capturing() const;
  // A failure raised while the driver still captured (cause driver_still_capturing, "the
  // stream stays in CAPTURE"), said again for a caller whose abort after it then ended that
  // capture (capture()): cause driver, and the stream in NO_CAPTURE, as end_capture says when
  // its own retry ends it. Any other failure: itself.
  static Error after_capture_ended(const Error& failure, const char* by);
  // The thread that began the recording ("" outside CAPTURE), as the standard library prints it.
  std::string capture_thread() const;

  // For Graph and Buffer.
  void replay(Graph& graph);
  // `settle_now`: wait for the stream's queued work and release every drop at once, for memory
  // that goes back to the driver (an arena hold) where no later fence of this stream may come.
  void drop_slice(SliceId slice, bool settle_now = false);
  // Waits for the stream's queued work (for Graph::destroy); skipped while it records on a
  // hardware-graph device (a host sync would abort the capture). A wait a live capture refused
  // (and invalidated) is retried in relaxed mode. False when the wait failed, so work queued on
  // the stream may still run (see release_after_work).
  bool wait_for_graph_work() noexcept;
  // Lets go of `hold` once the work queued on this stream so far has run (at its next fence), or
  // at once when the stream or its device is gone.
  void release_after_work(std::shared_ptr<void> hold) noexcept;
  // Device close: ends any window, waits, releases everything, destroys the driver stream.
  // A non-relaxed driver capture of another thread cannot be ended from here: its window is
  // discarded and the capture is left to that thread's next call on this stream (see
  // Device::abandoned_captures); nothing waits for it.
  void shutdown() noexcept;

  // Zero-copy interop (runtime/buffer_lease.hpp).
  // Synchronizes, then copies the buffer into `dst`, which must hold exactly buffer.nbytes(), on
  // this stream (as read does), and waits for the copy. A wait that fails once the copy was
  // queued may leave the copy still to run: `*pending` (when given) is then set before the error
  // is raised, and the caller must keep `dst` allocated for good.
  void read_into(const Buffer& buffer, void* dst, std::size_t bytes, bool* pending = nullptr);
  // Makes the buffer's memory ready for a consumer: with `consumer_stream` null the stream's
  // work is waited for on the host; otherwise that native stream waits on an event recorded
  // here. Refused (CaptureStateError) while this stream has a window prepared or recording, and
  // the host wait while a recording elsewhere forbids it (check_not_recording_elsewhere).
  // `no_order` (DLPack's -1: the consumer orders its own work, and the producer must not
  // synchronize): checked the same way, and nothing waits.
  void lend(const Buffer& buffer, const std::uintptr_t* consumer_stream, bool no_order = false,
            const char* op = "view");
  // The rule of lend without its wait, for an export that hands its consumer this stream to
  // order on instead (the CUDA array interface): ClosedError when the buffer or the stream
  // cannot be used, CaptureStateError while this stream has a window prepared or recording.
  void check_lendable(const Buffer& buffer, const char* op);
  // Right after a DLPack export that was handed this stream to order (DLPack's stream=),
  // whatever the call does next with the tensor: CaptureStateError naming `op`, nothing
  // issued, when the producer's ordering made this stream join a capture of the producer's
  // own (torch inside torch.cuda.graph); the stream then refuses every call until that
  // capture ends. Checked at the export, not in the operation, so a call that fails on its
  // arguments afterwards still leaves the stream refusing.
  void check_not_joined_by_producer(const char* op);
  // Before a DLPack export handed this stream, when the producer (`library`, e.g. CuPy) is
  // known to order it after the library's current stream `producer_current`: CaptureStateError
  // naming `op` and `argument`, nothing issued, while that stream is being captured, so the
  // export never joins this stream to the library's capture (which could then not end).
  // Nothing to ask when that stream is this one (the export then orders nothing).
  void check_producer_stream_before_export(std::uintptr_t producer_current, const char* op,
                                           std::string_view argument, std::string_view library);

 private:
  // The driver captures this stream's work (a driver-capture window is recording).
  bool driver_captures() const { return state_.is_recording() && recorder_->in_driver(); }
  // The runtime keeps this stream's work (an op-list window is recording): nothing reaches the driver.
  bool runtime_records() const { return state_.is_recording() && !recorder_->in_driver(); }
  // Host work named `op` inside a window whose recorder cannot hold it: raised at once, or
  // (`lazily`) queued for end_capture to refuse, which returns true (nothing to issue).
  void check_host_work(const char* op) const;
  bool refuse_host_work_lazily(const char* op);
  WindowId active_window() const { return state_.is_active() ? window_ : 0; }
  // ClosedError / DeviceLostError naming `op`. On the capturing thread of a capture that
  // close() left behind, it first ends that capture and destroys the driver stream.
  // CaptureStateError while a tensor's producer has this stream joined to its capture.
  void check_usable(const char* op);
  // write() past check_usable, under the caller's hold of the stream.
  void write_locked(Buffer& buffer, const void* data, std::size_t bytes, const char* op = "write",
                    std::size_t offset = 0);
  // sync()'s refusals, checked before any wait (sync and sync_for alike).
  void check_syncable();
  // The refusals of a host wait `op` on this stream (sync, read, read_into, a profile's stop),
  // nothing changed; `does` says why a recording elsewhere forbids it:
  // a software window cannot hold it (check_host_work); while the stream records into a driver
  // graph the driver would refuse the wait and invalidate the capture (CUDA and HIP alike), so
  // it never reaches the driver and the recording goes on; and a recording elsewhere may
  // forbid it (check_not_recording_elsewhere).
  void check_host_wait(const char* op, std::string_view does = "synchronizes this stream") const;
  // A host wait for `op` (sync, read, read_into, a view) and what follows it on success: what
  // the fence held is released, and the first queued failure surfaces, named for `op`.
  void finish_host_wait(const char* op);
  // read / read_into after their host wait: `bytes` at `ptr` copied to `dst` on this stream,
  // then waited for. Returns the wait's status; after a failed wait the copy may still run, so
  // `dst` must outlive it. A refused copy (nothing queued) raises.
  driver::Status copy_to_host_locked(void* dst, driver::DevicePtr ptr, std::size_t bytes);
  // Whether the driver says this stream is being captured (a DriverError when it cannot say).
  bool captured_by_driver();
  // CaptureStateError naming both threads when the calling thread may not end or abort the
  // recording (thread_local / global mode, another thread began it).
  void check_capture_thread(const char* op) const;
  // Whether `cycle` (graph_prepare's answer) names the capture this stream holds; no cycle: yes.
  bool holds_cycle(std::optional<WindowId> cycle) const noexcept;
  // CaptureStateError, nothing changed, unless it does.
  void require_cycle(const char* op, std::optional<WindowId> cycle) const;
  // CaptureStateError, nothing changed, when a recording on another stream forbids the calling
  // thread `op`, which `does` what the driver forbids while it records (runtime/capture_registry.hpp).
  void check_not_recording_elsewhere(const char* op, std::string_view does) const;
  // Whether such a recording exists (true when that cannot be told).
  bool recording_elsewhere() const noexcept;
  // driver::check / throw_status that first records a sticky status as the device being lost.
  void check_status(const driver::Status& status);
  [[noreturn]] void throw_driver(const driver::Status& status);
  // Ends the driver capture of a window already discarded; throws (state untouched) when the
  // driver still captures, else the stream is back in NO_CAPTURE.
  void end_discarded_capture(const char* op, ErrorKind still_capturing);
  // The capture close() left to this thread: end it, destroy the driver stream.
  void end_capture_left_by_close() noexcept;
  [[noreturn]] void raise_still_capturing(const char* op, const driver::Status& status, ErrorKind kind);
  // A failed asynchronous call: queued, tagged with the window (if any).
  void queue_failure(const driver::Status& status);
  void queue_error(Error error);
  // After issuing an operation: flush the drop queue every so often, unless recording on a
  // hardware-graph device, where a fence would be captured (flushes wait for end_capture).
  void after_issue();
  void flush_fenced();
  // Releases what the drop queue holds behind fences that completed; never waits.
  void collect_fenced();
  // stream_synchronize; on success everything the drop queue holds is released. The host waits
  // a user asks for (sync, a bounded sync's polls, read, read_into, a view without a consumer
  // stream), and those of a graph's destroy and of a stream's end, run it in relaxed capture
  // mode: the driver does not capture their stream
  // (check_host_work), so its global-mode rule would only let them invalidate a capture
  // recording elsewhere, another library's or one of lifecore's begun on another thread after
  // their check. Where the driver cannot switch modes they wait in the thread's own.
  driver::Status synchronize_and_release();
  // An operation about to be issued uses this memory: an active window touches it, and memory
  // another stream allocated (`owner`; null: not known) is pinned until this stream's fence.
  void touch(const Buffer& buffer);
  void touch(SliceId slice, const Stream* owner);
  std::shared_ptr<Buffer> alloc_locked(std::size_t nbytes, bool memory_nodes, const char* op);
  void drop_slice_locked(SliceId slice) noexcept;  // drop_slice with the stream's lock held
  // After a driver allocation refused for want of memory, outside any capture: waits for the
  // work this stream queued (what it dropped is released then, not at a later fence) and
  // hands the pool's free slices back to the driver, so the allocation can be asked once more.
  // Under the stream's lock: the caller must not hold an embedding lock (Stream.alloc's
  // binding lets the interpreter's go first).
  void reclaim_for_allocation();
  // Foreign memory an operation just used: held until the next fence, or by the window (and
  // then its graph) while recording.
  void keep_hold(std::shared_ptr<void> hold);
  // An info buffer the cache let go, freed in this stream's order (after the work queued on it).
  void free_info_after_work(driver::DevicePtr ptr);
  // Makes this stream wait, on the device, for the work queued so far on each native stream
  // in `producers` (foreign tensors' producer streams; duplicates allowed): an event recorded
  // there, waited for here, destroyed at once (a pending wait outlives it). This stream's own
  // native stream needs nothing. While recording nothing waits: the recorded work runs at
  // replay, not now, and a wait would itself be recorded, joining another stream's work to
  // the graph. A producer stream another library is capturing is refused first
  // (CaptureStateError naming `op` and the argument, nothing issued): the wait would make
  // this stream join that capture. A DriverError leaves only the waits issued before it.
  void wait_for_producers(std::vector<ProducerStream>& producers, const char* op);
  // CaptureStateError when the native stream `native` (a foreign tensor's producer, or a
  // view's consumer) is being captured into a graph: `why` says what the call would do to it.
  void check_native_not_capturing(std::uintptr_t native, const char* op, const std::string& whose,
                                  std::string_view why);
  // A new info-cache entry's buffer. Outside a hardware recording it returns only once the
  // words are on the device, because the cache hands the buffer to every stream at once.
  driver::DevicePtr upload_info(const InfoWords& words);
  // Blocks until the work issued so far on this stream (the upload's copy) has run.
  driver::Status wait_for_upload();
  void keep_staging(Staging staging);
  void destroy_events(ProfileEvents& events) noexcept;
  // The failure path of a window: disarm the pools, discard the pins and the recording, then
  // run the flushes deferred while recording (discard_window alone skips that: a fence on a
  // stream the driver still captures would be captured).
  void undo_window() noexcept;
  void discard_window() noexcept;
  // The recording is over without a graph, its driver capture ended or beyond ending (the
  // device closed or lost): the window is discarded (`discard`; a closed device took its memory
  // back, and a window already discarded has nothing left) and the stream is out of capture.
  void forget_recording(bool discard) noexcept;
  // As the stream goes with a capture shutdown() left to its thread (left_by_close_, another
  // thread dropping the last reference): what ends it goes to that thread's registry entry.
  void leave_capture_to_its_thread() noexcept;
  void check_lendable_locked(const Buffer& buffer, const char* op);
  // Discards the window while the driver still captures (window_discarded_). Work issued until
  // that capture ends is recorded into it, so it runs under a window id of its own (never armed
  // in the pools): the info pins it takes and the errors it queues go when the capture ends.
  void discard_window_still_capturing() noexcept;
  [[noreturn]] void refuse(const std::string& message, const std::string& cause,
                           const driver::Status* status = nullptr);

  std::shared_ptr<Device> device_;
  driver::Driver& driver_;
  driver::StreamHandle handle_;
  std::unique_ptr<Recorder> recorder_;  // never null; moved out only as the stream goes (leave_capture_to_its_thread)
  const std::shared_ptr<const void> capture_domain_;  // the driver's (Driver::capture_domain())

  // The stream's lock held: as it is let go, the status below is republished (stream.cpp).
  class Locked;
  // What the status properties (capture_state, driver_capturing, capture_thread) read. They
  // take only status_mutex_, held for a copy and never across a driver call, so a monitoring
  // thread never waits behind a sync or a read that holds the stream's lock for as long as the
  // device takes. Written under both locks as each holder of mutex_ lets it go, so it is the
  // stream as the last call left it.
  struct Status {
    StreamCaptureState state;
    bool driver_capturing = false;
    std::uint64_t thread = 0;  // capture_thread_ while recording, else 0
    std::string thread_text;
    WindowId prepared_window = 0;
  };
  void publish_status() const noexcept;

  mutable std::mutex mutex_;
  mutable std::mutex status_mutex_;
  mutable Status status_;
  bool dead_ = false;
  PublishedCaptureState state_;  // its mark is what the capture registry checks entries against
  // Who began the recording (meaningful while recording): a thread_token(), which no later
  // thread reuses (an OS thread id is, once its thread exits), and the OS id for messages.
  std::uint64_t capture_thread_ = 0;
  std::string capture_thread_text_;
  // Driver allocations made inside this window's software recording (a buffer the pool had no
  // free slice for, an info-cache upload): with a driver's graphs each would be a memory node,
  // which end_capture refuses.
  std::size_t window_allocations_ = 0;
  bool window_discarded_ = false;     // the driver still captures a window already discarded (ending it is all that is left)
  bool left_by_close_ = false;        // close() left that capture to capture_thread_
  // A tensor's producer made this stream join a capture of its own (see
  // check_not_joined_by_producer): every call is refused until the driver says that capture
  // has ended.
  bool joined_by_producer_ = false;
  WindowId window_ = 0;
  // The window graph_prepare opened last: with state_ active, the capture the stream holds
  // (window_ changes when a window is discarded while the driver still captures; this does not).
  WindowId prepared_window_ = 0;
  // Buffers whose memory is a memory node of the open recording: they dangle if it is discarded.
  std::vector<std::weak_ptr<Buffer>> window_node_buffers_;
  // Foreign memory the open recording uses: the graph holds it for its life.
  std::vector<std::shared_ptr<void>> window_holds_;
  DropQueue drop_;
  StreamErrors errors_;
  std::size_t issued_since_flush_ = 0;
  std::vector<driver::KernelArg> launch_args_;
  // Slices of live Buffers lent to another library's allocator (alloc_lent): touched by every recording.
  std::set<SliceId> lent_slices_;
};

}  // namespace lifecore::runtime
