// SHA-256 (FIPS 180-4) of a byte string, as lowercase hex. Used for plan identities.
#pragma once

#include <string>
#include <string_view>

namespace lifecore::capture {

std::string sha256_hex(std::string_view data);

}  // namespace lifecore::capture
