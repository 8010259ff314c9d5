// The toy backend's own status numbering, for tests only: native = 7000 + lifecore's code,
// named "TOY_" + the code's name in capitals. Nothing in it resembles another backend's, so a
// test can tell that the toy's naming (and no other) reported an error.
#pragma once

#include <cctype>
#include <string>

#include "lifecore/driver/status.hpp"

namespace toy {

using lifecore::driver::Code;

inline constexpr int native_base = 7000;

inline int toy_native(Code code) { return code == Code::success ? 0 : native_base + static_cast<int>(code); }

inline Code toy_code(int native) {
  const int index = native - native_base;
  if (native == 0) return Code::success;
  if (index <= 0 || index >= static_cast<int>(lifecore::driver::all_codes().size())) return Code::unknown;
  return static_cast<Code>(index);
}

inline std::string toy_name(int native) {
  const Code code = toy_code(native);
  if (code == Code::unknown && native != toy_native(Code::unknown)) return "TOY_" + std::to_string(native);
  std::string name = "TOY_";
  for (const char* c = lifecore::driver::code_name(code); *c != '\0'; ++c)
    name += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
  return name;
}

// The toy loses its device on an illegal address only.
inline bool toy_sticky(int native) { return native == toy_native(Code::illegal_address); }

inline const lifecore::driver::StatusNaming& toy_naming() {
  static const lifecore::driver::StatusNaming naming{toy_code, toy_native, toy_name, toy_sticky};
  return naming;
}

}  // namespace toy
