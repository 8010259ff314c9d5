#include "driver/mock/mock_driver.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <optional>
#include <sstream>
#include <utility>

#include "lifecore/thread_token.hpp"

namespace lifecore::driver {
namespace {

using mock::mock_call_name;
using mock::mock_native_status;
using mock::mock_status;

constexpr std::uint32_t max_block_threads = 1024;
constexpr std::uint32_t max_shared_bytes = 48 * 1024;

// Capture ids are unique in the process, as cuStreamGetCaptureInfo's are.
std::atomic<std::uint64_t> next_capture_id{1};
std::atomic<std::uint64_t> next_driver_uid{1};

// The calling thread's capture modes for the driver instances it changed one of (CUDA keeps one
// per thread; the mock keeps one per thread and per device, see mock_driver.hpp). Only modes
// other than the default, global, are kept: a thread that opens device after device (each a
// new instance) and restores each mode it set keeps nothing.
std::unordered_map<std::uint64_t, CaptureMode>& thread_capture_modes() {
  thread_local std::unordered_map<std::uint64_t, CaptureMode> modes;
  return modes;
}

CaptureMode thread_capture_mode(std::uint64_t driver_uid) {
  const auto& modes = thread_capture_modes();
  auto found = modes.find(driver_uid);
  return found == modes.end() ? CaptureMode::global : found->second;
}

void set_thread_capture_mode(std::uint64_t driver_uid, CaptureMode mode) {
  if (mode == CaptureMode::global) thread_capture_modes().erase(driver_uid);
  else thread_capture_modes()[driver_uid] = mode;
}

bool valid_mode(CaptureMode mode) {
  const int value = static_cast<int>(mode);
  return value >= 0 && value <= 2;
}

std::string hex(std::uint64_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << value;
  return out.str();
}

std::string dim_text(Dim3 d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

template <class Handle>
std::uintptr_t raw(Handle handle) {
  return static_cast<std::uintptr_t>(handle);
}

// Every message starts with the neutral operation name; Status::call carries the mock's.
Status fail(Operation op, Code code, const std::string& message) {
  return mock_status(code, mock_call_name(op), std::string(operation_name(op)) + ": " + message);
}

Status bad_handle(Operation op, const char* what, std::uintptr_t handle) {
  return fail(op, Code::invalid_handle, "unknown or destroyed " + std::string(what) + " handle " + std::to_string(handle));
}

Status bad_value(Operation op, const std::string& message) { return fail(op, Code::invalid_value, message); }

Status not_live(Operation op, DevicePtr ptr) {
  return bad_value(op, hex(ptr) + " is not the start of a live allocation (unknown, inside one, or already freed)");
}

std::string signature_text(const BuiltinKernel& kernel) {
  std::string text;
  for (std::size_t i = 0; i < kernel.params.size(); ++i) {
    if (i) text += ", ";
    text += std::string(kernel.param_names[i]) + ": " + arg_kind_name(kernel.params[i]);
  }
  return text;
}

std::string args_text(const std::vector<KernelArg>& args) {
  std::string text;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (i) text += ", ";
    text += arg_kind_name(args[i].kind);
  }
  return text;
}

}  // namespace

#define LIFECORE_MOCK_GATE(op)                                                  \
  if (Status gate_status = gate(Operation::op); !gate_status.ok()) {            \
    return gate_status;                                                         \
  }

const BackendDescriptor& MockDriver::backend() const { return mock_backend(); }

Status MockDriver::lost_status(Operation op) const {
  const int code = lost_code_.load(std::memory_order_acquire);
  if (code == 0) return {};
  std::string first;
  {
    std::lock_guard lock(lost_mutex_);
    first = lost_by_;
  }
  return mock_native_status(code, mock_call_name(op),
                            std::string(operation_name(op)) + ": the device is lost: an earlier call failed with sticky status " +
                                std::to_string(code) + ", and every later call fails with it (as a CUDA context does)" +
                                (first.empty() ? std::string() : "; the first failure: " + first));
}

void MockDriver::note_status(const Status& status) {
  // A sticky status poisons the device, as in CUDA: the first one is what every later call returns.
  if (status.sticky) {
    std::lock_guard lock(lost_mutex_);
    int none = 0;
    if (lost_code_.compare_exchange_strong(none, status.native_code, std::memory_order_acq_rel))
      lost_by_ = status.call + (status.message.empty() ? std::string() : ": " + status.message);
  }
}

Status MockDriver::gate(Operation op) {
  if (Status lost = lost_status(op); !lost.ok()) return lost;
  Status injected = faults_.pass(op);
  note_status(injected);
  return injected;
}

struct MockDriver::Capture {
  std::uint64_t id = 0;
  CaptureMode mode = CaptureMode::global;
  std::uint64_t thread = 0;  // thread_token(): a thread that exits leaves its id to a new one, never its token
  CaptureStatus status = CaptureStatus::active;
  std::string invalidated_by;  // the operation that invalidated it
  std::shared_ptr<mock::GraphData> graph;
};

struct MockDriver::Stream {
  Stream(std::uintptr_t stream_id, mock::WorkerGate* gate, mock::AddressSpace* memory,
         mock::StreamWorker::StickySink on_sticky)
      : id(stream_id), worker(gate, memory, std::move(on_sticky)) {}
  std::uintptr_t id;
  mock::StreamWorker worker;
  std::optional<Capture> capture;  // guarded by MockDriver::mutex_
};

struct MockDriver::Module {
  std::unordered_map<std::string, std::uintptr_t> functions;  // by kernel name
};

struct MockDriver::Function {
  std::uintptr_t module = 0;
  const mock::MockKernel* kernel = nullptr;
};

struct MockDriver::Exec {
  std::shared_ptr<mock::GraphData> source;
  std::shared_ptr<const std::vector<mock::WorkNode>> nodes;  // swapped by exec update; MockDriver::mutex_
  std::vector<DevicePtr> allocations;                        // alloc-node addresses the graph does not free
  std::mutex run_mutex;                                      // one launch of an exec runs at a time
  std::mutex launches_mutex;
  std::condition_variable launches_done;
  std::size_t launches = 0;  // enqueued, not finished

  void launch_enqueued() {
    std::lock_guard lock(launches_mutex);
    ++launches;
  }
  void launch_finished() {
    std::lock_guard lock(launches_mutex);
    if (--launches == 0) launches_done.notify_all();
  }
  void wait_launches() {
    std::unique_lock lock(launches_mutex);
    launches_done.wait(lock, [this] { return launches == 0; });
  }
};

// --- construction ----------------------------------------------------------------------

MockDriver::MockDriver(int ordinal)
    : ordinal_(ordinal),
      uid_(next_driver_uid.fetch_add(1)),
      // Each ordinal's addresses start at its own TiB, so a pointer from another device fails.
      memory_(std::make_shared<mock::AddressSpace>(DevicePtr(ordinal + 1) << 40, default_memory_limit)) {}

MockDriver::~MockDriver() {
  worker_gate_.resume();
  std::vector<std::shared_ptr<Stream>> streams;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, stream] : streams_) streams.push_back(stream);
    streams_.clear();
  }
  for (auto& stream : streams) stream->worker.stop();
}

MockDriver* MockDriver::from(Driver* driver) { return dynamic_cast<MockDriver*>(driver); }

void MockDriver::set_memory_limit(std::size_t bytes) { memory_->set_limit(bytes); }
std::size_t MockDriver::memory_in_use() const { return memory_->in_use(); }
std::size_t MockDriver::live_allocations() const { return memory_->live_allocations(); }
std::size_t MockDriver::live_streams() const {
  std::lock_guard lock(mutex_);
  return streams_.size();
}
std::size_t MockDriver::live_events() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}
std::size_t MockDriver::live_modules() const {
  std::lock_guard lock(mutex_);
  return modules_.size();
}
std::size_t MockDriver::live_graph_execs() const {
  std::lock_guard lock(mutex_);
  return execs_.size();
}
void MockDriver::pause_streams() { worker_gate_.pause(); }
void MockDriver::resume_streams() { worker_gate_.resume(); }

bool MockDriver::builtin_kernels_available(std::string* reason) const {
  if (reason) reason->clear();
  return true;
}

// --- helpers ---------------------------------------------------------------------------

std::shared_ptr<MockDriver::Stream> MockDriver::find_stream_locked(StreamHandle stream) const {
  auto it = streams_.find(raw(stream));
  return it == streams_.end() ? nullptr : it->second;
}

Status MockDriver::route_locked(Operation op, StreamHandle handle, Stream** stream, Route* route) {
  auto it = streams_.find(raw(handle));
  if (it == streams_.end()) return bad_handle(op, "stream", raw(handle));
  Stream* found = it->second.get();
  if (found->capture && found->capture->status == CaptureStatus::invalidated) {
    return fail(op, Code::capture_invalidated,
                "capture " + std::to_string(found->capture->id) + " on stream " + std::to_string(found->id) +
                    " was invalidated by " + found->capture->invalidated_by +
                    "; end it with stream_end_capture before using the stream");
  }
  *stream = found;
  *route = found->capture ? Route::capture : Route::queue;
  return {};
}

Status MockDriver::submit(Operation op, StreamHandle handle, mock::WorkNode node) {
  std::lock_guard lock(mutex_);
  Stream* stream = nullptr;
  Route route{};
  if (Status status = route_locked(op, handle, &stream, &route); !status.ok()) return status;
  if (route == Route::capture) {
    stream->capture->graph->nodes.push_back(std::move(node));
    return {};
  }
  const bool queued = stream->worker.enqueue(std::move(node), &mock_call_name(op));
  return queued ? Status{} : bad_handle(op, "stream", raw(handle));
}

Status MockDriver::submit_launch(StreamHandle handle, const mock::KernelNode& kernel, const std::vector<KernelArg>& args) {
  constexpr Operation op = Operation::launch_kernel;
  std::lock_guard lock(mutex_);
  Stream* stream = nullptr;
  Route route{};
  if (Status status = route_locked(op, handle, &stream, &route); !status.ok()) return status;
  if (route == Route::capture) {
    mock::KernelNode node = kernel;
    node.args = args;
    stream->capture->graph->nodes.push_back(std::move(node));
    return {};
  }
  // Written into the queue's slot in place: an eager launch allocates nothing.
  const bool queued = stream->worker.enqueue_kernel(kernel, args, &mock_call_name(op));
  return queued ? Status{} : bad_handle(op, "stream", raw(handle));
}

// CUDA's rule for a potentially unsafe call from thread T against each live capture C:
// it conflicts when C is the stream the call acts on (necessarily illegal, every mode),
// when C is global and T's mode is not relaxed, or when C is thread_local, began on T, and
// T's mode is not relaxed. Every capture it conflicts with is invalidated; the call fails.
Status MockDriver::check_unsafe_call_locked(Operation op, const Stream* target) {
  const CaptureMode mine = thread_capture_mode(uid_);
  const std::uint64_t me = thread_token();
  std::string conflicts;
  for (auto& [id, stream] : streams_) {
    if (!stream->capture) continue;
    Capture& capture = *stream->capture;
    const bool own_stream = stream.get() == target;
    // CUDA's rule: a non-relaxed thread may not make unsafe calls while it has a non-relaxed
    // capture of its own; a thread in global mode also not while another thread has a global one.
    const bool by_mode = mine != CaptureMode::relaxed &&
                         ((capture.thread == me && capture.mode != CaptureMode::relaxed) ||
                          (capture.thread != me && capture.mode == CaptureMode::global &&
                           mine == CaptureMode::global));
    if (!own_stream && !by_mode) continue;
    if (capture.status == CaptureStatus::active) {
      capture.status = CaptureStatus::invalidated;
      capture.invalidated_by = operation_name(op);
    }
    if (!conflicts.empty()) conflicts += ", ";
    conflicts += "capture " + std::to_string(capture.id) + " (" + capture_mode_name(capture.mode) + ") on stream " +
                 std::to_string(stream->id) + (own_stream ? ", the stream this call acts on" : "");
  }
  if (conflicts.empty()) return {};
  return fail(op, Code::capture_unsupported,
              std::string("not permitted while a stream capture is live (") + conflicts +
                  "; this thread's capture mode is " + capture_mode_name(mine) +
                  "); the capture is invalidated and must be ended");
}

bool MockDriver::capture_live_locked(std::uint64_t capture_id) const {
  for (const auto& [id, stream] : streams_)
    if (stream->capture && stream->capture->id == capture_id) return true;
  return false;
}

Status MockDriver::check_captured_event_locked(Operation op, const mock::EventState& event) const {
  if (event.captured_by == 0 || !capture_live_locked(event.captured_by)) return {};
  return fail(op, Code::captured_event,
              "the event was last recorded in capture " + std::to_string(event.captured_by) +
                  ", which is still live on its stream");
}

Status MockDriver::check_unsafe_call(Operation op) {
  std::lock_guard lock(mutex_);
  return check_unsafe_call_locked(op, nullptr);
}

Status MockDriver::stream_for_host_wait(Operation op, StreamHandle handle, std::shared_ptr<Stream>* out) {
  std::lock_guard lock(mutex_);
  std::shared_ptr<Stream> stream = find_stream_locked(handle);
  if (!stream) return bad_handle(op, "stream", raw(handle));
  if (Status status = check_unsafe_call_locked(op, stream.get()); !status.ok()) return status;
  *out = std::move(stream);
  return {};
}

Status MockDriver::event_for_host_wait(Operation op, EventHandle handle, std::shared_ptr<mock::EventState>* out) {
  std::lock_guard lock(mutex_);
  auto it = events_.find(raw(handle));
  if (it == events_.end()) return bad_handle(op, "event", raw(handle));
  if (Status status = check_unsafe_call_locked(op, nullptr); !status.ok()) return status;
  if (Status status = check_captured_event_locked(op, *it->second); !status.ok()) return status;
  *out = it->second;
  return {};
}

// Allocates at once (mem_alloc, and mem_alloc_async outside a capture).
Status MockDriver::allocate_now(Operation op, std::size_t bytes, DevicePtr* out) {
  if (memory_->allocate(bytes, out)) return {};
  return fail(op, Code::out_of_memory,
              "allocating " + std::to_string(bytes) + " bytes would pass the device's memory (" +
                  std::to_string(memory_->in_use()) + " of " + std::to_string(memory_->limit()) + " bytes in use)");
}

void MockDriver::wait_device_idle() {
  std::vector<std::shared_ptr<Stream>> streams;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, stream] : streams_) streams.push_back(stream);
  }
  for (auto& stream : streams) stream->worker.wait_idle();
}

// Synchronous copies and memsets: legacy default-stream semantics, so they first wait for
// every stream of the device, then run on the calling thread.
Status MockDriver::run_synchronous(Operation op, mock::WorkNode node) {
  {
    std::lock_guard lock(mutex_);
    if (Status status = check_unsafe_call_locked(op, nullptr); !status.ok()) return status;
  }
  wait_device_idle();
  return mock::execute_node(node, mock::ExecContext{*memory_, mock_call_name(op), Code::invalid_value});
}

// --- device ----------------------------------------------------------------------------

Status MockDriver::device_name(std::string* out) {
  LIFECORE_MOCK_GATE(device_name)
  if (!out) return bad_value(Operation::device_name, "the output pointer is null");
  *out = device_label;
  return {};
}

Status MockDriver::driver_version(int* out) {
  LIFECORE_MOCK_GATE(driver_version)
  if (!out) return bad_value(Operation::driver_version, "the output pointer is null");
  *out = version;
  return {};
}

Status MockDriver::mem_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  LIFECORE_MOCK_GATE(mem_info)
  if (!free_bytes || !total_bytes) return bad_value(Operation::mem_info, "an output pointer is null");
  const std::size_t limit = memory_->limit();
  const std::size_t used = memory_->in_use();
  *free_bytes = used < limit ? limit - used : 0;
  *total_bytes = limit;
  return {};
}

// --- streams ---------------------------------------------------------------------------

Status MockDriver::stream_create(StreamHandle* out) {
  LIFECORE_MOCK_GATE(stream_create)
  if (!out) return bad_value(Operation::stream_create, "the output pointer is null");
  const std::uintptr_t id = new_handle();
  // Starts its thread: outside the lock. A kernel fault loses the device when it happens.
  auto stream = std::make_shared<Stream>(id, &worker_gate_, memory_.get(), [this](const Status& fault) { note_status(fault); });
  {
    std::lock_guard lock(mutex_);
    streams_.emplace(id, std::move(stream));
  }
  *out = StreamHandle{id};
  return {};
}

Status MockDriver::stream_destroy(StreamHandle handle) {
  // A lost device still lets its streams go (and their workers finish): nothing runs after them.
  Status gate_status = gate(Operation::stream_destroy);
  if (!gate_status.ok() && lost_code_.load(std::memory_order_acquire) == 0) return gate_status;
  std::shared_ptr<Stream> stream;
  {
    std::lock_guard lock(mutex_);
    auto it = streams_.find(raw(handle));
    if (it == streams_.end()) return bad_handle(Operation::stream_destroy, "stream", raw(handle));
    stream = std::move(it->second);
    streams_.erase(it);  // a capture in flight on it is discarded with it
  }
  stream->worker.stop();
  return gate_status;
}

Status MockDriver::stream_synchronize(StreamHandle handle) {
  constexpr Operation op = Operation::stream_synchronize;
  if (Status lost = lost_status(op); !lost.ok()) {
    // A lost context runs nothing more: once the worker is done with what it holds (the mock's
    // emulation of that), host memory its queued copies read may go.
    std::shared_ptr<Stream> stream;
    {
      std::lock_guard lock(mutex_);
      stream = find_stream_locked(handle);
    }
    if (stream) stream->worker.wait_idle();
    return lost;
  }
  LIFECORE_MOCK_GATE(stream_synchronize)
  std::shared_ptr<Stream> stream;
  if (Status status = stream_for_host_wait(op, handle, &stream); !status.ok()) return status;
  stream->worker.wait_idle();
  Status error = stream->worker.take_error();
  if (error.ok()) return {};
  Status reported =
      mock_native_status(error.native_code, mock_call_name(op), "asynchronous error from " + error.call + ": " + error.message);
  note_status(reported);
  return reported;
}

Status MockDriver::stream_query(StreamHandle handle) {
  LIFECORE_MOCK_GATE(stream_query)
  constexpr Operation op = Operation::stream_query;
  std::shared_ptr<Stream> stream;
  if (Status status = stream_for_host_wait(op, handle, &stream); !status.ok()) return status;
  if (stream->worker.idle()) return {};
  return mock_status(Code::not_ready, mock_call_name(op));
}

std::uintptr_t MockDriver::stream_native_handle(StreamHandle handle) {
  std::lock_guard lock(mutex_);
  return streams_.count(raw(handle)) ? raw(handle) : 0;
}

// --- events ----------------------------------------------------------------------------

Status MockDriver::event_create(EventHandle* out, EventTiming timing) {
  LIFECORE_MOCK_GATE(event_create)
  if (!out) return bad_value(Operation::event_create, "the output pointer is null");
  std::lock_guard lock(mutex_);
  const std::uintptr_t id = new_handle();
  auto state = std::make_shared<mock::EventState>();
  state->timing = timing == EventTiming::enabled;
  events_.emplace(id, std::move(state));
  *out = EventHandle{id};
  return {};
}

Status MockDriver::event_destroy(EventHandle event) {
  LIFECORE_MOCK_GATE(event_destroy)
  std::lock_guard lock(mutex_);
  if (events_.erase(raw(event)) == 0) return bad_handle(Operation::event_destroy, "event", raw(event));
  return {};  // a record still queued keeps the state alive until it runs
}

Status MockDriver::event_record(EventHandle event, StreamHandle handle) {
  LIFECORE_MOCK_GATE(event_record)
  return record(Operation::event_record, event, handle);
}

Status MockDriver::record(Operation op, EventHandle event, StreamHandle handle) {
  std::lock_guard lock(mutex_);
  auto it = events_.find(raw(event));
  if (it == events_.end()) return bad_handle(op, "event", raw(event));
  std::shared_ptr<mock::EventState> state = it->second;
  Stream* stream = nullptr;
  Route route{};
  if (Status status = route_locked(op, handle, &stream, &route); !status.ok()) return status;
  if (route == Route::capture) {
    // As CUDA's plain record: no graph node, only a mark inside the capture (a replay never
    // records the event; querying it while the capture lives is 907).
    state->captured_by = stream->capture->id;
    return {};
  }
  state->captured_by = 0;
  const std::uint64_t generation = state->begin_record();
  const bool queued = stream->worker.enqueue([state, generation]() {
    state->complete(generation);
    return Status{};
  });
  if (!queued) {
    state->complete(generation);
    return bad_handle(op, "stream", raw(handle));
  }
  return {};
}

Status MockDriver::event_synchronize(EventHandle event) {
  LIFECORE_MOCK_GATE(event_synchronize)
  std::shared_ptr<mock::EventState> state;
  if (Status status = event_for_host_wait(Operation::event_synchronize, event, &state); !status.ok()) return status;
  state->wait();
  return {};
}

Status MockDriver::event_query(EventHandle event) {
  LIFECORE_MOCK_GATE(event_query)
  constexpr Operation op = Operation::event_query;
  std::shared_ptr<mock::EventState> state;
  if (Status status = event_for_host_wait(op, event, &state); !status.ok()) return status;
  if (state->done()) return {};
  return mock_status(Code::not_ready, mock_call_name(op));
}

Status MockDriver::event_elapsed(EventHandle start, EventHandle end, float* milliseconds) {
  LIFECORE_MOCK_GATE(event_elapsed)
  constexpr Operation op = Operation::event_elapsed;
  if (!milliseconds) return bad_value(op, "the output pointer is null");
  std::shared_ptr<mock::EventState> first, second;
  {
    std::lock_guard lock(mutex_);
    auto a = events_.find(raw(start));
    if (a == events_.end()) return bad_handle(op, "event", raw(start));
    auto b = events_.find(raw(end));
    if (b == events_.end()) return bad_handle(op, "event", raw(end));
    first = a->second;
    second = b->second;
    if (Status status = check_captured_event_locked(op, *first); !status.ok()) return status;
    if (Status status = check_captured_event_locked(op, *second); !status.ok()) return status;
  }
  if (!first->timing || !second->timing)
    return fail(op, Code::invalid_handle, "both events must have been created with timing");
  if (!first->ever_recorded() || !second->ever_recorded())
    return fail(op, Code::invalid_handle, "both events must have been recorded");
  if (!first->done() || !second->done()) return mock_status(Code::not_ready, mock_call_name(op));
  *milliseconds = std::chrono::duration<float, std::milli>(second->timestamp() - first->timestamp()).count();
  return {};
}

// --- memory ----------------------------------------------------------------------------

Status MockDriver::mem_alloc(std::size_t bytes, DevicePtr* out) {
  LIFECORE_MOCK_GATE(mem_alloc)
  constexpr Operation op = Operation::mem_alloc;
  if (!out) return bad_value(op, "the output pointer is null");
  if (bytes == 0) return bad_value(op, "cannot allocate 0 bytes");
  if (Status status = check_unsafe_call(op); !status.ok()) return status;
  return allocate_now(op, bytes, out);
}

Status MockDriver::mem_free(DevicePtr ptr) {
  LIFECORE_MOCK_GATE(mem_free)
  constexpr Operation op = Operation::mem_free;
  if (Status status = check_unsafe_call(op); !status.ok()) return status;
  wait_device_idle();  // as cuMemFree: work in flight may still use the memory
  if (memory_->free(ptr)) return {};
  return not_live(op, ptr);
}

Status MockDriver::mem_alloc_async(std::size_t bytes, StreamHandle handle, DevicePtr* out) {
  LIFECORE_MOCK_GATE(mem_alloc_async)
  constexpr Operation op = Operation::mem_alloc_async;
  if (!out) return bad_value(op, "the output pointer is null");
  if (bytes == 0) return bad_value(op, "cannot allocate 0 bytes");
  std::lock_guard lock(mutex_);
  Stream* stream = nullptr;
  Route route{};
  if (Status status = route_locked(op, handle, &stream, &route); !status.ok()) return status;
  if (route == Route::capture) {
    if (bytes > memory_->limit())
      return fail(op, Code::out_of_memory,
                  std::to_string(bytes) + " bytes exceed the device's memory (" + std::to_string(memory_->limit()) +
                      " bytes)");
    // A memory-alloc node: the address is fixed now, the memory exists only after a launch.
    const DevicePtr ptr = memory_->reserve(bytes);
    if (ptr == 0) return fail(op, Code::out_of_memory, "the emulated device's address space is used up");
    stream->capture->graph->nodes.push_back(mock::MemAllocNode{ptr, bytes});
    *out = ptr;
    return {};
  }
  // Allocating at once is a valid stream order: the memory exists before any later work.
  return allocate_now(op, bytes, out);
}

Status MockDriver::mem_free_async(DevicePtr ptr, StreamHandle handle) {
  LIFECORE_MOCK_GATE(mem_free_async)
  constexpr Operation op = Operation::mem_free_async;
  {
    std::lock_guard lock(mutex_);
    Stream* stream = nullptr;
    Route route{};
    if (Status status = route_locked(op, handle, &stream, &route); !status.ok()) return status;
    if (route == Route::capture) {
      // A memory-free node; it may free a graph allocation this capture made.
      if (!memory_->is_region_base(ptr)) return bad_value(op, hex(ptr) + " is not the start of an allocation");
      stream->capture->graph->nodes.push_back(mock::MemFreeNode{ptr});
      return {};
    }
    if (!memory_->is_freeable(ptr))
      return not_live(op, ptr);
  }
  return submit(op, handle, mock::MemFreeNode{ptr});
}

Status MockDriver::memcpy_htod(DevicePtr dst, const void* src, std::size_t bytes) {
  LIFECORE_MOCK_GATE(memcpy_htod)
  if (bytes && !src) return bad_value(Operation::memcpy_htod, "the host source is null");
  return run_synchronous(Operation::memcpy_htod, mock::CopyHostToDeviceNode{dst, src, bytes});
}

Status MockDriver::memcpy_dtoh(void* dst, DevicePtr src, std::size_t bytes) {
  LIFECORE_MOCK_GATE(memcpy_dtoh)
  if (bytes && !dst) return bad_value(Operation::memcpy_dtoh, "the host destination is null");
  return run_synchronous(Operation::memcpy_dtoh, mock::CopyDeviceToHostNode{dst, src, bytes});
}

Status MockDriver::memcpy_dtod(DevicePtr dst, DevicePtr src, std::size_t bytes) {
  LIFECORE_MOCK_GATE(memcpy_dtod)
  return run_synchronous(Operation::memcpy_dtod, mock::CopyDeviceToDeviceNode{dst, src, bytes});
}

Status MockDriver::memcpy_htod_async(DevicePtr dst, const void* src, std::size_t bytes, StreamHandle stream) {
  LIFECORE_MOCK_GATE(memcpy_htod_async)
  if (bytes && !src) return bad_value(Operation::memcpy_htod_async, "the host source is null");
  return submit(Operation::memcpy_htod_async, stream, mock::CopyHostToDeviceNode{dst, src, bytes});
}

Status MockDriver::memcpy_dtoh_async(void* dst, DevicePtr src, std::size_t bytes, StreamHandle stream) {
  LIFECORE_MOCK_GATE(memcpy_dtoh_async)
  if (bytes && !dst) return bad_value(Operation::memcpy_dtoh_async, "the host destination is null");
  return submit(Operation::memcpy_dtoh_async, stream, mock::CopyDeviceToHostNode{dst, src, bytes});
}

Status MockDriver::memcpy_dtod_async(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle stream) {
  LIFECORE_MOCK_GATE(memcpy_dtod_async)
  return submit(Operation::memcpy_dtod_async, stream, mock::CopyDeviceToDeviceNode{dst, src, bytes});
}

Status MockDriver::memset_d32(DevicePtr dst, std::uint32_t value, std::size_t count) {
  LIFECORE_MOCK_GATE(memset_d32)
  if (dst % 4 != 0) return bad_value(Operation::memset_d32, "the destination " + hex(dst) + " is not 4-byte aligned");
  return run_synchronous(Operation::memset_d32, mock::MemsetNode{dst, value, count});
}

Status MockDriver::memset_d32_async(DevicePtr dst, std::uint32_t value, std::size_t count, StreamHandle stream) {
  LIFECORE_MOCK_GATE(memset_d32_async)
  if (dst % 4 != 0)
    return bad_value(Operation::memset_d32_async, "the destination " + hex(dst) + " is not 4-byte aligned");
  return submit(Operation::memset_d32_async, stream, mock::MemsetNode{dst, value, count});
}

// --- modules and kernels ---------------------------------------------------------------

Status MockDriver::module_load(const ModuleImage& image, ModuleHandle* out) {
  LIFECORE_MOCK_GATE(module_load)
  constexpr Operation op = Operation::module_load;
  if (!out) return bad_value(op, "the output pointer is null");
  // As CUDA: loading a module is an unsafe call while a stream captures.
  if (Status status = check_unsafe_call(op); !status.ok()) return status;
  if (image.kind != ImageKind::builtin)
    return fail(op, Code::not_supported,
                "the mock device runs built-in kernels only; it cannot load PTX, cubin, fatbin or code objects");
  std::lock_guard lock(mutex_);
  const std::uintptr_t id = new_handle();
  modules_.emplace(id, std::make_shared<Module>());
  *out = ModuleHandle{id};
  return {};
}

Status MockDriver::module_unload(ModuleHandle module) {
  LIFECORE_MOCK_GATE(module_unload)
  std::lock_guard lock(mutex_);
  auto it = modules_.find(raw(module));
  if (it == modules_.end()) return bad_handle(Operation::module_unload, "module", raw(module));
  for (const auto& [name, function] : it->second->functions) functions_.erase(function);
  modules_.erase(it);
  return {};
}

Status MockDriver::module_get_function(ModuleHandle module, const std::string& name, FunctionHandle* out) {
  LIFECORE_MOCK_GATE(module_get_function)
  constexpr Operation op = Operation::module_get_function;
  if (!out) return bad_value(op, "the output pointer is null");
  std::lock_guard lock(mutex_);
  auto it = modules_.find(raw(module));
  if (it == modules_.end()) return bad_handle(op, "module", raw(module));
  const mock::MockKernel* kernel = mock::find_mock_kernel(name);
  if (!kernel)
    return fail(op, Code::not_found,
                "no built-in kernel named '" + name + "' (the mock has " + mock::mock_kernel_names() + ")");
  auto& functions = it->second->functions;
  if (auto known = functions.find(name); known != functions.end()) {
    *out = FunctionHandle{known->second};
    return {};
  }
  const std::uintptr_t id = new_handle();
  functions_.emplace(id, std::make_shared<Function>(Function{raw(module), kernel}));
  functions.emplace(name, id);
  *out = FunctionHandle{id};
  return {};
}

Status MockDriver::function_param_sizes(FunctionHandle function, std::vector<std::size_t>* out) {
  LIFECORE_MOCK_GATE(function_param_sizes)
  constexpr Operation op = Operation::function_param_sizes;
  if (!out) return bad_value(op, "the output pointer is null");
  std::lock_guard lock(mutex_);
  auto it = functions_.find(raw(function));
  if (it == functions_.end()) return bad_handle(op, "function", raw(function));
  out->clear();
  for (ArgKind kind : it->second->kernel->signature->params) out->push_back(arg_size(kind));
  return {};
}

Status MockDriver::launch_kernel(FunctionHandle function, Dim3 grid, Dim3 block, std::uint32_t shared_bytes,
                                 StreamHandle stream, const std::vector<KernelArg>& args) {
  LIFECORE_MOCK_GATE(launch_kernel)
  constexpr Operation op = Operation::launch_kernel;
  const mock::MockKernel* kernel = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto it = functions_.find(raw(function));
    if (it == functions_.end()) return bad_handle(op, "function", raw(function));
    kernel = it->second->kernel;
  }
  const BuiltinKernel& signature = *kernel->signature;
  const std::string name(signature.name);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0)
    return bad_value(op, name + ": grid " + dim_text(grid) + " and block " + dim_text(block) +
                             " must be at least 1 in every dimension");
  if (std::uint64_t{block.x} * block.y * block.z > max_block_threads || block.z > 64)
    return bad_value(op, name + ": block " + dim_text(block) + " exceeds 1024 threads per block (z at most 64)");
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    return bad_value(op, name + ": grid " + dim_text(grid) + " exceeds (2^31 - 1, 65535, 65535)");
  if (shared_bytes > max_shared_bytes)
    return bad_value(op, name + ": " + std::to_string(shared_bytes) + " bytes of shared memory exceed 48 KiB");
  if (args.size() != signature.params.size())
    return bad_value(op, name + " expects " + std::to_string(signature.params.size()) + " arguments (" +
                             signature_text(signature) + "), got " + std::to_string(args.size()) + " (" +
                             args_text(args) + ")");
  for (std::size_t i = 0; i < args.size(); ++i) {
    const ArgKind expected = signature.params[i];
    if (args[i].kind != expected)
      return bad_value(op, name + " argument " + std::to_string(i) + " (" + std::string(signature.param_names[i]) +
                               ") expects " + arg_kind_name(expected) + ", got " + arg_kind_name(args[i].kind) +
                               " (signature: " + signature_text(signature) + ")");
    if (arg_size(expected) == 4 && (args[i].bits >> 32) != 0)
      return bad_value(op, name + " argument " + std::to_string(i) + " (" + std::string(signature.param_names[i]) +
                               ") is 4 bytes wide but its bits " + hex(args[i].bits) + " do not fit");
  }
  return submit_launch(stream, mock::KernelNode{function, kernel, grid, block, shared_bytes, {}}, args);
}

// --- capture ---------------------------------------------------------------------------

Status MockDriver::stream_begin_capture(StreamHandle handle, CaptureMode mode) {
  LIFECORE_MOCK_GATE(stream_begin_capture)
  constexpr Operation op = Operation::stream_begin_capture;
  if (!valid_mode(mode)) return bad_value(op, "unknown capture mode " + std::to_string(static_cast<int>(mode)));
  std::lock_guard lock(mutex_);
  std::shared_ptr<Stream> stream = find_stream_locked(handle);
  if (!stream) return bad_handle(op, "stream", raw(handle));
  if (stream->capture) {
    const Capture& live = *stream->capture;
    return fail(op, Code::illegal_state,
                "stream " + std::to_string(stream->id) + " is already capturing (capture " + std::to_string(live.id) +
                    (live.status == CaptureStatus::invalidated ? ", invalidated" : ", active") +
                    "); end that capture first");
  }
  Capture capture;
  capture.id = next_capture_id.fetch_add(1);
  capture.mode = mode;
  capture.thread = thread_token();
  capture.graph = std::make_shared<mock::GraphData>();
  capture.graph->space = memory_;
  stream->capture = std::move(capture);
  return {};
}

Status MockDriver::stream_end_capture(StreamHandle handle, GraphHandle* out) {
  constexpr Operation op = Operation::stream_end_capture;
  if (Status injected = gate(op); !injected.ok()) {
    // What a failed end does follows the driver documentation: 901 (invalidated) ends the capture
    // sequence with a null graph; any other failure (a wrong thread, a sticky error) leaves it.
    if (out) *out = GraphHandle{0};
    if (injected.code == Code::capture_invalidated) {
      std::lock_guard lock(mutex_);
      if (std::shared_ptr<Stream> stream = find_stream_locked(handle)) stream->capture.reset();
    }
    return injected;
  }
  if (!out) return bad_value(op, "the output pointer is null");
  std::lock_guard lock(mutex_);
  std::shared_ptr<Stream> stream = find_stream_locked(handle);
  if (!stream) return bad_handle(op, "stream", raw(handle));
  if (!stream->capture) return fail(op, Code::illegal_state, "stream " + std::to_string(stream->id) + " is not capturing");
  Capture& capture = *stream->capture;
  if (capture.mode != CaptureMode::relaxed && capture.thread != thread_token())
    return fail(op, Code::capture_wrong_thread,
                "capture " + std::to_string(capture.id) + " (" + capture_mode_name(capture.mode) +
                    ") began on another thread; only that thread may end it");
  if (capture.status == CaptureStatus::invalidated) {
    const std::string reason = "capture " + std::to_string(capture.id) + " was invalidated by " +
                               capture.invalidated_by + "; it is ended and no graph was made";
    stream->capture.reset();
    *out = GraphHandle{0};
    return fail(op, Code::capture_invalidated, reason);
  }
  const std::uintptr_t id = new_handle();
  graphs_.emplace(id, std::move(capture.graph));
  stream->capture.reset();
  *out = GraphHandle{id};
  return {};
}

Status MockDriver::stream_capture_info(StreamHandle handle, CaptureStatus* status, std::uint64_t* capture_id) {
  LIFECORE_MOCK_GATE(stream_capture_info)
  constexpr Operation op = Operation::stream_capture_info;
  if (!status) return bad_value(op, "the status output pointer is null");
  std::lock_guard lock(mutex_);
  std::shared_ptr<Stream> stream = find_stream_locked(handle);
  if (!stream) return bad_handle(op, "stream", raw(handle));
  *status = stream->capture ? stream->capture->status : CaptureStatus::none;
  if (capture_id) *capture_id = *status == CaptureStatus::active ? stream->capture->id : 0;  // as CUDA's
  return {};
}

Status MockDriver::thread_exchange_capture_mode(CaptureMode* mode) {
  constexpr Operation op = Operation::thread_exchange_capture_mode;
  // As CUDA's: the mode is the thread's, so a lost device does not refuse it (a thread that went
  // relaxed for a call gets its mode back); only an injected fault does.
  Status injected = faults_.pass(op);
  note_status(injected);
  if (!injected.ok()) return injected;
  if (!mode) return bad_value(op, "the mode pointer is null");
  if (!valid_mode(*mode)) return bad_value(op, "unknown capture mode " + std::to_string(static_cast<int>(*mode)));
  const CaptureMode previous = thread_capture_mode(uid_);
  set_thread_capture_mode(uid_, *mode);
  *mode = previous;
  return {};
}

std::size_t MockDriver::thread_capture_modes_kept() { return thread_capture_modes().size(); }

// --- graphs ----------------------------------------------------------------------------

Status MockDriver::graph_node_counts(GraphHandle graph, GraphNodeCounts* out) {
  LIFECORE_MOCK_GATE(graph_node_counts)
  constexpr Operation op = Operation::graph_node_counts;
  if (!out) return bad_value(op, "the output pointer is null");
  std::lock_guard lock(mutex_);
  auto it = graphs_.find(raw(graph));
  if (it == graphs_.end()) return bad_handle(op, "graph", raw(graph));
  *out = it->second->counts();
  return {};
}

Status MockDriver::graph_instantiate(GraphHandle graph, GraphExecHandle* out) {
  LIFECORE_MOCK_GATE(graph_instantiate)
  constexpr Operation op = Operation::graph_instantiate;
  if (!out) return bad_value(op, "the output pointer is null");
  std::lock_guard lock(mutex_);
  auto it = graphs_.find(raw(graph));
  if (it == graphs_.end()) return bad_handle(op, "graph", raw(graph));
  const std::shared_ptr<mock::GraphData>& source = it->second;
  if (source->has_memory_nodes() && source->live_execs > 0)
    return bad_value(op, "the graph has memory nodes and already has a live executable graph; destroy that one "
                         "first (one instantiation at a time, as in CUDA)");
  auto exec = std::make_shared<Exec>();
  exec->source = source;
  exec->nodes = std::make_shared<const std::vector<mock::WorkNode>>(source->nodes);
  // An allocation the graph also frees is gone again by the end of each replay, so later
  // launches (in stream order) may reuse its address; only the others need a claim.
  for (const auto& node : source->nodes) {
    const auto* alloc = std::get_if<mock::MemAllocNode>(&node);
    if (!alloc) continue;
    const bool freed_inside = std::any_of(source->nodes.begin(), source->nodes.end(), [&](const mock::WorkNode& other) {
      const auto* free = std::get_if<mock::MemFreeNode>(&other);
      return free && free->ptr == alloc->ptr;
    });
    if (!freed_inside) exec->allocations.push_back(alloc->ptr);
  }
  ++source->live_execs;
  const std::uintptr_t id = new_handle();
  execs_.emplace(id, std::move(exec));
  *out = GraphExecHandle{id};
  return {};
}

Status MockDriver::graph_upload(GraphExecHandle exec, StreamHandle stream) {
  LIFECORE_MOCK_GATE(graph_upload)
  constexpr Operation op = Operation::graph_upload;
  std::lock_guard lock(mutex_);
  if (!execs_.count(raw(exec))) return bad_handle(op, "executable graph", raw(exec));
  if (!streams_.count(raw(stream))) return bad_handle(op, "stream", raw(stream));
  return {};  // host memory is the device memory: there is nothing to upload
}

Status MockDriver::graph_launch(GraphExecHandle handle, StreamHandle stream_handle) {
  LIFECORE_MOCK_GATE(graph_launch)
  constexpr Operation op = Operation::graph_launch;
  std::lock_guard lock(mutex_);
  auto it = execs_.find(raw(handle));
  if (it == execs_.end()) return bad_handle(op, "executable graph", raw(handle));
  std::shared_ptr<Exec> exec = it->second;
  Stream* stream = nullptr;
  Route route{};
  if (Status status = route_locked(op, stream_handle, &stream, &route); !status.ok()) return status;
  if (route == Route::capture)
    return fail(op, Code::not_supported,
                "the mock does not record a graph launch into a capture (a child-graph node)");
  DevicePtr busy = 0;
  if (!exec->allocations.empty() && !memory_->claim(exec->allocations, &busy))
    return bad_value(op, "the allocation at " + hex(busy) +
                             " made by this graph's memory-alloc node is still live (or a launch making it is "
                             "queued); free it before launching the graph again");
  exec->launch_enqueued();
  mock::AddressSpace* memory = memory_.get();
  // The whole graph is ONE work item: that is what makes a replay cheaper than its launches.
  const bool queued = stream->worker.enqueue([memory, exec, nodes = exec->nodes]() {
    Status status;
    {
      std::lock_guard run(exec->run_mutex);
      status = mock::run_graph(*nodes, mock::ExecContext{*memory, mock_call_name(Operation::graph_launch),
                                                 Code::illegal_address});
    }
    exec->launch_finished();
    return status;
  });
  if (!queued) {
    for (DevicePtr ptr : exec->allocations) memory_->unclaim(ptr);
    exec->launch_finished();
    return bad_handle(op, "stream", raw(stream_handle));
  }
  return {};
}

Status MockDriver::graph_exec_update(GraphExecHandle exec, GraphHandle graph, GraphUpdateResult* result) {
  LIFECORE_MOCK_GATE(graph_exec_update)
  constexpr Operation op = Operation::graph_exec_update;
  if (!result) return bad_value(op, "the result pointer is null");
  std::lock_guard lock(mutex_);
  auto e = execs_.find(raw(exec));
  if (e == execs_.end()) return bad_handle(op, "executable graph", raw(exec));
  auto g = graphs_.find(raw(graph));
  if (g == graphs_.end()) return bad_handle(op, "graph", raw(graph));
  std::string why;
  GraphUpdateResult outcome = mock::compare_for_update(*e->second->nodes, g->second->nodes, &why);
  if (outcome == GraphUpdateResult::success && g->second->has_memory_nodes()) {
    outcome = GraphUpdateResult::not_supported;
    why = "graphs with memory nodes cannot be updated";
  }
  *result = outcome;
  // A refused update is an answer (the result says why), not a failed call: as the backends
  // report CUDA's and HIP's CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE.
  if (outcome != GraphUpdateResult::success) return {};
  // Launches already queued keep the nodes they were given; later launches see the update.
  e->second->nodes = std::make_shared<const std::vector<mock::WorkNode>>(g->second->nodes);
  return {};
}

Status MockDriver::graph_destroy(GraphHandle graph) {
  LIFECORE_MOCK_GATE(graph_destroy)
  std::lock_guard lock(mutex_);
  if (graphs_.erase(raw(graph)) == 0) return bad_handle(Operation::graph_destroy, "graph", raw(graph));
  return {};  // executable graphs keep their own copy of the nodes
}

Status MockDriver::graph_exec_destroy(GraphExecHandle handle) {
  LIFECORE_MOCK_GATE(graph_exec_destroy)
  std::shared_ptr<Exec> exec;
  {
    std::lock_guard lock(mutex_);
    auto it = execs_.find(raw(handle));
    if (it == execs_.end()) return bad_handle(Operation::graph_exec_destroy, "executable graph", raw(handle));
    exec = std::move(it->second);
    execs_.erase(it);
    --exec->source->live_execs;
  }
  exec->wait_launches();
  return {};
}

// --- interop ---------------------------------------------------------------------------

Status MockDriver::stream_wait_event(std::uintptr_t native_stream, EventHandle event) {
  LIFECORE_MOCK_GATE(stream_wait_event)
  constexpr Operation op = Operation::stream_wait_event;
  std::lock_guard lock(mutex_);
  auto it = events_.find(raw(event));
  if (it == events_.end()) return bad_handle(op, "event", raw(event));
  std::shared_ptr<mock::EventState> state = it->second;
  Stream* stream = nullptr;
  Route route{};
  if (Status status = route_locked(op, StreamHandle{native_stream}, &stream, &route); !status.ok()) return status;
  if (route == Route::capture) return fail(op, Code::not_supported, "a wait inside a capture is not modelled");
  // In CUDA a stream that waits for an event last recorded in a live capture joins that
  // capture (a fork): its later work is recorded, not run, and the capture cannot end until
  // it is joined back (904). The mock does not model the join; it refuses rather than let the
  // wait pass as an ordinary eager one.
  if (state->captured_by != 0 && capture_live_locked(state->captured_by))
    return fail(op, Code::not_supported,
                "the event was last recorded in capture " + std::to_string(state->captured_by) +
                    ", which is still live: in CUDA this wait would make the stream join that capture "
                    "(its later work recorded, not run); the mock does not model that");
  const std::uint64_t generation = state->latest_generation();
  if (generation == 0) return {};  // never recorded: nothing to wait for, as CUDA
  (void)stream->worker.enqueue([state, generation]() {
    state->wait_for(generation);
    return Status{};
  });
  return {};
}

Status MockDriver::event_record_native(EventHandle event, std::uintptr_t native_stream) {
  LIFECORE_MOCK_GATE(event_record_native)
  // A native stream pointer is a stream id here (stream_native_handle): only the mock's own
  // streams can be named, and CUDA's default-stream values mean nothing special.
  return record(Operation::event_record_native, event, StreamHandle{native_stream});
}

Status MockDriver::stream_capture_status_native(std::uintptr_t native_stream, CaptureStatus* status) {
  LIFECORE_MOCK_GATE(stream_capture_status_native)
  constexpr Operation op = Operation::stream_capture_status_native;
  if (!status) return bad_value(op, "the status output pointer is null");
  std::lock_guard lock(mutex_);
  // A native stream pointer is a stream id here, as in event_record_native.
  std::shared_ptr<Stream> stream = find_stream_locked(StreamHandle{native_stream});
  if (!stream) return bad_handle(op, "stream", native_stream);
  *status = stream->capture ? stream->capture->status : CaptureStatus::none;
  return {};
}

Status MockDriver::pointer_device(DevicePtr ptr, int* ordinal) {
  LIFECORE_MOCK_GATE(pointer_device)
  constexpr Operation op = Operation::pointer_device;
  if (!ordinal) return bad_value(op, "the output pointer is null");
  // Each device's addresses are its own (their base is per ordinal): one this device does not
  // resolve is no memory it knows, as CUDA says of a host pointer.
  if (!memory_->resolve(ptr, 1).data) return bad_value(op, hex(ptr) + " is not inside a live allocation or mapping");
  *ordinal = ordinal_;
  return {};
}

Status MockDriver::host_view(DevicePtr ptr, std::size_t bytes, HostView* out) {
  LIFECORE_MOCK_GATE(host_view)
  constexpr Operation op = Operation::host_view;
  if (!out) return bad_value(op, "the output pointer is null");
  if (bytes == 0) return bad_value(op, "the range is empty");
  mock::DeviceSpan span = memory_->resolve(ptr, bytes);
  if (!span.data) return bad_value(op, "the range is not inside one live allocation");
  out->data = span.data;
  out->keep_alive = std::move(span.block);
  return {};
}

Status MockDriver::map_host(void* host, std::size_t bytes, DevicePtr* out) {
  LIFECORE_MOCK_GATE(map_host)
  constexpr Operation op = Operation::map_host;
  if (!out) return bad_value(op, "the output pointer is null");
  if (host == nullptr) return bad_value(op, "the host pointer is null");
  if (bytes == 0) return bad_value(op, "the range is empty");
  if (!memory_->map(static_cast<std::byte*>(host), bytes, out)) return bad_value(op, "the range cannot be mapped");
  return {};
}

Status MockDriver::unmap_host(DevicePtr ptr) {
  LIFECORE_MOCK_GATE(unmap_host)
  constexpr Operation op = Operation::unmap_host;
  if (!memory_->unmap(ptr)) return bad_value(op, hex(ptr) + " is not the start of a host mapping");
  return {};
}

#undef LIFECORE_MOCK_GATE

}  // namespace lifecore::driver
