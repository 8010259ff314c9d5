// SHA-256 (FIPS 180-4), small and dependency-free: identities (session fingerprints, plan
// ids) are digests of canonical payloads, and the core must compute them without a crypto
// library. Not constant-time; never use it for secrets.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lifecore {

class Sha256 {
 public:
  Sha256() noexcept;
  void update(const void* data, std::size_t size) noexcept;
  void update(std::string_view text) noexcept { update(text.data(), text.size()); }
  // Finishes the digest; the object must not be updated afterwards.
  std::array<std::uint8_t, 32> finish() noexcept;

 private:
  void compress(const std::uint8_t* block) noexcept;
  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

// Lower-case hex of the digest of `data`.
std::string sha256_hex(std::string_view data);
std::string to_hex(const std::array<std::uint8_t, 32>& digest);

}  // namespace lifecore
