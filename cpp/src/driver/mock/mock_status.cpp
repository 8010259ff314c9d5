#include "driver/mock/mock_status.hpp"

#include <utility>

#include "driver/cuda/cuda_status.hpp"

namespace lifecore::driver::mock {

const StatusNaming& mock_naming() { return cuda::cuda_naming(); }

Status mock_status(Code code, std::string call, std::string message) {
  return local_status(mock_naming(), code, std::move(call), std::move(message));
}

Status mock_native_status(int native, std::string call, std::string message) {
  return native_status(mock_naming(), native, std::move(call), std::move(message));
}

}  // namespace lifecore::driver::mock
