// The protocol through which a session reaches tensors. The core never touches tensor
// memory: a tensor is an opaque handle the backend understands, so a skipped point costs
// nothing but a lookup and no handle is ever retained past a call.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lifecore/capture/intervention_plan.hpp"
#include "lifecore/capture/types.hpp"

namespace lifecore::capture {

using TensorHandle = void*;

// One resolved slice per axis of the source: [start, end) step stride.
struct ResolvedSlice {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  std::uint64_t stride = 1;
};

// Thrown by a backend adapter for any native failure; the session turns it into a
// Failed{Native} outcome and a CaptureSessionError naming it.
struct BackendFailure {
  std::string message;
};

// Thrown by a backend's describe for what is no tensor it takes (a caller's mistake, not a
// capture that failed): the session refuses the call as a type mismatch, no record changed.
struct TensorRefused {
  std::string message;
};

struct TransformRequest {
  // Distinct per request within a session, so an adapter may convert a request once and
  // reuse it for estimate and transform (0: no reuse).
  std::uint64_t serial = 0;
  TransformKind kind = TransformKind::summary;
  std::vector<std::uint64_t> source_shape;
  std::vector<ResolvedSlice> region;        // one per axis
  std::vector<std::uint64_t> selected_shape;
  std::uint64_t max_elements = 0;
  std::vector<double> edges;
  std::uint64_t count = 0;
};

struct InterventionRequest {
  InterventionAction action = InterventionAction::zero;
  std::vector<std::uint64_t> source_shape;
  std::vector<ResolvedSlice> region;
  std::vector<std::uint64_t> selected_shape;
  InterventionOperation operation;
};

// What the core's cost model (transform_usage) prices a capture from, reported by a backend in
// one call: the tensor's shape, bytes per element, and whether it lives in host memory.
struct TensorFacts {
  std::vector<std::uint64_t> shape;
  std::uint64_t itemsize = 0;
  bool on_host = true;
};

class CaptureBackend {
 public:
  virtual ~CaptureBackend() = default;
  // The facts of a tensor, or nullopt for a backend that prices its own transforms
  // (shape, then estimate). With facts the session prices and caches each point itself.
  // Throws TensorRefused for what is no tensor of this backend's.
  virtual std::optional<TensorFacts> describe(TensorHandle /*tensor*/) { return std::nullopt; }
  virtual std::vector<std::uint64_t> shape(TensorHandle tensor) = 0;
  virtual ValueDtype dtype(TensorHandle tensor) = 0;
  // Side-effect free and conservative; an unknown cost is a failure, never zero.
  virtual CaptureUsage estimate(TensorHandle tensor, const TransformRequest& request) = 0;
  virtual CapturePayload transform(TensorHandle tensor, const TransformRequest& request) = 0;
  // Peak native bytes the transform would materialize (side-effect free, conservative).
  // Asked only under a physical native byte limit; a backend that cannot say fails the
  // capture (an unknown size is never zero).
  virtual std::uint64_t native_bytes(TensorHandle /*tensor*/, const TransformRequest& /*request*/) {
    throw BackendFailure{"backend does not report native bytes, required by the physical native byte limit"};
  }
  // Returns a new tensor owned by the adapter until the session call returns.
  virtual TensorHandle intervene(TensorHandle tensor, const InterventionRequest& request) = 0;
  // What makes an intervention's replacement unfit to stand for the original beyond what
  // describe tells (another dtype of the same element size, another device off the host),
  // or nullopt: nothing does, or the backend cannot tell.
  virtual std::optional<std::string> replacement_mismatch(TensorHandle /*original*/, TensorHandle /*replacement*/) {
    return std::nullopt;
  }
};

// The side-effect free cost model an intervention plan is enabled with.
class InterventionEstimator {
 public:
  virtual ~InterventionEstimator() = default;
  virtual CaptureUsage estimate(TensorHandle tensor, const TransformRequest& request) = 0;
};

}  // namespace lifecore::capture
