// The subset of the HIP runtime ABI lifecore uses, declared here so that building needs no
// ROCm. Numbers follow hip_runtime_api.h, which shares CUDA's numbering for everything
// lifecore touches (errors 0..999, capture modes and statuses, update results) but graph node
// types before graph memory nodes (see hipGraphNodeTypeMemAlloc); handle types reuse HIP's own
// struct tags.
#pragma once

#include <cstddef>
#include <cstdint>

struct ihipStream_t;
struct ihipEvent_t;
struct ihipModule_t;
struct ihipModuleSymbol_t;
struct ihipGraph;
struct hipGraphNode;
struct hipGraphExec;
struct _hiprtcProgram;

namespace lifecore::driver::hip_abi {

using hipError_t = int;
using hipDevice_t = int;
using hipDeviceptr_t = void*;
using hipStream_t = ihipStream_t*;
using hipEvent_t = ihipEvent_t*;
using hipModule_t = ihipModule_t*;
using hipFunction_t = ihipModuleSymbol_t*;
using hipGraph_t = ihipGraph*;
using hipGraphNode_t = hipGraphNode*;
using hipGraphExec_t = hipGraphExec*;
using hipStreamCaptureMode = int;
using hipStreamCaptureStatus = int;
using hipGraphNodeType = int;
using hipGraphExecUpdateResult = int;
using hipDriverProcAddressQueryResult = int;
using hipPointer_attribute = int;

inline constexpr hipError_t hipSuccess = 0;
inline constexpr hipError_t hipErrorInvalidValue = 1;
inline constexpr hipError_t hipErrorNoDevice = 100;
inline constexpr hipError_t hipErrorInvalidDevice = 101;
inline constexpr hipError_t hipErrorGraphExecUpdateFailure = 910;
inline constexpr hipError_t hipErrorUnknown = 999;

inline constexpr unsigned hipStreamNonBlocking = 0x1;
inline constexpr unsigned hipEventDefault = 0x0;
inline constexpr unsigned hipEventDisableTiming = 0x2;
inline constexpr hipStreamCaptureMode hipStreamCaptureModeRelaxed = 2;  // Global 0, ThreadLocal 1, as CUDA's
inline constexpr hipStreamCaptureStatus hipStreamCaptureStatusNone = 0;
inline constexpr hipStreamCaptureStatus hipStreamCaptureStatusActive = 1;
inline constexpr hipStreamCaptureStatus hipStreamCaptureStatusInvalidated = 2;
// Since graph memory nodes came (with hipGraphAddMemAllocNode), kernels count from 0 and these
// are 10 and 11. The runtimes before them count from 1: 10 and 11 are MemcpyFromSymbol and
// MemcpyToSymbol there, and no graph can hold a memory node.
inline constexpr hipGraphNodeType hipGraphNodeTypeMemAlloc = 10;
inline constexpr hipGraphNodeType hipGraphNodeTypeMemFree = 11;
inline constexpr hipDriverProcAddressQueryResult HIP_GET_PROC_ADDRESS_SUCCESS = 0;
// hipPointer_attribute counts from HIP_POINTER_ATTRIBUTE_CONTEXT = 1, as CUpointer_attribute.
inline constexpr hipPointer_attribute HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;
// ROCm 6.1, the ABI declared below, as hipGetProcAddress's hipVersion counts: 100 * major +
// minor (not HIP_VERSION's major * 10^7 + minor * 10^5, which reads as a far newer release).
inline constexpr int hip_abi_version = 601;

using PFN_hipGetProcAddress = hipError_t (*)(const char* symbol, void** pfn, int hip_version, std::uint64_t flags,
                                             hipDriverProcAddressQueryResult* found);
using PFN_hipInit = hipError_t (*)(unsigned int flags);
using PFN_hipDriverGetVersion = hipError_t (*)(int* version);
using PFN_hipRuntimeGetVersion = hipError_t (*)(int* version);
using PFN_hipGetErrorName = const char* (*)(hipError_t error);
using PFN_hipGetErrorString = const char* (*)(hipError_t error);
using PFN_hipGetDeviceCount = hipError_t (*)(int* count);
using PFN_hipDeviceGet = hipError_t (*)(hipDevice_t* device, int ordinal);
using PFN_hipDeviceGetName = hipError_t (*)(char* name, int length, hipDevice_t device);
using PFN_hipSetDevice = hipError_t (*)(int ordinal);
using PFN_hipGetDevice = hipError_t (*)(int* ordinal);
using PFN_hipDeviceSynchronize = hipError_t (*)();
using PFN_hipMemGetInfo = hipError_t (*)(std::size_t* free_bytes, std::size_t* total_bytes);
using PFN_hipStreamCreateWithFlags = hipError_t (*)(hipStream_t* stream, unsigned int flags);
using PFN_hipStreamDestroy = hipError_t (*)(hipStream_t stream);
using PFN_hipStreamSynchronize = hipError_t (*)(hipStream_t stream);
using PFN_hipStreamQuery = hipError_t (*)(hipStream_t stream);
using PFN_hipEventCreateWithFlags = hipError_t (*)(hipEvent_t* event, unsigned int flags);
using PFN_hipEventDestroy = hipError_t (*)(hipEvent_t event);
using PFN_hipEventRecord = hipError_t (*)(hipEvent_t event, hipStream_t stream);
using PFN_hipEventSynchronize = hipError_t (*)(hipEvent_t event);
using PFN_hipEventQuery = hipError_t (*)(hipEvent_t event);
using PFN_hipEventElapsedTime = hipError_t (*)(float* milliseconds, hipEvent_t start, hipEvent_t stop);
using PFN_hipMalloc = hipError_t (*)(void** pointer, std::size_t bytes);
using PFN_hipFree = hipError_t (*)(void* pointer);
using PFN_hipMallocAsync = hipError_t (*)(void** pointer, std::size_t bytes, hipStream_t stream);
using PFN_hipFreeAsync = hipError_t (*)(void* pointer, hipStream_t stream);
using PFN_hipMemcpyHtoD = hipError_t (*)(hipDeviceptr_t dst, void* src, std::size_t bytes);
using PFN_hipMemcpyDtoH = hipError_t (*)(void* dst, hipDeviceptr_t src, std::size_t bytes);
using PFN_hipMemcpyDtoD = hipError_t (*)(hipDeviceptr_t dst, hipDeviceptr_t src, std::size_t bytes);
using PFN_hipMemcpyHtoDAsync = hipError_t (*)(hipDeviceptr_t dst, void* src, std::size_t bytes, hipStream_t stream);
using PFN_hipMemcpyDtoHAsync = hipError_t (*)(void* dst, hipDeviceptr_t src, std::size_t bytes, hipStream_t stream);
using PFN_hipMemcpyDtoDAsync = hipError_t (*)(hipDeviceptr_t dst, hipDeviceptr_t src, std::size_t bytes, hipStream_t stream);
using PFN_hipMemsetD32 = hipError_t (*)(hipDeviceptr_t dst, int value, std::size_t count);
using PFN_hipMemsetD32Async = hipError_t (*)(hipDeviceptr_t dst, int value, std::size_t count, hipStream_t stream);
using PFN_hipModuleLoadData = hipError_t (*)(hipModule_t* module, const void* image);
using PFN_hipModuleUnload = hipError_t (*)(hipModule_t module);
using PFN_hipModuleGetFunction = hipError_t (*)(hipFunction_t* function, hipModule_t module, const char* name);
using PFN_hipModuleLaunchKernel = hipError_t (*)(hipFunction_t function, unsigned int grid_x, unsigned int grid_y,
                                                 unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                                 unsigned int block_z, unsigned int shared_bytes, hipStream_t stream,
                                                 void** params, void** extra);
using PFN_hipStreamBeginCapture = hipError_t (*)(hipStream_t stream, hipStreamCaptureMode mode);
using PFN_hipStreamEndCapture = hipError_t (*)(hipStream_t stream, hipGraph_t* graph);
using PFN_hipStreamGetCaptureInfo = hipError_t (*)(hipStream_t stream, hipStreamCaptureStatus* status,
                                                   unsigned long long* id);
using PFN_hipStreamIsCapturing = hipError_t (*)(hipStream_t stream, hipStreamCaptureStatus* status);
using PFN_hipThreadExchangeStreamCaptureMode = hipError_t (*)(hipStreamCaptureMode* mode);
using PFN_hipGraphGetNodes = hipError_t (*)(hipGraph_t graph, hipGraphNode_t* nodes, std::size_t* count);
using PFN_hipGraphNodeGetType = hipError_t (*)(hipGraphNode_t node, hipGraphNodeType* type);
// Never called: its presence says the runtime has graph memory nodes (and numbers them as above).
using PFN_hipGraphAddMemAllocNode = hipError_t (*)(hipGraphNode_t* node, hipGraph_t graph,
                                                   const hipGraphNode_t* dependencies, std::size_t count,
                                                   void* params);
using PFN_hipGraphInstantiate = hipError_t (*)(hipGraphExec_t* exec, hipGraph_t graph, hipGraphNode_t* error_node,
                                               char* log, std::size_t log_size);
using PFN_hipGraphInstantiateWithFlags = hipError_t (*)(hipGraphExec_t* exec, hipGraph_t graph, unsigned long long flags);
using PFN_hipGraphUpload = hipError_t (*)(hipGraphExec_t exec, hipStream_t stream);
using PFN_hipGraphLaunch = hipError_t (*)(hipGraphExec_t exec, hipStream_t stream);
using PFN_hipGraphExecUpdate = hipError_t (*)(hipGraphExec_t exec, hipGraph_t graph, hipGraphNode_t* error_node,
                                              hipGraphExecUpdateResult* result);
using PFN_hipGraphDestroy = hipError_t (*)(hipGraph_t graph);
using PFN_hipGraphExecDestroy = hipError_t (*)(hipGraphExec_t exec);
using PFN_hipStreamWaitEvent = hipError_t (*)(hipStream_t stream, hipEvent_t event, unsigned int flags);
using PFN_hipPointerGetAttribute = hipError_t (*)(void* data, hipPointer_attribute attribute, hipDeviceptr_t ptr);

// hiprtc, loaded separately (it ships in its own library and may be absent).
using hiprtcResult = int;
using hiprtcProgram = _hiprtcProgram*;
inline constexpr hiprtcResult HIPRTC_SUCCESS = 0;
using PFN_hiprtcCreateProgram = hiprtcResult (*)(hiprtcProgram* program, const char* source, const char* name,
                                                 int header_count, const char** headers, const char** include_names);
using PFN_hiprtcCompileProgram = hiprtcResult (*)(hiprtcProgram program, int option_count, const char** options);
using PFN_hiprtcGetProgramLogSize = hiprtcResult (*)(hiprtcProgram program, std::size_t* size);
using PFN_hiprtcGetProgramLog = hiprtcResult (*)(hiprtcProgram program, char* log);
using PFN_hiprtcGetCodeSize = hiprtcResult (*)(hiprtcProgram program, std::size_t* size);
using PFN_hiprtcGetCode = hiprtcResult (*)(hiprtcProgram program, char* code);
using PFN_hiprtcDestroyProgram = hiprtcResult (*)(hiprtcProgram* program);
using PFN_hiprtcGetErrorString = const char* (*)(hiprtcResult result);

}  // namespace lifecore::driver::hip_abi
