#include "capture/capture_payload_check.hpp"

#include <algorithm>
#include <cmath>

#include "capture/capture_geometry.hpp"

namespace lifecore::capture {
namespace {

PayloadKind kind_answering(TransformKind kind) {
  switch (kind) {
    case TransformKind::summary: return PayloadKind::summary;
    case TransformKind::histogram: return PayloadKind::histogram;
    case TransformKind::top_candidates: return PayloadKind::candidates;
    default: return PayloadKind::tensor;
  }
}

std::optional<std::string> tensor_problem(const TransformRequest& request, const CapturePayload& payload,
                                          std::uint64_t available, std::uint64_t itemsize) {
  if (request.kind == TransformKind::preview) {
    const std::uint64_t expected = std::min(request.max_elements, available);
    if (payload.elements() != expected)
      return "a preview of " + std::to_string(payload.elements()) + " elements (the first " +
             std::to_string(expected) + " of the region were asked for)";
  } else {
    if (payload.shape != request.selected_shape)
      return "a tensor of shape " + shape_text(payload.shape, /*as_tuple=*/true) + " (the region selected is " +
             shape_text(request.selected_shape, /*as_tuple=*/true) + ")";
    if (payload.elements() != available)
      return "a tensor of " + std::to_string(payload.elements()) + " elements for a region of " +
             std::to_string(available);
  }
  // A payload built from an array keeps the source's element type: its size must be the source's.
  if (itemsize != 0 && payload.array.present() && capture::itemsize(payload.array.type) != itemsize)
    return std::string("a tensor of ") + to_string(payload.array.type) + " (" +
           std::to_string(capture::itemsize(payload.array.type)) + " bytes per element) for a source of " +
           std::to_string(itemsize) + " bytes per element";
  return std::nullopt;
}

std::optional<std::string> histogram_problem(const TransformRequest& request, const CapturePayload& payload,
                                             std::uint64_t available) {
  if (payload.values != request.edges)
    return "a histogram over other bin edges (" + std::to_string(payload.values.size()) + " edges; " +
           std::to_string(request.edges.size()) + " were asked for)";
  if (payload.counts.size() + 1 != request.edges.size())
    return "a histogram of " + std::to_string(payload.counts.size()) + " bins over " +
           std::to_string(request.edges.size()) + " edges";
  std::uint64_t total = 0;
  for (auto c : payload.counts) {
    if (c > available - total) return "a histogram counting more values than the region's " + std::to_string(available);
    total += c;
  }
  return std::nullopt;
}

std::optional<std::string> candidates_problem(const TransformRequest& request, const CapturePayload& payload) {
  if (payload.counts.size() != request.count || payload.values.size() != request.count)
    return std::to_string(payload.counts.size()) + " candidate ids and " + std::to_string(payload.values.size()) +
           " scores (" + std::to_string(request.count) + " were asked for)";
  const std::uint64_t vocabulary = request.source_shape.empty() ? 0 : request.source_shape.back();
  for (auto id : payload.counts)
    if (id >= vocabulary)
      return "candidate id " + std::to_string(id) + " outside a vocabulary of " + std::to_string(vocabulary);
  // Best first: a score after a larger one (NaN scores, which order nowhere, are let be).
  for (std::size_t i = 1; i < payload.values.size(); ++i)
    if (payload.values[i] > payload.values[i - 1])
      return "candidate scores not best first (score " + std::to_string(i) + " is above the one before it)";
  return std::nullopt;
}

std::optional<std::string> summary_problem(const CapturePayload& payload, std::uint64_t available) {
  if (payload.count != available)
    return "a summary of " + std::to_string(payload.count) + " values for a region of " + std::to_string(available);
  if (payload.nonfinite > payload.count)
    return "a summary with " + std::to_string(payload.nonfinite) + " values not finite of " +
           std::to_string(payload.count);
  if (payload.nonfinite == payload.count) return std::nullopt;  // no finite values: the statistics are NaN
  const double lo = payload.min, hi = payload.max, mean = payload.mean, sd = payload.std;
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi)
    return "a summary whose min and max (" + std::to_string(lo) + ", " + std::to_string(hi) +
           ") cannot bound finite values";
  // The mean of finite values lies between them; a framework accumulating in the source's
  // precision may land a little outside, so the bound allows for rounding, not for error. A
  // mean or std that overflowed the source's precision (inf, or NaN from inf - inf) is what
  // that framework computes, and is kept.
  const double slack = 1e-3 * (std::abs(lo) + std::abs(hi)) + 1e-6;
  if (std::isfinite(mean) && !(mean >= lo - slack && mean <= hi + slack))
    return "a summary mean " + std::to_string(mean) + " outside its min and max [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]";
  if (sd < 0 || (std::isfinite(sd) && sd > (hi - lo) + slack))
    return "a summary std " + std::to_string(sd) + " that values in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "] cannot have";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> payload_problem(const TransformRequest& request, const CapturePayload& payload,
                                           std::uint64_t available, std::uint64_t itemsize) {
  const PayloadKind expected = kind_answering(request.kind);
  if (payload.kind != expected)
    return std::string("a ") + to_string(payload.kind) + " payload for a " + to_string(request.kind) + " request";
  switch (expected) {
    case PayloadKind::tensor: return tensor_problem(request, payload, available, itemsize);
    case PayloadKind::histogram: return histogram_problem(request, payload, available);
    case PayloadKind::candidates: return candidates_problem(request, payload);
    case PayloadKind::summary: return summary_problem(payload, available);
    default: return std::nullopt;
  }
}

}  // namespace lifecore::capture
