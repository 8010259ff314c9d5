// HIP's status codes: the native numbers and names, lifecore's code for each, and which ones
// are sticky.
#pragma once

#include <array>

#include "driver/native_status_table.hpp"

namespace lifecore::driver::hip {

// HIP has no code for not_permitted (800 is no hipError_t: hipGetErrorName calls it hipErrorUnknown).
inline constexpr std::array<NativeStatus, 27> hip_statuses{{
    {0, Code::success, "hipSuccess"},
    {1, Code::invalid_value, "hipErrorInvalidValue"},
    {2, Code::out_of_memory, "hipErrorOutOfMemory"},
    {3, Code::not_initialized, "hipErrorNotInitialized"},
    {100, Code::no_device, "hipErrorNoDevice"},
    {101, Code::invalid_device, "hipErrorInvalidDevice"},
    {200, Code::invalid_image, "hipErrorInvalidImage"},
    {201, Code::invalid_context, "hipErrorInvalidContext"},
    {218, Code::invalid_kernel_source, "hipErrorInvalidKernelFile"},
    {400, Code::invalid_handle, "hipErrorInvalidHandle"},
    {401, Code::illegal_state, "hipErrorIllegalState"},
    {500, Code::not_found, "hipErrorNotFound"},
    {600, Code::not_ready, "hipErrorNotReady"},
    {700, Code::illegal_address, "hipErrorIllegalAddress"},
    {719, Code::launch_failure, "hipErrorLaunchFailure"},
    {801, Code::not_supported, "hipErrorNotSupported"},
    {900, Code::capture_unsupported, "hipErrorStreamCaptureUnsupported"},
    {901, Code::capture_invalidated, "hipErrorStreamCaptureInvalidated"},
    {902, Code::capture_merge, "hipErrorStreamCaptureMerge"},
    {903, Code::capture_unmatched, "hipErrorStreamCaptureUnmatched"},
    {904, Code::capture_unjoined, "hipErrorStreamCaptureUnjoined"},
    {905, Code::capture_isolation, "hipErrorStreamCaptureIsolation"},
    {906, Code::capture_implicit, "hipErrorStreamCaptureImplicit"},
    {907, Code::captured_event, "hipErrorCapturedEvent"},
    {908, Code::capture_wrong_thread, "hipErrorStreamCaptureWrongThread"},
    {910, Code::graph_exec_update_failure, "hipErrorGraphExecUpdateFailure"},
    {999, Code::unknown, "hipErrorUnknown"},
}};

constexpr int hip_native(Code code) { return native_in(hip_statuses, code); }

// HIP's naming: the table's names ("hipError<n>" for other numbers) and HIP's sticky codes
// (700, 702, 710 and 719).
const StatusNaming& hip_naming();

}  // namespace lifecore::driver::hip
