// A backend's table of native status codes: each native number with lifecore's code and the
// native name. Backends whose naming is such a table build their StatusNaming from it.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "lifecore/driver/status.hpp"

namespace lifecore::driver {

struct NativeStatus {
  int native;
  Code code;
  std::string_view name;
};

constexpr const NativeStatus* find_native(std::span<const NativeStatus> table, int native) {
  for (const auto& row : table)
    if (row.native == native) return &row;
  return nullptr;
}

// The first row for `code`; nullptr when the backend has no native code for it.
constexpr const NativeStatus* find_code(std::span<const NativeStatus> table, Code code) {
  for (const auto& row : table)
    if (row.code == code) return &row;
  return nullptr;
}

constexpr Code code_in(std::span<const NativeStatus> table, int native) {
  const NativeStatus* row = find_native(table, native);
  return row != nullptr ? row->code : Code::unknown;
}

// The native code of `code`, else the table's code for Code::unknown.
constexpr int native_in(std::span<const NativeStatus> table, Code code) {
  if (const NativeStatus* row = find_code(table, code)) return row->native;
  const NativeStatus* unknown = find_code(table, Code::unknown);
  return unknown != nullptr ? unknown->native : -1;
}

// The table's name, else `prefix` followed by the number.
inline std::string name_in(std::span<const NativeStatus> table, int native, std::string_view prefix) {
  if (const NativeStatus* row = find_native(table, native)) return std::string(row->name);
  return std::string(prefix) + std::to_string(native);
}

}  // namespace lifecore::driver
