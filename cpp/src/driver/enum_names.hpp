// An enum's names in a table of the enum's order (written once, from the enum's X-macro
// list): the name of a value, and the value of a name.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace lifecore::driver {

// "unknown" for a value outside the table.
template <class Enum, std::size_t N>
const char* enum_name(const std::array<const char*, N>& names, Enum value) {
  const auto index = static_cast<std::size_t>(value);
  return index < N ? names[index] : "unknown";
}

// Returns false when no value has that name.
template <class Enum, std::size_t N>
bool enum_from_name(const std::array<const char*, N>& names, std::string_view name, Enum* out) {
  for (std::size_t i = 0; i < N; ++i) {
    if (name == names[i]) {
      *out = static_cast<Enum>(i);
      return true;
    }
  }
  return false;
}

}  // namespace lifecore::driver
