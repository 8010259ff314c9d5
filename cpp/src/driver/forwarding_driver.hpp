// A Driver that hands every call to another, each status passed back through passed(): the
// base of a driver that watches or translates another's statuses (a device's watch for a
// sticky status, a test backend's own numbering). One place to forward a new operation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lifecore/driver/driver.hpp"

namespace lifecore::driver {

class ForwardingDriver : public Driver {
 public:
  explicit ForwardingDriver(std::shared_ptr<Driver> inner) : inner_(std::move(inner)) {}

  // The driver forwarded to.
  Driver& inner() noexcept { return *inner_; }

  const BackendDescriptor& backend() const override { return inner_->backend(); }
  int ordinal() const override { return inner_->ordinal(); }
  bool hardware_graphs() const override { return inner_->hardware_graphs(); }
  std::shared_ptr<const void> capture_domain() const override { return inner_->capture_domain(); }
  bool builtin_kernels_available(std::string* reason) const override { return inner_->builtin_kernels_available(reason); }
  FaultInjection* fault_injection() override { return inner_->fault_injection(); }

  Status device_name(std::string* out) override { return passed(inner_->device_name(out)); }
  Status driver_version(int* out) override { return passed(inner_->driver_version(out)); }
  Status mem_info(std::size_t* free_bytes, std::size_t* total_bytes) override {
    return passed(inner_->mem_info(free_bytes, total_bytes));
  }

  Status stream_create(StreamHandle* out) override { return passed(inner_->stream_create(out)); }
  Status stream_destroy(StreamHandle stream) override { return passed(inner_->stream_destroy(stream)); }
  Status stream_synchronize(StreamHandle stream) override {
    return passed(inner_->stream_synchronize(stream));
  }
  Status stream_query(StreamHandle stream) override { return passed(inner_->stream_query(stream)); }
  std::uintptr_t stream_native_handle(StreamHandle stream) override {
    return inner_->stream_native_handle(stream);
  }

  Status event_create(EventHandle* out, EventTiming timing) override {
    return passed(inner_->event_create(out, timing));
  }
  Status event_destroy(EventHandle event) override { return passed(inner_->event_destroy(event)); }
  Status event_record(EventHandle event, StreamHandle stream) override {
    return passed(inner_->event_record(event, stream));
  }
  Status event_synchronize(EventHandle event) override {
    return passed(inner_->event_synchronize(event));
  }
  Status event_query(EventHandle event) override { return passed(inner_->event_query(event)); }
  Status event_elapsed(EventHandle start, EventHandle end, float* milliseconds) override {
    return passed(inner_->event_elapsed(start, end, milliseconds));
  }

  Status mem_alloc(std::size_t bytes, DevicePtr* out) override {
    return passed(inner_->mem_alloc(bytes, out));
  }
  Status mem_free(DevicePtr ptr) override { return passed(inner_->mem_free(ptr)); }
  Status mem_alloc_async(std::size_t bytes, StreamHandle stream, DevicePtr* out) override {
    return passed(inner_->mem_alloc_async(bytes, stream, out));
  }
  Status mem_free_async(DevicePtr ptr, StreamHandle stream) override {
    return passed(inner_->mem_free_async(ptr, stream));
  }
  Status memcpy_htod(DevicePtr dst, const void* src, std::size_t bytes) override {
    return passed(inner_->memcpy_htod(dst, src, bytes));
  }
  Status memcpy_dtoh(void* dst, DevicePtr src, std::size_t bytes) override {
    return passed(inner_->memcpy_dtoh(dst, src, bytes));
  }
  Status memcpy_dtod(DevicePtr dst, DevicePtr src, std::size_t bytes) override {
    return passed(inner_->memcpy_dtod(dst, src, bytes));
  }
  Status memcpy_htod_async(DevicePtr dst, const void* src, std::size_t bytes,
                                   StreamHandle stream) override {
    return passed(inner_->memcpy_htod_async(dst, src, bytes, stream));
  }
  Status memcpy_dtoh_async(void* dst, DevicePtr src, std::size_t bytes,
                                   StreamHandle stream) override {
    return passed(inner_->memcpy_dtoh_async(dst, src, bytes, stream));
  }
  Status memcpy_dtod_async(DevicePtr dst, DevicePtr src, std::size_t bytes,
                                   StreamHandle stream) override {
    return passed(inner_->memcpy_dtod_async(dst, src, bytes, stream));
  }
  Status memset_d32(DevicePtr dst, std::uint32_t value, std::size_t count) override {
    return passed(inner_->memset_d32(dst, value, count));
  }
  Status memset_d32_async(DevicePtr dst, std::uint32_t value, std::size_t count,
                                  StreamHandle stream) override {
    return passed(inner_->memset_d32_async(dst, value, count, stream));
  }

  Status module_load(const ModuleImage& image, ModuleHandle* out) override {
    return passed(inner_->module_load(image, out));
  }
  Status module_unload(ModuleHandle module) override { return passed(inner_->module_unload(module)); }
  Status module_get_function(ModuleHandle module, const std::string& name,
                                     FunctionHandle* out) override {
    return passed(inner_->module_get_function(module, name, out));
  }
  Status function_param_sizes(FunctionHandle function, std::vector<std::size_t>* out) override {
    return passed(inner_->function_param_sizes(function, out));
  }
  Status launch_kernel(FunctionHandle function, Dim3 grid, Dim3 block,
                               std::uint32_t shared_bytes, StreamHandle stream,
                               const std::vector<KernelArg>& args) override {
    return passed(inner_->launch_kernel(function, grid, block, shared_bytes, stream, args));
  }

  Status stream_begin_capture(StreamHandle stream, CaptureMode mode) override {
    return passed(inner_->stream_begin_capture(stream, mode));
  }
  Status stream_end_capture(StreamHandle stream, GraphHandle* out) override {
    return passed(inner_->stream_end_capture(stream, out));
  }
  Status stream_capture_info(StreamHandle stream, CaptureStatus* status,
                                     std::uint64_t* capture_id) override {
    return passed(inner_->stream_capture_info(stream, status, capture_id));
  }
  Status thread_exchange_capture_mode(CaptureMode* mode) override {
    return passed(inner_->thread_exchange_capture_mode(mode));
  }

  Status graph_node_counts(GraphHandle graph, GraphNodeCounts* out) override {
    return passed(inner_->graph_node_counts(graph, out));
  }
  Status graph_instantiate(GraphHandle graph, GraphExecHandle* out) override {
    return passed(inner_->graph_instantiate(graph, out));
  }
  Status graph_upload(GraphExecHandle exec, StreamHandle stream) override {
    return passed(inner_->graph_upload(exec, stream));
  }
  Status graph_launch(GraphExecHandle exec, StreamHandle stream) override {
    return passed(inner_->graph_launch(exec, stream));
  }
  Status graph_exec_update(GraphExecHandle exec, GraphHandle graph,
                                   GraphUpdateResult* result) override {
    return passed(inner_->graph_exec_update(exec, graph, result));
  }
  Status graph_destroy(GraphHandle graph) override { return passed(inner_->graph_destroy(graph)); }
  Status graph_exec_destroy(GraphExecHandle exec) override {
    return passed(inner_->graph_exec_destroy(exec));
  }

  Status stream_wait_event(std::uintptr_t native_stream, EventHandle event) override {
    return passed(inner_->stream_wait_event(native_stream, event));
  }
  Status event_record_native(EventHandle event, std::uintptr_t native_stream) override {
    return passed(inner_->event_record_native(event, native_stream));
  }
  Status stream_capture_status_native(std::uintptr_t native_stream, CaptureStatus* status) override {
    return passed(inner_->stream_capture_status_native(native_stream, status));
  }
  Status pointer_device(DevicePtr ptr, int* ordinal) override {
    return passed(inner_->pointer_device(ptr, ordinal));
  }
  Status host_view(DevicePtr ptr, std::size_t bytes, HostView* out) override {
    return passed(inner_->host_view(ptr, bytes, out));
  }
  Status map_host(void* host, std::size_t bytes, DevicePtr* out) override {
    return passed(inner_->map_host(host, bytes, out));
  }
  Status unmap_host(DevicePtr ptr) override { return passed(inner_->unmap_host(ptr)); }

 protected:
  // What a forwarded call returns: its status as the inner driver gave it, unless overridden.
  virtual Status passed(Status status) { return status; }

  std::shared_ptr<Driver> inner_;
};

}  // namespace lifecore::driver
