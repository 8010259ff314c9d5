// The driver floor's name tables: every case has a name that reads back to it, and the runtime
// spells a kernel argument kind exactly as the driver does (one table, "ptr" for a pointer).
#include <string>

#include "lifecore/driver/driver.hpp"
#include "lifecore/runtime/kernel.hpp"
#include "test_support.hpp"

namespace {

using namespace lifecore::driver;
using lifecore::test_support::expect_equal;

template <class Enum, class Name, class FromName>
void round_trips(Enum value, Name name_of, FromName from_name, const char* expected) {
  expect_equal(name_of(value), expected, expected);
  Enum back{};
  CHECK(from_name(expected, &back) && back == value);
}

}  // namespace

int main() {
  round_trips(CaptureMode::global, capture_mode_name, capture_mode_from_name, "global");
  round_trips(CaptureMode::thread_local_, capture_mode_name, capture_mode_from_name, "thread_local");
  round_trips(CaptureMode::relaxed, capture_mode_name, capture_mode_from_name, "relaxed");

  const std::pair<ArgKind, const char*> args[] = {{ArgKind::pointer, "ptr"}, {ArgKind::i32, "i32"},
                                                  {ArgKind::u32, "u32"},     {ArgKind::i64, "i64"},
                                                  {ArgKind::u64, "u64"},     {ArgKind::f32, "f32"},
                                                  {ArgKind::f64, "f64"}};
  for (const auto& [kind, name] : args) {
    round_trips(kind, arg_kind_name, arg_kind_from_name, name);
    expect_equal(lifecore::runtime::arg_kind_name(kind), arg_kind_name(kind), "the runtime's spelling is the driver's");
  }
  ArgKind pointer = ArgKind::u64;
  CHECK(arg_kind_from_name("pointer", &pointer) && pointer == ArgKind::pointer);  // the older spelling

  const std::pair<ImageKind, const char*> images[] = {{ImageKind::builtin, "builtin"}, {ImageKind::ptx, "ptx"},
                                                      {ImageKind::cubin, "cubin"},     {ImageKind::fatbin, "fatbin"},
                                                      {ImageKind::code_object, "code_object"}};
  for (const auto& [kind, name] : images) round_trips(kind, image_kind_name, image_kind_from_name, name);

  // Anything else is refused and leaves the output alone.
  CaptureMode mode = CaptureMode::relaxed;
  ArgKind arg = ArgKind::f64;
  ImageKind image = ImageKind::ptx;
  CHECK(!capture_mode_from_name("threadlocal", &mode) && mode == CaptureMode::relaxed);
  CHECK(!arg_kind_from_name("float", &arg) && arg == ArgKind::f64);
  CHECK(!arg_kind_from_name("", &arg) && arg == ArgKind::f64);
  CHECK(!image_kind_from_name("PTX", &image) && image == ImageKind::ptx);
  expect_equal(capture_mode_name(static_cast<CaptureMode>(7)), "unknown", "a value outside the table");
  return lifecore::test_support::finish("driver_enum_names_test");
}
