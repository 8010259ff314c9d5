// The mock's statuses: CUDA's numbers, names and sticky codes, so that a program (and a
// differential run) sees the mock fail the way the CUDA driver does.
#pragma once

#include <string>

#include "lifecore/driver/status.hpp"

namespace lifecore::driver::mock {

const StatusNaming& mock_naming();
// The native number the mock reports for `code` (what inject() takes to fail with it).
inline int mock_native(Code code) { return mock_naming().native(code); }
// A failure the mock reports with lifecore's code `code` (named the mock's way).
Status mock_status(Code code, std::string call, std::string message = {});
// A native code the mock reports as it is: an injected fault, a sticky status that lost the device.
Status mock_native_status(int native, std::string call, std::string message = {});

}  // namespace lifecore::driver::mock
