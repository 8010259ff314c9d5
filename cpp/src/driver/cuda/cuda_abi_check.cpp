// Compile-time proof that cuda_abi.hpp matches the driver's own header, built only where
// cuda.h is present. Constants and enum values are compared one by one; each entry point's
// function pointer type is compared with std::is_same after mapping cuda.h's enum types to
// the ints (of the same size) that cuda_abi.hpp declares. Entry points and codes newer than
// the header at hand (CUDA_VERSION) are left unchecked; the build needs cuda.h 12.0 or newer.
#ifdef LIFECORE_HAVE_CUDA_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstddef>
#include <type_traits>

#include "driver/cuda/cuda_abi.hpp"
#include "driver/cuda/cuda_status.hpp"
#include "lifecore/driver/driver.hpp"

namespace lifecore::driver::cuda_abi_check {
namespace abi = lifecore::driver::cuda_abi;

template <class T>
struct declared {
  using type = T;
};
template <class T>
using declared_t = typename declared<T>::type;
#define LIFECORE_DECLARED_AS_INT(type_name)                                      \
  static_assert(sizeof(::type_name) == sizeof(int), #type_name " is not an int"); \
  template <>                                                                    \
  struct declared<::type_name> {                                                 \
    using type = int;                                                            \
  };
LIFECORE_DECLARED_AS_INT(CUresult)
LIFECORE_DECLARED_AS_INT(CUstreamCaptureMode)
LIFECORE_DECLARED_AS_INT(CUstreamCaptureStatus)
LIFECORE_DECLARED_AS_INT(CUgraphNodeType)
LIFECORE_DECLARED_AS_INT(CUjit_option)
LIFECORE_DECLARED_AS_INT(CUdriverProcAddressQueryResult)
LIFECORE_DECLARED_AS_INT(CUpointer_attribute)
#undef LIFECORE_DECLARED_AS_INT
template <>
struct declared<::CUgraphExecUpdateResultInfo> {
  using type = abi::CUgraphExecUpdateResultInfo;
};
template <class T>
struct declared<T*> {
  using type = declared_t<T>*;
};
template <class T>
struct declared<const T> {
  using type = const declared_t<T>;
};
template <class R, class... A>
struct declared<R (*)(A...)> {
  using type = declared_t<R> (*)(declared_t<A>...);
};

#define LIFECORE_SAME_ABI(ours, theirs) \
  static_assert(std::is_same_v<abi::ours, declared_t<::theirs>>, #ours " does not match cuda.h's " #theirs)

LIFECORE_SAME_ABI(PFN_cuGetProcAddress_v12000, PFN_cuGetProcAddress_v12000);
LIFECORE_SAME_ABI(PFN_cuInit, PFN_cuInit_v2000);
LIFECORE_SAME_ABI(PFN_cuDriverGetVersion, PFN_cuDriverGetVersion_v2020);
LIFECORE_SAME_ABI(PFN_cuGetErrorName, PFN_cuGetErrorName_v6000);
LIFECORE_SAME_ABI(PFN_cuGetErrorString, PFN_cuGetErrorString_v6000);
LIFECORE_SAME_ABI(PFN_cuDeviceGetCount, PFN_cuDeviceGetCount_v2000);
LIFECORE_SAME_ABI(PFN_cuDeviceGet, PFN_cuDeviceGet_v2000);
LIFECORE_SAME_ABI(PFN_cuDeviceGetName, PFN_cuDeviceGetName_v2000);
LIFECORE_SAME_ABI(PFN_cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000);
LIFECORE_SAME_ABI(PFN_cuDevicePrimaryCtxRelease, PFN_cuDevicePrimaryCtxRelease_v11000);
LIFECORE_SAME_ABI(PFN_cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000);
LIFECORE_SAME_ABI(PFN_cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000);
LIFECORE_SAME_ABI(PFN_cuCtxSynchronize, PFN_cuCtxSynchronize_v2000);
LIFECORE_SAME_ABI(PFN_cuMemGetInfo, PFN_cuMemGetInfo_v3020);
LIFECORE_SAME_ABI(PFN_cuStreamCreate, PFN_cuStreamCreate_v2000);
LIFECORE_SAME_ABI(PFN_cuStreamDestroy, PFN_cuStreamDestroy_v4000);
LIFECORE_SAME_ABI(PFN_cuStreamSynchronize, PFN_cuStreamSynchronize_v2000);
LIFECORE_SAME_ABI(PFN_cuStreamQuery, PFN_cuStreamQuery_v2000);
LIFECORE_SAME_ABI(PFN_cuEventCreate, PFN_cuEventCreate_v2000);
LIFECORE_SAME_ABI(PFN_cuEventDestroy, PFN_cuEventDestroy_v4000);
LIFECORE_SAME_ABI(PFN_cuEventRecord, PFN_cuEventRecord_v2000);
LIFECORE_SAME_ABI(PFN_cuEventSynchronize, PFN_cuEventSynchronize_v2000);
LIFECORE_SAME_ABI(PFN_cuEventQuery, PFN_cuEventQuery_v2000);
LIFECORE_SAME_ABI(PFN_cuEventElapsedTime, PFN_cuEventElapsedTime_v2000);
LIFECORE_SAME_ABI(PFN_cuMemAlloc, PFN_cuMemAlloc_v3020);
LIFECORE_SAME_ABI(PFN_cuMemFree, PFN_cuMemFree_v3020);
LIFECORE_SAME_ABI(PFN_cuMemAllocAsync, PFN_cuMemAllocAsync_v11020);
LIFECORE_SAME_ABI(PFN_cuMemFreeAsync, PFN_cuMemFreeAsync_v11020);
LIFECORE_SAME_ABI(PFN_cuMemcpyHtoD, PFN_cuMemcpyHtoD_v3020);
LIFECORE_SAME_ABI(PFN_cuMemcpyDtoH, PFN_cuMemcpyDtoH_v3020);
LIFECORE_SAME_ABI(PFN_cuMemcpyDtoD, PFN_cuMemcpyDtoD_v3020);
LIFECORE_SAME_ABI(PFN_cuMemcpyHtoDAsync, PFN_cuMemcpyHtoDAsync_v3020);
LIFECORE_SAME_ABI(PFN_cuMemcpyDtoHAsync, PFN_cuMemcpyDtoHAsync_v3020);
LIFECORE_SAME_ABI(PFN_cuMemcpyDtoDAsync, PFN_cuMemcpyDtoDAsync_v3020);
LIFECORE_SAME_ABI(PFN_cuMemsetD32, PFN_cuMemsetD32_v3020);
LIFECORE_SAME_ABI(PFN_cuMemsetD32Async, PFN_cuMemsetD32Async_v3020);
LIFECORE_SAME_ABI(PFN_cuModuleLoadDataEx, PFN_cuModuleLoadDataEx_v2010);
LIFECORE_SAME_ABI(PFN_cuModuleUnload, PFN_cuModuleUnload_v2000);
LIFECORE_SAME_ABI(PFN_cuModuleGetFunction, PFN_cuModuleGetFunction_v2000);
#if CUDA_VERSION >= 12040
LIFECORE_SAME_ABI(PFN_cuFuncGetParamInfo, PFN_cuFuncGetParamInfo_v12040);
#endif
LIFECORE_SAME_ABI(PFN_cuLaunchKernel, PFN_cuLaunchKernel_v4000);
LIFECORE_SAME_ABI(PFN_cuStreamBeginCapture, PFN_cuStreamBeginCapture_v10010);
LIFECORE_SAME_ABI(PFN_cuStreamEndCapture, PFN_cuStreamEndCapture_v10000);
#if CUDA_VERSION >= 12030
LIFECORE_SAME_ABI(PFN_cuStreamGetCaptureInfo_v3, PFN_cuStreamGetCaptureInfo_v12030);
#endif
LIFECORE_SAME_ABI(PFN_cuStreamGetCaptureInfo_v2, PFN_cuStreamGetCaptureInfo_v11030);
LIFECORE_SAME_ABI(PFN_cuThreadExchangeStreamCaptureMode, PFN_cuThreadExchangeStreamCaptureMode_v10010);
LIFECORE_SAME_ABI(PFN_cuGraphGetNodes, PFN_cuGraphGetNodes_v10000);
LIFECORE_SAME_ABI(PFN_cuGraphNodeGetType, PFN_cuGraphNodeGetType_v10000);
LIFECORE_SAME_ABI(PFN_cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags_v11040);
LIFECORE_SAME_ABI(PFN_cuGraphUpload, PFN_cuGraphUpload_v11010);
LIFECORE_SAME_ABI(PFN_cuGraphLaunch, PFN_cuGraphLaunch_v10000);
LIFECORE_SAME_ABI(PFN_cuGraphExecUpdate, PFN_cuGraphExecUpdate_v12000);
LIFECORE_SAME_ABI(PFN_cuGraphDestroy, PFN_cuGraphDestroy_v10000);
LIFECORE_SAME_ABI(PFN_cuGraphExecDestroy, PFN_cuGraphExecDestroy_v10000);
LIFECORE_SAME_ABI(PFN_cuStreamWaitEvent, PFN_cuStreamWaitEvent_v3020);
LIFECORE_SAME_ABI(PFN_cuPointerGetAttribute, PFN_cuPointerGetAttribute_v4000);
#undef LIFECORE_SAME_ABI

static_assert(std::is_same_v<abi::CUdeviceptr, ::CUdeviceptr>);
static_assert(std::is_same_v<abi::CUdevice, ::CUdevice>);
static_assert(std::is_same_v<abi::cuuint64_t, ::cuuint64_t>);
static_assert(std::is_same_v<abi::CUstream, ::CUstream>);
static_assert(std::is_same_v<abi::CUgraphExec, ::CUgraphExec>);
static_assert(sizeof(abi::CUgraphExecUpdateResultInfo) == sizeof(::CUgraphExecUpdateResultInfo));
static_assert(offsetof(abi::CUgraphExecUpdateResultInfo, errorNode) == offsetof(::CUgraphExecUpdateResultInfo, errorNode));
static_assert(offsetof(abi::CUgraphExecUpdateResultInfo, errorFromNode) ==
              offsetof(::CUgraphExecUpdateResultInfo, errorFromNode));

#define LIFECORE_SAME_VALUE(name) static_assert(abi::name == static_cast<std::remove_cv_t<decltype(abi::name)>>(::name), #name)
LIFECORE_SAME_VALUE(CUDA_SUCCESS);
LIFECORE_SAME_VALUE(CUDA_ERROR_INVALID_VALUE);
LIFECORE_SAME_VALUE(CUDA_ERROR_NO_DEVICE);
LIFECORE_SAME_VALUE(CUDA_ERROR_NOT_FOUND);
LIFECORE_SAME_VALUE(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
LIFECORE_SAME_VALUE(CU_STREAM_NON_BLOCKING);
LIFECORE_SAME_VALUE(CU_EVENT_DEFAULT);
LIFECORE_SAME_VALUE(CU_EVENT_DISABLE_TIMING);
LIFECORE_SAME_VALUE(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
LIFECORE_SAME_VALUE(CU_GET_PROC_ADDRESS_LEGACY_STREAM);
LIFECORE_SAME_VALUE(CU_GET_PROC_ADDRESS_SUCCESS);
LIFECORE_SAME_VALUE(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
LIFECORE_SAME_VALUE(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
LIFECORE_SAME_VALUE(CU_STREAM_CAPTURE_MODE_GLOBAL);
LIFECORE_SAME_VALUE(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
LIFECORE_SAME_VALUE(CU_STREAM_CAPTURE_MODE_RELAXED);
LIFECORE_SAME_VALUE(CU_STREAM_CAPTURE_STATUS_NONE);
LIFECORE_SAME_VALUE(CU_STREAM_CAPTURE_STATUS_ACTIVE);
LIFECORE_SAME_VALUE(CU_STREAM_CAPTURE_STATUS_INVALIDATED);
LIFECORE_SAME_VALUE(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
LIFECORE_SAME_VALUE(CU_GRAPH_NODE_TYPE_MEM_FREE);
LIFECORE_SAME_VALUE(CU_JIT_INFO_LOG_BUFFER);
LIFECORE_SAME_VALUE(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES);
LIFECORE_SAME_VALUE(CU_JIT_ERROR_LOG_BUFFER);
LIFECORE_SAME_VALUE(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES);
LIFECORE_SAME_VALUE(CU_GRAPH_EXEC_UPDATE_SUCCESS);
LIFECORE_SAME_VALUE(CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED);
#undef LIFECORE_SAME_VALUE

// The vendor-neutral enums use the driver's numbering directly.
static_assert(static_cast<int>(CaptureMode::global) == ::CU_STREAM_CAPTURE_MODE_GLOBAL);
static_assert(static_cast<int>(CaptureMode::thread_local_) == ::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
static_assert(static_cast<int>(CaptureMode::relaxed) == ::CU_STREAM_CAPTURE_MODE_RELAXED);
static_assert(static_cast<int>(CaptureStatus::invalidated) == ::CU_STREAM_CAPTURE_STATUS_INVALIDATED);
static_assert(static_cast<int>(GraphUpdateResult::topology_changed) == ::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
static_assert(static_cast<int>(GraphUpdateResult::attributes_changed) == ::CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED);
static_assert(cuda::cuda_native(Code::capture_invalidated) == ::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
static_assert(cuda::cuda_native(Code::capture_wrong_thread) == ::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
static_assert(cuda::cuda_native(Code::invalid_kernel_source) == ::CUDA_ERROR_INVALID_PTX);
static_assert(cuda::cuda_native(Code::not_ready) == ::CUDA_ERROR_NOT_READY);
static_assert(cuda::cuda_native(Code::invalid_handle) == ::CUDA_ERROR_INVALID_HANDLE);
static_assert(cuda::cuda_native(Code::illegal_state) == ::CUDA_ERROR_ILLEGAL_STATE);
static_assert(cuda::cuda_native(Code::graph_exec_update_failure) == ::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
#if CUDA_VERSION >= 12080
// The sticky codes the status table names without a code of lifecore's.
static_assert(::CUDA_ERROR_CONTAINED == 226 && ::CUDA_ERROR_TENSOR_MEMORY_LEAK == 721 &&
              ::CUDA_ERROR_MPS_CLIENT_TERMINATED == 810);
#endif

}  // namespace lifecore::driver::cuda_abi_check

#endif  // LIFECORE_HAVE_CUDA_H
