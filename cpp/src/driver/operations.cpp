#include "lifecore/driver/driver.hpp"

#include <array>
#include <map>
#include <mutex>

#include "driver/enum_names.hpp"

namespace lifecore::driver {
namespace {

constexpr std::array<const char*, static_cast<std::size_t>(Operation::count_)> operation_names_table{{
#define LIFECORE_OPERATION_NAME(name) #name,
    LIFECORE_DRIVER_OPERATIONS(LIFECORE_OPERATION_NAME)
#undef LIFECORE_OPERATION_NAME
}};

}  // namespace

const char* operation_name(Operation op) { return enum_name(operation_names_table, op); }

std::shared_ptr<const void> Driver::capture_domain() const {
  // One token per backend, never freed: a backend's captures may outlive every driver of it.
  static std::mutex mutex;
  static auto* tokens = new std::map<const BackendDescriptor*, std::shared_ptr<const void>>;
  std::lock_guard lock(mutex);
  std::shared_ptr<const void>& token = (*tokens)[&backend()];
  if (!token) token = std::make_shared<const int>(0);
  return token;
}

bool operation_from_name(const std::string& name, Operation* out) {
  return enum_from_name(operation_names_table, name, out);
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
