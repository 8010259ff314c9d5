// The subset of the CUDA driver ABI lifecore uses, declared here so that building needs no
// CUDA toolkit. Handle types reuse the driver's own struct tags (so they are the very same
// types as cuda.h's); enums are plain ints with the driver's numbers. cuda_abi_check.cpp
// asserts all of this against cuda.h whenever the toolkit is present at build time.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphNode_st;
struct CUgraphExec_st;
struct CUgraphEdgeData_st;

namespace lifecore::driver::cuda_abi {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using cuuint64_t = std::uint64_t;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
using CUgraph = CUgraph_st*;
using CUgraphNode = CUgraphNode_st*;
using CUgraphExec = CUgraphExec_st*;
using CUgraphEdgeData = CUgraphEdgeData_st;
using CUstreamCaptureMode = int;
using CUstreamCaptureStatus = int;
using CUgraphNodeType = int;
using CUjit_option = int;
using CUdriverProcAddressQueryResult = int;
using CUgraphExecUpdateResult = int;
using CUpointer_attribute = int;

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
inline constexpr CUresult CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910;

inline constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned CU_EVENT_DEFAULT = 0x0;
inline constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
inline constexpr CUpointer_attribute CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;

inline constexpr cuuint64_t CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1;
inline constexpr CUdriverProcAddressQueryResult CU_GET_PROC_ADDRESS_SUCCESS = 0;
inline constexpr CUdriverProcAddressQueryResult CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1;
inline constexpr CUdriverProcAddressQueryResult CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2;

inline constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_GLOBAL = 0;
inline constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
inline constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_RELAXED = 2;
inline constexpr CUstreamCaptureStatus CU_STREAM_CAPTURE_STATUS_NONE = 0;
inline constexpr CUstreamCaptureStatus CU_STREAM_CAPTURE_STATUS_ACTIVE = 1;
inline constexpr CUstreamCaptureStatus CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2;

inline constexpr CUgraphNodeType CU_GRAPH_NODE_TYPE_MEM_ALLOC = 10;
inline constexpr CUgraphNodeType CU_GRAPH_NODE_TYPE_MEM_FREE = 11;

inline constexpr CUjit_option CU_JIT_INFO_LOG_BUFFER = 3;
inline constexpr CUjit_option CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4;
inline constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER = 5;
inline constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;

inline constexpr CUgraphExecUpdateResult CU_GRAPH_EXEC_UPDATE_SUCCESS = 0;
inline constexpr CUgraphExecUpdateResult CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED = 8;

// The CUDA 12 result of cuGraphExecUpdate (the _v2 entry point).
struct CUgraphExecUpdateResultInfo {
  CUgraphExecUpdateResult result;
  CUgraphNode errorNode;
  CUgraphNode errorFromNode;
};

// Function pointer types, one per entry point at the ABI version the loader asks for.
using PFN_cuGetProcAddress_v12000 = CUresult (*)(const char* symbol, void** pfn, int driver_version,
                                                 cuuint64_t flags, CUdriverProcAddressQueryResult* found);
using PFN_cuInit = CUresult (*)(unsigned int flags);
using PFN_cuDriverGetVersion = CUresult (*)(int* version);
using PFN_cuGetErrorName = CUresult (*)(CUresult error, const char** name);
using PFN_cuGetErrorString = CUresult (*)(CUresult error, const char** text);
using PFN_cuDeviceGetCount = CUresult (*)(int* count);
using PFN_cuDeviceGet = CUresult (*)(CUdevice* device, int ordinal);
using PFN_cuDeviceGetName = CUresult (*)(char* name, int length, CUdevice device);
using PFN_cuDevicePrimaryCtxRetain = CUresult (*)(CUcontext* context, CUdevice device);
using PFN_cuDevicePrimaryCtxRelease = CUresult (*)(CUdevice device);
using PFN_cuCtxGetCurrent = CUresult (*)(CUcontext* context);
using PFN_cuCtxSetCurrent = CUresult (*)(CUcontext context);
using PFN_cuCtxSynchronize = CUresult (*)();
using PFN_cuMemGetInfo = CUresult (*)(std::size_t* free_bytes, std::size_t* total_bytes);
using PFN_cuStreamCreate = CUresult (*)(CUstream* stream, unsigned int flags);
using PFN_cuStreamDestroy = CUresult (*)(CUstream stream);
using PFN_cuStreamSynchronize = CUresult (*)(CUstream stream);
using PFN_cuStreamQuery = CUresult (*)(CUstream stream);
using PFN_cuEventCreate = CUresult (*)(CUevent* event, unsigned int flags);
using PFN_cuEventDestroy = CUresult (*)(CUevent event);
using PFN_cuEventRecord = CUresult (*)(CUevent event, CUstream stream);
using PFN_cuEventSynchronize = CUresult (*)(CUevent event);
using PFN_cuEventQuery = CUresult (*)(CUevent event);
using PFN_cuEventElapsedTime = CUresult (*)(float* milliseconds, CUevent start, CUevent end);
using PFN_cuMemAlloc = CUresult (*)(CUdeviceptr* ptr, std::size_t bytes);
using PFN_cuMemFree = CUresult (*)(CUdeviceptr ptr);
using PFN_cuMemAllocAsync = CUresult (*)(CUdeviceptr* ptr, std::size_t bytes, CUstream stream);
using PFN_cuMemFreeAsync = CUresult (*)(CUdeviceptr ptr, CUstream stream);
using PFN_cuMemcpyHtoD = CUresult (*)(CUdeviceptr dst, const void* src, std::size_t bytes);
using PFN_cuMemcpyDtoH = CUresult (*)(void* dst, CUdeviceptr src, std::size_t bytes);
using PFN_cuMemcpyDtoD = CUresult (*)(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes);
using PFN_cuMemcpyHtoDAsync = CUresult (*)(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream);
using PFN_cuMemcpyDtoHAsync = CUresult (*)(void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream);
using PFN_cuMemcpyDtoDAsync = CUresult (*)(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream);
using PFN_cuMemsetD32 = CUresult (*)(CUdeviceptr dst, unsigned int value, std::size_t count);
using PFN_cuMemsetD32Async = CUresult (*)(CUdeviceptr dst, unsigned int value, std::size_t count, CUstream stream);
using PFN_cuModuleLoadDataEx = CUresult (*)(CUmodule* module, const void* image, unsigned int num_options,
                                            CUjit_option* options, void** option_values);
using PFN_cuModuleUnload = CUresult (*)(CUmodule module);
using PFN_cuModuleGetFunction = CUresult (*)(CUfunction* function, CUmodule module, const char* name);
using PFN_cuFuncGetParamInfo = CUresult (*)(CUfunction function, std::size_t index, std::size_t* offset,
                                            std::size_t* size);
using PFN_cuLaunchKernel = CUresult (*)(CUfunction function, unsigned int grid_x, unsigned int grid_y,
                                        unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                        unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                                        void** params, void** extra);
using PFN_cuStreamBeginCapture = CUresult (*)(CUstream stream, CUstreamCaptureMode mode);
using PFN_cuStreamEndCapture = CUresult (*)(CUstream stream, CUgraph* graph);
using PFN_cuStreamGetCaptureInfo_v3 = CUresult (*)(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                   CUgraph* graph, const CUgraphNode** dependencies,
                                                   const CUgraphEdgeData** edges, std::size_t* count);
using PFN_cuStreamGetCaptureInfo_v2 = CUresult (*)(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                   CUgraph* graph, const CUgraphNode** dependencies,
                                                   std::size_t* count);
using PFN_cuThreadExchangeStreamCaptureMode = CUresult (*)(CUstreamCaptureMode* mode);
using PFN_cuGraphGetNodes = CUresult (*)(CUgraph graph, CUgraphNode* nodes, std::size_t* count);
using PFN_cuGraphNodeGetType = CUresult (*)(CUgraphNode node, CUgraphNodeType* type);
using PFN_cuGraphInstantiateWithFlags = CUresult (*)(CUgraphExec* exec, CUgraph graph, unsigned long long flags);
using PFN_cuGraphUpload = CUresult (*)(CUgraphExec exec, CUstream stream);
using PFN_cuGraphLaunch = CUresult (*)(CUgraphExec exec, CUstream stream);
using PFN_cuGraphExecUpdate = CUresult (*)(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info);
using PFN_cuGraphDestroy = CUresult (*)(CUgraph graph);
using PFN_cuGraphExecDestroy = CUresult (*)(CUgraphExec exec);
using PFN_cuStreamWaitEvent = CUresult (*)(CUstream stream, CUevent event, unsigned int flags);
using PFN_cuPointerGetAttribute = CUresult (*)(void* data, CUpointer_attribute attribute, CUdeviceptr ptr);

}  // namespace lifecore::driver::cuda_abi
