#include "capture/capture_geometry.hpp"

#include <algorithm>
#include <set>

#include "lifecore/checked.hpp"

#include "lifecore/capture/admission.hpp"

namespace lifecore::capture {

std::optional<std::uint64_t> resolve_dim(const Dim& dim, const CaptureRequest& request, CapturePhase phase,
                                         std::uint64_t prediction) {
  std::uint64_t sequence = phase == CapturePhase::prefill ? request.prompt_tokens : 1;
  switch (dim.kind) {
    case DimKind::known: return dim.size;
    case DimKind::batch: return request.batch;
    case DimKind::sequence: return sequence;
    // Admission refuses a request whose products overflow; an overflow here stays unknown.
    case DimKind::token_rows: return checked::mul(request.batch, sequence);
    case DimKind::context: return checked::add(request.prompt_tokens, prediction);
    case DimKind::media_positions:
    case DimKind::unknown: return std::nullopt;  // checked at run time, never assumed zero
  }
  return std::nullopt;
}

std::optional<std::string> check_slice_axes(const std::vector<CaptureSlice>& slices,
                                            const ObservationPoint& point) {
  std::set<std::string> seen;
  for (const auto& s : slices) {
    bool known = false;
    for (const auto& a : point.axes) known = known || a.name == s.axis;
    if (!known) {
      std::string names;
      for (const auto& a : point.axes) names += (names.empty() ? "'" : ", '") + a.name + "'";
      return "unknown slice axis '" + s.axis + "' at " + point.path + " (its axes: " + (names.empty() ? "none" : names) +
             ")";
    }
    if (!seen.insert(s.axis).second) return "repeated slice axis '" + s.axis + "' at " + point.path;
    if (s.stride == 0) return "slice stride must be positive on axis '" + s.axis + "'";
    if (s.end && *s.end <= s.start) return "empty slice on axis '" + s.axis + "'";
  }
  return std::nullopt;
}

std::optional<std::string> resolve_region(const std::vector<CaptureSlice>& slices, const ObservationPoint& point,
                                          const std::vector<std::uint64_t>& shape,
                                          std::vector<ResolvedSlice>& region,
                                          std::vector<std::uint64_t>& selected_shape) {
  region.assign(shape.size(), {});
  selected_shape = shape;
  for (std::size_t i = 0; i < shape.size(); ++i) region[i] = {0, shape[i], 1};
  for (const auto& s : slices) {
    std::size_t axis = point.axes.size();
    for (std::size_t i = 0; i < point.axes.size(); ++i)
      if (point.axes[i].name == s.axis) axis = i;
    if (axis >= shape.size()) return "slice axis '" + s.axis + "' is not in the observed shape";
    std::uint64_t end = s.end.value_or(shape[axis]);
    if (s.start >= shape[axis] || end > shape[axis])
      return "slice [" + std::to_string(s.start) + ", " + std::to_string(end) + ") out of range for axis '" +
             s.axis + "' of extent " + std::to_string(shape[axis]);
    region[axis] = {s.start, end, s.stride};
    selected_shape[axis] = slice_extent(s.start, end, s.stride);
  }
  return std::nullopt;
}

std::optional<std::string> check_shape(const ObservationPoint& point, const std::vector<std::uint64_t>& shape,
                                       const CaptureRequest& request, CapturePhase phase, std::uint64_t prediction) {
  if (point.axes.empty()) {
    if (shape.size() > 32) return "observed rank exceeds 32 at " + point.path;
    return std::nullopt;
  }
  if (shape.size() != point.axes.size())
    return "observed rank " + std::to_string(shape.size()) + " does not match the declared rank " +
           std::to_string(point.axes.size()) + " at " + point.path;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    auto expected = resolve_dim(point.axes[i].dim, request, phase, prediction);
    if (expected && *expected != shape[i])
      return "axis '" + point.axes[i].name + "' has extent " + std::to_string(shape[i]) + ", expected " +
             std::to_string(*expected) + " at " + point.path;
  }
  return std::nullopt;
}

std::uint64_t element_count(const std::vector<std::uint64_t>& shape) noexcept {
  // An empty extent empties the region, whatever the others' product would overflow to.
  if (std::find(shape.begin(), shape.end(), std::uint64_t{0}) != shape.end()) return 0;
  std::optional<std::uint64_t> n = 1;
  for (auto d : shape) n = checked::mul(n, d);
  return n.value_or(UINT64_MAX);
}

std::string shape_text(const std::vector<std::uint64_t>& shape, bool as_tuple) {
  std::string text = as_tuple ? "(" : "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  if (!as_tuple) return text + "]";
  return text + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace lifecore::capture
