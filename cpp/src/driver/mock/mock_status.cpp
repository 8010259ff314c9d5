#include "driver/mock/mock_status.hpp"

#include <utility>

namespace lifecore::driver::mock {
namespace {

// CUDA's sticky codes, all of them (cuda_status.cpp): a differential run sees the same device loss.
constexpr std::array mock_sticky{226, 700, 702, 710, 714, 715, 716, 717, 718, 719, 721, 810, 911};
constexpr NativeStatusTable mock_table{mock_statuses, "CUDA_ERROR_", mock_sticky};

}  // namespace

const StatusNaming& mock_naming() { return table_naming<mock_table>(); }

Status mock_status(Code code, std::string call, std::string message) {
  return local_status(mock_naming(), code, std::move(call), std::move(message));
}

Status mock_native_status(int native, std::string call, std::string message) {
  return native_status(mock_naming(), native, std::move(call), std::move(message));
}

}  // namespace lifecore::driver::mock
