#include "driver/hip/hip_status.hpp"

namespace lifecore::driver::hip {
namespace {

constexpr std::array hip_sticky{700, 702, 710, 719};
constexpr NativeStatusTable hip_table{hip_statuses, "hipError", hip_sticky};

}  // namespace

const StatusNaming& hip_naming() { return table_naming<hip_table>(); }

}  // namespace lifecore::driver::hip
