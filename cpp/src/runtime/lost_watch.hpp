// Every driver call a device makes goes through this watch, so the first sticky status anyone
// meets loses the device, also where the caller has nobody to report a failure to (a graph's
// upload after its seal, a free at a drop, a capture-mode switch back): the device says it is
// lost at once, and names that call, instead of the next call failing on a dead context.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "lifecore/driver/driver.hpp"

namespace lifecore::runtime {

// Whether a device is lost, and by which status: shared by the device and its driver's watch,
// which may outlive it (a forked child keeps the driver to exit).
class LostRecord {
 public:
  bool lost() const noexcept { return lost_.load(std::memory_order_acquire); }
  // The flag lost() reads, for those that must see it without holding the device.
  static std::shared_ptr<const std::atomic<bool>> flag(const std::shared_ptr<LostRecord>& record) noexcept {
    return {record, &record->lost_};
  }
  // Records the first sticky status; any other is ignored. Never throws past a failed copy of
  // the status's text: the flag is set first.
  void note(const driver::Status& status) noexcept {
    if (!status.sticky || lost()) return;
    std::lock_guard lock(mutex_);
    if (!lost_.load(std::memory_order_relaxed)) {
      try {
        reason_ = status.name + " (" + std::to_string(status.native_code) + ") from " + status.call;
        status_ = status;
      } catch (...) {  // out of memory for the text: still lost, with less said
      }
    }
    lost_.store(true, std::memory_order_release);
  }
  // The status that lost the device and its one-line reason (empty while it is not lost).
  std::pair<std::string, driver::Status> cause() const {
    std::lock_guard lock(mutex_);
    return {reason_, status_};
  }

 private:
  std::atomic<bool> lost_{false};
  mutable std::mutex mutex_;
  std::string reason_;
  driver::Status status_;
};

// The vendor driver, each status it returns noted in the device's LostRecord first. Not
// final: a test driver overrides one call of it.
class LostWatch : public driver::Driver {
 public:
  LostWatch(std::shared_ptr<driver::Driver> inner, std::shared_ptr<LostRecord> record)
      : inner_(std::move(inner)), record_(std::move(record)) {}

  // The driver watched: the emulated device's own controls are reached through it.
  driver::Driver& inner() noexcept { return *inner_; }

  const driver::BackendDescriptor& backend() const override { return inner_->backend(); }
  int ordinal() const override { return inner_->ordinal(); }
  bool hardware_graphs() const override { return inner_->hardware_graphs(); }
  std::shared_ptr<const void> capture_domain() const override { return inner_->capture_domain(); }
  bool builtin_kernels_available(std::string* reason) const override { return inner_->builtin_kernels_available(reason); }
  driver::FaultInjection* fault_injection() override { return inner_->fault_injection(); }

  driver::Status device_name(std::string* out) override { return noted(inner_->device_name(out)); }
  driver::Status driver_version(int* out) override { return noted(inner_->driver_version(out)); }
  driver::Status mem_info(std::size_t* free_bytes, std::size_t* total_bytes) override {
    return noted(inner_->mem_info(free_bytes, total_bytes));
  }

  driver::Status stream_create(driver::StreamHandle* out) override { return noted(inner_->stream_create(out)); }
  driver::Status stream_destroy(driver::StreamHandle stream) override { return noted(inner_->stream_destroy(stream)); }
  driver::Status stream_synchronize(driver::StreamHandle stream) override {
    return noted(inner_->stream_synchronize(stream));
  }
  driver::Status stream_query(driver::StreamHandle stream) override { return noted(inner_->stream_query(stream)); }
  std::uintptr_t stream_native_handle(driver::StreamHandle stream) override {
    return inner_->stream_native_handle(stream);
  }

  driver::Status event_create(driver::EventHandle* out, driver::EventTiming timing) override {
    return noted(inner_->event_create(out, timing));
  }
  driver::Status event_destroy(driver::EventHandle event) override { return noted(inner_->event_destroy(event)); }
  driver::Status event_record(driver::EventHandle event, driver::StreamHandle stream) override {
    return noted(inner_->event_record(event, stream));
  }
  driver::Status event_synchronize(driver::EventHandle event) override {
    return noted(inner_->event_synchronize(event));
  }
  driver::Status event_query(driver::EventHandle event) override { return noted(inner_->event_query(event)); }
  driver::Status event_elapsed(driver::EventHandle start, driver::EventHandle end, float* milliseconds) override {
    return noted(inner_->event_elapsed(start, end, milliseconds));
  }

  driver::Status mem_alloc(std::size_t bytes, driver::DevicePtr* out) override {
    return noted(inner_->mem_alloc(bytes, out));
  }
  driver::Status mem_free(driver::DevicePtr ptr) override { return noted(inner_->mem_free(ptr)); }
  driver::Status mem_alloc_async(std::size_t bytes, driver::StreamHandle stream, driver::DevicePtr* out) override {
    return noted(inner_->mem_alloc_async(bytes, stream, out));
  }
  driver::Status mem_free_async(driver::DevicePtr ptr, driver::StreamHandle stream) override {
    return noted(inner_->mem_free_async(ptr, stream));
  }
  driver::Status memcpy_htod(driver::DevicePtr dst, const void* src, std::size_t bytes) override {
    return noted(inner_->memcpy_htod(dst, src, bytes));
  }
  driver::Status memcpy_dtoh(void* dst, driver::DevicePtr src, std::size_t bytes) override {
    return noted(inner_->memcpy_dtoh(dst, src, bytes));
  }
  driver::Status memcpy_dtod(driver::DevicePtr dst, driver::DevicePtr src, std::size_t bytes) override {
    return noted(inner_->memcpy_dtod(dst, src, bytes));
  }
  driver::Status memcpy_htod_async(driver::DevicePtr dst, const void* src, std::size_t bytes,
                                   driver::StreamHandle stream) override {
    return noted(inner_->memcpy_htod_async(dst, src, bytes, stream));
  }
  driver::Status memcpy_dtoh_async(void* dst, driver::DevicePtr src, std::size_t bytes,
                                   driver::StreamHandle stream) override {
    return noted(inner_->memcpy_dtoh_async(dst, src, bytes, stream));
  }
  driver::Status memcpy_dtod_async(driver::DevicePtr dst, driver::DevicePtr src, std::size_t bytes,
                                   driver::StreamHandle stream) override {
    return noted(inner_->memcpy_dtod_async(dst, src, bytes, stream));
  }
  driver::Status memset_d32(driver::DevicePtr dst, std::uint32_t value, std::size_t count) override {
    return noted(inner_->memset_d32(dst, value, count));
  }
  driver::Status memset_d32_async(driver::DevicePtr dst, std::uint32_t value, std::size_t count,
                                  driver::StreamHandle stream) override {
    return noted(inner_->memset_d32_async(dst, value, count, stream));
  }

  driver::Status module_load(const driver::ModuleImage& image, driver::ModuleHandle* out) override {
    return noted(inner_->module_load(image, out));
  }
  driver::Status module_unload(driver::ModuleHandle module) override { return noted(inner_->module_unload(module)); }
  driver::Status module_get_function(driver::ModuleHandle module, const std::string& name,
                                     driver::FunctionHandle* out) override {
    return noted(inner_->module_get_function(module, name, out));
  }
  driver::Status function_param_sizes(driver::FunctionHandle function, std::vector<std::size_t>* out) override {
    return noted(inner_->function_param_sizes(function, out));
  }
  driver::Status launch_kernel(driver::FunctionHandle function, driver::Dim3 grid, driver::Dim3 block,
                               std::uint32_t shared_bytes, driver::StreamHandle stream,
                               const std::vector<driver::KernelArg>& args) override {
    return noted(inner_->launch_kernel(function, grid, block, shared_bytes, stream, args));
  }

  driver::Status stream_begin_capture(driver::StreamHandle stream, driver::CaptureMode mode) override {
    return noted(inner_->stream_begin_capture(stream, mode));
  }
  driver::Status stream_end_capture(driver::StreamHandle stream, driver::GraphHandle* out) override {
    return noted(inner_->stream_end_capture(stream, out));
  }
  driver::Status stream_capture_info(driver::StreamHandle stream, driver::CaptureStatus* status,
                                     std::uint64_t* capture_id) override {
    return noted(inner_->stream_capture_info(stream, status, capture_id));
  }
  driver::Status thread_exchange_capture_mode(driver::CaptureMode* mode) override {
    return noted(inner_->thread_exchange_capture_mode(mode));
  }

  driver::Status graph_node_counts(driver::GraphHandle graph, driver::GraphNodeCounts* out) override {
    return noted(inner_->graph_node_counts(graph, out));
  }
  driver::Status graph_instantiate(driver::GraphHandle graph, driver::GraphExecHandle* out) override {
    return noted(inner_->graph_instantiate(graph, out));
  }
  driver::Status graph_upload(driver::GraphExecHandle exec, driver::StreamHandle stream) override {
    return noted(inner_->graph_upload(exec, stream));
  }
  driver::Status graph_launch(driver::GraphExecHandle exec, driver::StreamHandle stream) override {
    return noted(inner_->graph_launch(exec, stream));
  }
  driver::Status graph_exec_update(driver::GraphExecHandle exec, driver::GraphHandle graph,
                                   driver::GraphUpdateResult* result) override {
    return noted(inner_->graph_exec_update(exec, graph, result));
  }
  driver::Status graph_destroy(driver::GraphHandle graph) override { return noted(inner_->graph_destroy(graph)); }
  driver::Status graph_exec_destroy(driver::GraphExecHandle exec) override {
    return noted(inner_->graph_exec_destroy(exec));
  }

  driver::Status stream_wait_event(std::uintptr_t native_stream, driver::EventHandle event) override {
    return noted(inner_->stream_wait_event(native_stream, event));
  }
  driver::Status event_record_native(driver::EventHandle event, std::uintptr_t native_stream) override {
    return noted(inner_->event_record_native(event, native_stream));
  }
  driver::Status stream_capture_status_native(std::uintptr_t native_stream, driver::CaptureStatus* status) override {
    return noted(inner_->stream_capture_status_native(native_stream, status));
  }
  driver::Status pointer_device(driver::DevicePtr ptr, int* ordinal) override {
    return noted(inner_->pointer_device(ptr, ordinal));
  }
  driver::Status host_view(driver::DevicePtr ptr, std::size_t bytes, driver::HostView* out) override {
    return noted(inner_->host_view(ptr, bytes, out));
  }
  driver::Status map_host(void* host, std::size_t bytes, driver::DevicePtr* out) override {
    return noted(inner_->map_host(host, bytes, out));
  }
  driver::Status unmap_host(driver::DevicePtr ptr) override { return noted(inner_->unmap_host(ptr)); }

 private:
  driver::Status noted(driver::Status status) const noexcept {
    record_->note(status);
    return status;
  }

  std::shared_ptr<driver::Driver> inner_;
  std::shared_ptr<LostRecord> record_;
};

}  // namespace lifecore::runtime
