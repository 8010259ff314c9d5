// The HIP backend: one Driver per device, over the runtime resolved by hip_loader. Every
// operation selects the device on the calling thread first (HIP's current device is
// per thread, like CUDA's current context).
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "driver/allocation_registry.hpp"
#include "driver/handle_registry.hpp"
#include "driver/hip/hip_builtin_source.hpp"
#include "driver/hip/hip_backend.hpp"
#include "driver/hip/hip_loader.hpp"
#include "driver/kernel_params.hpp"
#include "driver/native_driver.hpp"
#include "driver/open_checks.hpp"

namespace lifecore::driver {
namespace hip {
namespace {

using namespace hip_abi;

void* as_pointer(DevicePtr pointer) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(pointer)); }

// Another library's stream, by value (not in streams_). 1 is CUDA's legacy default stream,
// which HIP names as its null stream; 2 (the per-thread default) is hipStreamPerThread in both.
hipStream_t foreign_stream(std::uintptr_t native_stream) {
  return native_stream == 1 ? hipStream_t{} : reinterpret_cast<hipStream_t>(native_stream);
}

class HipDriver final : public NativeDriver {
 public:
  HipDriver(const HipRuntime& runtime, int ordinal) : runtime_(runtime), api_(runtime.api), ordinal_(ordinal) {}

  ~HipDriver() override {
    OnDevice on_device(*this, "hipSetDevice");
    if (!on_device.status().ok()) return;
    // The device is shared with every other Device of it and other libraries, whose streams may
    // be recording now on any thread: a device synchronize would invalidate such a recording
    // (as CUDA's context synchronize does), and outside relaxed mode so would the frees. So the
    // thread works in relaxed mode and waits for its own streams only; what HIP releases lazily
    // (graph executables, freed memory) goes at its next synchronization.
    hipStreamCaptureMode mode = hipStreamCaptureModeRelaxed;
    const bool relaxed = api_.hipThreadExchangeStreamCaptureMode(&mode) == hipSuccess;
    const std::vector<hipStream_t> streams = streams_.take_all();
    synchronize_idle(streams, api_.hipStreamSynchronize);  // a recording's work never runs
    for (auto exec : execs_.take_all()) api_.hipGraphExecDestroy(exec);
    for (auto graph : graphs_.take_all()) api_.hipGraphDestroy(graph);
    for (auto event : events_.take_all()) api_.hipEventDestroy(event);
    for (hipStream_t stream : streams) api_.hipStreamDestroy(stream);
    for (auto module : modules_.take_all()) api_.hipModuleUnload(module);
    for (DevicePtr pointer : allocations_.take_all()) api_.hipFree(as_pointer(pointer));
    if (relaxed) api_.hipThreadExchangeStreamCaptureMode(&mode);
  }

  const BackendDescriptor& backend() const override { return hip_backend(); }
  int ordinal() const override { return ordinal_; }
  bool hardware_graphs() const override { return true; }
  bool builtin_kernels_available(std::string* reason) const override {
    if (runtime_.hiprtc_available) return true;
    if (reason != nullptr) *reason = runtime_.hiprtc_reason;
    return false;
  }

  // device
  Status device_name(std::string* out) override {
    hipDevice_t device = 0;
    if (Status s = checked(api_.hipDeviceGet(&device, ordinal_), "hipDeviceGet"); !s.ok()) return s;
    char name[256] = {};
    Status status = checked(api_.hipDeviceGetName(name, sizeof name - 1, device), "hipDeviceGetName");
    if (status.ok()) *out = name;
    return status;
  }
  Status driver_version(int* out) override { return checked(api_.hipDriverGetVersion(out), "hipDriverGetVersion"); }
  Status mem_info(std::size_t* free_bytes, std::size_t* total_bytes) override {
    return current("hipMemGetInfo", [&] { return api_.hipMemGetInfo(free_bytes, total_bytes); });
  }

  // streams
  Status stream_create(StreamHandle* out) override {
    return create(streams_, out, "hipStreamCreateWithFlags",
                  [&](hipStream_t* s) { return api_.hipStreamCreateWithFlags(s, hipStreamNonBlocking); });
  }
  Status stream_destroy(StreamHandle handle) override {
    return release(streams_, handle, "hipStreamDestroy", [&](hipStream_t s) { return api_.hipStreamDestroy(s); });
  }
  Status stream_synchronize(StreamHandle handle) override {
    return on(streams_, handle, "hipStreamSynchronize", [&](hipStream_t s) { return api_.hipStreamSynchronize(s); });
  }
  Status stream_query(StreamHandle handle) override {
    return on(streams_, handle, "hipStreamQuery", [&](hipStream_t s) { return api_.hipStreamQuery(s); });
  }
  std::uintptr_t stream_native_handle(StreamHandle handle) override {
    return streams_.contains(handle) ? static_cast<std::uintptr_t>(handle) : 0;
  }

  // events
  Status event_create(EventHandle* out, EventTiming timing) override {
    const unsigned flags = timing == EventTiming::enabled ? hipEventDefault : hipEventDisableTiming;
    return create(events_, out, "hipEventCreateWithFlags",
                  [&](hipEvent_t* e) { return api_.hipEventCreateWithFlags(e, flags); });
  }
  Status event_destroy(EventHandle handle) override {
    return release(events_, handle, "hipEventDestroy", [&](hipEvent_t e) { return api_.hipEventDestroy(e); });
  }
  Status event_record(EventHandle event_handle, StreamHandle stream_handle) override {
    return on(events_, event_handle, streams_, stream_handle, "hipEventRecord",
              [&](hipEvent_t e, hipStream_t s) { return api_.hipEventRecord(e, s); });
  }
  Status event_synchronize(EventHandle handle) override {
    return on(events_, handle, "hipEventSynchronize", [&](hipEvent_t e) { return api_.hipEventSynchronize(e); });
  }
  Status event_query(EventHandle handle) override {
    return on(events_, handle, "hipEventQuery", [&](hipEvent_t e) { return api_.hipEventQuery(e); });
  }
  Status event_elapsed(EventHandle start_handle, EventHandle end_handle, float* milliseconds) override {
    hipEvent_t start, end;
    if (Status s = events_.find(start_handle, "hipEventElapsedTime", &start); !s.ok()) return s;
    if (Status s = events_.find(end_handle, "hipEventElapsedTime", &end); !s.ok()) return s;
    return current("hipEventElapsedTime", [&] { return api_.hipEventElapsedTime(milliseconds, start, end); });
  }

  // memory
  Status mem_alloc(std::size_t bytes, DevicePtr* out) override {
    void* pointer = nullptr;
    Status status = current("hipMalloc", [&] { return api_.hipMalloc(&pointer, bytes); });
    if (status.ok()) *out = allocations_.adopt(reinterpret_cast<std::uintptr_t>(pointer));
    return status;
  }
  Status mem_free(DevicePtr pointer) override {
    std::uint64_t adoption = 0;
    if (Status s = allocations_.begin_free(pointer, "hipFree", &adoption); !s.ok()) return s;
    Status status = current("hipFree", [&] { return api_.hipFree(as_pointer(pointer)); });
    allocations_.settle(pointer, adoption, status.ok());
    return status;
  }
  Status mem_alloc_async(std::size_t bytes, StreamHandle handle, DevicePtr* out) override {
    if (api_.hipMallocAsync == nullptr) return unsupported("hipMallocAsync");
    void* pointer = nullptr;
    Status status = on(streams_, handle, "hipMallocAsync", [&](hipStream_t s) { return api_.hipMallocAsync(&pointer, bytes, s); });
    if (status.ok()) *out = allocations_.adopt(reinterpret_cast<std::uintptr_t>(pointer));
    return status;
  }
  Status mem_free_async(DevicePtr pointer, StreamHandle handle) override {
    if (api_.hipFreeAsync == nullptr) return unsupported("hipFreeAsync");
    hipStream_t stream;
    if (Status s = streams_.find(handle, "hipFreeAsync", &stream); !s.ok()) return s;
    std::uint64_t adoption = 0;
    if (Status s = allocations_.begin_free(pointer, "hipFreeAsync", &adoption); !s.ok()) return s;
    Status status = current("hipFreeAsync", [&] { return api_.hipFreeAsync(as_pointer(pointer), stream); });
    allocations_.settle(pointer, adoption, status.ok());
    return status;
  }
  Status memcpy_htod(DevicePtr dst, const void* src, std::size_t bytes) override {
    return current("hipMemcpyHtoD", [&] { return api_.hipMemcpyHtoD(as_pointer(dst), const_cast<void*>(src), bytes); });
  }
  Status memcpy_dtoh(void* dst, DevicePtr src, std::size_t bytes) override {
    return current("hipMemcpyDtoH", [&] { return api_.hipMemcpyDtoH(dst, as_pointer(src), bytes); });
  }
  Status memcpy_dtod(DevicePtr dst, DevicePtr src, std::size_t bytes) override {
    return current("hipMemcpyDtoD", [&] { return api_.hipMemcpyDtoD(as_pointer(dst), as_pointer(src), bytes); });
  }
  Status memcpy_htod_async(DevicePtr dst, const void* src, std::size_t bytes, StreamHandle handle) override {
    return on(streams_, handle, "hipMemcpyHtoDAsync", [&](hipStream_t s) {
      return api_.hipMemcpyHtoDAsync(as_pointer(dst), const_cast<void*>(src), bytes, s);
    });
  }
  Status memcpy_dtoh_async(void* dst, DevicePtr src, std::size_t bytes, StreamHandle handle) override {
    return on(streams_, handle, "hipMemcpyDtoHAsync", [&](hipStream_t s) { return api_.hipMemcpyDtoHAsync(dst, as_pointer(src), bytes, s); });
  }
  Status memcpy_dtod_async(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle handle) override {
    return on(streams_, handle, "hipMemcpyDtoDAsync", [&](hipStream_t s) {
      return api_.hipMemcpyDtoDAsync(as_pointer(dst), as_pointer(src), bytes, s);
    });
  }
  Status memset_d32(DevicePtr dst, std::uint32_t value, std::size_t count) override {
    return current("hipMemsetD32", [&] { return api_.hipMemsetD32(as_pointer(dst), static_cast<int>(value), count); });
  }
  Status memset_d32_async(DevicePtr dst, std::uint32_t value, std::size_t count, StreamHandle handle) override {
    return on(streams_, handle, "hipMemsetD32Async", [&](hipStream_t s) {
      return api_.hipMemsetD32Async(as_pointer(dst), static_cast<int>(value), count, s);
    });
  }

  // modules and kernels
  Status module_load(const ModuleImage& image, ModuleHandle* out) override {
    const void* data = nullptr;
    std::string code;
    switch (image.kind) {
      case ImageKind::builtin: {
        if (Status s = builtin_code_object(&code); !s.ok()) return s;
        data = code.data();
        break;
      }
      case ImageKind::code_object:
      case ImageKind::fatbin:
        if (image.bytes.empty()) return hip_local_status(Code::invalid_image, "hipModuleLoadData", "the image is empty");
        data = image.bytes.data();
        break;
      case ImageKind::ptx:
      case ImageKind::cubin:
        return hip_local_status(Code::invalid_image, "hipModuleLoadData",
                                "PTX and cubin images are CUDA's; the HIP runtime loads code objects and fat binaries");
    }
    return create(modules_, out, "hipModuleLoadData", [&](hipModule_t* m) { return api_.hipModuleLoadData(m, data); });
  }
  Status module_unload(ModuleHandle handle) override {
    return unload_module(modules_, functions_, handle, "hipModuleUnload", [&](hipModule_t m) { return api_.hipModuleUnload(m); });
  }
  Status module_get_function(ModuleHandle handle, const std::string& name, FunctionHandle* out) override {
    hipModule_t module;
    if (Status s = modules_.find(handle, "hipModuleGetFunction", &module); !s.ok()) return s;
    hipFunction_t function = nullptr;
    Status status = current("hipModuleGetFunction", [&] { return api_.hipModuleGetFunction(&function, module, name.c_str()); });
    if (!status.ok()) {
      status.message += ": no kernel named '" + name + "' in the module";
      return status;
    }
    return adopt_function(modules_, functions_, handle, function, "hipModuleGetFunction", out);
  }
  Status function_param_sizes(FunctionHandle, std::vector<std::size_t>*) override {
    return unsupported("hipFuncGetParamInfo");
  }
  Status launch_kernel(FunctionHandle function_handle, Dim3 grid, Dim3 block, std::uint32_t shared_bytes,
                       StreamHandle stream_handle, const std::vector<KernelArg>& args) override {
    hipFunction_t function;
    hipStream_t stream;
    if (Status s = functions_.find(function_handle, "hipModuleLaunchKernel", &function); !s.ok()) return s;
    if (Status s = streams_.find(stream_handle, "hipModuleLaunchKernel", &stream); !s.ok()) return s;
    KernelParams params(args);
    return current("hipModuleLaunchKernel", [&] {
      return api_.hipModuleLaunchKernel(function, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes, stream,
                                        params.data(), nullptr);
    });
  }

  // capture
  Status stream_begin_capture(StreamHandle handle, CaptureMode mode) override {
    return on(streams_, handle, "hipStreamBeginCapture",
              [&](hipStream_t s) { return api_.hipStreamBeginCapture(s, static_cast<hipStreamCaptureMode>(mode)); });
  }
  Status stream_end_capture(StreamHandle handle, GraphHandle* out) override {
    *out = GraphHandle{0};
    hipGraph_t graph = nullptr;
    bool left_invalidated = false;
    Status status = on(streams_, handle, "hipStreamEndCapture", [&](hipStream_t s) {
      const hipError_t e = api_.hipStreamEndCapture(s, &graph);
      if (e == hip_native(Code::capture_invalidated) && graph == nullptr) left_invalidated = !end_invalidated_capture(s);
      return e;
    });
    if (left_invalidated)  // not "ended": the runtime asks, finds the stream still in capture and says so
      return hip_local_status(Code::unknown, "hipStreamEndCapture",
                              "the capture was invalidated, and ROCm left the stream invalidated (ending it by hand, "
                              "a relaxed begin and its end, did not take it out of capture)");
    if (graph == nullptr) {
      if (status.ok()) return hip_local_status(Code::capture_invalidated, "hipStreamEndCapture", "the capture produced no graph");
      return status;
    }
    if (!status.ok()) {  // a graph with a failed end: never hand it out
      api_.hipGraphDestroy(graph);
      return status;
    }
    *out = graphs_.adopt(graph);
    return status;
  }
  // Before ROCm 7.0, hipStreamEndCapture refuses an invalidated capture (901, no graph) without
  // ending it: the stream stays invalidated, and every call on it fails with 901. Where the
  // stream says so, the capture is ended by hand: a begin (which refuses only an active capture)
  // and its end. True once the stream is out of capture, or when it cannot be asked (as before).
  bool end_invalidated_capture(hipStream_t s) {
    hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
    unsigned long long id = 0;
    if (api_.hipStreamGetCaptureInfo(s, &status, &id) != hipSuccess || status != hipStreamCaptureStatusInvalidated)
      return true;
    if (api_.hipStreamBeginCapture(s, hipStreamCaptureModeRelaxed) == hipSuccess) {
      hipGraph_t empty = nullptr;
      (void)api_.hipStreamEndCapture(s, &empty);
      if (empty != nullptr) (void)api_.hipGraphDestroy(empty);
    }
    return api_.hipStreamGetCaptureInfo(s, &status, &id) == hipSuccess && status == hipStreamCaptureStatusNone;
  }
  Status stream_capture_info(StreamHandle handle, CaptureStatus* capture_status, std::uint64_t* capture_id) override {
    hipStreamCaptureStatus native = hipStreamCaptureStatusNone;
    unsigned long long id = 0;
    Status status = on(streams_, handle, "hipStreamGetCaptureInfo",
                       [&](hipStream_t s) { return api_.hipStreamGetCaptureInfo(s, &native, &id); });
    if (status.ok()) {
      *capture_status = static_cast<CaptureStatus>(native);
      *capture_id = native == hipStreamCaptureStatusActive ? id : 0;  // valid only while active
    }
    return status;
  }
  Status thread_exchange_capture_mode(CaptureMode* mode) override {
    hipStreamCaptureMode native = static_cast<hipStreamCaptureMode>(*mode);
    // The thread's mode, not a device's: as on CUDA, nothing is made current first.
    Status status = checked(api_.hipThreadExchangeStreamCaptureMode(&native), "hipThreadExchangeStreamCaptureMode");
    if (status.ok()) *mode = static_cast<CaptureMode>(native);
    return status;
  }

  // graphs
  Status graph_node_counts(GraphHandle handle, GraphNodeCounts* out) override {
    hipGraph_t graph;
    if (Status s = graphs_.find(handle, "hipGraphGetNodes", &graph); !s.ok()) return s;
    std::size_t count = 0;
    if (Status s = current("hipGraphGetNodes", [&] { return api_.hipGraphGetNodes(graph, nullptr, &count); }); !s.ok()) return s;
    std::vector<hipGraphNode_t> nodes(count);
    if (count > 0) {
      Status s = current("hipGraphGetNodes", [&] { return api_.hipGraphGetNodes(graph, nodes.data(), &count); });
      if (!s.ok()) return s;
      nodes.resize(count);
    }
    GraphNodeCounts counts;
    counts.total = nodes.size();
    // A runtime without graph memory nodes records none (and numbers symbol copies 10 and 11).
    if (api_.hipGraphAddMemAllocNode == nullptr) nodes.clear();
    for (hipGraphNode_t node : nodes) {
      hipGraphNodeType type = 0;
      if (hipError_t e = api_.hipGraphNodeGetType(node, &type); e != hipSuccess) return hip_status(api_, e, "hipGraphNodeGetType");
      if (type == hipGraphNodeTypeMemAlloc) ++counts.mem_alloc;
      if (type == hipGraphNodeTypeMemFree) ++counts.mem_free;
    }
    *out = counts;
    return Status::success();
  }
  Status graph_instantiate(GraphHandle handle, GraphExecHandle* out) override {
    hipGraph_t graph;
    const char* name = api_.hipGraphInstantiateWithFlags ? "hipGraphInstantiateWithFlags" : "hipGraphInstantiate";
    if (Status s = graphs_.find(handle, name, &graph); !s.ok()) return s;
    // ROCm ignores instantiate flags; lifecore passes none, so both entry points agree.
    return create(execs_, out, name, [&](hipGraphExec_t* exec) {
      return api_.hipGraphInstantiateWithFlags ? api_.hipGraphInstantiateWithFlags(exec, graph, 0)
                                               : api_.hipGraphInstantiate(exec, graph, nullptr, nullptr, 0);
    });
  }
  Status graph_upload(GraphExecHandle exec_handle, StreamHandle stream_handle) override {
    hipGraphExec_t exec;
    hipStream_t stream;
    if (Status s = execs_.find(exec_handle, "hipGraphUpload", &exec); !s.ok()) return s;
    if (Status s = streams_.find(stream_handle, "hipGraphUpload", &stream); !s.ok()) return s;
    // Upload only moves the first launch's setup earlier; a runtime without it (ROCm < 5.3)
    // does the same work at the first launch.
    if (api_.hipGraphUpload == nullptr) return Status::success();
    return current("hipGraphUpload", [&] { return api_.hipGraphUpload(exec, stream); });
  }
  Status graph_launch(GraphExecHandle exec_handle, StreamHandle stream_handle) override {
    return on(execs_, exec_handle, streams_, stream_handle, "hipGraphLaunch",
              [&](hipGraphExec_t e, hipStream_t s) { return api_.hipGraphLaunch(e, s); });
  }
  Status graph_exec_update(GraphExecHandle exec_handle, GraphHandle graph_handle, GraphUpdateResult* result) override {
    if (api_.hipGraphExecUpdate == nullptr) return unsupported("hipGraphExecUpdate");
    hipGraphExec_t exec;
    hipGraph_t graph;
    if (Status s = execs_.find(exec_handle, "hipGraphExecUpdate", &exec); !s.ok()) return s;
    if (Status s = graphs_.find(graph_handle, "hipGraphExecUpdate", &graph); !s.ok()) return s;
    OnDevice on_device(*this, "hipGraphExecUpdate");
    if (!on_device.status().ok()) return on_device.status();
    hipGraphNode_t error_node = nullptr;
    hipGraphExecUpdateResult native_result = 0;
    hipError_t native = api_.hipGraphExecUpdate(exec, graph, &error_node, &native_result);
    if (native != hipSuccess && native != hipErrorGraphExecUpdateFailure) return hip_status(api_, native, "hipGraphExecUpdate");
    *result = static_cast<GraphUpdateResult>(native_result);
    return Status::success();
  }
  Status graph_destroy(GraphHandle handle) override {
    return release(graphs_, handle, "hipGraphDestroy", [&](hipGraph_t g) { return api_.hipGraphDestroy(g); });
  }
  Status graph_exec_destroy(GraphExecHandle handle) override {
    // ROCm releases an executable graph's resources lazily, at its next synchronization. No
    // device synchronize hurries it: that would invalidate any capture live on the device
    // (another Device's, another library's), as the teardown's would.
    return release(execs_, handle, "hipGraphExecDestroy", [&](hipGraphExec_t e) { return api_.hipGraphExecDestroy(e); });
  }

  // interop
  Status stream_wait_event(std::uintptr_t native_stream, EventHandle handle) override {
    hipStream_t stream = foreign_stream(native_stream);  // the consumer's
    return on(events_, handle, "hipStreamWaitEvent", [&](hipEvent_t e) { return api_.hipStreamWaitEvent(stream, e, 0); });
  }
  Status event_record_native(EventHandle handle, std::uintptr_t native_stream) override {
    hipStream_t stream = foreign_stream(native_stream);  // the producer's
    return on(events_, handle, "hipEventRecord", [&](hipEvent_t e) { return api_.hipEventRecord(e, stream); });
  }
  Status stream_capture_status_native(std::uintptr_t native_stream, CaptureStatus* capture_status) override {
    if (capture_status == nullptr)
      return hip_local_status(Code::invalid_value, "hipStreamGetCaptureInfo", "the status output pointer is null");
    hipStream_t stream = foreign_stream(native_stream);  // another library's
    hipStreamCaptureStatus native = hipStreamCaptureStatusNone;
    unsigned long long id = 0;
    Status status = current("hipStreamGetCaptureInfo", [&] { return api_.hipStreamGetCaptureInfo(stream, &native, &id); });
    // ROCm 5's hipStreamGetCaptureInfo answers hipErrorUnknown for the null stream, which its
    // hipStreamIsCapturing answers (as ROCm 6's hipStreamGetCaptureInfo does).
    if (!status.ok() && stream == nullptr && status.native_code == hipErrorUnknown && api_.hipStreamIsCapturing)
      status = current("hipStreamIsCapturing", [&] { return api_.hipStreamIsCapturing(stream, &native); });
    if (status.ok()) *capture_status = static_cast<CaptureStatus>(native);
    return status;
  }
  // hipPointerGetAttribute (optional: an older runtime lacks it, and the check is then skipped)
  // rather than hipPointerGetAttributes, whose hipPointerAttribute_t differs between ROCm releases.
  Status pointer_device(DevicePtr ptr, int* ordinal) override {
    if (api_.hipPointerGetAttribute == nullptr) return unsupported("hipPointerGetAttribute");
    if (ordinal == nullptr) return hip_local_status(Code::invalid_value, "hipPointerGetAttribute", "the output pointer is null");
    return current("hipPointerGetAttribute", [&] {
      return api_.hipPointerGetAttribute(ordinal, HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL, as_pointer(ptr));
    });
  }
  Status host_view(DevicePtr, std::size_t, HostView*) override {
    return hip_local_status(Code::not_supported, "host_view", "a HIP device's memory is not host memory");
  }
  Status map_host(void*, std::size_t, DevicePtr*) override {
    return hip_local_status(Code::not_supported, "map_host", "a HIP device does not map host arrays");
  }
  Status unmap_host(DevicePtr) override {
    return hip_local_status(Code::not_supported, "unmap_host", "a HIP device does not map host arrays");
  }

 private:
  Status failure(int native, const char* call) const override { return hip_status(api_, native, call); }
  Status unsupported(const char* name) const {
    return hip_local_status(Code::not_supported, name, "this HIP runtime does not provide " + std::string(name));
  }
  // Selects this driver's device on this thread (one query when it already is); the device
  // that was selected is put back by leave_device.
  Status enter_device(const char* for_call, std::optional<std::uintptr_t>* previous) const override {
    int now = -1;
    const bool known = api_.hipGetDevice(&now) == hipSuccess && now >= 0;
    if (known && now == ordinal_) return Status::success();
    if (hipError_t error = api_.hipSetDevice(ordinal_); error != hipSuccess) {
      Status status = hip_status(api_, error, "hipSetDevice");
      status.message += std::string(" (before ") + for_call + ")";
      return status;
    }
    if (known) *previous = static_cast<std::uintptr_t>(now);
    return Status::success();
  }
  void leave_device(std::uintptr_t previous) const noexcept override {
    (void)api_.hipSetDevice(static_cast<int>(previous));
  }
  // Compiles the built-in kernels once per driver (hiprtc targets the current device).
  Status builtin_code_object(std::string* out) {
    std::lock_guard lock(builtin_mutex_);
    if (!builtin_code_.empty()) {
      *out = builtin_code_;
      return Status::success();
    }
    if (!runtime_.hiprtc_available)
      return hip_local_status(Code::not_supported, "hiprtcCompileProgram", runtime_.hiprtc_reason);
    OnDevice on_device(*this, "hiprtcCompileProgram");
    if (!on_device.status().ok()) return on_device.status();
    const HiprtcApi& rtc = runtime_.hiprtc;
    auto rtc_failure = [&](hiprtcResult result, const char* call, const std::string& log) {
      const char* text = rtc.hiprtcGetErrorString(result);
      std::string message = text ? text : "hiprtc error";
      if (!log.empty()) message += ": " + log;
      return hip_local_status(Code::invalid_image, call, message);
    };
    hiprtcProgram program = nullptr;
    std::string source(builtin_source());
    if (hiprtcResult r = rtc.hiprtcCreateProgram(&program, source.c_str(), "lifecore_builtin.hip", 0, nullptr, nullptr);
        r != HIPRTC_SUCCESS)
      return rtc_failure(r, "hiprtcCreateProgram", {});
    std::vector<const char*> options(std::begin(builtin_compile_options), std::end(builtin_compile_options));
    hiprtcResult compiled = rtc.hiprtcCompileProgram(program, static_cast<int>(options.size()), options.data());
    if (compiled != HIPRTC_SUCCESS) {
      std::size_t size = 0;
      std::string log;
      if (rtc.hiprtcGetProgramLogSize(program, &size) == HIPRTC_SUCCESS && size > 1) {
        log.resize(size);
        if (rtc.hiprtcGetProgramLog(program, log.data()) != HIPRTC_SUCCESS) log.clear();
        while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
      }
      rtc.hiprtcDestroyProgram(&program);
      return rtc_failure(compiled, "hiprtcCompileProgram", log);
    }
    std::size_t size = 0;
    std::string code;
    hiprtcResult got = rtc.hiprtcGetCodeSize(program, &size);
    if (got == HIPRTC_SUCCESS) {
      code.resize(size);
      got = rtc.hiprtcGetCode(program, code.data());
    }
    rtc.hiprtcDestroyProgram(&program);
    if (got != HIPRTC_SUCCESS) return rtc_failure(got, "hiprtcGetCode", {});
    builtin_code_ = std::move(code);
    *out = builtin_code_;
    return Status::success();
  }

  const HipRuntime& runtime_;
  const HipApi& api_;
  int ordinal_;
  HandleRegistry<hipStream_t, StreamHandle> streams_{"stream", hip_naming()};
  HandleRegistry<hipEvent_t, EventHandle> events_{"event", hip_naming()};
  HandleRegistry<hipModule_t, ModuleHandle> modules_{"module", hip_naming()};
  HandleRegistry<hipFunction_t, FunctionHandle> functions_{"kernel function", hip_naming()};  // owned by modules
  HandleRegistry<hipGraph_t, GraphHandle> graphs_{"graph", hip_naming()};
  HandleRegistry<hipGraphExec_t, GraphExecHandle> execs_{"executable graph", hip_naming()};
  AllocationRegistry allocations_{hip_naming()};
  std::mutex builtin_mutex_;
  std::string builtin_code_;  // guarded by builtin_mutex_
};

}  // namespace

std::shared_ptr<Driver> open_hip(int ordinal) {
  const hip::HipRuntime& runtime = hip::hip_runtime();
  check_can_open(runtime.info, ordinal);
  // Selecting the device proves it usable; the thread's selection is then put back, as every
  // later call does.
  int previous = -1;
  const bool known = runtime.api.hipGetDevice(&previous) == hip_abi::hipSuccess && previous >= 0;
  if (hip_abi::hipError_t e = runtime.api.hipSetDevice(ordinal); e != hip_abi::hipSuccess)
    throw_status(hip::hip_status(runtime.api, e, "hipSetDevice"));
  if (known && previous != ordinal) (void)runtime.api.hipSetDevice(previous);
  return std::make_shared<hip::HipDriver>(runtime, ordinal);
}

}  // namespace hip
}  // namespace lifecore::driver
