// The driver floor: the only interface through which the runtime reaches a GPU driver.
// Everything above it is backend-neutral; everything below it (cpp/src/driver/cuda, hip,
// mock) knows exactly one backend. One Driver instance serves one device of one backend.
//
// Conventions:
//  - every operation returns a Status (never throws); outputs go through pointers;
//  - a failed Status names the native call (Status::call) and carries the native code;
//  - handles are opaque integers; 0 is never a valid handle;
//  - all operations are thread-safe; blocking ones may be called without the GIL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lifecore/driver/status.hpp"

namespace lifecore::driver {

// Every driver operation by its neutral name. Fault injection (mock) and error messages use
// these names; a backend reports the native call name in Status::call.
#define LIFECORE_DRIVER_OPERATIONS(X)                                                  \
  X(device_name) X(driver_version) X(mem_info)                                         \
  X(stream_create) X(stream_destroy) X(stream_synchronize) X(stream_query)             \
  X(event_create) X(event_destroy) X(event_record) X(event_synchronize) X(event_query) \
  X(event_elapsed)                                                                     \
  X(mem_alloc) X(mem_free) X(mem_alloc_async) X(mem_free_async)                        \
  X(memcpy_htod) X(memcpy_dtoh) X(memcpy_dtod)                                         \
  X(memcpy_htod_async) X(memcpy_dtoh_async) X(memcpy_dtod_async)                       \
  X(memset_d32) X(memset_d32_async)                                                    \
  X(module_load) X(module_unload) X(module_get_function) X(function_param_sizes)       \
  X(launch_kernel)                                                                     \
  X(stream_begin_capture) X(stream_end_capture) X(stream_capture_info)                 \
  X(thread_exchange_capture_mode)                                                      \
  X(graph_node_counts) X(graph_instantiate) X(graph_upload) X(graph_launch)            \
  X(graph_exec_update) X(graph_destroy) X(graph_exec_destroy)                          \
  X(stream_wait_event) X(host_view) X(map_host) X(unmap_host)                        \
  X(event_record_native) X(pointer_device) X(stream_capture_status_native)

enum class Operation : int {
#define LIFECORE_OPERATION_ENUM(name) name,
  LIFECORE_DRIVER_OPERATIONS(LIFECORE_OPERATION_ENUM)
#undef LIFECORE_OPERATION_ENUM
  count_
};
const char* operation_name(Operation op);
// Returns false when `name` is not an operation name.
bool operation_from_name(const std::string& name, Operation* out);
std::vector<std::string> operation_names();

enum class StreamHandle : std::uintptr_t {};
enum class EventHandle : std::uintptr_t {};
enum class ModuleHandle : std::uintptr_t {};
enum class FunctionHandle : std::uintptr_t {};
enum class GraphHandle : std::uintptr_t {};
enum class GraphExecHandle : std::uintptr_t {};
using DevicePtr = std::uint64_t;

// Each enum below with names is generated from one (case, name) table, as are its name
// functions, so a case cannot be added without its name.
#define LIFECORE_DRIVER_ENUM_CASE(value, name) value,

// CUDA's numbering (CU_STREAM_CAPTURE_MODE_*), which HIP shares: the table is in that order.
#define LIFECORE_CAPTURE_MODES(X) X(global, "global") X(thread_local_, "thread_local") X(relaxed, "relaxed")
enum class CaptureMode : int { LIFECORE_CAPTURE_MODES(LIFECORE_DRIVER_ENUM_CASE) };
static_assert(static_cast<int>(CaptureMode::global) == 0 && static_cast<int>(CaptureMode::thread_local_) == 1 &&
              static_cast<int>(CaptureMode::relaxed) == 2);
const char* capture_mode_name(CaptureMode mode);
// Returns false when `name` is not a capture mode's name.
bool capture_mode_from_name(std::string_view name, CaptureMode* out);
// CUDA's numbering (CU_STREAM_CAPTURE_STATUS_*).
enum class CaptureStatus : int { none = 0, active = 1, invalidated = 2 };
// Whether an event records a time. An event that only orders work (a wait, a host sync, a
// release mark) needs none, and the driver records it more cheaply; elapsed time is
// refused on it (invalid_handle, as CUDA and HIP do).
enum class EventTiming : bool { disabled = false, enabled = true };

struct Dim3 {
  std::uint32_t x = 1, y = 1, z = 1;
};

// A kernel argument: its kind fixes the size the driver passes (pointers are 8 bytes).
#define LIFECORE_ARG_KINDS(X)                                                                           \
  X(pointer, "ptr") X(i32, "i32") X(u32, "u32") X(i64, "i64") X(u64, "u64") X(f32, "f32") X(f64, "f64")
enum class ArgKind : std::uint8_t { LIFECORE_ARG_KINDS(LIFECORE_DRIVER_ENUM_CASE) };
const char* arg_kind_name(ArgKind kind);
// The table's names, and "pointer" (the spelling the driver diagnostics took first); false
// for anything else.
bool arg_kind_from_name(std::string_view name, ArgKind* out);
std::size_t arg_size(ArgKind kind);
struct KernelArg {
  ArgKind kind = ArgKind::u64;
  std::uint64_t bits = 0;  // the value's bytes, little-endian, zero-extended to 64 bits
};

#define LIFECORE_IMAGE_KINDS(X)                                                                           \
  X(builtin, "builtin") X(ptx, "ptx") X(cubin, "cubin") X(fatbin, "fatbin") X(code_object, "code_object")
enum class ImageKind : std::uint8_t { LIFECORE_IMAGE_KINDS(LIFECORE_DRIVER_ENUM_CASE) };
const char* image_kind_name(ImageKind kind);
// Returns false when `name` is not an image kind's name.
bool image_kind_from_name(std::string_view name, ImageKind* out);
struct ModuleImage {
  ImageKind kind = ImageKind::builtin;
  std::string bytes;  // PTX text, cubin / fatbin / code-object bytes; empty for builtin
};

struct GraphNodeCounts {
  std::size_t total = 0;
  std::size_t mem_alloc = 0;
  std::size_t mem_free = 0;
};

// CUDA's CUgraphExecUpdateResult numbering.
enum class GraphUpdateResult : int {
  success = 0, error = 1, topology_changed = 2, node_type_changed = 3, function_changed = 4,
  parameters_changed = 5, not_supported = 6, unsupported_function_change = 7, attributes_changed = 8
};

// The host bytes behind a device range, where device memory is host memory (the mock).
// `keep_alive` holds the storage: the bytes stay valid while it is held, even once the range
// is freed or the device is gone (they are then nobody else's, but never unmapped under a view).
struct HostView {
  void* data = nullptr;
  std::shared_ptr<void> keep_alive;
};

struct BackendDescriptor;  // registry.hpp

// Fault injection, offered by the mock only: the `after`-th next call (0 = the very next)
// of `op` fails with `code`, for `times` consecutive calls of that operation.
class FaultInjection {
 public:
  virtual ~FaultInjection() = default;
  virtual void inject(Operation op, int code, std::uint64_t after, std::uint64_t times) = 0;
  virtual void clear() = 0;
  // How many calls of each operation have been made (also those that failed).
  virtual std::uint64_t call_count(Operation op) const = 0;
};

class Driver {
 public:
  virtual ~Driver() = default;

  // The registry entry of the backend this driver belongs to.
  virtual const BackendDescriptor& backend() const = 0;
  virtual int ordinal() const = 0;
  // True when capture is done by the driver (a stream capture that records a graph).
  virtual bool hardware_graphs() const = 0;
  // The reach of the driver's capture-mode rule (runtime/capture_registry.hpp): a capture
  // forbids unsafe calls within its domain, never across. A token, alive exactly as long as the
  // domain's captures can be (its address names the domain and is never reused meanwhile): by
  // default the backend's, which lives as long as the process, whose driver library keeps one
  // capture state (CUDA, HIP); an emulated driver may keep one per instance.
  virtual std::shared_ptr<const void> capture_domain() const;
  // Whether the built-in kernels (lifecore.kernels) can run here, and why not.
  virtual bool builtin_kernels_available(std::string* reason) const = 0;
  virtual FaultInjection* fault_injection() { return nullptr; }

  // device
  virtual Status device_name(std::string* out) = 0;
  virtual Status driver_version(int* out) = 0;
  virtual Status mem_info(std::size_t* free_bytes, std::size_t* total_bytes) = 0;

  // streams
  virtual Status stream_create(StreamHandle* out) = 0;
  virtual Status stream_destroy(StreamHandle stream) = 0;
  virtual Status stream_synchronize(StreamHandle stream) = 0;
  // ok when idle; Code::not_ready when work is pending.
  virtual Status stream_query(StreamHandle stream) = 0;
  // The native stream pointer (CUstream / hipStream_t) for interop; the mock's own id.
  virtual std::uintptr_t stream_native_handle(StreamHandle stream) = 0;

  // events
  virtual Status event_create(EventHandle* out, EventTiming timing) = 0;
  virtual Status event_destroy(EventHandle event) = 0;
  virtual Status event_record(EventHandle event, StreamHandle stream) = 0;
  virtual Status event_synchronize(EventHandle event) = 0;
  virtual Status event_query(EventHandle event) = 0;
  virtual Status event_elapsed(EventHandle start, EventHandle end, float* milliseconds) = 0;

  // memory
  virtual Status mem_alloc(std::size_t bytes, DevicePtr* out) = 0;
  virtual Status mem_free(DevicePtr ptr) = 0;
  virtual Status mem_alloc_async(std::size_t bytes, StreamHandle stream, DevicePtr* out) = 0;
  virtual Status mem_free_async(DevicePtr ptr, StreamHandle stream) = 0;
  // The synchronous copies and fill run on CUDA's legacy default stream (HIP's null stream):
  // they do not order the non-blocking streams lifecore creates, and one from pageable host
  // memory may return before its data lands. The mock runs them on an idle device, to the end.
  // The runtime uses only the stream-ordered ones below; these serve the driver tests.
  virtual Status memcpy_htod(DevicePtr dst, const void* src, std::size_t bytes) = 0;
  virtual Status memcpy_dtoh(void* dst, DevicePtr src, std::size_t bytes) = 0;
  virtual Status memcpy_dtod(DevicePtr dst, DevicePtr src, std::size_t bytes) = 0;
  // The host memory must stay valid until the stream's work reaches the copy.
  virtual Status memcpy_htod_async(DevicePtr dst, const void* src, std::size_t bytes, StreamHandle stream) = 0;
  virtual Status memcpy_dtoh_async(void* dst, DevicePtr src, std::size_t bytes, StreamHandle stream) = 0;
  virtual Status memcpy_dtod_async(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle stream) = 0;
  virtual Status memset_d32(DevicePtr dst, std::uint32_t value, std::size_t count) = 0;
  virtual Status memset_d32_async(DevicePtr dst, std::uint32_t value, std::size_t count, StreamHandle stream) = 0;

  // modules and kernels
  virtual Status module_load(const ModuleImage& image, ModuleHandle* out) = 0;
  virtual Status module_unload(ModuleHandle module) = 0;
  virtual Status module_get_function(ModuleHandle module, const std::string& name, FunctionHandle* out) = 0;
  // The byte size of each kernel parameter, where the driver can tell (else not_supported).
  virtual Status function_param_sizes(FunctionHandle function, std::vector<std::size_t>* out) = 0;
  virtual Status launch_kernel(FunctionHandle function, Dim3 grid, Dim3 block, std::uint32_t shared_bytes,
                               StreamHandle stream, const std::vector<KernelArg>& args) = 0;

  // capture
  virtual Status stream_begin_capture(StreamHandle stream, CaptureMode mode) = 0;
  // On an invalidated capture: ends it, *out = 0, returns Code::capture_invalidated.
  virtual Status stream_end_capture(StreamHandle stream, GraphHandle* out) = 0;
  // *capture_id: the capture's id while its status is active, else 0 (CUDA vouches for the
  // id of an active capture only).
  virtual Status stream_capture_info(StreamHandle stream, CaptureStatus* status, std::uint64_t* capture_id) = 0;
  // Sets the calling thread's capture mode to *mode and returns the previous one in *mode.
  virtual Status thread_exchange_capture_mode(CaptureMode* mode) = 0;

  // graphs
  virtual Status graph_node_counts(GraphHandle graph, GraphNodeCounts* out) = 0;
  virtual Status graph_instantiate(GraphHandle graph, GraphExecHandle* out) = 0;
  virtual Status graph_upload(GraphExecHandle exec, StreamHandle stream) = 0;
  virtual Status graph_launch(GraphExecHandle exec, StreamHandle stream) = 0;
  virtual Status graph_exec_update(GraphExecHandle exec, GraphHandle graph, GraphUpdateResult* result) = 0;
  virtual Status graph_destroy(GraphHandle graph) = 0;
  virtual Status graph_exec_destroy(GraphExecHandle exec) = 0;

  // interop
  // Makes the stream with native pointer `native_stream` (another library's stream, or 0 for
  // the legacy default stream) wait, on the device, for the work `event` recorded.
  virtual Status stream_wait_event(std::uintptr_t native_stream, EventHandle event) = 0;
  // The reverse: records `event` on the stream with native pointer `native_stream` (another
  // library's stream; CUDA's 1 and 2 name the legacy and the per-thread default stream), so a
  // stream of this driver can wait for the work that library queued.
  virtual Status event_record_native(EventHandle event, std::uintptr_t native_stream) = 0;
  // Whether the stream with native pointer `native_stream` (another library's, named as in
  // event_record_native) is being captured into a graph. Recording on such a stream or
  // waiting there would make a lifecore stream join that capture, or invalidate it: a caller
  // asks first. The legacy default stream answers Code::capture_implicit while a blocking
  // stream captures (recording or waiting there would fail alike).
  virtual Status stream_capture_status_native(std::uintptr_t native_stream, CaptureStatus* status) = 0;
  // The ordinal of the device whose memory `ptr` is; Code::invalid_value when the driver does
  // not know the address as device memory, Code::not_supported when the driver cannot tell.
  virtual Status pointer_device(DevicePtr ptr, int* ordinal) = 0;
  // The host bytes behind [ptr, ptr + bytes) when the device's memory is host memory;
  // Code::not_supported on a device whose memory the host cannot address.
  virtual Status host_view(DevicePtr ptr, std::size_t bytes, HostView* out) = 0;
  // The reverse, for another library's host memory (a NumPy array) where the device's memory
  // is host memory: [host, host + bytes) gets a device address of its own, valid until
  // unmap_host. The caller keeps the host memory alive and unmaps only once no queued work
  // reads it. Code::not_supported on a device that cannot address host memory this way.
  virtual Status map_host(void* host, std::size_t bytes, DevicePtr* out) = 0;
  virtual Status unmap_host(DevicePtr ptr) = 0;
};

// What lifecore.backends() reports for one backend.
struct BackendInfo {
  std::string name;            // the registry's name for the backend
  bool available = false;
  std::string reason;          // why not, when unavailable; details (e.g. "no hiprtc") otherwise
  int driver_version = 0;      // 0 when unknown
  int device_count = 0;
  std::string device_name;     // of device 0, when there is one
  std::string library;         // the shared library that was loaded, when any
  // Interop facts, from the backend's registry entry (see BackendDescriptor).
  int dlpack_device_type = 0;
  bool cuda_array_interface = false;
  std::string torch_device;
  std::vector<std::string> code_object_kinds;
  bool emulated = false;  // from the registry entry: an emulated device offering fault injection
};

}  // namespace lifecore::driver
