// What a backend's transform must return for the request it was given. The session records a
// payload only once it matches: a backend that answers another kind, another shape or numbers
// that cannot be true of the region fails its record instead of publishing a wrong value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "lifecore/capture/backend.hpp"
#include "lifecore/capture/types.hpp"

namespace lifecore::capture {

// Why `payload` cannot be the answer to `request` on a region of `available` elements of
// `itemsize` bytes each (0: unknown), or nothing when it can.
std::optional<std::string> payload_problem(const TransformRequest& request, const CapturePayload& payload,
                                           std::uint64_t available, std::uint64_t itemsize);

}  // namespace lifecore::capture
