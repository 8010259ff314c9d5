// The element types the bindings know, in one table: each type's name (the core's, as a
// capture payload reports it), DLPack's code and bits, and the array-interface typestr a view
// exports. Buffer.view, a payload built from an array and the checks on a foreign tensor's type
// all read it, so a type has one spelling everywhere; a type outside it is named as DLPack
// spells types ("complex64", "uint8x4"). Translation only.
#pragma once

#include <bit>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "dlpack_abi.hpp"
#include "lifecore/capture/types.hpp"

namespace lifecore::bindings {

struct TensorElementType {
  capture::ElementType core;
  std::uint8_t code;    // DLPack's: int 0, uint 1, float 2, bfloat 4, bool 6
  std::uint8_t bits;
  const char* typestr;  // in this host's (little-endian) order; "" where none exists (bfloat16)
  const char* name() const noexcept { return capture::to_string(core); }
};

inline constexpr TensorElementType element_types[] = {
    {capture::ElementType::uint8, 1, 8, "|u1"}, {capture::ElementType::int8, 0, 8, "|i1"},
    {capture::ElementType::uint16, 1, 16, "<u2"}, {capture::ElementType::int16, 0, 16, "<i2"},
    {capture::ElementType::uint32, 1, 32, "<u4"}, {capture::ElementType::int32, 0, 32, "<i4"},
    {capture::ElementType::uint64, 1, 64, "<u8"}, {capture::ElementType::int64, 0, 64, "<i8"},
    {capture::ElementType::float16, 2, 16, "<f2"}, {capture::ElementType::float32, 2, 32, "<f4"},
    {capture::ElementType::float64, 2, 64, "<f8"}, {capture::ElementType::bfloat16, 4, 16, ""},
    {capture::ElementType::boolean, 6, 8, "|b1"},
};
// A buffer seen as plain bytes.
inline constexpr const TensorElementType& byte_type = element_types[0];
static_assert(byte_type.core == capture::ElementType::uint8);

// "uint8, int8, ..., bool": the types a message can offer.
inline std::string element_type_names() {
  std::string names;
  for (const TensorElementType& type : element_types) names += std::string(names.empty() ? "" : ", ") + type.name();
  return names;
}

inline const TensorElementType* find_element_type(std::string_view name) noexcept {
  for (const TensorElementType& type : element_types)
    if (name == type.name()) return &type;
  return nullptr;
}

inline const TensorElementType* find_element_type(const DLDataType& dtype) noexcept {
  if (dtype.lanes != 1) return nullptr;
  for (const TensorElementType& type : element_types)
    if (type.code == dtype.code && type.bits == dtype.bits) return &type;
  return nullptr;
}

// A DLPack dtype's name: the table's, or DLPack's spelling of a type outside it.
inline std::string dl_dtype_name(const DLDataType& dtype) {
  if (const TensorElementType* type = find_element_type(dtype)) return type->name();
  static constexpr const char* codes[] = {"int", "uint", "float", "handle", "bfloat", "complex", "bool"};
  // DLPack 1.1's narrow floats (codes 7 on), whose names hold their width.
  static constexpr const char* narrow_floats[] = {
      "float8_e3m4",    "float8_e4m3",     "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
      "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn",      "float6_e3m2fn", "float4_e2m1fn"};
  std::string name;
  if (dtype.code < std::size(codes)) {
    name = codes[dtype.code] + std::to_string(dtype.bits);
  } else if (const std::size_t narrow = dtype.code - std::size(codes); narrow < std::size(narrow_floats)) {
    name = narrow_floats[narrow];
  } else {
    name = "code " + std::to_string(dtype.code) + " " + std::to_string(dtype.bits);
  }
  if (dtype.lanes != 1) name += "x" + std::to_string(dtype.lanes);
  return name;
}

// The DLPack dtype an array interface typestr (byte order, kind, item size: "<f4", "|u1")
// describes, if any: none for a kind DLPack has no code for (datetimes, strings, records), or
// for bytes in the order this machine does not use.
inline std::optional<DLDataType> typestr_dtype(const std::string& typestr) {
  if (typestr.size() < 3 || typestr.size() > 5) return std::nullopt;
  const char order = typestr[0], kind = typestr[1];
  const std::string size = typestr.substr(2);
  if (size.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const unsigned long bits = std::stoul(size) * 8;  // at most 999 * 8
  const bool native = order == '|' || order == '=' || (order == '<') == (std::endian::native == std::endian::little);
  if ((!native && bits != 8) || bits == 0 || bits > UINT8_MAX) return std::nullopt;
  static constexpr std::pair<char, std::uint8_t> kinds[] = {{'i', 0}, {'u', 1}, {'f', 2}, {'c', 5}, {'b', 6}};
  for (auto [letter, code] : kinds)
    if (kind == letter) return DLDataType{code, static_cast<std::uint8_t>(bits), 1};
  return std::nullopt;
}

// A typestr by DLPack's name for its type; one that names none keeps the typestr itself, which
// no built-in kernel's type equals.
inline std::string typestr_element_type(const std::string& typestr) {
  const std::optional<DLDataType> dtype = typestr_dtype(typestr);
  return dtype ? dl_dtype_name(*dtype) : typestr;
}

}  // namespace lifecore::bindings
