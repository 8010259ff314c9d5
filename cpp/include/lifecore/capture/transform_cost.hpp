// The cost table of capture transforms: how many elements of a selected region a transform
// keeps and how many numbers its payload holds. Every cost model builds on this one table:
// the admission floor here, and the backends' charges through the bindings.
#pragma once

#include <cstdint>
#include <vector>

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

// The cost model of the bundled backends, priced from facts about the tensor: 1 capture;
// retained = a tensor payload's real bytes (elements kept x itemsize) or 8 per number of a
// reduction; host = the selected region's bytes when it crosses to the host (a host tensor,
// or a tensor payload), else 8 per number; encoded = the JSON writer's bound (128 per payload,
// 25 per number, 21 per shape entry). Saturates like transform_size.
inline constexpr std::uint64_t payload_encoded_overhead = 128;
inline constexpr std::uint64_t encoded_number_bytes = 25;
inline constexpr std::uint64_t encoded_shape_entry_bytes = 21;
CaptureUsage transform_usage(TransformKind kind, const std::vector<std::uint64_t>& selected_shape,
                             std::uint64_t itemsize, std::uint64_t max_elements, std::uint64_t edge_count,
                             std::uint64_t count, bool on_host) noexcept;

}  // namespace lifecore::capture
