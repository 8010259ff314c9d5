// The names of the driver floor's enums, each table generated from its enum's list in driver.hpp.
#include <utility>

#include "lifecore/driver/driver.hpp"

namespace lifecore::driver {
namespace {

template <class Enum>
using NameRow = std::pair<Enum, std::string_view>;

#define LIFECORE_CAPTURE_MODE_ROW(value, name) NameRow<CaptureMode>{CaptureMode::value, name},
#define LIFECORE_ARG_KIND_ROW(value, name) NameRow<ArgKind>{ArgKind::value, name},
#define LIFECORE_IMAGE_KIND_ROW(value, name) NameRow<ImageKind>{ImageKind::value, name},
constexpr NameRow<CaptureMode> capture_modes[] = {LIFECORE_CAPTURE_MODES(LIFECORE_CAPTURE_MODE_ROW)};
constexpr NameRow<ArgKind> arg_kinds[] = {LIFECORE_ARG_KINDS(LIFECORE_ARG_KIND_ROW)};
constexpr NameRow<ImageKind> image_kinds[] = {LIFECORE_IMAGE_KINDS(LIFECORE_IMAGE_KIND_ROW)};
#undef LIFECORE_CAPTURE_MODE_ROW
#undef LIFECORE_ARG_KIND_ROW
#undef LIFECORE_IMAGE_KIND_ROW

template <class Enum, std::size_t N>
const char* name_in(const NameRow<Enum> (&table)[N], Enum value) {
  for (const auto& [row, name] : table)
    if (row == value) return name.data();  // the rows are string literals
  return "unknown";
}

template <class Enum, std::size_t N>
bool value_in(const NameRow<Enum> (&table)[N], std::string_view name, Enum* out) {
  for (const auto& [row, text] : table)
    if (name == text) {
      *out = row;
      return true;
    }
  return false;
}

}  // namespace

const char* capture_mode_name(CaptureMode mode) { return name_in(capture_modes, mode); }
bool capture_mode_from_name(std::string_view name, CaptureMode* out) { return value_in(capture_modes, name, out); }

const char* arg_kind_name(ArgKind kind) { return name_in(arg_kinds, kind); }
bool arg_kind_from_name(std::string_view name, ArgKind* out) {
  if (name == "pointer") {
    *out = ArgKind::pointer;
    return true;
  }
  return value_in(arg_kinds, name, out);
}

const char* image_kind_name(ImageKind kind) { return name_in(image_kinds, kind); }
bool image_kind_from_name(std::string_view name, ImageKind* out) { return value_in(image_kinds, name, out); }

}  // namespace lifecore::driver
