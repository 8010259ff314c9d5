// bound_message at its boundaries: a message of exactly `limit` bytes is kept whole, one byte
// more is cut, a cut never splits a UTF-8 sequence (two-, three- and four-byte ones), and bytes
// that are not valid UTF-8 (continuation bytes from the very start) end the cut at the start
// instead of stepping before it.
#include <cstdio>
#include <string>

#include "lifecore/capture/types.hpp"
#include "test_support.hpp"

using lifecore::capture::bound_message;
using lifecore::test_support::expect_equal;

int main() {
  expect_equal(bound_message(std::string(256, 'a')), std::string(256, 'a'), "exactly the default limit");
  expect_equal(bound_message(std::string(257, 'a')), std::string(256, 'a'), "one byte past the default limit");
  expect_equal(bound_message("abc", 3), "abc", "exactly the limit");
  expect_equal(bound_message("abcd", 3), "abc", "one past the limit");
  expect_equal(bound_message("", 0), "", "empty, no room");
  expect_equal(bound_message("a", 0), "", "no room");
  // Sequences across the limit are dropped whole.
  expect_equal(bound_message("ab\xc3\xa9", 3), "ab", "two-byte sequence across the limit");
  expect_equal(bound_message("a\xe2\x82\xac" "b", 3), "a", "three-byte sequence across the limit");
  expect_equal(bound_message("a\xe2\x82\xac" "b", 4), "a\xe2\x82\xac", "three-byte sequence ending at the limit");
  expect_equal(bound_message("\xf0\x9f\x98\x80" "x", 3), "", "four-byte sequence at the start");
  expect_equal(bound_message("\xf0\x9f\x98\x80" "x", 4), "\xf0\x9f\x98\x80", "four-byte sequence ending at the limit");
  // Not UTF-8: continuation bytes only. The cut stops at the start.
  expect_equal(bound_message(std::string(8, '\x80'), 5), "", "continuation bytes only");
  expect_equal(bound_message("\x80\x80" "abc", 3), "\x80\x80" "a", "continuation bytes, then ASCII");
  return lifecore::test_support::finish("capture_bound_message_test");
}
