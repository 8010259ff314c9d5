// The CUDA backend: one Driver per device, over the driver API resolved by cuda_loader.
// Every operation makes the device's primary context current on the calling thread first
// (threads of a Python program come and go; the context must follow the call).
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "lifecore/driver/builtin_kernels.hpp"
#include "driver/allocation_registry.hpp"
#include "driver/cuda/cuda_builtin_ptx.hpp"
#include "driver/cuda/cuda_backend.hpp"
#include "driver/cuda/cuda_loader.hpp"
#include "driver/handle_registry.hpp"
#include "driver/kernel_params.hpp"
#include "driver/native_driver.hpp"
#include "driver/open_checks.hpp"

namespace lifecore::driver {
namespace cuda {
namespace {

using namespace cuda_abi;

class CudaDriver final : public NativeDriver {
 public:
  CudaDriver(const CudaApi& api, int ordinal, CUdevice device, CUcontext context)
      : api_(api), ordinal_(ordinal), device_(device), context_(context) {}

  ~CudaDriver() override {
    // Release what the runtime left behind, then the primary context reference. Failures
    // are ignored: there is no one left to report them to. Where the context cannot be made
    // current here, the objects are left to it, but the reference is still given back (it
    // needs no current context): kept, the driver would hold the context for the process.
    // The primary context is shared: another Device's stream, or another library's, may be
    // recording in it now, on any thread (a driver goes when Python collects its last Device).
    // A context synchronize is illegal while any capture in the context is live and invalidates
    // it, whatever the capture modes (seen on an H200: a global-mode recording invalidated when
    // an earlier test's device was collected during it), and outside relaxed mode so are the
    // frees below. So the thread works in relaxed mode and waits for its own streams only.
    if (OnDevice on_device(*this, "cuCtxSetCurrent"); on_device.status().ok()) {
      CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
      const bool relaxed = api_.cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
      const std::vector<CUstream> streams = streams_.take_all();
      synchronize_idle(streams, api_.cuStreamSynchronize);  // a recording's work never runs
      for (auto exec : execs_.take_all()) api_.cuGraphExecDestroy(exec);
      for (auto graph : graphs_.take_all()) api_.cuGraphDestroy(graph);
      for (auto event : events_.take_all()) api_.cuEventDestroy(event);
      for (CUstream stream : streams) api_.cuStreamDestroy(stream);
      for (auto module : modules_.take_all()) api_.cuModuleUnload(module);
      for (DevicePtr pointer : allocations_.take_all()) api_.cuMemFree(pointer);
      if (relaxed) api_.cuThreadExchangeStreamCaptureMode(&mode);
    }
    api_.cuDevicePrimaryCtxRelease(device_);
  }

  const BackendDescriptor& backend() const override { return cuda_backend(); }
  int ordinal() const override { return ordinal_; }
  bool hardware_graphs() const override { return true; }
  bool builtin_kernels_available(std::string*) const override { return true; }

  // device
  Status device_name(std::string* out) override {
    char name[256] = {};
    Status status = checked(api_.cuDeviceGetName(name, sizeof name - 1, device_), "cuDeviceGetName");
    if (status.ok()) *out = name;
    return status;
  }
  Status driver_version(int* out) override { return checked(api_.cuDriverGetVersion(out), "cuDriverGetVersion"); }
  Status mem_info(std::size_t* free_bytes, std::size_t* total_bytes) override {
    return current("cuMemGetInfo_v2", [&] { return api_.cuMemGetInfo(free_bytes, total_bytes); });
  }

  // streams
  Status stream_create(StreamHandle* out) override {
    return create(streams_, out, "cuStreamCreate", [&](CUstream* s) { return api_.cuStreamCreate(s, CU_STREAM_NON_BLOCKING); });
  }
  Status stream_destroy(StreamHandle handle) override {
    return release(streams_, handle, "cuStreamDestroy_v2", [&](CUstream s) { return api_.cuStreamDestroy(s); });
  }
  Status stream_synchronize(StreamHandle handle) override {
    return on(streams_, handle, "cuStreamSynchronize", [&](CUstream s) { return api_.cuStreamSynchronize(s); });
  }
  Status stream_query(StreamHandle handle) override {
    return on(streams_, handle, "cuStreamQuery", [&](CUstream s) { return api_.cuStreamQuery(s); });
  }
  std::uintptr_t stream_native_handle(StreamHandle handle) override {
    return streams_.contains(handle) ? static_cast<std::uintptr_t>(handle) : 0;
  }

  // events
  Status event_create(EventHandle* out, EventTiming timing) override {
    const unsigned flags = timing == EventTiming::enabled ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING;
    return create(events_, out, "cuEventCreate", [&](CUevent* e) { return api_.cuEventCreate(e, flags); });
  }
  Status event_destroy(EventHandle handle) override {
    return release(events_, handle, "cuEventDestroy_v2", [&](CUevent e) { return api_.cuEventDestroy(e); });
  }
  Status event_record(EventHandle event_handle, StreamHandle stream_handle) override {
    return on(events_, event_handle, streams_, stream_handle, "cuEventRecord",
              [&](CUevent e, CUstream s) { return api_.cuEventRecord(e, s); });
  }
  Status event_synchronize(EventHandle handle) override {
    return on(events_, handle, "cuEventSynchronize", [&](CUevent e) { return api_.cuEventSynchronize(e); });
  }
  Status event_query(EventHandle handle) override {
    return on(events_, handle, "cuEventQuery", [&](CUevent e) { return api_.cuEventQuery(e); });
  }
  Status event_elapsed(EventHandle start_handle, EventHandle end_handle, float* milliseconds) override {
    CUevent start, end;
    if (Status s = events_.find(start_handle, "cuEventElapsedTime", &start); !s.ok()) return s;
    if (Status s = events_.find(end_handle, "cuEventElapsedTime", &end); !s.ok()) return s;
    return current("cuEventElapsedTime", [&] { return api_.cuEventElapsedTime(milliseconds, start, end); });
  }

  // memory
  Status mem_alloc(std::size_t bytes, DevicePtr* out) override {
    CUdeviceptr pointer = 0;
    Status status = current("cuMemAlloc_v2", [&] { return api_.cuMemAlloc(&pointer, bytes); });
    if (status.ok()) *out = allocations_.adopt(pointer);
    return status;
  }
  Status mem_free(DevicePtr pointer) override {
    std::uint64_t adoption = 0;
    if (Status s = allocations_.begin_free(pointer, "cuMemFree_v2", &adoption); !s.ok()) return s;
    Status status = current("cuMemFree_v2", [&] { return api_.cuMemFree(pointer); });
    allocations_.settle(pointer, adoption, status.ok());
    return status;
  }
  Status mem_alloc_async(std::size_t bytes, StreamHandle handle, DevicePtr* out) override {
    if (api_.cuMemAllocAsync == nullptr) return unsupported("cuMemAllocAsync");
    CUdeviceptr pointer = 0;
    Status status = on(streams_, handle, "cuMemAllocAsync", [&](CUstream s) { return api_.cuMemAllocAsync(&pointer, bytes, s); });
    if (status.ok()) *out = allocations_.adopt(pointer);
    return status;
  }
  Status mem_free_async(DevicePtr pointer, StreamHandle handle) override {
    if (api_.cuMemFreeAsync == nullptr) return unsupported("cuMemFreeAsync");
    CUstream stream;
    if (Status s = streams_.find(handle, "cuMemFreeAsync", &stream); !s.ok()) return s;
    std::uint64_t adoption = 0;
    if (Status s = allocations_.begin_free(pointer, "cuMemFreeAsync", &adoption); !s.ok()) return s;
    Status status = current("cuMemFreeAsync", [&] { return api_.cuMemFreeAsync(pointer, stream); });
    allocations_.settle(pointer, adoption, status.ok());
    return status;
  }
  Status memcpy_htod(DevicePtr dst, const void* src, std::size_t bytes) override {
    return current("cuMemcpyHtoD_v2", [&] { return api_.cuMemcpyHtoD(dst, src, bytes); });
  }
  Status memcpy_dtoh(void* dst, DevicePtr src, std::size_t bytes) override {
    return current("cuMemcpyDtoH_v2", [&] { return api_.cuMemcpyDtoH(dst, src, bytes); });
  }
  Status memcpy_dtod(DevicePtr dst, DevicePtr src, std::size_t bytes) override {
    return current("cuMemcpyDtoD_v2", [&] { return api_.cuMemcpyDtoD(dst, src, bytes); });
  }
  Status memcpy_htod_async(DevicePtr dst, const void* src, std::size_t bytes, StreamHandle handle) override {
    return on(streams_, handle, "cuMemcpyHtoDAsync_v2", [&](CUstream s) { return api_.cuMemcpyHtoDAsync(dst, src, bytes, s); });
  }
  Status memcpy_dtoh_async(void* dst, DevicePtr src, std::size_t bytes, StreamHandle handle) override {
    return on(streams_, handle, "cuMemcpyDtoHAsync_v2", [&](CUstream s) { return api_.cuMemcpyDtoHAsync(dst, src, bytes, s); });
  }
  Status memcpy_dtod_async(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle handle) override {
    return on(streams_, handle, "cuMemcpyDtoDAsync_v2", [&](CUstream s) { return api_.cuMemcpyDtoDAsync(dst, src, bytes, s); });
  }
  Status memset_d32(DevicePtr dst, std::uint32_t value, std::size_t count) override {
    return current("cuMemsetD32_v2", [&] { return api_.cuMemsetD32(dst, value, count); });
  }
  Status memset_d32_async(DevicePtr dst, std::uint32_t value, std::size_t count, StreamHandle handle) override {
    return on(streams_, handle, "cuMemsetD32Async", [&](CUstream s) { return api_.cuMemsetD32Async(dst, value, count, s); });
  }

  // modules and kernels
  Status module_load(const ModuleImage& image, ModuleHandle* out) override {
    const void* data = nullptr;
    std::string text;
    switch (image.kind) {
      case ImageKind::builtin:
        text = builtin_ptx();
        data = text.c_str();
        break;
      case ImageKind::ptx:
        text = image.bytes;  // the JIT reads a NUL-terminated string
        data = text.c_str();
        break;
      case ImageKind::cubin:
      case ImageKind::fatbin:
        if (image.bytes.empty()) return cuda_local_status(Code::invalid_image, "cuModuleLoadDataEx", "the image is empty");
        data = image.bytes.data();
        break;
      case ImageKind::code_object:
        return cuda_local_status(Code::invalid_image, "cuModuleLoadDataEx",
                           "a HIP code object cannot be loaded by the CUDA driver (expected PTX, cubin or fatbin)");
    }
    // The JIT's own diagnostics go into the Status message: "syntax error at line 3" beats
    // CUDA_ERROR_INVALID_PTX alone.
    std::vector<char> error_log(8192, '\0');
    CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void* values[] = {error_log.data(), reinterpret_cast<void*>(static_cast<std::uintptr_t>(error_log.size() - 1))};
    CUmodule module = nullptr;
    Status status = current("cuModuleLoadDataEx", [&] { return api_.cuModuleLoadDataEx(&module, data, 2, options, values); });
    if (!status.ok()) {
      std::string log(error_log.data());
      while (!log.empty() && (log.back() == '\n' || log.back() == '\0')) log.pop_back();
      if (!log.empty()) status.message += ": " + log;
      return status;
    }
    *out = modules_.adopt(module);
    return status;
  }
  Status module_unload(ModuleHandle handle) override {
    return unload_module(modules_, functions_, handle, "cuModuleUnload", [&](CUmodule m) { return api_.cuModuleUnload(m); });
  }
  Status module_get_function(ModuleHandle handle, const std::string& name, FunctionHandle* out) override {
    CUmodule module;
    if (Status s = modules_.find(handle, "cuModuleGetFunction", &module); !s.ok()) return s;
    CUfunction function = nullptr;
    Status status = current("cuModuleGetFunction", [&] { return api_.cuModuleGetFunction(&function, module, name.c_str()); });
    if (!status.ok()) {
      status.message += ": no kernel named '" + name + "' in the module";
      return status;
    }
    return adopt_function(modules_, functions_, handle, function, "cuModuleGetFunction", out);
  }
  Status function_param_sizes(FunctionHandle handle, std::vector<std::size_t>* out) override {
    if (api_.cuFuncGetParamInfo == nullptr) return unsupported("cuFuncGetParamInfo");
    CUfunction function;
    if (Status s = functions_.find(handle, "cuFuncGetParamInfo", &function); !s.ok()) return s;
    OnDevice on_device(*this, "cuFuncGetParamInfo");
    if (!on_device.status().ok()) return on_device.status();
    std::vector<std::size_t> sizes;
    for (std::size_t index = 0;; ++index) {
      std::size_t offset = 0, size = 0;
      CUresult result = api_.cuFuncGetParamInfo(function, index, &offset, &size);
      if (result == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
      if (result != CUDA_SUCCESS) return cuda_status(api_, result, "cuFuncGetParamInfo");
      sizes.push_back(size);
    }
    *out = std::move(sizes);
    return Status::success();
  }
  Status launch_kernel(FunctionHandle function_handle, Dim3 grid, Dim3 block, std::uint32_t shared_bytes,
                       StreamHandle stream_handle, const std::vector<KernelArg>& args) override {
    CUfunction function;
    CUstream stream;
    if (Status s = functions_.find(function_handle, "cuLaunchKernel", &function); !s.ok()) return s;
    if (Status s = streams_.find(stream_handle, "cuLaunchKernel", &stream); !s.ok()) return s;
    KernelParams params(args);
    return current("cuLaunchKernel", [&] {
      return api_.cuLaunchKernel(function, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes, stream,
                                 params.data(), nullptr);
    });
  }

  // capture
  Status stream_begin_capture(StreamHandle handle, CaptureMode mode) override {
    return on(streams_, handle, "cuStreamBeginCapture_v2",
              [&](CUstream s) { return api_.cuStreamBeginCapture(s, static_cast<CUstreamCaptureMode>(mode)); });
  }
  Status stream_end_capture(StreamHandle handle, GraphHandle* out) override {
    *out = GraphHandle{0};
    CUgraph graph = nullptr;
    Status status = on(streams_, handle, "cuStreamEndCapture", [&](CUstream s) { return api_.cuStreamEndCapture(s, &graph); });
    if (graph == nullptr) {
      if (status.ok()) return cuda_local_status(Code::capture_invalidated, "cuStreamEndCapture", "the capture produced no graph");
      return status;
    }
    if (!status.ok()) {  // a graph with a failed end: never hand it out
      api_.cuGraphDestroy(graph);
      return status;
    }
    *out = graphs_.adopt(graph);
    return status;
  }
  Status stream_capture_info(StreamHandle handle, CaptureStatus* capture_status, std::uint64_t* capture_id) override {
    CUstreamCaptureStatus native = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    Status status = api_.cuStreamGetCaptureInfo_v3 != nullptr
        ? on(streams_, handle, "cuStreamGetCaptureInfo_v3", [&](CUstream s) {
            return api_.cuStreamGetCaptureInfo_v3(s, &native, &id, nullptr, nullptr, nullptr, nullptr);
          })
        : on(streams_, handle, "cuStreamGetCaptureInfo_v2", [&](CUstream s) {
            return api_.cuStreamGetCaptureInfo_v2(s, &native, &id, nullptr, nullptr, nullptr);
          });
    if (status.ok()) {
      *capture_status = static_cast<CaptureStatus>(native);
      *capture_id = native == CU_STREAM_CAPTURE_STATUS_ACTIVE ? id : 0;  // valid only while active
    }
    return status;
  }
  Status thread_exchange_capture_mode(CaptureMode* mode) override {
    CUstreamCaptureMode native = static_cast<CUstreamCaptureMode>(*mode);
    // The mode is the thread's, not a context's: no context is made current, so a lost one cannot
    // keep a thread from getting its mode back.
    Status status = checked(api_.cuThreadExchangeStreamCaptureMode(&native), "cuThreadExchangeStreamCaptureMode");
    if (status.ok()) *mode = static_cast<CaptureMode>(native);
    return status;
  }

  // graphs
  Status graph_node_counts(GraphHandle handle, GraphNodeCounts* out) override {
    CUgraph graph;
    if (Status s = graphs_.find(handle, "cuGraphGetNodes", &graph); !s.ok()) return s;
    std::size_t count = 0;
    if (Status s = current("cuGraphGetNodes", [&] { return api_.cuGraphGetNodes(graph, nullptr, &count); }); !s.ok()) return s;
    std::vector<CUgraphNode> nodes(count);
    if (count > 0) {
      Status s = current("cuGraphGetNodes", [&] { return api_.cuGraphGetNodes(graph, nodes.data(), &count); });
      if (!s.ok()) return s;
      nodes.resize(count);
    }
    GraphNodeCounts counts;
    counts.total = nodes.size();
    for (CUgraphNode node : nodes) {
      CUgraphNodeType type = 0;
      if (CUresult r = api_.cuGraphNodeGetType(node, &type); r != CUDA_SUCCESS) return cuda_status(api_, r, "cuGraphNodeGetType");
      if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) ++counts.mem_alloc;
      if (type == CU_GRAPH_NODE_TYPE_MEM_FREE) ++counts.mem_free;
    }
    *out = counts;
    return Status::success();
  }
  Status graph_instantiate(GraphHandle handle, GraphExecHandle* out) override {
    CUgraph graph;
    if (Status s = graphs_.find(handle, "cuGraphInstantiateWithFlags", &graph); !s.ok()) return s;
    return create(execs_, out, "cuGraphInstantiateWithFlags",
                  [&](CUgraphExec* e) { return api_.cuGraphInstantiateWithFlags(e, graph, 0); });
  }
  Status graph_upload(GraphExecHandle exec_handle, StreamHandle stream_handle) override {
    return on(execs_, exec_handle, streams_, stream_handle, "cuGraphUpload",
              [&](CUgraphExec e, CUstream s) { return api_.cuGraphUpload(e, s); });
  }
  Status graph_launch(GraphExecHandle exec_handle, StreamHandle stream_handle) override {
    return on(execs_, exec_handle, streams_, stream_handle, "cuGraphLaunch",
              [&](CUgraphExec e, CUstream s) { return api_.cuGraphLaunch(e, s); });
  }
  Status graph_exec_update(GraphExecHandle exec_handle, GraphHandle graph_handle, GraphUpdateResult* result) override {
    if (api_.cuGraphExecUpdate == nullptr) return unsupported("cuGraphExecUpdate_v2");
    CUgraphExec exec;
    CUgraph graph;
    if (Status s = execs_.find(exec_handle, "cuGraphExecUpdate_v2", &exec); !s.ok()) return s;
    if (Status s = graphs_.find(graph_handle, "cuGraphExecUpdate_v2", &graph); !s.ok()) return s;
    OnDevice on_device(*this, "cuGraphExecUpdate_v2");
    if (!on_device.status().ok()) return on_device.status();
    CUgraphExecUpdateResultInfo info{};
    CUresult native = api_.cuGraphExecUpdate(exec, graph, &info);
    // A refused update is an answer (the result says why), not a failed call.
    if (native != CUDA_SUCCESS && native != CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE)
      return cuda_status(api_, native, "cuGraphExecUpdate_v2");
    *result = static_cast<GraphUpdateResult>(info.result);
    return Status::success();
  }
  Status graph_destroy(GraphHandle handle) override {
    return release(graphs_, handle, "cuGraphDestroy", [&](CUgraph g) { return api_.cuGraphDestroy(g); });
  }
  Status graph_exec_destroy(GraphExecHandle handle) override {
    return release(execs_, handle, "cuGraphExecDestroy", [&](CUgraphExec e) { return api_.cuGraphExecDestroy(e); });
  }

  // interop
  Status stream_wait_event(std::uintptr_t native_stream, EventHandle handle) override {
    auto stream = reinterpret_cast<CUstream>(native_stream);  // the consumer's: not in streams_
    return on(events_, handle, "cuStreamWaitEvent", [&](CUevent e) { return api_.cuStreamWaitEvent(stream, e, 0); });
  }
  Status event_record_native(EventHandle handle, std::uintptr_t native_stream) override {
    // The producer's: not in streams_. CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) are
    // handles the driver takes as they are.
    auto stream = reinterpret_cast<CUstream>(native_stream);
    return on(events_, handle, "cuEventRecord", [&](CUevent e) { return api_.cuEventRecord(e, stream); });
  }
  Status stream_capture_status_native(std::uintptr_t native_stream, CaptureStatus* capture_status) override {
    if (capture_status == nullptr)
      return cuda_local_status(Code::invalid_value, "cuStreamGetCaptureInfo", "the status output pointer is null");
    auto stream = reinterpret_cast<CUstream>(native_stream);  // another library's: not in streams_
    CUstreamCaptureStatus native = CU_STREAM_CAPTURE_STATUS_NONE;
    Status status = api_.cuStreamGetCaptureInfo_v3 != nullptr
        ? current("cuStreamGetCaptureInfo_v3", [&] {
            return api_.cuStreamGetCaptureInfo_v3(stream, &native, nullptr, nullptr, nullptr, nullptr, nullptr);
          })
        : current("cuStreamGetCaptureInfo_v2", [&] {
            return api_.cuStreamGetCaptureInfo_v2(stream, &native, nullptr, nullptr, nullptr, nullptr);
          });
    if (status.ok()) *capture_status = static_cast<CaptureStatus>(native);
    return status;
  }
  Status pointer_device(DevicePtr ptr, int* ordinal) override {
    if (api_.cuPointerGetAttribute == nullptr) return unsupported("cuPointerGetAttribute");
    if (ordinal == nullptr) return cuda_local_status(Code::invalid_value, "cuPointerGetAttribute", "the output pointer is null");
    return current("cuPointerGetAttribute",
                   [&] { return api_.cuPointerGetAttribute(ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr); });
  }
  Status host_view(DevicePtr, std::size_t, HostView*) override {
    return cuda_local_status(Code::not_supported, "host_view", "a CUDA device's memory is not host memory");
  }
  // Host arrays are refused before this on CUDA (their DLPack device is the CPU): pinning
  // someone else's pages for one call would cost more than the copy it saves.
  Status map_host(void*, std::size_t, DevicePtr*) override {
    return cuda_local_status(Code::not_supported, "map_host", "a CUDA device does not map host arrays");
  }
  Status unmap_host(DevicePtr) override {
    return cuda_local_status(Code::not_supported, "unmap_host", "a CUDA device does not map host arrays");
  }

 private:
  Status failure(int native, const char* call) const override { return cuda_status(api_, native, call); }
  Status unsupported(const char* name) const {
    return cuda_local_status(Code::not_supported, name, "this CUDA driver does not provide " + std::string(name));
  }

  // Makes the primary context current on this thread (one query when it already is); the
  // context that was current (none included) is put back by leave_device.
  Status enter_device(const char* for_call, std::optional<std::uintptr_t>* previous) const override {
    CUcontext now = nullptr;
    const bool known = api_.cuCtxGetCurrent(&now) == CUDA_SUCCESS;
    if (known && now == context_) return Status::success();
    if (CUresult result = api_.cuCtxSetCurrent(context_); result != CUDA_SUCCESS) {
      Status status = cuda_status(api_, result, "cuCtxSetCurrent");
      status.message += std::string(" (before ") + for_call + ")";
      return status;
    }
    if (known) *previous = reinterpret_cast<std::uintptr_t>(now);
    return Status::success();
  }
  void leave_device(std::uintptr_t previous) const noexcept override {
    (void)api_.cuCtxSetCurrent(reinterpret_cast<CUcontext>(previous));
  }

  const CudaApi& api_;
  int ordinal_;
  CUdevice device_;
  CUcontext context_;
  HandleRegistry<CUstream, StreamHandle> streams_{"stream", cuda_naming()};
  HandleRegistry<CUevent, EventHandle> events_{"event", cuda_naming()};
  HandleRegistry<CUmodule, ModuleHandle> modules_{"module", cuda_naming()};
  HandleRegistry<CUfunction, FunctionHandle> functions_{"kernel function", cuda_naming()};  // owned by modules
  HandleRegistry<CUgraph, GraphHandle> graphs_{"graph", cuda_naming()};
  HandleRegistry<CUgraphExec, GraphExecHandle> execs_{"executable graph", cuda_naming()};
  AllocationRegistry allocations_{cuda_naming()};
};

}  // namespace

std::shared_ptr<Driver> open_cuda(int ordinal) {
  const cuda::CudaRuntime& runtime = cuda::cuda_runtime();
  check_can_open(runtime.info, ordinal);
  const cuda::CudaApi& api = runtime.api;
  cuda_abi::CUdevice device = 0;
  if (cuda_abi::CUresult r = api.cuDeviceGet(&device, ordinal); r != cuda_abi::CUDA_SUCCESS)
    throw_status(cuda::cuda_status(api, r, "cuDeviceGet"));
  cuda_abi::CUcontext context = nullptr;
  if (cuda_abi::CUresult r = api.cuDevicePrimaryCtxRetain(&context, device); r != cuda_abi::CUDA_SUCCESS)
    throw_status(cuda::cuda_status(api, r, "cuDevicePrimaryCtxRetain"));
  return std::make_shared<cuda::CudaDriver>(api, ordinal, device, context);
}

}  // namespace cuda
}  // namespace lifecore::driver
