// Checked arithmetic: overflow at the 64-bit boundaries is reported, never wrapped.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "lifecore/checked.hpp"
#include "test_support.hpp"

using namespace lifecore;

int main() {
  constexpr auto u64_max = std::numeric_limits<std::uint64_t>::max();
  constexpr auto i64_max = std::numeric_limits<std::int64_t>::max();
  CHECK(checked::add<std::uint64_t>(u64_max - 1, 1) == u64_max);
  CHECK(!checked::add<std::uint64_t>(u64_max, 1));
  CHECK(!checked::mul<std::uint64_t>(std::uint64_t{1} << 32, std::uint64_t{1} << 32));
  CHECK(checked::mul<std::uint64_t>(std::uint64_t{1} << 31, std::uint64_t{1} << 32) == std::uint64_t{1} << 63);
  CHECK(!checked::mul<std::uint64_t>(std::uint64_t{1} << 60, 16));  // the routing reservation of issue 8
  CHECK(!checked::add<std::int64_t>(i64_max, 1));
  CHECK(!checked::sub<std::uint64_t>(0, 1));
  CHECK(!checked::add(std::optional<std::uint64_t>{}, std::uint64_t{1}));
  CHECK(!checked::narrow<std::uint32_t>(std::uint64_t{1} << 32));
  CHECK(checked::narrow<std::uint32_t>(std::uint64_t{0xffffffff}) == 0xffffffffu);
  CHECK(!checked::narrow<std::uint64_t>(std::int64_t{-1}));
  bool threw = false;
  try {
    (void)checked::mul_or_throw<std::uint64_t>(u64_max, 2, "test: a * b");
  } catch (const Error& error) {
    threw = error.kind() == ErrorKind::Overflow;
  }
  CHECK(threw);
  CHECK(std::string(error_class_name(ErrorKind::Overflow)) == "LifecoreOverflowError");
  CHECK(std::string(error_class_name(ErrorKind::Lifecore)) == "LifecoreError");
  return test_support::finish("checked_arithmetic_test");
}
