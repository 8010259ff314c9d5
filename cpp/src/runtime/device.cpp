#include "lifecore/runtime/device.hpp"

#include <algorithm>
#include <new>

#include "lifecore/error.hpp"
#include "runtime/blocking_wait.hpp"
#include "lifecore/runtime/capture_registry.hpp"
#include "lifecore/runtime/graph.hpp"
#include "lifecore/runtime/module.hpp"
#include "lifecore/runtime/pause_points.hpp"
#include "runtime/lost_watch.hpp"
#include "runtime/relaxed_capture_mode.hpp"
#include "lifecore/runtime/stream.hpp"
#include "lifecore/driver/backends.hpp"

namespace lifecore::runtime {
namespace {

driver::CaptureMode parse_capture_mode(const std::string& name) {
  driver::CaptureMode mode{};
  if (driver::capture_mode_from_name(name, &mode)) return mode;
  raise(ErrorKind::InvalidArgument,
        "unknown capture_mode '" + name + "': expected 'thread_local', 'global' or 'relaxed'");
}

// Whether a recording forbids this thread a driver free (CUDA's potentially unsafe calls): one
// of its own outside relaxed mode, or another thread's global one.
bool recording_forbids_frees(driver::Driver& driver) noexcept {
  return capture_registry::forbids(driver.capture_domain().get(), nullptr);
}

}  // namespace

std::shared_ptr<Device> Device::open(const std::string& backend, int ordinal, const std::string& graphs,
                                     const std::string& capture_mode) {
  // Validate every argument before touching a driver.
  if (graphs != "auto" && graphs != "hardware" && graphs != "software")
    raise(ErrorKind::InvalidArgument, "unknown graphs mode '" + graphs + "': expected 'auto', 'hardware' or 'software'");
  driver::CaptureMode mode = parse_capture_mode(capture_mode);
  std::shared_ptr<driver::Driver> driver = driver::open_driver(backend, ordinal);
  GraphsMode graphs_mode = driver->hardware_graphs() ? GraphsMode::hardware : GraphsMode::software;
  if (graphs == "software") graphs_mode = GraphsMode::software;
  if (graphs == "hardware" && !driver->hardware_graphs())
    raise(ErrorKind::InvalidArgument, std::string("graphs='hardware' needs a driver that captures graphs, and the ") +
                                          driver->backend().name +
                                          " driver here does not: use graphs='software'");
  return std::make_shared<Device>(std::move(driver), graphs_mode, mode, capture_mode);
}

Device::Device(std::shared_ptr<driver::Driver> driver, GraphsMode graphs, driver::CaptureMode capture_mode,
               std::string capture_mode_name)
    : lost_record_(std::make_shared<LostRecord>()),
      lost_(LostRecord::flag(lost_record_)),
      vendor_(std::move(driver)),
      driver_(std::make_shared<LostWatch>(vendor_, lost_record_)),
      graphs_(graphs),
      capture_mode_(capture_mode),
      capture_mode_name_(std::move(capture_mode_name)) {
  driver::check(driver_->device_name(&name_));
  std::size_t free_bytes = 0;
  driver::check(driver_->mem_info(&free_bytes, &total_memory_));
  driver::Driver* raw = driver_.get();
  memory_ = std::make_shared<MemoryManager>([raw, born = fork_generation_](driver::DevicePtr ptr, bool memory_node) {
    if (fork_generation() != born) return;  // the parent's memory, in a forked child: left to the parent
    // A free comes from a drop (an arena's coordinator, a memory node's buffer), which cannot
    // be refused: it is made in relaxed mode, or while a stream records on this thread (or a
    // global recording elsewhere, lifecore's or another library's) the driver would invalidate
    // that recording and keep the memory.
    RelaxedCaptureMode relaxed(*raw);
    // Memory a capture recorded as a node was never the pool's to return; a stream-ordered
    // free is the only call that accepts it, and a failure here has nobody to report to.
    if (memory_node) (void)raw->mem_free_async(ptr, driver::StreamHandle{});
    else (void)raw->mem_free(ptr);
  });
  functions_ = std::make_unique<std::atomic<std::uintptr_t>[]>(Kernel::builtins().size());
}

Device::~Device() {
  if (forked()) {
    // In a child of fork(): the driver's context, its streams' threads and the memory are the
    // parent's. Releasing them would wait for threads this process does not have, so the driver
    // is never destroyed here (its reference is kept); the process's exit reclaims it all.
    keep_until_exit(std::move(driver_));
    return;
  }
  BlockingWait blocking;  // the last reference may be dropped from Python: close waits for the device
  close();
}

std::string Device::forked_text() const {
  return "this device was opened in process " + std::to_string(opened_in_process_) +
         ", before this process forked from it; a forked process opens a Device of its own";
}

void Device::check_not_forked(const char* op) const {
  if (forked()) raise(ErrorKind::Closed, std::string(op) + ": " + forked_text());
}

void Device::check_open(const char* op) const {
  check_not_forked(op);
  if (closed()) raise(ErrorKind::Closed, std::string(op) + ": the device is closed");
  check_not_lost(op);
}

void Device::note_status(const driver::Status& status) { lost_record_->note(status); }

void Device::check_status(const driver::Status& status) {
  if (status.ok()) return;
  note_status(status);
  driver::throw_status(status);
}

void Device::check_not_lost(const char* op) const {
  if (!lost()) return;
  auto [reason, status] = lost_record_->cause();
  // The attributes of the status that lost it, as a DriverError carries them.
  raise(ErrorKind::DeviceLost, std::string(op) + ": the device is lost: a sticky driver error (" + reason +
                                   ") left its context unusable, so every call on it is refused; close it and open "
                                   "a new device (on a real GPU, in a new process)",
        {{"code", std::int64_t{status.native_code}}, {"status", status.name}, {"call", status.call}, {"reason", reason},
         {"lifecore_status", std::string(driver::code_name(status.code))}});
}

std::shared_ptr<Stream> Device::stream() {
  check_open("stream");
  driver::StreamHandle handle{};
  check_status(driver_->stream_create(&handle));
  pause_points::reach(pause_points::Point::stream_made);
  auto destroy = [&] {
    BlockingWait blocking;  // the caller may hold the embedding's lock
    (void)driver_->stream_destroy(handle);
  };
  std::shared_ptr<Stream> stream;
  try {
    // Registered under the lock close() takes the streams under: a stream joins before close
    // takes them (and close destroys it) or is refused below, never left to no one.
    std::lock_guard lock(registry_mutex_);
    if (!streams_taken_) {
      std::erase_if(streams_, [](const std::weak_ptr<Stream>& s) { return s.expired(); });
      // The slot first, so nothing throws once the Stream owns the handle (a slot a throw
      // leaves empty counts as expired).
      streams_.emplace_back();
      stream = std::make_shared<Stream>(shared_from_this(), handle);
      streams_.back() = stream;
    }
  } catch (...) {
    destroy();  // nothing owns the handle yet
    throw;
  }
  if (stream) return stream;
  destroy();
  raise(ErrorKind::Closed, "stream: the device is closed");
}

std::vector<std::shared_ptr<Stream>> Device::live_streams() {
  std::lock_guard lock(registry_mutex_);
  return live_streams_locked();
}

std::vector<std::shared_ptr<Stream>> Device::take_streams() {
  std::lock_guard lock(registry_mutex_);
  streams_taken_ = true;
  return live_streams_locked();
}

std::vector<std::shared_ptr<Stream>> Device::live_streams_locked() const {
  std::vector<std::shared_ptr<Stream>> alive;
  for (auto& weak : streams_)
    if (auto stream = weak.lock()) alive.push_back(std::move(stream));
  return alive;
}

std::vector<std::shared_ptr<Graph>> Device::live_graphs() {
  std::lock_guard lock(registry_mutex_);
  std::vector<std::shared_ptr<Graph>> alive;
  for (auto& [id, weak] : graphs_alive_)
    if (auto graph = weak.lock()) alive.push_back(std::move(graph));
  return alive;
}

void Device::register_graph(const std::shared_ptr<Graph>& graph) {
  std::lock_guard lock(registry_mutex_);
  graphs_alive_[graph->id()] = graph;
}

void Device::forget_graph(GraphId graph) {
  std::lock_guard lock(registry_mutex_);
  graphs_alive_.erase(graph);
}

std::vector<std::pair<std::string, std::int64_t>> Device::memory_stats() const {
  // In a forked child the pool is the parent's, and its lock may be held for ever.
  check_not_forked("memory_stats");
  MemoryStats stats = memory_->stats();
  std::size_t graphs = 0;
  {
    std::lock_guard lock(registry_mutex_);
    graphs = graphs_alive_.size();
  }
  auto i = [](auto v) { return static_cast<std::int64_t>(v); };
  return {{"pool_bytes", i(stats.pool_bytes)},
          {"slices", i(stats.slices)},
          {"slices_in_use", i(stats.slices_in_use)},
          {"slices_retained", i(stats.slices_retained)},
          {"slices_free", i(stats.slices_free)},
          {"slices_free_for_capture", i(stats.slices_free_for_capture)},
          {"driver_allocations", i(stats.driver_allocations)},
          {"graphs_alive", i(graphs)},
          {"info_entries", i(info_.entries())},
          {"info_pinned", i(info_.pinned())},
          {"windows_active", i(stats.windows_active)},
          {"arena_bytes", i(stats.arena_bytes)},
          {"arenas", i(stats.arenas)}};
}

void Device::free_info_buffer(driver::DevicePtr ptr) {
  if (forked()) return;  // the parent's memory
  // Also on a closed device: close() frees only the buffers the cache still holds, and this one
  // had left it (evicted, transient, or taken by cleanup()), so nobody else frees it.
  RelaxedCaptureMode relaxed(*driver_);  // as the pool's frees
  (void)driver_->mem_free(ptr);
}

void Device::cleanup() {
  check_open("cleanup");
  if (memory_->stats().windows_active > 0) return;  // a free could sync and abort a capture
  // The same for a recording of this thread (or a global one) on another device of the domain.
  if (recording_forbids_frees(*driver_)) return;
  // Wait for every stream so nothing freed here is still read by queued work.
  for (auto& stream : live_streams()) stream->wait_for_graph_work();
  if (memory_->stats().windows_active > 0) return;
  memory_->cleanup();
  unload_retired_modules();
  std::vector<driver::DevicePtr> unpinned = info_.clear_unpinned();
  pause_points::reach(pause_points::Point::cleanup_took_info);
  for (driver::DevicePtr ptr : unpinned) free_info_buffer(ptr);
}

namespace {

// The driver operation named `call`; InvalidArgumentError naming `op` and every valid name.
driver::Operation operation_named(const std::string& call, const char* op) {
  driver::Operation found{};
  if (!driver::operation_from_name(call, &found)) {
    std::string names;
    for (const auto& name : driver::operation_names()) names += (names.empty() ? "" : ", ") + name;
    raise(ErrorKind::InvalidArgument, std::string(op) + ": unknown driver call '" + call + "'; valid names: " + names);
  }
  return found;
}

}  // namespace

driver::FaultInjection& Device::fault_injection(const char* op) const {
  check_open(op);
  driver::FaultInjection* faults = driver_->fault_injection();
  if (faults == nullptr)
    raise(ErrorKind::Lifecore, std::string(op) + ": the " + backend() +
                                   " backend does not offer fault injection (an emulated backend does)");
  return *faults;
}

void Device::inject_fault(const std::string& call, int status, std::int64_t after, std::int64_t times) {
  driver::FaultInjection& faults = fault_injection("inject_fault");
  const driver::Operation op = operation_named(call, "inject_fault");
  // CUDA's and HIP's statuses are positive: a negative one is nothing a driver returns.
  if (status <= 0)
    raise(ErrorKind::InvalidArgument,
          "inject_fault: status must be a failure code (a positive status), got " + std::to_string(status));
  if (after < 0) raise(ErrorKind::InvalidArgument, "inject_fault: after must be >= 0, got " + std::to_string(after));
  if (times < 1) raise(ErrorKind::InvalidArgument, "inject_fault: times must be >= 1, got " + std::to_string(times));
  faults.inject(op, status, static_cast<std::uint64_t>(after), static_cast<std::uint64_t>(times));
}

void Device::clear_faults() { fault_injection("clear_faults").clear(); }

std::uint64_t Device::driver_calls(const std::string& call) const {
  driver::FaultInjection& faults = fault_injection("driver_calls");
  return faults.call_count(operation_named(call, "driver_calls"));
}

driver::FunctionHandle Device::function(const Kernel& kernel) {
  if (!kernel.is_builtin()) return kernel.module()->launchable(*this, kernel);
  std::atomic<std::uintptr_t>& slot = functions_[kernel.index()];
  if (auto loaded = slot.load(std::memory_order_acquire)) return driver::FunctionHandle{loaded};
  check_open("launch");
  std::lock_guard lock(functions_mutex_);
  if (auto loaded = slot.load(std::memory_order_acquire)) return driver::FunctionHandle{loaded};
  if (builtin_module_ == driver::ModuleHandle{}) {
    std::string reason;
    if (!driver_->builtin_kernels_available(&reason))
      raise(ErrorKind::BackendUnavailable, "launch: the built-in kernels cannot run on the " + backend() +
                                               " backend here: " + reason);
  }
  driver::FunctionHandle function{};
  check_status(resolve_builtin_locked(kernel.index(), &function));
  return function;
}

driver::Status Device::resolve_builtin_locked(std::size_t index, driver::FunctionHandle* out) {
  // As load_module; the lookup too, where the driver loads modules lazily (CUDA 12.2 and later
  // by default): the load then happens at the lookup.
  RelaxedCaptureMode relaxed(*driver_);
  if (builtin_module_ == driver::ModuleHandle{}) {
    driver::ModuleHandle module{};
    if (auto status = driver_->module_load(driver::ModuleImage{driver::ImageKind::builtin, {}}, &module); !status.ok())
      return status;
    builtin_module_ = module;
  }
  const Kernel& kernel = Kernel::builtins()[index];
  if (auto status = driver_->module_get_function(builtin_module_, std::string(kernel.name()), out); !status.ok())
    return status;
  functions_[index].store(static_cast<std::uintptr_t>(*out), std::memory_order_release);
  return {};
}

void Device::load_builtins() noexcept {
  if (closed() || lost()) return;
  try {
    std::lock_guard lock(functions_mutex_);
    if (closed()) return;  // close() unloads under this lock: load nothing after it
    std::string reason;
    if (builtin_module_ == driver::ModuleHandle{} && !driver_->builtin_kernels_available(&reason)) return;
    for (std::size_t i = 0; i < Kernel::builtins().size(); ++i) {
      if (functions_[i].load(std::memory_order_acquire) != 0) continue;
      driver::FunctionHandle function{};
      if (auto status = resolve_builtin_locked(i, &function); !status.ok()) {
        note_status(status);  // a sticky status is a lost device whoever meets it
        if (status.sticky || builtin_module_ == driver::ModuleHandle{}) return;
      }
    }
  } catch (...) {
    // The launch meets the same failure and reports it.
  }
}

driver::ModuleHandle Device::load_module(const driver::ModuleImage& image) {
  check_open("module_load");
  unload_retired_modules();
  driver::ModuleHandle module{};
  driver::Status status;
  {
    // A load is a call the driver forbids in the thread's own mode while a global capture records
    // anywhere (another library's, on another thread), and it would invalidate that capture: in
    // relaxed mode it leaves the capture alone.
    RelaxedCaptureMode relaxed(*driver_);
    status = driver_->module_load(image, &module);
  }
  if (status.code == driver::Code::capture_unsupported) {
    // The driver refuses a module load while a stream captures, and invalidates that capture.
    try {
      check_status(status);
    } catch (const Error& error) {
      throw Error(error.kind(),
                  error.message() +
                      "; a module cannot be loaded while a stream captures: load it before the capture "
                      "begins (the capture this load conflicted with is invalidated; end or abort it)",
                  error.attributes());
    }
  }
  check_status(status);
  pause_points::reach(pause_points::Point::module_loaded);
  {
    // close() marks the device closed before it unloads the modules under this lock: a module
    // listed here is close's to unload; one loaded after that is refused, or nobody unloads it.
    std::lock_guard lock(modules_mutex_);
    if (!closed()) {
      modules_loaded_.push_back(module);
      return module;
    }
  }
  RelaxedCaptureMode relaxed(*driver_);
  (void)driver_->module_unload(module);
  raise(ErrorKind::Closed, "module_load: the device is closed");
}

void Device::release_module(driver::ModuleHandle module) noexcept {
  if (forked()) return;  // the parent's module
  bool closing = false;
  {
    std::lock_guard lock(modules_mutex_);
    const bool listed = std::erase(modules_loaded_, module) > 0;
    closing = closed();
    if (closing && !listed) return;  // close() unloaded it
    // Listed on a closed device: close() has not reached the modules and will not see this one
    // now. No graph or window can hold its functions any more (close ended them before marking
    // the device closed), so it goes at once, outside the lock.
    if (!closing) {
      try {
        modules_retired_.push_back(module);
      } catch (const std::bad_alloc&) {
        // No room to retire it (out of host memory): kept loaded until the device closes, which
        // unloads what close() finds listed. Listed again in the room its erased entry left.
        if (listed) modules_loaded_.push_back(module);
        return;
      }
    }
  }
  if (!closing) return unload_retired_modules();
  RelaxedCaptureMode relaxed(*driver_);
  (void)driver_->module_unload(module);
}

void Device::unload_retired_modules() noexcept {
  {
    std::lock_guard lock(modules_mutex_);
    if (modules_retired_.empty()) return;
  }
  // A live graph or an open window may hold one of the functions: unloading now would leave
  // it pointing at freed code.
  if (memory_->stats().windows_active > 0) return;
  {
    std::lock_guard lock(registry_mutex_);
    if (!graphs_alive_.empty()) return;
  }
  // Eagerly queued launches of the functions must have run: a stream that could not be waited
  // for keeps them loaded until a later call's wait succeeds.
  for (auto& stream : live_streams())
    if (!stream->wait_for_graph_work()) return;
  std::vector<driver::ModuleHandle> retired;
  {
    std::lock_guard lock(modules_mutex_);
    if (closed()) return;
    retired = std::move(modules_retired_);
    modules_retired_.clear();
  }
  RelaxedCaptureMode relaxed(*driver_);
  for (driver::ModuleHandle module : retired) (void)driver_->module_unload(module);
}

std::shared_ptr<void> Device::watch_close(std::function<void()> on_close) {
  auto watch = std::make_shared<CloseWatch>(CloseWatch{std::move(on_close)});
  {
    std::lock_guard lock(close_watch_mutex_);
    // close() stores closed_ before it takes the list, so a watch either joins the list it
    // takes or sees the device closed here: exactly one call either way.
    if (!closed()) {
      std::erase_if(close_watches_, [](const std::weak_ptr<CloseWatch>& w) { return w.expired(); });
      close_watches_.push_back(watch);
      return watch;
    }
  }
  watch->on_close();
  return watch;
}

void Device::close() {
  // In a forked child there is nothing of this process's to close, and a parent thread may have
  // held close_mutex_ as the process forked (through close()'s waits).
  if (forked()) return;
  // Under close_mutex_ to the end: a close() racing this one returns only once the watches ran.
  std::lock_guard close_lock(close_mutex_);
  if (!close_locked()) return;
  std::vector<std::weak_ptr<CloseWatch>> watches;
  {
    std::lock_guard lock(close_watch_mutex_);
    watches.swap(close_watches_);
  }
  for (const auto& weak : watches)
    if (auto watch = weak.lock()) watch->on_close();
}

bool Device::close_locked() {
  if (closed()) return false;
  // Relaxed for the closing thread: its synchronizations and frees must not invalidate (or be
  // refused by) another thread's live capture, which close() leaves to that thread.
  RelaxedCaptureMode relaxed(*driver_);
  std::vector<std::shared_ptr<Stream>> streams = take_streams();
  pause_points::reach(pause_points::Point::close_took_streams);
  for (auto& stream : streams) stream->shutdown();
  for (auto& graph : live_graphs()) graph->destroy();
  closed_.store(true, std::memory_order_release);
  pause_points::reach(pause_points::Point::device_marked_closed);
  memory_->release_all();
  for (driver::DevicePtr ptr : info_.release_all()) (void)driver_->mem_free(ptr);
  {
    std::lock_guard lock(functions_mutex_);
    if (builtin_module_ != driver::ModuleHandle{}) (void)driver_->module_unload(builtin_module_);
    builtin_module_ = {};
    for (std::size_t i = 0; i < Kernel::builtins().size(); ++i) functions_[i].store(0, std::memory_order_release);
  }
  {
    std::lock_guard lock(modules_mutex_);
    for (driver::ModuleHandle module : modules_loaded_) (void)driver_->module_unload(module);
    for (driver::ModuleHandle module : modules_retired_) (void)driver_->module_unload(module);
    modules_loaded_.clear();
    modules_retired_.clear();
  }
  return true;
}

}  // namespace lifecore::runtime
