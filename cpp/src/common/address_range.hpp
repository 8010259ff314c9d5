// Byte ranges [address, address + bytes) compared by distance, never by their ends: a range near
// the top of the address space has an end that wraps to zero, and must not look like one there.
#pragma once

#include <cstdint>

namespace lifecore {

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte. An empty range shares none.
constexpr bool shares_a_byte(std::uint64_t a, std::uint64_t a_bytes, std::uint64_t b, std::uint64_t b_bytes) noexcept {
  return a_bytes != 0 && b_bytes != 0 && (b >= a ? b - a < a_bytes : a - b < b_bytes);
}

// Whether [inner, inner + inner_bytes) starts inside [outer, outer + outer_bytes) and ends
// within it. An empty inner range lies within when its address is inside.
constexpr bool lies_within(std::uint64_t outer, std::uint64_t outer_bytes, std::uint64_t inner,
                           std::uint64_t inner_bytes) noexcept {
  return inner >= outer && inner - outer < outer_bytes && inner_bytes <= outer_bytes - (inner - outer);
}

}  // namespace lifecore
