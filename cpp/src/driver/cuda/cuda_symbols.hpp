// The CUDA driver entry points lifecore resolves, written once.
//   X(member, base name, minimum version, versioned export, required)
// The loader asks cuGetProcAddress_v2 for `base name` at `minimum version` (the version that
// introduced the ABI declared in cuda_abi.hpp) and falls back to dlsym of `versioned export`.
// A missing required entry makes the backend unavailable with that entry's name; a missing
// optional one only disables the operation that needs it (it then returns not_supported).
#pragma once

#define LIFECORE_CUDA_SYMBOLS(X)                                                                    \
  X(cuInit, "cuInit", 2000, "cuInit", true)                                                        \
  X(cuDriverGetVersion, "cuDriverGetVersion", 2020, "cuDriverGetVersion", true)                    \
  X(cuGetErrorName, "cuGetErrorName", 6000, "cuGetErrorName", true)                                \
  X(cuGetErrorString, "cuGetErrorString", 6000, "cuGetErrorString", true)                          \
  X(cuDeviceGetCount, "cuDeviceGetCount", 2000, "cuDeviceGetCount", true)                          \
  X(cuDeviceGet, "cuDeviceGet", 2000, "cuDeviceGet", true)                                         \
  X(cuDeviceGetName, "cuDeviceGetName", 2000, "cuDeviceGetName", true)                             \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, "cuDevicePrimaryCtxRetain", true)  \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 11000, "cuDevicePrimaryCtxRelease_v2", true) \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", 4000, "cuCtxGetCurrent", true)                             \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, "cuCtxSetCurrent", true)                             \
  X(cuCtxSynchronize, "cuCtxSynchronize", 2000, "cuCtxSynchronize", true)                          \
  X(cuMemGetInfo, "cuMemGetInfo", 3020, "cuMemGetInfo_v2", true)                                   \
  X(cuStreamCreate, "cuStreamCreate", 2000, "cuStreamCreate", true)                                \
  X(cuStreamDestroy, "cuStreamDestroy", 4000, "cuStreamDestroy_v2", true)                          \
  X(cuStreamSynchronize, "cuStreamSynchronize", 2000, "cuStreamSynchronize", true)                 \
  X(cuStreamQuery, "cuStreamQuery", 2000, "cuStreamQuery", true)                                   \
  X(cuEventCreate, "cuEventCreate", 2000, "cuEventCreate", true)                                   \
  X(cuEventDestroy, "cuEventDestroy", 4000, "cuEventDestroy_v2", true)                             \
  X(cuEventRecord, "cuEventRecord", 2000, "cuEventRecord", true)                                   \
  X(cuEventSynchronize, "cuEventSynchronize", 2000, "cuEventSynchronize", true)                    \
  X(cuEventQuery, "cuEventQuery", 2000, "cuEventQuery", true)                                      \
  X(cuEventElapsedTime, "cuEventElapsedTime", 2000, "cuEventElapsedTime", true)                    \
  X(cuMemAlloc, "cuMemAlloc", 3020, "cuMemAlloc_v2", true)                                         \
  X(cuMemFree, "cuMemFree", 3020, "cuMemFree_v2", true)                                            \
  X(cuMemAllocAsync, "cuMemAllocAsync", 11020, "cuMemAllocAsync", false)                           \
  X(cuMemFreeAsync, "cuMemFreeAsync", 11020, "cuMemFreeAsync", false)                              \
  X(cuMemcpyHtoD, "cuMemcpyHtoD", 3020, "cuMemcpyHtoD_v2", true)                                   \
  X(cuMemcpyDtoH, "cuMemcpyDtoH", 3020, "cuMemcpyDtoH_v2", true)                                   \
  X(cuMemcpyDtoD, "cuMemcpyDtoD", 3020, "cuMemcpyDtoD_v2", true)                                   \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync", 3020, "cuMemcpyHtoDAsync_v2", true)                    \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync", 3020, "cuMemcpyDtoHAsync_v2", true)                    \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync", 3020, "cuMemcpyDtoDAsync_v2", true)                    \
  X(cuMemsetD32, "cuMemsetD32", 3020, "cuMemsetD32_v2", true)                                      \
  X(cuMemsetD32Async, "cuMemsetD32Async", 3020, "cuMemsetD32Async", true)                          \
  X(cuModuleLoadDataEx, "cuModuleLoadDataEx", 2010, "cuModuleLoadDataEx", true)                    \
  X(cuModuleUnload, "cuModuleUnload", 2000, "cuModuleUnload", true)                                \
  X(cuModuleGetFunction, "cuModuleGetFunction", 2000, "cuModuleGetFunction", true)                 \
  X(cuFuncGetParamInfo, "cuFuncGetParamInfo", 12040, "cuFuncGetParamInfo", false)                 \
  X(cuLaunchKernel, "cuLaunchKernel", 4000, "cuLaunchKernel", true)                                \
  X(cuStreamBeginCapture, "cuStreamBeginCapture", 10010, "cuStreamBeginCapture_v2", true)          \
  X(cuStreamEndCapture, "cuStreamEndCapture", 10000, "cuStreamEndCapture", true)                   \
  X(cuStreamGetCaptureInfo_v3, "cuStreamGetCaptureInfo", 12030, "cuStreamGetCaptureInfo_v3", false) \
  X(cuStreamGetCaptureInfo_v2, "cuStreamGetCaptureInfo", 11030, "cuStreamGetCaptureInfo_v2", false) \
  X(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", 10010,                 \
    "cuThreadExchangeStreamCaptureMode", true)                                                     \
  X(cuGraphGetNodes, "cuGraphGetNodes", 10000, "cuGraphGetNodes", true)                            \
  X(cuGraphNodeGetType, "cuGraphNodeGetType", 10000, "cuGraphNodeGetType", true)                   \
  X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 11040, "cuGraphInstantiateWithFlags", true) \
  X(cuGraphUpload, "cuGraphUpload", 11010, "cuGraphUpload", true)                                  \
  X(cuGraphLaunch, "cuGraphLaunch", 10000, "cuGraphLaunch", true)                                  \
  X(cuGraphExecUpdate, "cuGraphExecUpdate", 12000, "cuGraphExecUpdate_v2", false)                  \
  X(cuGraphDestroy, "cuGraphDestroy", 10000, "cuGraphDestroy", true)                               \
  X(cuGraphExecDestroy, "cuGraphExecDestroy", 10000, "cuGraphExecDestroy", true)                   \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", 3020, "cuStreamWaitEvent", true)                      \
  X(cuPointerGetAttribute, "cuPointerGetAttribute", 4000, "cuPointerGetAttribute", false)
