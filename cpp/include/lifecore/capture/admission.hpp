// Admission: a plan checked against facts retained from the loaded model. The only way
// to obtain an AdmittedCapturePlan is admit(); its identity is the SHA-256 of a canonical
// encoding of (plan, points, request), so it cannot be forged or deserialized.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lifecore/capture/intervention_plan.hpp"
#include "lifecore/capture/types.hpp"

namespace lifecore::capture {

class AdmittedCapturePlan {
 public:
  const CapturePlan& plan() const noexcept { return plan_; }
  // One point per selection, in selection order.
  const std::vector<ObservationPoint>& points() const noexcept { return points_; }
  const CaptureRequest& request() const noexcept { return request_; }
  const std::string& identity() const noexcept { return identity_; }
  const std::string& artifact_identity() const noexcept { return artifact_; }
  // Bytes of the canonical encoding (what a portable checkpoint copies).
  std::size_t encoded_size() const noexcept { return encoded_size_; }

 private:
  friend AdmittedCapturePlan admit(const CapturePlan&, const CaptureDiscovery&, const CaptureRequest&,
                                   const CaptureUsage&, std::uint64_t);
  AdmittedCapturePlan() = default;
  CapturePlan plan_;
  std::vector<ObservationPoint> points_;
  CaptureRequest request_;
  std::string identity_;
  std::string artifact_;
  std::size_t encoded_size_ = 0;
};

// Throws Error(Admission) on any refused rule. `inherited` is the usage a forked run starts
// from and `next_prediction` where it continues (zero for a fresh run); the static preflight
// charges every remaining step's envelopes on top of the inherited usage.
AdmittedCapturePlan admit(const CapturePlan& plan, const CaptureDiscovery& discovery,
                          const CaptureRequest& request, const CaptureUsage& inherited = {},
                          std::uint64_t next_prediction = 0);

// The per-step diagnostic envelope of a selection (metadata of its record, whatever happens).
CaptureUsage metadata_envelope(const CaptureSelection& selection, const ObservationPoint& point);
// The per-step diagnostic envelope of an intervention or routing operation: its record's JSON
// in every outcome (a FAILED one with the longest message included) with every number at its
// widest, evidence payloads excepted (they are charged on top when captured). Host
// 512 + id + target bytes, encoded 2048 + 6 x (id + target) bytes.
CaptureUsage operation_envelope(const InterventionOperation& operation);

// The least value cost any conforming backend charges for one capture of `selection` at a
// prediction: transform_floor (transform_cost.hpp) of the selected region.
// nullopt when it cannot be known now (itemsize unknown, or an extent the transform
// depends on is resolved only at run time): such costs are checked at run time, never zero.
// A product past 64 bits saturates at UINT64_MAX: still a floor, and beyond any limit.
std::optional<CaptureUsage> value_floor(const CaptureSelection& selection, const ObservationPoint& point,
                                        const CaptureRequest& request, CapturePhase phase, std::uint64_t prediction);

// Resolves a symbolic extent for a phase and prediction; nullopt when unknown.
std::optional<std::uint64_t> resolve_dim(const Dim& dim, const CaptureRequest& request, CapturePhase phase,
                                         std::uint64_t prediction);

class AdmittedInterventionPlan {
 public:
  const InterventionPlan& plan() const noexcept { return plan_; }
  const std::vector<ObservationPoint>& points() const noexcept { return points_; }  // one per operation
  const CaptureRequest& request() const noexcept { return request_; }
  const std::string& identity() const noexcept { return identity_; }
  std::uint64_t session_id() const noexcept { return session_id_; }
  // Bytes of the canonical encoding: operations and the points they target (what a portable
  // checkpoint copies beside the capture plan).
  std::size_t encoded_size() const noexcept { return encoded_size_; }

 private:
  friend AdmittedInterventionPlan admit_interventions(const InterventionPlan&, const CaptureDiscovery&,
                                                      const CaptureRequest&, const std::string&,
                                                      std::uint64_t);
  AdmittedInterventionPlan() = default;
  InterventionPlan plan_;
  std::vector<ObservationPoint> points_;
  CaptureRequest request_;
  std::string identity_;
  std::uint64_t session_id_ = 0;
  std::size_t encoded_size_ = 0;
};

AdmittedInterventionPlan admit_interventions(const InterventionPlan& plan, const CaptureDiscovery& discovery,
                                             const CaptureRequest& request,
                                             const std::string& session_identity, std::uint64_t session_id);

// The preflight of `capture` again with the operations' envelopes (operation_envelope of each)
// reserved beside its own, from `inherited` usage at `next_prediction`: throws Error(Admission)
// when the envelopes cannot fit each remaining step and the run (and, under OnLimit::fail,
// beside known value costs), so an intervention plan joining a run is refused before it could
// fail a step.
void check_operation_envelopes(const AdmittedCapturePlan& capture, const std::vector<CaptureUsage>& operation_envelopes,
                               const CaptureUsage& inherited, std::uint64_t next_prediction);

}  // namespace lifecore::capture
