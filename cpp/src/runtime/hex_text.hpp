// An address or a native handle in an error message, as "0x" and lowercase hex digits: the
// spelling a driver's tools and a debugger print, so a user can match the two.
#pragma once

#include <cstdint>
#include <string>

namespace lifecore::runtime {

inline std::string hex_text(std::uint64_t value) {
  static constexpr char digits[] = "0123456789abcdef";
  char text[2 + 16];
  std::size_t first = sizeof(text);
  do {
    text[--first] = digits[value & 0xf];
    value >>= 4;
  } while (value != 0);
  text[--first] = 'x';
  text[--first] = '0';
  return std::string(text + first, sizeof(text) - first);
}

}  // namespace lifecore::runtime
