#include "lifecore/driver/driver.hpp"

#include <array>

namespace lifecore::driver {
namespace {

constexpr std::array<const char*, static_cast<std::size_t>(Operation::count_)> operation_names_table{{
#define LIFECORE_OPERATION_NAME(name) #name,
    LIFECORE_DRIVER_OPERATIONS(LIFECORE_OPERATION_NAME)
#undef LIFECORE_OPERATION_NAME
}};

}  // namespace

const char* operation_name(Operation op) {
  auto index = static_cast<std::size_t>(op);
  return index < operation_names_table.size() ? operation_names_table[index] : "unknown";
}

bool operation_from_name(const std::string& name, Operation* out) {
  for (std::size_t i = 0; i < operation_names_table.size(); ++i) {
    if (name == operation_names_table[i]) {
      *out = static_cast<Operation>(i);
      return true;
    }
  }
  return false;
}

std::vector<std::string> operation_names() {
  return {operation_names_table.begin(), operation_names_table.end()};
}

std::size_t arg_size(ArgKind kind) {
  switch (kind) {
    case ArgKind::i32:
    case ArgKind::u32:
    case ArgKind::f32:
      return 4;
    default:
      return 8;
  }
}

}  // namespace lifecore::driver
