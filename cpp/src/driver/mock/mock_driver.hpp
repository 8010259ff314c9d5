// The mock backend: an emulated hardware-graph device on host memory, a faithful model of a
// CUDA-like driver (see docs/backends.md, "The driver floor"). Each stream runs its work on
// its own worker thread; captures follow CUDA's mode rules and record graphs that launches
// replay; every operation first passes a fault-injection gate.
//
// Status::call is "mock" + the operation in CamelCase ("mockStreamSynchronize"); codes and
// names are CUDA's. An asynchronous error (a kernel or async copy touching memory outside a
// live allocation: 700) is kept per stream and returned, then cleared, by stream_synchronize.
//
// Capture rules. Potentially unsafe calls: stream/event synchronize and query, synchronous
// copies and memsets, mem_alloc and mem_free. Such a call from thread T conflicts with a live
// capture C when C is on the stream the call acts on (necessarily illegal, in every mode), or
// C is global and T's mode is not relaxed, or C is thread_local, began on T, and T's mode is
// not relaxed. It then fails with 900 and invalidates every capture it conflicts with; work
// enqueued on an invalidated stream fails with 901, and ending it returns a null graph and 901.
// Querying / synchronizing an event last recorded in a live capture fails with 907 (without
// invalidating anything). A record inside a capture makes no graph node (CUDA's plain record):
// replays never record the event. A wait, on a stream that is not capturing, for an event last
// recorded in a live capture is refused (not_supported): in CUDA it would fork that capture
// onto the waiting stream. Ending a global or thread_local capture from another thread fails
// with 908 and leaves it open; an injected 901 at the end ends it (null graph), any other
// injected end failure leaves it open. A sticky status (CUDA's: 226, 700, 702, 710, 714-719, 721, 810, 911),
// injected or asynchronous, loses the device: every later call fails with that status.
// Beginning on a capturing stream, or ending on one that is not capturing, fails with 401
// (CUDA_ERROR_ILLEGAL_STATE). An exec update the rules refuse succeeds with the reason in
// *result, as the backends report CUDA's CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE (an answer, not
// a failed call).
//
// Capture bookkeeping (live captures, each thread's capture mode) is per MockDriver instance:
// a capture on one mock device never conflicts with calls on another. Mock-only knobs are the
// public methods below; reach them with MockDriver::from(driver).
//
// Not modelled: launching a graph into a capture (child-graph node: not_supported), kernels'
// y and z dimensions (threads = grid.x * block.x), a capture forked onto another stream (a
// wait on a capturing stream, or for an event of a live capture, is refused: not_supported;
// every other stream_wait_event is an eager wait). stream_query reports not_ready / success only; the
// asynchronous error waits for stream_synchronize. Destroying a capturing stream discards
// its capture.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "lifecore/driver/driver.hpp"
#include "driver/mock/mock_status.hpp"
#include "driver/mock/mock_address_space.hpp"
#include "driver/mock/mock_fault_gate.hpp"
#include "driver/mock/mock_stream_worker.hpp"
#include "driver/mock/mock_work.hpp"
#include "driver/registered_backends.hpp"

namespace lifecore::driver {

class MockDriver final : public Driver {
 public:
  static constexpr int device_count = 2;
  static constexpr int version = 12080;
  static constexpr std::size_t default_memory_limit = std::size_t{8} << 30;
  static constexpr const char* device_label = "lifecore mock device";

  // A fresh, independent device; `ordinal` must be in [0, device_count).
  explicit MockDriver(int ordinal);
  ~MockDriver() override;  // joins every stream's worker
  MockDriver(const MockDriver&) = delete;
  MockDriver& operator=(const MockDriver&) = delete;

  // The MockDriver behind `driver`, or nullptr when it is another backend.
  static MockDriver* from(Driver* driver);
  // Its capture bookkeeping is its own (see above): captures on another mock device never
  // conflict, and they go with this driver (so does its token).
  std::shared_ptr<const void> capture_domain() const override { return capture_domain_; }

  // How many mock devices the calling thread holds a capture mode other than global for (for
  // tests: a device's mode, set and restored, leaves nothing behind).
  static std::size_t thread_capture_modes_kept();

  // Mock-only knobs.
  // The device memory size mem_info reports and mem_alloc enforces (out_of_memory beyond it).
  void set_memory_limit(std::size_t bytes);
  std::size_t memory_in_use() const;
  std::size_t live_allocations() const;
  // Streams, events, modules and executable graphs made and not yet destroyed or unloaded (a
  // close must leave none).
  std::size_t live_streams() const;
  std::size_t live_events() const;
  std::size_t live_modules() const;
  std::size_t live_graph_execs() const;
  // Holds every stream's worker before its next item until resume_streams(): work stays
  // pending (stream_query -> not_ready) without timing tricks. Anything that waits for the
  // device (sync, synchronous copy, mem_free, stream/exec destroy) blocks until resumed.
  void pause_streams();
  void resume_streams();

  // Driver
  const BackendDescriptor& backend() const override;
  int ordinal() const override { return ordinal_; }
  bool hardware_graphs() const override { return true; }
  bool builtin_kernels_available(std::string* reason) const override;
  FaultInjection* fault_injection() override { return &faults_; }

  Status device_name(std::string* out) override;
  Status driver_version(int* out) override;
  Status mem_info(std::size_t* free_bytes, std::size_t* total_bytes) override;

  Status stream_create(StreamHandle* out) override;
  Status stream_destroy(StreamHandle stream) override;
  Status stream_synchronize(StreamHandle stream) override;
  Status stream_query(StreamHandle stream) override;
  std::uintptr_t stream_native_handle(StreamHandle stream) override;

  Status event_create(EventHandle* out, EventTiming timing) override;
  Status event_destroy(EventHandle event) override;
  Status event_record(EventHandle event, StreamHandle stream) override;
  Status event_synchronize(EventHandle event) override;
  Status event_query(EventHandle event) override;
  Status event_elapsed(EventHandle start, EventHandle end, float* milliseconds) override;

  Status mem_alloc(std::size_t bytes, DevicePtr* out) override;
  Status mem_free(DevicePtr ptr) override;
  Status mem_alloc_async(std::size_t bytes, StreamHandle stream, DevicePtr* out) override;
  Status mem_free_async(DevicePtr ptr, StreamHandle stream) override;
  Status memcpy_htod(DevicePtr dst, const void* src, std::size_t bytes) override;
  Status memcpy_dtoh(void* dst, DevicePtr src, std::size_t bytes) override;
  Status memcpy_dtod(DevicePtr dst, DevicePtr src, std::size_t bytes) override;
  Status memcpy_htod_async(DevicePtr dst, const void* src, std::size_t bytes, StreamHandle stream) override;
  Status memcpy_dtoh_async(void* dst, DevicePtr src, std::size_t bytes, StreamHandle stream) override;
  Status memcpy_dtod_async(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle stream) override;
  Status memset_d32(DevicePtr dst, std::uint32_t value, std::size_t count) override;
  Status memset_d32_async(DevicePtr dst, std::uint32_t value, std::size_t count, StreamHandle stream) override;

  Status module_load(const ModuleImage& image, ModuleHandle* out) override;
  Status module_unload(ModuleHandle module) override;
  Status module_get_function(ModuleHandle module, const std::string& name, FunctionHandle* out) override;
  Status function_param_sizes(FunctionHandle function, std::vector<std::size_t>* out) override;
  Status launch_kernel(FunctionHandle function, Dim3 grid, Dim3 block, std::uint32_t shared_bytes,
                       StreamHandle stream, const std::vector<KernelArg>& args) override;

  Status stream_begin_capture(StreamHandle stream, CaptureMode mode) override;
  Status stream_end_capture(StreamHandle stream, GraphHandle* out) override;
  Status stream_capture_info(StreamHandle stream, CaptureStatus* status, std::uint64_t* capture_id) override;
  Status thread_exchange_capture_mode(CaptureMode* mode) override;

  Status graph_node_counts(GraphHandle graph, GraphNodeCounts* out) override;
  Status graph_instantiate(GraphHandle graph, GraphExecHandle* out) override;
  Status graph_upload(GraphExecHandle exec, StreamHandle stream) override;
  Status graph_launch(GraphExecHandle exec, StreamHandle stream) override;
  Status graph_exec_update(GraphExecHandle exec, GraphHandle graph, GraphUpdateResult* result) override;
  Status graph_destroy(GraphHandle graph) override;
  Status graph_exec_destroy(GraphExecHandle exec) override;

  // The mock's native stream pointer is its own stream id, so only its streams can wait.
  Status stream_wait_event(std::uintptr_t native_stream, EventHandle event) override;
  // The device memory is host memory: the view holds the allocation's storage.
  Status host_view(DevicePtr ptr, std::size_t bytes, HostView* out) override;
  Status map_host(void* host, std::size_t bytes, DevicePtr* out) override;
  Status unmap_host(DevicePtr ptr) override;
  // Records on one of the mock's streams by its native handle (its id), as event_record does.
  Status event_record_native(EventHandle event, std::uintptr_t native_stream) override;
  Status stream_capture_status_native(std::uintptr_t native_stream, CaptureStatus* status) override;
  // This device's ordinal for an address inside one of its live allocations or mappings.
  Status pointer_device(DevicePtr ptr, int* ordinal) override;

 private:
  struct Capture;
  struct Stream;
  struct Module;
  struct Function;
  struct Exec;

  // Where a stream's next piece of work goes: into its live capture, or onto its queue.
  enum class Route { queue, capture };

  // Unique in the process, as CUDA's stream and event pointers are: a stream's native handle
  // names it among every device's (the pooled allocator routes by it).
  static std::uintptr_t new_handle() {
    static std::atomic<std::uintptr_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }
  std::shared_ptr<Stream> find_stream_locked(StreamHandle stream) const;
  Status route_locked(Operation op, StreamHandle handle, Stream** stream, Route* route);
  // event_record's work, shared with event_record_native (which names the stream natively).
  Status record(Operation op, EventHandle event, StreamHandle stream);
  Status submit(Operation op, StreamHandle stream, mock::WorkNode node);
  // launch_kernel's submit: the arguments are copied once, into the capture or the queue.
  Status submit_launch(StreamHandle stream, const mock::KernelNode& kernel, const std::vector<KernelArg>& args);
  Status check_unsafe_call_locked(Operation op, const Stream* target);
  bool capture_live_locked(std::uint64_t capture_id) const;
  Status check_captured_event_locked(Operation op, const mock::EventState& event) const;
  Status check_unsafe_call(Operation op);
  // The stream / event a host call waits on or polls, once the capture rules allow the call.
  Status stream_for_host_wait(Operation op, StreamHandle handle, std::shared_ptr<Stream>* out);
  Status event_for_host_wait(Operation op, EventHandle handle, std::shared_ptr<mock::EventState>* out);
  Status allocate_now(Operation op, std::size_t bytes, DevicePtr* out);
  void wait_device_idle();
  Status run_synchronous(Operation op, mock::WorkNode node);
  // Every operation passes here first: a lost device fails it with its sticky status, else the
  // fault gate counts it and may fail it (an injected sticky status loses the device).
  Status gate(Operation op);
  Status lost_status(Operation op) const;
  void note_status(const Status& status);

  const int ordinal_;
  const std::uint64_t uid_;  // keys this instance's per-thread capture modes
  const std::shared_ptr<const void> capture_domain_ = std::make_shared<const int>(0);
  mock::FaultGate faults_;
  mock::WorkerGate worker_gate_;
  std::shared_ptr<mock::AddressSpace> memory_;  // shared: a graph gives back its memory nodes' addresses
  std::atomic<int> lost_code_{0};  // the sticky status that lost the device; 0 while usable
  mutable std::mutex lost_mutex_;  // orders the two below
  std::string lost_by_;            // that first failure: its call and message

  mutable std::mutex mutex_;  // the tables below and all capture state
  std::unordered_map<std::uintptr_t, std::shared_ptr<Stream>> streams_;
  std::unordered_map<std::uintptr_t, std::shared_ptr<mock::EventState>> events_;
  std::unordered_map<std::uintptr_t, std::shared_ptr<Module>> modules_;
  std::unordered_map<std::uintptr_t, std::shared_ptr<Function>> functions_;
  std::unordered_map<std::uintptr_t, std::shared_ptr<mock::GraphData>> graphs_;
  std::unordered_map<std::uintptr_t, std::shared_ptr<Exec>> execs_;
};

}  // namespace lifecore::driver
