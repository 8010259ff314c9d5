// Address ranges: overlap and containment at every edge, and at the top of the address space,
// where a range's end wraps to zero and must not be mistaken for a range there.
#include <cstdint>
#include <limits>

#include "common/address_range.hpp"
#include "test_support.hpp"

using namespace lifecore;

int main() {
  constexpr auto top = std::numeric_limits<std::uint64_t>::max();
  // [100, 200) against ranges starting before, inside, at its last byte, and right after.
  CHECK(shares_a_byte(100, 100, 100, 1));
  CHECK(shares_a_byte(100, 100, 199, 64));
  CHECK(shares_a_byte(100, 100, 90, 11));
  CHECK(!shares_a_byte(100, 100, 90, 10));  // ends right at it
  CHECK(!shares_a_byte(100, 100, 200, 4096));  // starts right after it
  CHECK(shares_a_byte(100, 100, 0, top));  // covers it
  CHECK(shares_a_byte(0, top, 100, 1) && shares_a_byte(100, 1, 0, top));  // either order
  CHECK(!shares_a_byte(100, 100, 150, 0) && !shares_a_byte(150, 0, 100, 100));  // empty ranges share nothing
  // A range ending at the top: its end wraps to 0, and it still shares nothing with [0, 16).
  CHECK(!shares_a_byte(top - 15, 16, 0, 16));
  CHECK(!shares_a_byte(0, 16, top - 15, 16));
  CHECK(shares_a_byte(top - 15, 16, top, 1));
  CHECK(shares_a_byte(top - 15, 16, top - 100, top));  // its own end wraps too
  // Containment in [100, 200).
  CHECK(lies_within(100, 100, 100, 100));
  CHECK(lies_within(100, 100, 150, 50));
  CHECK(!lies_within(100, 100, 150, 51));  // runs one byte past
  CHECK(!lies_within(100, 100, 99, 2));  // starts one byte before
  CHECK(!lies_within(100, 100, 200, 0));  // an empty range right after is not inside
  CHECK(lies_within(100, 100, 199, 0));
  CHECK(!lies_within(100, 100, 150, top));  // an end past the top is not wrapped back inside
  CHECK(lies_within(top - 15, 16, top, 1) && !lies_within(top - 15, 16, top, 2));
  return test_support::finish("address_range_test");
}
