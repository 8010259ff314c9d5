// The toy backend's Driver, for tests only: a device on host memory that borrows the emulated
// backend's device (opened through the registry, like any user of a backend) and reports every
// status with the toy's own numbering and names. Fault injection takes the toy's numbers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "lifecore/driver/registry.hpp"
#include "toy_status.hpp"

namespace toy {

namespace drv = lifecore::driver;

const drv::BackendDescriptor& toy_descriptor();

class ToyFaults final : public drv::FaultInjection {
 public:
  explicit ToyFaults(drv::FaultInjection* inner) : inner_(inner) {}
  void inject(drv::Operation op, int code, std::uint64_t after, std::uint64_t times) override {
    // A toy number becomes the emulation's number for the same lifecore code.
    const drv::StatusNaming& naming = drv::backend_descriptor(lifecore::test_support::emulated_backend()).naming;
    const int emulated = code == 0 ? 0 : naming.native(toy_code(code));
    inner_->inject(op, emulated, after, times);
  }
  void clear() override { inner_->clear(); }
  std::uint64_t call_count(drv::Operation op) const override { return inner_->call_count(op); }

 private:
  drv::FaultInjection* inner_;
};

class ToyDriver final : public drv::Driver {
 public:
  explicit ToyDriver(std::shared_ptr<drv::Driver> inner) : inner_(std::move(inner)), faults_(inner_->fault_injection()) {}

  const drv::BackendDescriptor& backend() const override { return toy_descriptor(); }
  int ordinal() const override { return inner_->ordinal(); }
  bool hardware_graphs() const override { return inner_->hardware_graphs(); }
  bool builtin_kernels_available(std::string* reason) const override { return inner_->builtin_kernels_available(reason); }
  drv::FaultInjection* fault_injection() override { return &faults_; }

  drv::Status device_name(std::string* out) override {
    drv::Status s = inner_->device_name(out);
    if (s.ok()) *out = "toy device";
    return own(s);
  }
  drv::Status driver_version(int* out) override { return own(inner_->driver_version(out)); }
  drv::Status mem_info(std::size_t* f, std::size_t* t) override { return own(inner_->mem_info(f, t)); }

  drv::Status stream_create(drv::StreamHandle* out) override { return own(inner_->stream_create(out)); }
  drv::Status stream_destroy(drv::StreamHandle s) override { return own(inner_->stream_destroy(s)); }
  drv::Status stream_synchronize(drv::StreamHandle s) override { return own(inner_->stream_synchronize(s)); }
  drv::Status stream_query(drv::StreamHandle s) override { return own(inner_->stream_query(s)); }
  std::uintptr_t stream_native_handle(drv::StreamHandle s) override { return inner_->stream_native_handle(s); }

  drv::Status event_create(drv::EventHandle* out, drv::EventTiming timing) override {
    return own(inner_->event_create(out, timing));
  }
  drv::Status event_destroy(drv::EventHandle e) override { return own(inner_->event_destroy(e)); }
  drv::Status event_record(drv::EventHandle e, drv::StreamHandle s) override { return own(inner_->event_record(e, s)); }
  drv::Status event_synchronize(drv::EventHandle e) override { return own(inner_->event_synchronize(e)); }
  drv::Status event_query(drv::EventHandle e) override { return own(inner_->event_query(e)); }
  drv::Status event_elapsed(drv::EventHandle a, drv::EventHandle b, float* ms) override {
    return own(inner_->event_elapsed(a, b, ms));
  }

  drv::Status mem_alloc(std::size_t n, drv::DevicePtr* out) override { return own(inner_->mem_alloc(n, out)); }
  drv::Status mem_free(drv::DevicePtr p) override { return own(inner_->mem_free(p)); }
  drv::Status mem_alloc_async(std::size_t n, drv::StreamHandle s, drv::DevicePtr* out) override {
    return own(inner_->mem_alloc_async(n, s, out));
  }
  drv::Status mem_free_async(drv::DevicePtr p, drv::StreamHandle s) override { return own(inner_->mem_free_async(p, s)); }
  drv::Status memcpy_htod(drv::DevicePtr d, const void* h, std::size_t n) override { return own(inner_->memcpy_htod(d, h, n)); }
  drv::Status memcpy_dtoh(void* h, drv::DevicePtr d, std::size_t n) override { return own(inner_->memcpy_dtoh(h, d, n)); }
  drv::Status memcpy_dtod(drv::DevicePtr d, drv::DevicePtr s, std::size_t n) override { return own(inner_->memcpy_dtod(d, s, n)); }
  drv::Status memcpy_htod_async(drv::DevicePtr d, const void* h, std::size_t n, drv::StreamHandle s) override {
    return own(inner_->memcpy_htod_async(d, h, n, s));
  }
  drv::Status memcpy_dtoh_async(void* h, drv::DevicePtr d, std::size_t n, drv::StreamHandle s) override {
    return own(inner_->memcpy_dtoh_async(h, d, n, s));
  }
  drv::Status memcpy_dtod_async(drv::DevicePtr d, drv::DevicePtr src, std::size_t n, drv::StreamHandle s) override {
    return own(inner_->memcpy_dtod_async(d, src, n, s));
  }
  drv::Status memset_d32(drv::DevicePtr d, std::uint32_t v, std::size_t n) override { return own(inner_->memset_d32(d, v, n)); }
  drv::Status memset_d32_async(drv::DevicePtr d, std::uint32_t v, std::size_t n, drv::StreamHandle s) override {
    return own(inner_->memset_d32_async(d, v, n, s));
  }

  drv::Status module_load(const drv::ModuleImage& image, drv::ModuleHandle* out) override {
    return own(inner_->module_load(image, out));
  }
  drv::Status module_unload(drv::ModuleHandle m) override { return own(inner_->module_unload(m)); }
  drv::Status module_get_function(drv::ModuleHandle m, const std::string& name, drv::FunctionHandle* out) override {
    return own(inner_->module_get_function(m, name, out));
  }
  drv::Status function_param_sizes(drv::FunctionHandle f, std::vector<std::size_t>* out) override {
    return own(inner_->function_param_sizes(f, out));
  }
  drv::Status launch_kernel(drv::FunctionHandle f, drv::Dim3 grid, drv::Dim3 block, std::uint32_t shared,
                            drv::StreamHandle s, const std::vector<drv::KernelArg>& args) override {
    return own(inner_->launch_kernel(f, grid, block, shared, s, args));
  }

  drv::Status stream_begin_capture(drv::StreamHandle s, drv::CaptureMode mode) override {
    return own(inner_->stream_begin_capture(s, mode));
  }
  drv::Status stream_end_capture(drv::StreamHandle s, drv::GraphHandle* out) override {
    return own(inner_->stream_end_capture(s, out));
  }
  drv::Status stream_capture_info(drv::StreamHandle s, drv::CaptureStatus* st, std::uint64_t* id) override {
    return own(inner_->stream_capture_info(s, st, id));
  }
  drv::Status thread_exchange_capture_mode(drv::CaptureMode* mode) override {
    return own(inner_->thread_exchange_capture_mode(mode));
  }

  drv::Status graph_node_counts(drv::GraphHandle g, drv::GraphNodeCounts* out) override {
    return own(inner_->graph_node_counts(g, out));
  }
  drv::Status graph_instantiate(drv::GraphHandle g, drv::GraphExecHandle* out) override {
    return own(inner_->graph_instantiate(g, out));
  }
  drv::Status graph_upload(drv::GraphExecHandle e, drv::StreamHandle s) override { return own(inner_->graph_upload(e, s)); }
  drv::Status graph_launch(drv::GraphExecHandle e, drv::StreamHandle s) override { return own(inner_->graph_launch(e, s)); }
  drv::Status graph_exec_update(drv::GraphExecHandle e, drv::GraphHandle g, drv::GraphUpdateResult* r) override {
    return own(inner_->graph_exec_update(e, g, r));
  }
  drv::Status graph_destroy(drv::GraphHandle g) override { return own(inner_->graph_destroy(g)); }
  drv::Status graph_exec_destroy(drv::GraphExecHandle e) override { return own(inner_->graph_exec_destroy(e)); }
  drv::Status stream_wait_event(std::uintptr_t s, drv::EventHandle e) override { return own(inner_->stream_wait_event(s, e)); }
  drv::Status host_view(drv::DevicePtr p, std::size_t n, drv::HostView* out) override {
    return own(inner_->host_view(p, n, out));
  }
  drv::Status map_host(void* h, std::size_t n, drv::DevicePtr* out) override { return own(inner_->map_host(h, n, out)); }
  drv::Status unmap_host(drv::DevicePtr p) override { return own(inner_->unmap_host(p)); }
  drv::Status event_record_native(drv::EventHandle e, std::uintptr_t s) override {
    return own(inner_->event_record_native(e, s));
  }
  drv::Status stream_capture_status_native(std::uintptr_t s, drv::CaptureStatus* status) override {
    return own(inner_->stream_capture_status_native(s, status));
  }
  drv::Status pointer_device(drv::DevicePtr p, int* ordinal) override { return own(inner_->pointer_device(p, ordinal)); }

 private:
  // The emulation's status in the toy's words: lifecore's code stays, the native number,
  // name and stickiness become the toy's; the call is renamed "toy" + the emulation's.
  static drv::Status own(drv::Status status) {
    if (status.ok()) return status;
    drv::Status mine = drv::local_status(toy_naming(), status.code, "toy:" + status.call, status.message);
    return mine;
  }

  std::shared_ptr<drv::Driver> inner_;
  ToyFaults faults_;
};

}  // namespace toy
