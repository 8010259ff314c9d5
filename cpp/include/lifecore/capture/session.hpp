// A capture run: one admission, one monotone ledger, at most one step of records.
// Consumers drain each step (take_step) before another begins; there is no queue.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lifecore/capture/admission.hpp"
#include "lifecore/capture/backend.hpp"
#include "lifecore/capture/ledger.hpp"
#include "lifecore/error.hpp"
#include "lifecore/capture/types.hpp"

namespace lifecore::capture {

// The capture component of a generation snapshot: the admission data, schedule position and
// usage, portable (no estimator, backend or handle) and copied as a value. The owner is the
// run's process-local id and is never serialized.
struct CaptureCheckpoint {
  std::uint64_t owner = 0;
  std::string artifact_identity;
  std::string plan_identity;
  std::string intervention_identity;
  // The admission data, cloned by checkpoint() (what checkpoint_storage_bytes sizes): the plan
  // re-admitted against the discovery given, and the intervention plan when there is one.
  // Immutable, so copies of the checkpoint share them.
  std::shared_ptr<const AdmittedCapturePlan> plan;
  std::shared_ptr<const AdmittedInterventionPlan> interventions;
  std::uint64_t prediction = 0;
  CapturePhase phase = CapturePhase::prefill;
  bool has_step = false;
  CaptureUsage usage;
};

// What a routing selector must do for one scheduled operation: the expected grouped top-k
// policy, the rows [row_start, row_end) step row_stride it applies to, and the action.
struct GroupSelectionControl {
  std::string operation_id;
  std::string target;
  InterventionAction action = InterventionAction::exclude_experts;
  RoutingPolicy policy;
  std::uint64_t num_experts = 0;  // = policy.num_experts (kept for callers of the plain top-k form)
  std::uint64_t top_k = 0;        // = policy.top_k
  std::uint64_t token_rows = 0;
  std::uint64_t row_start = 0, row_end = 0, row_stride = 1;
  std::vector<std::uint64_t> expert_ids;  // excluded / zeroed / biased / forced (rows x top_k)
  std::vector<double> biases;
  bool capture_original = false;

  // Re-checks the control against the selector's actual policy and rows before any native
  // work: policy matches, rows valid, ids unique and in range, grouped top-k still feasible
  // after exclusion, finite biases, forced ids shaped rows x top_k within group limits.
  // Throws Error(InvalidArgument) naming the first problem.
  void validate(const RoutingPolicy& actual, std::uint64_t token_rows) const;
  std::optional<std::string> problem(const RoutingPolicy& actual, std::uint64_t token_rows) const;
  std::uint64_t selected_rows() const noexcept {
    // ceil((row_end - row_start) / row_stride) without a sum that could wrap
    return row_stride == 0 || row_end <= row_start ? 0 : (row_end - row_start - 1) / row_stride + 1;
  }
};

class CaptureSession;

// Holds the run exclusively between validation and commit. Dropping it changes nothing.
class PreparedCaptureRestore {
 public:
  PreparedCaptureRestore(PreparedCaptureRestore&& other) noexcept;
  PreparedCaptureRestore& operator=(PreparedCaptureRestore&&) = delete;
  ~PreparedCaptureRestore();
  void commit() noexcept;
  bool committed() const noexcept { return committed_; }
  bool holding() const noexcept { return session_ != nullptr; }

 private:
  friend class CaptureSession;
  PreparedCaptureRestore(CaptureSession* session, CaptureCheckpoint checkpoint) noexcept
      : session_(session), checkpoint_(std::move(checkpoint)) {}
  CaptureSession* session_;
  CaptureCheckpoint checkpoint_;
  bool committed_ = false;
};

class CaptureSession {
 public:
  explicit CaptureSession(AdmittedCapturePlan plan);
  // Also re-admits the plan against the session's own discovery: an admission made for
  // another catalog is refused ("capture admission does not match this session's catalog").
  CaptureSession(AdmittedCapturePlan plan, const CaptureDiscovery& discovery);
  CaptureSession(const CaptureSession&) = delete;
  CaptureSession& operator=(const CaptureSession&) = delete;

  const AdmittedCapturePlan& plan() const noexcept { return plan_; }
  const AdmittedInterventionPlan* intervention_plan() const noexcept { return interventions_.get(); }
  std::uint64_t id() const noexcept { return id_; }
  // The estimator interventions were enabled with (null before); bindings reach the
  // foreign objects it holds for garbage collection.
  InterventionEstimator* estimator() const noexcept { return estimator_.get(); }

  void begin_step(CapturePhase phase, std::uint64_t prediction);
  void observe(CaptureBackend& backend, std::string_view path, TensorHandle tensor);
  // The selections observed at `path`, in plan order (empty when none): resolved once, so a
  // hook observing one point need not look its path up on every call.
  std::vector<std::size_t> selections_at(std::string_view path) const;
  // observe() for selections resolved by selections_at (on this session).
  void observe_at(CaptureBackend& backend, std::string_view path, const std::vector<std::size_t>& selections,
                  TensorHandle tensor);
  std::optional<CapturedStep> take_step();

  std::optional<std::uint64_t> checkpoint_storage_bytes(const CaptureDiscovery& discovery) const;
  CaptureCheckpoint checkpoint(const CaptureDiscovery& discovery) const;
  void validate_restore(const CaptureCheckpoint& checkpoint) const;
  PreparedCaptureRestore prepare_restore(const CaptureCheckpoint& checkpoint);
  void restore(const CaptureCheckpoint& checkpoint);
  CaptureUsage cumulative_usage() const noexcept { return ledger_.cumulative(); }
  CaptureUsage step_usage() const noexcept { return ledger_.step(); }
  std::uint64_t next_prediction() const noexcept { return has_step_ ? prediction_ + 1 : 0; }
  bool step_pending() const noexcept { return step_open_; }
  bool checkpoint_ready() const noexcept { return ready_; }
  // An independent child run continuing from this run's delivered boundary.
  std::unique_ptr<CaptureSession> fork(const CaptureDiscovery& discovery, std::optional<std::uint64_t> max_predictions,
                                       std::optional<CaptureLimits> limits) const;

  void enable_interventions(AdmittedInterventionPlan plan, std::shared_ptr<InterventionEstimator> estimator);
  std::optional<TensorHandle> intervene(CaptureBackend& backend, std::string_view path, TensorHandle tensor);
  // A recompute of `path`'s output (activation checkpointing runs a forward again in backward):
  // the operations at `path`, in plan order, applied again as the forwards applied them to a
  // tensor of its shape, with nothing recorded, charged or observed. An operation that no
  // forward applied to that shape is not applied; nullopt when none is. CaptureSessionError
  // where forwards of that shape differed (one applied an operation, another reached it and
  // did not: which one autograd runs again is unknown), where the shapes an operation saw are
  // too many to have kept this one, or for a replacement that changes the shape or dtype.
  std::optional<TensorHandle> reintervene(CaptureBackend& backend, std::string_view path, TensorHandle tensor);
  void finish_interventions() const;

  std::optional<GroupSelectionControl> routing_control(std::string_view path, std::uint64_t token_rows);
  void routing_applied(CaptureBackend& backend, std::string_view path, std::optional<std::pair<TensorHandle, TensorHandle>> original,
                       std::pair<TensorHandle, TensorHandle> effective);
  void routing_failed(std::string_view path, std::string_view message);

  // Encodes a record (what take_step hands out) as JSON.
  static std::string record_json(const CaptureRecord& record);
  static std::string intervention_record_json(const InterventionRecord& record);

 private:
  friend class PreparedCaptureRestore;
  struct Guard;  // rejects concurrent or re-entrant use instead of deadlocking under the GIL
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  using PathIndex = std::unordered_map<std::string, std::vector<std::size_t>, StringHash, std::equal_to<>>;

  void require_unprepared() const;
  // The operations of one stage (routing, or the rest) at `path` still due in the open step, in
  // plan order; refuses a point that already ran this step. Empty when none are enabled there.
  std::vector<std::size_t> due_operations(std::string_view path, bool routing) const;
  // Marks the operations at `path` observed in the open step (nothing without interventions).
  void note_observed(std::string_view path);
  // A point's resolved request and cost for the facts it was priced from: a hook observing
  // the same shape again skips the shape check, region resolution and pricing.
  struct PricedRequest {
    bool valid = false;
    std::vector<std::uint64_t> source_shape;
    std::uint64_t itemsize = 0;
    bool on_host = true;
    CapturePhase phase = CapturePhase::prefill;
    std::uint64_t prediction = 0;
    TransformRequest request;
    CaptureUsage cost;
    // The JSON bound of a CAPTURED summary's record under this pricing (0: not yet known).
    // Such records differ only in their numbers, which a bound counts at their widest.
    std::uint64_t summary_record_bound = 0;
  };
  struct Facts {  // what observe learned of one tensor, asked once for all its selections
    std::optional<TensorFacts> facts;
    std::optional<BackendFailure> failure;  // describe failed: each selection's record fails with it
  };
  void observe_selection(CaptureBackend& backend, std::size_t index, TensorHandle tensor, Facts& facts,
                         std::optional<Error>& first_error);
  void fail_record(CaptureRecord& record, FailReason reason, std::string_view message);
  // Whether the record's JSON stays within what it was charged for encoding.
  static bool record_fits_charge(PricedRequest& priced, const CaptureRecord& record);
  static bool operation_fits_charge(const InterventionRecord& record);
  void commit_restore(const CaptureCheckpoint& checkpoint) noexcept;

  static std::atomic<std::uint64_t> next_id_;
  std::uint64_t id_;
  AdmittedCapturePlan plan_;
  CaptureLedger ledger_;
  PathIndex selections_by_path_;
  std::vector<CaptureUsage> envelopes_;
  std::vector<PricedRequest> priced_;
  static constexpr std::uint8_t depends_on_phase = 1, depends_on_prediction = 2;
  std::vector<std::uint8_t> priced_depends_;  // per selection: what its geometry depends on
  std::shared_ptr<const AdmittedInterventionPlan> interventions_;
  std::vector<CaptureUsage> operation_envelopes_;  // per operation, reserved with envelopes_
  std::shared_ptr<InterventionEstimator> estimator_;
  PathIndex operations_by_path_;

  // Schedule position.
  CapturePhase phase_ = CapturePhase::prefill;
  std::uint64_t prediction_ = 0;
  bool has_step_ = false;
  bool ever_started_ = false;
  // The one step slot.
  bool step_open_ = false;          // records installed and not yet taken
  bool ready_ = true;               // a delivered, successful boundary (the fresh run is one)
  std::vector<CaptureRecord> records_;
  std::vector<InterventionRecord> operation_records_;
  // Per operation, whether its point was observed in the open step: an intervention follows
  // the ordinary observation at the same hook, whether or not anything is captured there.
  std::vector<std::uint8_t> operation_observed_;
  // Per operation, what the forwards did with it, by the shape of the tensor it met: the
  // geometry it was applied with, and the shapes a forward reached it at without applying it
  // (inactive in that step, or failed). What reintervene reads; kept across steps, restores
  // included (a graph of an earlier forward may still be backpropagated), up to
  // `kept_shapes` shapes each, the oldest let go first.
  struct Applied {
    std::vector<std::uint64_t> source_shape;
    std::vector<ResolvedSlice> region;
    std::vector<std::uint64_t> selected_shape;
  };
  struct ForwardsSeen {
    std::vector<Applied> applied;
    std::vector<std::vector<std::uint64_t>> passed;
    bool let_go = false;  // a shape was let go: one not found may have been seen
  };
  static constexpr std::size_t kept_shapes = 64;
  std::vector<ForwardsSeen> forwards_seen_;
  void note_passed(std::size_t operation, const std::vector<std::uint64_t>& shape);
  // The shape of `tensor`, noted for the operations at `path` inactive in the open step.
  void note_inactive(CaptureBackend& backend, std::string_view path, TensorHandle tensor);
  std::optional<std::size_t> pending_routing_;  // operation index with a control handed out
  std::optional<GroupSelectionControl> pending_control_;
  std::chrono::steady_clock::duration capture_time_{};
  mutable std::atomic<bool> busy_{false};
  std::uint64_t request_serial_ = 0;
  CaptureUsage inherited_;             // usage a fork started from (for re-admission)
  std::uint64_t admitted_from_ = 0;    // the prediction this run was admitted to continue from
  bool restore_prepared_ = false;
};

}  // namespace lifecore::capture
