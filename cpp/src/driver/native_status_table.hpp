// A backend's table of native status codes: each native number with lifecore's code and the
// native name, and which numbers are sticky. A backend fills the rows; the StatusNaming it
// registers is built from them here.
#pragma once

#include <algorithm>
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
// Loops over the rows, not find_code: GCC refuses a null test of a pointer into a constexpr
// table in a constant expression, and the CUDA ABI check static_asserts on this function.
constexpr int native_in(std::span<const NativeStatus> table, Code code) {
  for (const NativeStatus& row : table)
    if (row.code == code) return row.native;
  for (const NativeStatus& row : table)
    if (row.code == Code::unknown) return row.native;
  return -1;
}

// The table's name, else `prefix` followed by the number.
inline std::string name_in(std::span<const NativeStatus> table, int native, std::string_view prefix) {
  if (const NativeStatus* row = find_native(table, native)) return std::string(row->name);
  return std::string(prefix) + std::to_string(native);
}

// The stream-capture errors keep the table's names even where the driver offers its own.
constexpr bool keeps_table_name(Code code) {
  return code >= Code::capture_unsupported && code <= Code::capture_wrong_thread;
}

struct NativeStatusTable {
  std::span<const NativeStatus> rows;
  std::string_view unknown_prefix;  // a number without a row is named prefix + number
  std::span<const int> sticky;      // the numbers that leave the driver's context unusable
};

// The naming of a table with static storage. StatusNaming holds plain function pointers, so
// the table is a template argument rather than captured state.
template <const NativeStatusTable& table>
const StatusNaming& table_naming() {
  static const StatusNaming naming{
      [](int native) { return code_in(table.rows, native); },
      [](Code code) { return native_in(table.rows, code); },
      [](int native) { return name_in(table.rows, native, table.unknown_prefix); },
      [](int native) { return std::ranges::find(table.sticky, native) != table.sticky.end(); },
  };
  return naming;
}

}  // namespace lifecore::driver
