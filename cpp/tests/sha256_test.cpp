// SHA-256 against the FIPS 180-4 / NIST example vectors.
#include <cstdio>
#include <string>

#include "common/sha256.hpp"
#include "test_support.hpp"

int main() {
  using lifecore::sha256_hex;
  using lifecore::test_support::expect_equal;
  expect_equal(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "empty");
  expect_equal(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "abc");
  expect_equal(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
               "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", "448-bit message");
  expect_equal(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
               "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1", "896-bit message");
  expect_equal(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
               "one million 'a'");
  // Streaming in odd chunks must give the one-shot digest.
  std::string text(1000, 'x');
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('a' + i % 26);
  lifecore::Sha256 streamed;
  for (std::size_t i = 0; i < text.size(); i += 7) streamed.update(std::string_view(text).substr(i, 7));
  expect_equal(lifecore::to_hex(streamed.finish()), sha256_hex(text), "streamed in 7-byte chunks");
  // Lengths around the padding boundary (55, 56, 63, 64 bytes) must differ from each other.
  std::string a55 = sha256_hex(std::string(55, 'a')), a56 = sha256_hex(std::string(56, 'a'));
  expect_equal(a55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318", "55 x 'a'");
  expect_equal(a56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a", "56 x 'a'");
  return lifecore::test_support::finish("sha256_test");
}
