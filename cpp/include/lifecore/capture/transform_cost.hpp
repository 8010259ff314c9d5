// The cost table of capture transforms: how many elements of a selected region a transform
// keeps and how many numbers its payload holds. Every cost model builds on this one table:
// the admission floor here, and the backends' charges through the bindings.
#pragma once

#include <cstdint>

#include "lifecore/capture/types.hpp"

namespace lifecore::capture {

struct TransformSize {
  std::uint64_t kept_elements = 0;  // elements of the region a tensor payload keeps (0 for reductions)
  std::uint64_t numbers = 0;        // numbers the payload holds
};

// Whether the payload grows with the selected region (a tensor payload: Preview, Slice,
// FullTensor); a reduction's size is known without the region's extents.
bool keeps_elements(TransformKind kind) noexcept;

// Products saturate at UINT64_MAX: a size past 64 bits stays a lower bound beyond any limit.
TransformSize transform_size(TransformKind kind, std::uint64_t selected_elements, std::uint64_t max_elements,
                             std::uint64_t edge_count, std::uint64_t count) noexcept;
TransformSize transform_size(const CaptureTransform& transform, std::uint64_t selected_elements) noexcept;

// The least value cost any conforming backend charges for one capture of `selected_elements`
// of `itemsize` bytes each: 1 capture; retained = numbers x min(itemsize, 8); host = elements
// kept x itemsize (reductions: 0); encoded = 2 bytes per number.
CaptureUsage transform_floor(const CaptureTransform& transform, std::uint64_t selected_elements,
                             std::uint64_t itemsize) noexcept;

}  // namespace lifecore::capture
