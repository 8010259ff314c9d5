// The mock's statuses. It follows CUDA's numbers, names and sticky codes on purpose, so that a
// program (and a differential run) sees the mock fail the way that driver does; the table is
// the mock's own, in this folder.
#pragma once

#include <array>
#include <string>

#include "driver/native_status_table.hpp"

namespace lifecore::driver::mock {

inline constexpr std::array<NativeStatus, 39> mock_statuses{{
    {0, Code::success, "CUDA_SUCCESS"},
    {1, Code::invalid_value, "CUDA_ERROR_INVALID_VALUE"},
    {2, Code::out_of_memory, "CUDA_ERROR_OUT_OF_MEMORY"},
    {3, Code::not_initialized, "CUDA_ERROR_NOT_INITIALIZED"},
    {100, Code::no_device, "CUDA_ERROR_NO_DEVICE"},
    {101, Code::invalid_device, "CUDA_ERROR_INVALID_DEVICE"},
    {200, Code::invalid_image, "CUDA_ERROR_INVALID_IMAGE"},
    {201, Code::invalid_context, "CUDA_ERROR_INVALID_CONTEXT"},
    {218, Code::invalid_kernel_source, "CUDA_ERROR_INVALID_PTX"},
    {400, Code::invalid_handle, "CUDA_ERROR_INVALID_HANDLE"},
    {401, Code::illegal_state, "CUDA_ERROR_ILLEGAL_STATE"},
    {500, Code::not_found, "CUDA_ERROR_NOT_FOUND"},
    {600, Code::not_ready, "CUDA_ERROR_NOT_READY"},
    {700, Code::illegal_address, "CUDA_ERROR_ILLEGAL_ADDRESS"},
    {719, Code::launch_failure, "CUDA_ERROR_LAUNCH_FAILED"},
    {800, Code::not_permitted, "CUDA_ERROR_NOT_PERMITTED"},
    {801, Code::not_supported, "CUDA_ERROR_NOT_SUPPORTED"},
    {900, Code::capture_unsupported, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
    {901, Code::capture_invalidated, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
    {902, Code::capture_merge, "CUDA_ERROR_STREAM_CAPTURE_MERGE"},
    {903, Code::capture_unmatched, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"},
    {904, Code::capture_unjoined, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"},
    {905, Code::capture_isolation, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"},
    {906, Code::capture_implicit, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"},
    {907, Code::captured_event, "CUDA_ERROR_CAPTURED_EVENT"},
    {908, Code::capture_wrong_thread, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"},
    {910, Code::graph_exec_update_failure, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"},
    {999, Code::unknown, "CUDA_ERROR_UNKNOWN"},
    // CUDA's sticky codes lifecore has no code of its own for, named as CUDA names them; after
    // 999, which stays the native code of Code::unknown.
    {226, Code::unknown, "CUDA_ERROR_CONTAINED"},
    {702, Code::unknown, "CUDA_ERROR_LAUNCH_TIMEOUT"},
    {710, Code::unknown, "CUDA_ERROR_ASSERT"},
    {714, Code::unknown, "CUDA_ERROR_HARDWARE_STACK_ERROR"},
    {715, Code::unknown, "CUDA_ERROR_ILLEGAL_INSTRUCTION"},
    {716, Code::unknown, "CUDA_ERROR_MISALIGNED_ADDRESS"},
    {717, Code::unknown, "CUDA_ERROR_INVALID_ADDRESS_SPACE"},
    {718, Code::unknown, "CUDA_ERROR_INVALID_PC"},
    {721, Code::unknown, "CUDA_ERROR_TENSOR_MEMORY_LEAK"},
    {810, Code::unknown, "CUDA_ERROR_MPS_CLIENT_TERMINATED"},
    {911, Code::unknown, "CUDA_ERROR_EXTERNAL_DEVICE"},
}};

// The table's names ("CUDA_ERROR_<n>" for other numbers); sticky: CUDA's (226, 700, 702, 710,
// 714-719, 721, 810, 911).
const StatusNaming& mock_naming();
// The native number the mock reports for `code` (what inject() takes to fail with it).
constexpr int mock_native(Code code) { return native_in(mock_statuses, code); }
// A failure the mock reports with lifecore's code `code` (named the mock's way).
Status mock_status(Code code, std::string call, std::string message = {});
// A native code the mock reports as it is: an injected fault, a sticky status that lost the device.
Status mock_native_status(int native, std::string call, std::string message = {});

}  // namespace lifecore::driver::mock
