// The HIP runtime entry points lifecore resolves, written once.
//   X(member, exported name, required)
// Resolved through hipGetProcAddress (ROCm >= 6.1) at hip_abi_version, else dlsym. A
// missing required entry makes the backend unavailable with its name; a missing optional
// one disables only the operation that needs it.
#pragma once

#define LIFECORE_HIP_SYMBOLS(X)                                               \
  X(hipInit, true)                                                            \
  X(hipDriverGetVersion, true)                                                \
  X(hipRuntimeGetVersion, false)                                              \
  X(hipGetErrorName, true)                                                    \
  X(hipGetErrorString, true)                                                  \
  X(hipGetDeviceCount, true)                                                  \
  X(hipDeviceGet, true)                                                       \
  X(hipDeviceGetName, true)                                                   \
  X(hipSetDevice, true)                                                       \
  X(hipGetDevice, true)                                                       \
  X(hipDeviceSynchronize, true)                                               \
  X(hipMemGetInfo, true)                                                      \
  X(hipStreamCreateWithFlags, true)                                           \
  X(hipStreamDestroy, true)                                                   \
  X(hipStreamSynchronize, true)                                               \
  X(hipStreamQuery, true)                                                     \
  X(hipEventCreateWithFlags, true)                                            \
  X(hipEventDestroy, true)                                                    \
  X(hipEventRecord, true)                                                     \
  X(hipEventSynchronize, true)                                                \
  X(hipEventQuery, true)                                                      \
  X(hipEventElapsedTime, true)                                                \
  X(hipMalloc, true)                                                          \
  X(hipFree, true)                                                            \
  X(hipMallocAsync, false)                                                    \
  X(hipFreeAsync, false)                                                      \
  X(hipMemcpyHtoD, true)                                                      \
  X(hipMemcpyDtoH, true)                                                      \
  X(hipMemcpyDtoD, true)                                                      \
  X(hipMemcpyHtoDAsync, true)                                                 \
  X(hipMemcpyDtoHAsync, true)                                                 \
  X(hipMemcpyDtoDAsync, true)                                                 \
  X(hipMemsetD32, true)                                                       \
  X(hipMemsetD32Async, true)                                                  \
  X(hipModuleLoadData, true)                                                  \
  X(hipModuleUnload, true)                                                    \
  X(hipModuleGetFunction, true)                                               \
  X(hipModuleLaunchKernel, true)                                              \
  X(hipStreamBeginCapture, true)                                              \
  X(hipStreamEndCapture, true)                                                \
  X(hipStreamGetCaptureInfo, true)                                            \
  X(hipStreamIsCapturing, false)                                              \
  X(hipThreadExchangeStreamCaptureMode, true)                                 \
  X(hipGraphGetNodes, true)                                                   \
  X(hipGraphNodeGetType, true)                                                \
  X(hipGraphAddMemAllocNode, false)                                           \
  X(hipGraphInstantiate, true)                                                \
  X(hipGraphInstantiateWithFlags, false)                                      \
  X(hipGraphUpload, false)                                                    \
  X(hipGraphLaunch, true)                                                     \
  X(hipGraphExecUpdate, false)                                                \
  X(hipGraphDestroy, true)                                                    \
  X(hipGraphExecDestroy, true)                                                \
  X(hipStreamWaitEvent, true)                                                 \
  X(hipPointerGetAttribute, false)

#define LIFECORE_HIPRTC_SYMBOLS(X) \
  X(hiprtcCreateProgram)           \
  X(hiprtcCompileProgram)          \
  X(hiprtcGetProgramLogSize)       \
  X(hiprtcGetProgramLog)           \
  X(hiprtcGetCodeSize)             \
  X(hiprtcGetCode)                 \
  X(hiprtcDestroyProgram)          \
  X(hiprtcGetErrorString)
