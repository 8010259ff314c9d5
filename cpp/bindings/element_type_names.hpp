// A tensor's element type named as DLPack names it ("float32", "int64", "uint8x4"), whether the
// producer described it with a DLPack dtype or with an array interface's typestr ("<f4"), so
// checks and messages compare one spelling. Translation only.
#pragma once

#include <bit>
#include <iterator>
#include <string>

#include "dlpack_abi.hpp"

namespace lifecore::bindings {

// DLPack's type codes, in its order: int, uint, float, opaque handle, bfloat, complex, bool.
inline std::string dl_dtype_name(const DLDataType& dtype) {
  static constexpr const char* codes[] = {"int", "uint", "float", "handle", "bfloat", "complex", "bool"};
  std::string name = dtype.code < std::size(codes) ? codes[dtype.code] : "code " + std::to_string(dtype.code) + " ";
  name += std::to_string(dtype.bits);
  if (dtype.lanes != 1) name += "x" + std::to_string(dtype.lanes);
  return name;
}

// An array interface typestr (byte order, kind, item size: "<f4", "|u1") by DLPack's name for
// it; a kind DLPack has no name for (datetimes, strings, records), or bytes in the order this
// machine does not use, keep the typestr itself, which no built-in kernel's type equals.
inline std::string typestr_element_type(const std::string& typestr) {
  if (typestr.size() < 3 || typestr.size() > 6) return typestr;
  const char order = typestr[0], kind = typestr[1];
  const std::string size = typestr.substr(2);
  if (size.find_first_not_of("0123456789") != std::string::npos) return typestr;
  const bool native = order == '|' || order == '=' || (order == '<') == (std::endian::native == std::endian::little);
  if (!native && size != "1") return typestr;
  const char* name = nullptr;
  switch (kind) {
    case 'f': name = "float"; break;
    case 'i': name = "int"; break;
    case 'u': name = "uint"; break;
    case 'c': name = "complex"; break;
    case 'b': name = "bool"; break;
    default: return typestr;
  }
  return name + std::to_string(std::stoul(size) * 8);
}

}  // namespace lifecore::bindings
