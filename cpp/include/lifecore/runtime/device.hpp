// One device of one backend, opened through the vendor abstraction, and everything the
// device's streams share: the memory manager, the metadata info cache, the loaded built-in
// kernels, and the registries of live streams and graphs (so close() can reach them).
// Thread-safe: each shared part has its own lock; close() is idempotent.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lifecore/runtime/buffer_lease.hpp"
#include "lifecore/runtime/info_cache.hpp"
#include "lifecore/runtime/kernel.hpp"
#include "lifecore/runtime/memory_manager.hpp"
#include "lifecore/driver/driver.hpp"
#include "lifecore/driver/registry.hpp"
#include "lifecore/process_fork.hpp"

namespace lifecore::runtime {

class LostRecord;  // runtime/lost_watch.hpp

class Stream;
class Graph;

enum class GraphsMode : std::uint8_t { hardware, software };

class Device : public std::enable_shared_from_this<Device> {
 public:
  // backend: a registered backend's name or auto; graphs: auto | hardware | software;
  // capture_mode: thread_local | global | relaxed.
  static std::shared_ptr<Device> open(const std::string& backend, int ordinal, const std::string& graphs,
                                      const std::string& capture_mode);
  Device(std::shared_ptr<driver::Driver> driver, GraphsMode graphs, driver::CaptureMode capture_mode,
         std::string capture_mode_name);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  std::string backend() const { return driver_->backend().name; }
  const driver::BackendDescriptor& descriptor() const { return driver_->backend(); }
  int ordinal() const { return driver_->ordinal(); }
  const std::string& name() const { return name_; }
  GraphsMode graphs() const { return graphs_; }
  bool hardware_graphs() const { return graphs_ == GraphsMode::hardware; }
  const char* graphs_name() const { return hardware_graphs() ? "hardware" : "software"; }
  driver::CaptureMode capture_mode() const { return capture_mode_; }
  const std::string& capture_mode_name() const { return capture_mode_name_; }
  std::size_t total_memory() const { return total_memory_; }

  // A new stream. ClosedError once the device is closed, and when close() took the streams
  // while this one was made (its driver stream is destroyed): close() never misses one.
  std::shared_ptr<Stream> stream();
  // Ordered (name, value) pairs: the keys of Device.memory_stats().
  std::vector<std::pair<std::string, std::int64_t>> memory_stats() const;
  // Returns unpinned, unretained pool memory and unpinned info buffers to the driver after
  // waiting for the streams; skipped while any capture window is prepared or recording, and
  // while a recording elsewhere forbids this thread's frees (runtime/capture_registry.hpp).
  void cleanup();
  void inject_fault(const std::string& call, int status, std::int64_t after, std::int64_t times);
  void clear_faults();
  // How many calls of driver operation `call` the device's driver has made, failed ones included
  // (a device that offers fault injection): what tells a test whether an injected fault was reached.
  std::uint64_t driver_calls(const std::string& call) const;
  // Aborts open windows, waits for every stream, destroys every graph, returns all memory.
  void close();
  // Also true in a process forked after this device opened (lifecore/process_fork.hpp): there it
  // refuses every call, and dropping it leaves its driver, streams and memory to the parent.
  bool closed() const noexcept { return closed_.load(std::memory_order_acquire) || forked(); }
  bool forked() const noexcept { return fork_generation_ != fork_generation(); }
  // "this device was opened in process N, before this process forked from it; ...".
  std::string forked_text() const;
  // ClosedError "op: <forked_text>" in a process forked after this device opened. Safe to call
  // before any lock is taken (a lock held as the process forked is never let go in the child).
  void check_not_forked(const char* op) const;
  // Calls `on_close` once the device is closed: from the closing thread at the end of close()
  // (its memory returned; a close() racing it returns after the call), or at once on this
  // thread when the device is already closing or closed. A watch whose token was dropped
  // before the close began is not called; dropping it does not wait for a call under way.
  // `on_close` must not throw and must not close the device. So areas that take memory from
  // the device (a KV arena's waiters) learn of the close without polling.
  std::shared_ptr<void> watch_close(std::function<void()> on_close);
  // ClosedError naming `op` when the device is closed (or saying so in a forked process),
  // DeviceLostError when it is lost.
  void check_open(const char* op) const;

  // A sticky driver status (Status::sticky) loses the device: its context is unusable, and
  // every later call on it is refused with DeviceLostError. Every driver call of the device
  // goes through a watch that records the first one (runtime/lost_watch.hpp); note_status
  // records one met elsewhere.
  void note_status(const driver::Status& status);
  // driver::check that first records a sticky status as the device being lost: every failed
  // driver call of this device's own goes through it (or note_status), whichever object made it.
  void check_status(const driver::Status& status);
  bool lost() const noexcept { return lost_->load(std::memory_order_acquire); }
  // The flag lost() reads, for those that must see it without holding the Device (a stream's
  // RecordingMark: a lost device's captures went with its context).
  std::shared_ptr<const std::atomic<bool>> lost_flag() const noexcept { return lost_; }
  void check_not_lost(const char* op) const;

  // Driver captures that close() could not end because another thread began them in
  // thread_local / global mode (the driver lets only that thread end them). Each is ended, and
  // its driver stream destroyed, by that thread's next call on the stream; one whose thread
  // never calls again stays open until the driver goes (the documented leak).
  std::int64_t abandoned_captures() const noexcept { return abandoned_captures_.load(std::memory_order_acquire); }
  void capture_left_open() noexcept { abandoned_captures_.fetch_add(1, std::memory_order_acq_rel); }
  void capture_left_ended() noexcept { abandoned_captures_.fetch_sub(1, std::memory_order_acq_rel); }

  // For streams, buffers and graphs of this device: the vendor driver behind the watch that
  // notes a sticky status.
  driver::Driver& driver() { return *driver_; }
  // The vendor driver itself, for the emulated device's own controls (MockDriver::from).
  driver::Driver& vendor_driver() { return *vendor_; }
  // For areas that allocate device memory of their own (sequence KV pages) and keep it alive.
  std::shared_ptr<driver::Driver> shared_driver() const { return driver_; }
  MemoryManager& memory() { return *memory_; }
  InfoCache& info() { return info_; }
  // The zero-copy views lent out: a tensor passed back in is recognised as its buffer.
  LeaseTable& leases() { return leases_; }
  // The function to launch for `kernel` (a built-in's module loads on first use; a user
  // kernel's module must be of this device and loaded).
  driver::FunctionHandle function(const Kernel& kernel);
  // Loads the built-in module and resolves every built-in kernel, once: a stream calls it
  // before its driver capture begins, because the driver refuses (and invalidates the
  // capture) a module load while a stream captures. A failure is left for the launch to report.
  void load_builtins() noexcept;
  // User modules (runtime/module.hpp): loaded through the device so close() can unload them;
  // one whose load a close() overtook is unloaded and refused (ClosedError).
  driver::ModuleHandle load_module(const driver::ModuleImage& image);
  // Retires a module; the driver unload waits until no graph or capture window of this device
  // could hold one of its functions (then at the next load, release, cleanup() or close()).
  // On a closed device it is unloaded at once unless close() already did.
  void release_module(driver::ModuleHandle module) noexcept;
  WindowId new_window_id() { return next_window_.fetch_add(1) + 1; }
  GraphId new_graph_id() { return next_graph_.fetch_add(1) + 1; }
  void register_graph(const std::shared_ptr<Graph>& graph);
  void forget_graph(GraphId graph);
  // Returns an info buffer the cache no longer holds to the driver (after its fence), also once
  // the device is closed.
  void free_info_buffer(driver::DevicePtr ptr);

 private:
  // The driver's fault injection for `op` (inject_fault, clear_faults, driver_calls): ClosedError
  // once closed, LifecoreError naming `op` on a backend that does not offer it.
  driver::FaultInjection& fault_injection(const char* op) const;
  std::vector<std::shared_ptr<Stream>> live_streams();
  // close()'s: the live streams, and no stream registers after them (stream() is refused).
  std::vector<std::shared_ptr<Stream>> take_streams();
  std::vector<std::shared_ptr<Stream>> live_streams_locked() const;  // registry_mutex_ held
  std::vector<std::shared_ptr<Graph>> live_graphs();
  void unload_retired_modules() noexcept;
  bool close_locked();  // under close_mutex_; true for the call that closed the device

  struct CloseWatch {
    std::function<void()> on_close;
  };

  const std::shared_ptr<LostRecord> lost_record_;
  const std::shared_ptr<const std::atomic<bool>> lost_;  // lost_record_'s flag
  std::shared_ptr<driver::Driver> vendor_;
  std::shared_ptr<driver::Driver> driver_;  // vendor_, watched
  GraphsMode graphs_;
  driver::CaptureMode capture_mode_;
  std::string capture_mode_name_;
  std::string name_;
  std::size_t total_memory_ = 0;
  std::shared_ptr<MemoryManager> memory_;
  InfoCache info_;
  LeaseTable leases_;
  std::atomic<bool> closed_{false};
  const std::uint64_t fork_generation_ = fork_generation();
  const long opened_in_process_ = current_process_id();
  std::atomic<std::int64_t> abandoned_captures_{0};
  std::atomic<std::uint64_t> next_window_{0};
  std::atomic<std::uint64_t> next_graph_{0};

  std::mutex close_mutex_;
  std::mutex close_watch_mutex_;  // taken under close_mutex_ by close(), alone by watch_close
  std::vector<std::weak_ptr<CloseWatch>> close_watches_;
  mutable std::mutex registry_mutex_;
  std::vector<std::weak_ptr<Stream>> streams_;
  bool streams_taken_ = false;  // close() took the streams: a stream made since is refused
  std::unordered_map<GraphId, std::weak_ptr<Graph>> graphs_alive_;

  std::mutex functions_mutex_;
  driver::ModuleHandle builtin_module_{};
  // The built-in kernel at `index`, loading the module first if needed (functions_mutex_ held).
  driver::Status resolve_builtin_locked(std::size_t index, driver::FunctionHandle* out);
  // Read without the lock on the launch path; written once per kernel under it.
  std::unique_ptr<std::atomic<std::uintptr_t>[]> functions_;

  std::mutex modules_mutex_;
  std::vector<driver::ModuleHandle> modules_loaded_;
  std::vector<driver::ModuleHandle> modules_retired_;
};

}  // namespace lifecore::runtime
