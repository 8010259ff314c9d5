// A device stream and its graph-capture lifecycle. The ordering rule is StreamCaptureState's;
// this class supplies the work each transition brackets, in the order that keeps every failure
// path safe (see graph_prepare / begin_capture / end_capture), plus the per-stream drop queue
// and error queue. One mutex serialises the stream's operations; blocking driver calls
// (synchronize) happen under it but never under a device-wide lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "lifecore/stream_capture_state.hpp"
#include "runtime/drop_queue.hpp"
#include "runtime/graph.hpp"
#include "runtime/info_cache.hpp"
#include "runtime/kernel.hpp"
#include "runtime/memory_manager.hpp"
#include "runtime/stream_errors.hpp"
#include "vendor/driver.hpp"

namespace lifecore::runtime {

class Buffer;
class Device;

class Stream : public std::enable_shared_from_this<Stream> {
 public:
  Stream(std::shared_ptr<Device> device, vendor::StreamHandle handle);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  const std::shared_ptr<Device>& device() const noexcept { return device_; }
  std::uintptr_t native_handle() const;

  // nbytes in 1 .. the device's total memory, else InvalidArgumentError.
  std::shared_ptr<Buffer> alloc(std::int64_t nbytes);
  // Asynchronous: `data` is copied to staging host memory first. 0 < bytes <= buffer.nbytes.
  void write(Buffer& buffer, const void* data, std::size_t bytes);
  // Synchronizes the stream, then copies the buffer out.
  std::vector<std::uint8_t> read(const Buffer& buffer);
  // 32-bit pattern over the whole buffer (nbytes % 4 == 0).
  void fill(Buffer& buffer, std::uint32_t value);
  // Device to device, same size.
  void copy(Buffer& dst, const Buffer& src);
  void launch(const Kernel& kernel, vendor::Dim3 grid, vendor::Dim3 block, const LaunchArg* args,
              std::size_t count, const InfoWords* info);
  void sync();

  // Profiling (see Profile): a start event recorded now, an end event recorded at stop, waited
  // on, and the time between them. A software recording refuses it on the spot; inside a
  // hardware recording the wait goes to the driver, which refuses it, and the recording is
  // then refused too. A failure destroys the events and leaves the stream usable.
  struct ProfileEvents {
    vendor::EventHandle start{};
    vendor::EventHandle end{};
    WindowId recorded_in = 0;  // the hardware recording the start event went into (0: none)
    bool live = false;
  };
  ProfileEvents profile_start();
  // Blocks until the end event has run (call it without the GIL); returns milliseconds.
  float profile_stop(ProfileEvents& events);
  // Destroys the events without waiting (the profiled work failed); never fails.
  void profile_abandon(ProfileEvents& events) noexcept;

  void graph_prepare(CaptureOwner owner);
  void begin_capture();
  std::shared_ptr<Graph> end_capture(CaptureOwner caller);
  // Back to NO_CAPTURE from anywhere, undoing the window; never fails.
  void abort_capture() noexcept;
  StreamCaptureState capture_state() const;

  // For Graph and Buffer.
  void replay(Graph& graph);
  void drop_slice(SliceId slice);
  // Waits for the stream's queued work (for Graph::destroy); skipped while it records on a
  // hardware-graph device (a host sync would abort the capture).
  void wait_for_graph_work() noexcept;
  // Device close: ends any window, waits, releases everything, destroys the driver stream.
  void shutdown() noexcept;

 private:
  bool hardware_recording() const { return hardware_ && state_.is_recording(); }
  bool software_recording() const { return !hardware_ && state_.is_recording(); }
  WindowId active_window() const { return state_.is_active() ? window_ : 0; }
  void check_usable(const char* op) const;
  // A failed asynchronous call: queued, tagged with the window (if any).
  void queue_failure(const vendor::Status& status);
  void queue_error(Error error);
  // After issuing an operation: flush the drop queue every so often, unless recording on a
  // hardware-graph device, where a fence would be captured (flushes wait for end_capture).
  void after_issue();
  void flush_fenced();
  // stream_synchronize; on success everything the drop queue holds is released.
  vendor::Status synchronize_and_release();
  void touch(const Buffer& buffer);
  // A new info-cache entry's buffer. Outside a hardware recording it returns only once the
  // words are on the device, because the cache hands the buffer to every stream at once.
  vendor::DevicePtr upload_info(const InfoWords& words);
  // Blocks until the work issued so far on this stream (the upload's copy) has run.
  vendor::Status wait_for_upload();
  void keep_staging(std::shared_ptr<const std::vector<std::uint8_t>> staging);
  void destroy_events(ProfileEvents& events) noexcept;
  // Ends the driver's capture, retrying once when a failed end left it open.
  vendor::Status end_driver_capture(vendor::GraphHandle* graph);
  // The failure path of a window: disarm the pools, discard the pins and the recording.
  void undo_window() noexcept;
  [[noreturn]] void refuse(vendor::GraphHandle raw, const std::string& message, const std::string& cause,
                           const vendor::Status* status = nullptr);

  std::shared_ptr<Device> device_;
  vendor::Driver& driver_;
  vendor::StreamHandle handle_;
  const bool hardware_;

  mutable std::mutex mutex_;
  bool dead_ = false;
  StreamCaptureState state_;
  WindowId window_ = 0;
  std::vector<SoftwareOp> recording_;
  std::vector<std::shared_ptr<const std::vector<std::uint8_t>>> window_staging_;
  // Buffers whose memory is a memory node of the open recording: they dangle if it is discarded.
  std::vector<std::weak_ptr<Buffer>> window_node_buffers_;
  DropQueue drop_;
  StreamErrors errors_;
  std::size_t issued_since_flush_ = 0;
  std::vector<vendor::KernelArg> launch_args_;
};

}  // namespace lifecore::runtime
