#include "lifecore/capture/transform_cost.hpp"

#include <algorithm>

#include "lifecore/checked.hpp"

namespace lifecore::capture {
namespace {

std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) { return checked::mul(a, b).value_or(UINT64_MAX); }

}  // namespace

bool keeps_elements(TransformKind kind) noexcept {
  return kind == TransformKind::preview || kind == TransformKind::slice || kind == TransformKind::full_tensor;
}

TransformSize transform_size(TransformKind kind, std::uint64_t selected_elements, std::uint64_t max_elements,
                             std::uint64_t edge_count, std::uint64_t count) noexcept {
  switch (kind) {
    case TransformKind::preview: {
      std::uint64_t kept = std::min(selected_elements, max_elements);
      return {kept, kept};
    }
    case TransformKind::slice:
    case TransformKind::full_tensor: return {selected_elements, selected_elements};
    case TransformKind::summary: return {0, 6};  // count, nonfinite, min, max, mean, std
    case TransformKind::histogram:  // edges and counts: 2 x edges - 1 numbers
      return {0, checked::sub(saturating_mul(edge_count, 2), std::uint64_t{1}).value_or(0)};
    case TransformKind::top_candidates: return {0, saturating_mul(count, 2)};  // ids and scores
  }
  return {0, 0};
}

TransformSize transform_size(const CaptureTransform& t, std::uint64_t selected_elements) noexcept {
  return transform_size(t.kind, selected_elements, t.max_elements, t.edges.size(), t.count);
}

CaptureUsage transform_floor(const CaptureTransform& transform, std::uint64_t selected_elements,
                             std::uint64_t itemsize) noexcept {
  const TransformSize size = transform_size(transform, selected_elements);
  return {1, saturating_mul(size.numbers, std::min<std::uint64_t>(itemsize, 8)),
          saturating_mul(size.kept_elements, itemsize), saturating_mul(size.numbers, 2)};
}

CaptureUsage transform_usage(TransformKind kind, const std::vector<std::uint64_t>& selected_shape,
                             std::uint64_t itemsize, std::uint64_t max_elements, std::uint64_t edge_count,
                             std::uint64_t count, bool on_host) noexcept {
  std::uint64_t elements = 1;
  for (auto extent : selected_shape) elements = saturating_mul(elements, extent);
  const TransformSize size = transform_size(kind, elements, max_elements, edge_count, count);
  const bool tensor_payload = keeps_elements(kind);
  std::uint64_t retained = tensor_payload ? saturating_mul(size.kept_elements, itemsize) : saturating_mul(size.numbers, 8);
  std::uint64_t host = on_host || tensor_payload ? saturating_mul(elements, itemsize) : saturating_mul(size.numbers, 8);
  std::uint64_t encoded = checked::add(checked::add(std::optional<std::uint64_t>(payload_encoded_overhead),
                                                    saturating_mul(encoded_number_bytes, size.numbers)),
                                       saturating_mul(encoded_shape_entry_bytes, selected_shape.size()))
                              .value_or(UINT64_MAX);
  return {1, retained, host, encoded};
}

}  // namespace lifecore::capture
