// Geometry shared by admission and execution: resolving named slices on a shape and
// checking an observed shape against a point's declared axes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lifecore/capture/backend.hpp"
#include "lifecore/capture/types.hpp"

namespace lifecore::capture {

// Validates slice axes (known, not repeated) and strides; returns a message on error.
std::optional<std::string> check_slice_axes(const std::vector<CaptureSlice>& slices,
                                            const ObservationPoint& point);

// Resolves slices on a concrete shape. Returns a message when a slice does not fit.
std::optional<std::string> resolve_region(const std::vector<CaptureSlice>& slices, const ObservationPoint& point,
                                          const std::vector<std::uint64_t>& shape,
                                          std::vector<ResolvedSlice>& region,
                                          std::vector<std::uint64_t>& selected_shape);

// Checks an observed shape against the declared axes; returns a message on mismatch.
std::optional<std::string> check_shape(const ObservationPoint& point, const std::vector<std::uint64_t>& shape,
                                       const CaptureRequest& request, CapturePhase phase, std::uint64_t prediction);

std::uint64_t element_count(const std::vector<std::uint64_t>& shape) noexcept;  // saturating

// A shape in a message: "[1, 4, 8]", or with `as_tuple` as Python prints a shape tuple,
// "(1, 4, 8)" and "(4,)".
std::string shape_text(const std::vector<std::uint64_t>& shape, bool as_tuple = false);

// Elements a slice [start, end) step stride selects: ceil((end - start) / stride), computed
// without forming end - start + stride - 1 (which wraps for a stride near 2**64). Zero when
// the slice is empty or the stride is zero.
constexpr std::uint64_t slice_extent(std::uint64_t start, std::uint64_t end, std::uint64_t stride) noexcept {
  if (stride == 0 || end <= start) return 0;
  return (end - start - 1) / stride + 1;
}

}  // namespace lifecore::capture
