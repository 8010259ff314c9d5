// Admission of capture plans: every rule of the plan against the retained discovery.
#include <algorithm>
#include <cmath>
#include <set>

#include "capture/capture_geometry.hpp"
#include "capture/capture_json.hpp"
#include "common/sha256.hpp"
#include "lifecore/capture/admission.hpp"
#include "lifecore/capture/ledger.hpp"
#include "lifecore/capture/routing.hpp"
#include "lifecore/capture/transform_cost.hpp"
#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"

namespace lifecore::capture {
namespace {

[[noreturn]] void refuse(const std::string& message) { raise(ErrorKind::Admission, message); }

// `who`: what names the path ("selection 's'", "intervention 'a'"), for the message.
const ObservationPoint& find_point(const CaptureDiscovery& discovery, const std::string& path, const std::string& who) {
  for (const auto& p : discovery.catalog)
    if (p.path == path) return p;
  raise(ErrorKind::Admission,
        who + " names unknown observation path '" + path + "' (the discovery's catalog has " +
            std::to_string(discovery.catalog.size()) + " points; discover() lists them)",
        {{"path", path}});
}

void check_request(const CaptureRequest& r) {
  if (r.batch == 0 || r.prompt_tokens == 0 || r.max_predictions == 0)
    refuse("capture request numbers must be positive");
  if (!checked::mul(r.batch, r.prompt_tokens) || !checked::add(r.prompt_tokens, r.max_predictions))
    refuse("capture request numbers overflow (batch * prompt_tokens and prompt_tokens + max_predictions must fit "
           "in 64 bits)");
}

void check_schedule(const CaptureSchedule& s, const std::string& id) {
  if (s.every == 0) refuse("schedule of '" + id + "' has every == 0");
  if (s.end_prediction && *s.end_prediction <= s.first_prediction)
    refuse("schedule of '" + id + "' ends before it starts");
}

// The first and last prediction a schedule fires at in a phase, within the request.
std::optional<std::pair<std::uint64_t, std::uint64_t>> scheduled_window(const CaptureSchedule& s, CapturePhase phase,
                                                                       const CaptureRequest& r,
                                                                       std::uint64_t from = 0) {
  std::uint64_t lo = phase == CapturePhase::prefill ? 0 : 1;
  std::uint64_t hi = phase == CapturePhase::prefill ? 1 : r.max_predictions;  // exclusive
  if (s.end_prediction) hi = std::min(hi, *s.end_prediction);
  lo = std::max({lo, s.first_prediction, from});
  if (lo >= hi || (phase == CapturePhase::prefill ? !s.prefill : !s.decode)) return std::nullopt;
  // The first firing at or after lo; a firing beyond 64 bits is beyond hi, so never.
  auto first_or = checked::add(checked::mul(slice_extent(0, lo - s.first_prediction, s.every), s.every),
                               s.first_prediction);
  if (!first_or || *first_or >= hi) return std::nullopt;
  std::uint64_t first = *first_or;
  std::uint64_t last = s.first_prediction + ((hi - 1 - s.first_prediction) / s.every) * s.every;
  return std::make_pair(first, last);
}

void check_support(const ObservationPoint& point, const CaptureSchedule& s, const CaptureRequest& r,
                   const std::string& id) {
  for (auto phase : {CapturePhase::prefill, CapturePhase::decode}) {
    if (!scheduled_window(s, phase, r)) continue;
    bool offered = phase == CapturePhase::prefill ? point.prefill : point.decode;
    auto support = phase == CapturePhase::prefill ? point.prefill_support : point.decode_support;
    if (!offered || support != PhaseSupport::supported)
      raise(ErrorKind::Admission, "'" + id + "' schedules " + point.path + " in " + to_string(phase) +
                                      " where its support is " + (offered ? to_string(support) : "absent"));
  }
}

// Known extents must hold the slices at the first and last scheduled prediction.
void check_known_extents(const std::vector<CaptureSlice>& slices, const ObservationPoint& point,
                         const CaptureSchedule& s, const CaptureRequest& r, const std::string& id) {
  for (auto phase : {CapturePhase::prefill, CapturePhase::decode}) {
    auto window = scheduled_window(s, phase, r);
    if (!window) continue;
    for (auto prediction : {window->first, window->second}) {
      for (const auto& slice : slices) {
        for (const auto& axis : point.axes) {
          if (axis.name != slice.axis) continue;
          auto extent = resolve_dim(axis.dim, r, phase, prediction);
          if (!extent) continue;  // checked at run time
          std::uint64_t end = slice.end.value_or(*extent);
          if (slice.start >= *extent || end > *extent)
            refuse("slice of '" + id + "' on axis '" + slice.axis + "' exceeds its extent " +
                   std::to_string(*extent) + " at prediction " + std::to_string(prediction));
        }
      }
    }
  }
}

void check_transform(const CaptureSelection& sel, const ObservationPoint& point, const CaptureDiscovery& d,
                     const CaptureRequest& r) {
  const auto& t = sel.transform;
  const auto& caps = d.capabilities.transforms;
  if (std::find(caps.begin(), caps.end(), t.kind) == caps.end())
    refuse(std::string("transform ") + to_string(t.kind) + " is unsupported by this backend");
  // A payload keeps values in their own type, which for floats is 16, 32 or 64 bits: an 8-bit
  // float (torch's float8 kinds) would be refused at the forward, half-way through it.
  const bool keeps_values =
      t.kind == TransformKind::full_tensor || t.kind == TransformKind::preview || t.kind == TransformKind::slice;
  if (keeps_values && point.dtype == ValueDtype::floating && point.itemsize != 0 && point.itemsize != 2 &&
      point.itemsize != 4 && point.itemsize != 8) {
    const auto bits = checked::mul(point.itemsize, std::uint64_t{8});  // a described size: any uint64
    const std::string held = bits ? std::to_string(*bits) + "-bit floats"
                                  : "floats of " + std::to_string(point.itemsize) + " bytes";
    refuse(std::string(to_string(t.kind)) + " of '" + sel.id + "' keeps values in their own type, but point '" +
           sel.path + "' holds " + held + (point.itemsize == 1 ? " (float8)" : "") +
           ", which a payload cannot keep (it keeps 16-, 32- and 64-bit floats); capture a summary or histogram "
           "of it, or cast it in the model");
  }
  switch (t.kind) {
    case TransformKind::preview:
      if (t.max_elements == 0) refuse("preview of '" + sel.id + "' needs max_elements > 0");
      break;
    case TransformKind::slice:
      if (sel.slices.empty()) refuse("slice transform of '" + sel.id + "' has no slices");
      break;
    case TransformKind::histogram: {
      if (t.edges.size() < 2) refuse("histogram of '" + sel.id + "' needs at least two edges");
      if (t.edges.size() - 1 > d.capabilities.max_histogram_bins)
        refuse("histogram of '" + sel.id + "' has too many bins");
      for (std::size_t i = 0; i < t.edges.size(); ++i) {
        if (!std::isfinite(t.edges[i])) refuse("histogram edges of '" + sel.id + "' must be finite");
        if (i > 0 && !(t.edges[i] > t.edges[i - 1]))
          refuse("histogram edges of '" + sel.id + "' must be strictly increasing");
      }
      break;
    }
    case TransformKind::top_candidates: {
      // Each cause named: a point not marked as logits is the usual one (discover's logits=).
      if (point.meaning != "logits")
        refuse("top candidates of '" + sel.id + "' need unsliced logits with batch 1: point '" + sel.path +
               "' is not marked as logits (its meaning is '" + point.meaning + "'; discover(..., logits=[...]) marks it)");
      if (!sel.slices.empty())
        refuse("top candidates of '" + sel.id + "' need unsliced logits with batch 1: the selection slices them");
      if (r.batch != 1)
        refuse("top candidates of '" + sel.id + "' need unsliced logits with batch 1: the request's batch is " +
               std::to_string(r.batch));
      if (t.count == 0) refuse("top candidates of '" + sel.id + "' need count > 0");
      if (!point.axes.empty() && point.axes.back().dim.kind == DimKind::known &&
          t.count > point.axes.back().dim.size)
        refuse("top candidates of '" + sel.id + "' exceed the vocabulary: " + std::to_string(t.count) +
               " asked, but the last axis '" + point.axes.back().name + "' holds " +
               std::to_string(point.axes.back().dim.size));
      break;
    }
    default: break;
  }
}

std::string canonical(const CapturePlan& plan, const std::vector<ObservationPoint>& points,
                      const CaptureRequest& request, const std::string& artifact) {
  JsonWriter json;
  json.begin_object();
  json.key("artifact"); json.string(artifact);
  json.key("plan"); write_plan(json, plan);
  json.key("points"); write_points(json, points);
  json.key("request"); write_request(json, request);
  json.end_object();
  return json.take();
}

// Whether two schedules fire at one prediction of the request. Decode firings are two
// arithmetic progressions; they meet where the congruences first + k * every agree (the
// Chinese remainder theorem, in 128 bits), so a run of 2**63 predictions costs no loop.
bool schedules_meet(const CaptureSchedule& a, const CaptureSchedule& b, const CaptureRequest& r) {
  if (a.scheduled(CapturePhase::prefill, 0) && b.scheduled(CapturePhase::prefill, 0)) return true;
  if (!a.decode || !b.decode) return false;
  using u128 = unsigned __int128;
  using i128 = __int128;
  u128 lo = std::max({std::uint64_t{1}, a.first_prediction, b.first_prediction});
  u128 hi = std::min({r.max_predictions, a.end_prediction.value_or(UINT64_MAX), b.end_prediction.value_or(UINT64_MAX)});
  if (lo >= hi) return false;
  // x = a.first (mod a.every) and x = b.first (mod b.every): extended Euclid on the steps.
  i128 m1 = a.every, m2 = b.every;
  i128 old_r = m1, rem = m2, old_s = 1, s = 0;
  while (rem != 0) {
    i128 q = old_r / rem;
    i128 next_r = old_r - q * rem;
    old_r = rem;
    rem = next_r;
    i128 next_s = old_s - q * s;
    old_s = s;
    s = next_s;
  }
  i128 g = old_r;  // gcd; old_s * m1 = g (mod m2)
  i128 r1 = a.first_prediction % a.every, r2 = b.first_prediction % b.every;
  i128 diff = r2 - r1;
  if (diff % g != 0) return false;
  // k = (diff / g) * inverse(m1 / g) mod (m2 / g), in unsigned 128 bits (factors < 2**64).
  u128 m2g = static_cast<u128>(m2 / g);
  auto reduced = [&](i128 v) { return static_cast<u128>(((v % static_cast<i128>(m2g)) + static_cast<i128>(m2g)) %
                                                        static_cast<i128>(m2g)); };
  u128 k = reduced(diff / g) * reduced(old_s) % m2g;
  u128 lcm = static_cast<u128>(m1) * m2g;  // < 2**128
  u128 x = (static_cast<u128>(r1) + static_cast<u128>(m1) * k) % lcm;  // the least solution
  if (x < lo) {
    if (lcm >= hi) return false;  // the next solution, x + lcm, is past the run
    x += ((lo - x + lcm - 1) / lcm) * lcm;  // lcm < 2**64 here: no wrap
  }
  return x < hi;
}

// How many times a schedule fires in a phase from `from` on, with the first firing.
std::optional<std::pair<std::uint64_t, std::uint64_t>> firings(const CaptureSchedule& s, CapturePhase phase,
                                                              const CaptureRequest& r, std::uint64_t from) {
  auto window = scheduled_window(s, phase, r, from);
  if (!window) return std::nullopt;
  return std::make_pair(window->first, (window->second - window->first) / s.every + 1);
}

// Static preflight: every step reserves every envelope (`envelopes`, named `what`), so a plan
// whose envelopes cannot fit is refused now rather than failing at some later step.
void preflight(const CapturePlan& plan, const std::vector<ObservationPoint>& points, const CaptureRequest& request,
               const CaptureUsage& inherited, std::uint64_t next_prediction, const CaptureUsage& envelopes,
               const std::string& what, const std::string& hint = {}) {
  if (auto b = exceeded(envelopes, plan.limits.per_step))
    refuse(what + " exceed the per-step limit: " + to_string(*b) + hint);
  std::uint64_t remaining = request.max_predictions > next_prediction ? request.max_predictions - next_prediction : 0;
  auto future = checked_mul(envelopes, remaining);
  auto total = future ? checked_add(inherited, *future) : std::nullopt;
  if (!total) refuse("capture preflight overflow");
  // The usage a fork inherits may pass a new limit by itself: said so, not blamed on envelopes.
  if (auto b = exceeded(inherited, plan.limits.cumulative)) {
    const auto amount = [&](const CaptureUsage& u) {
      switch (*b) {
        case Budget::captures: return u.captures;
        case Budget::retention: return u.retained_bytes;
        case Budget::host: return u.host_bytes;
        default: return u.encoded_bytes;
      }
    };
    refuse("the usage the run inherits (" + std::to_string(amount(inherited)) + ") already exceeds the cumulative "
           "limit (" + std::to_string(amount(plan.limits.cumulative)) + "): " + to_string(*b));
  }
  if (auto b = exceeded(*total, plan.limits.cumulative))
    refuse(what + " exceed the cumulative limit: " + to_string(*b) + hint);
  if (plan.limits.on_limit == OnLimit::fail) {
    // Under Fail a capture over a limit fails the step, so value costs known now join the
    // preflight: a selection that cannot fit one step beside the envelopes, a prefill step
    // that cannot hold its selections together, or a run whose known costs exceed the
    // cumulative limit is refused here. Unknown costs are left to run time.
    CaptureUsage prefill = envelopes;
    CaptureUsage run = *total;
    for (std::size_t i = 0; i < plan.selections.size(); ++i) {
      const auto& sel = plan.selections[i];
      for (auto phase : {CapturePhase::prefill, CapturePhase::decode}) {
        auto fired = firings(sel.schedule, phase, request, next_prediction);
        if (!fired) continue;
        auto floor = value_floor(sel, points[i], request, phase, fired->first);
        if (!floor) continue;
        auto step = checked_add(envelopes, *floor);
        if (!step) refuse("capture preflight overflow");
        if (auto b = exceeded(*step, plan.limits.per_step))
          refuse("under on_limit=fail, '" + sel.id + "' needs at least " + std::to_string(
                     *b == Budget::captures ? floor->captures : *b == Budget::retention ? floor->retained_bytes
                     : *b == Budget::host ? floor->host_bytes : floor->encoded_bytes) +
                 " " + to_string(*b) + " per capture, beyond what the per-step limit leaves beside the envelopes");
        if (phase == CapturePhase::prefill) {
          auto sum = checked_add(prefill, *floor);
          if (!sum) refuse("capture preflight overflow");
          prefill = *sum;
        }
        auto all = checked_mul(*floor, fired->second);
        auto sum = all ? checked_add(run, *all) : std::nullopt;
        if (!sum) refuse("capture preflight overflow");
        run = *sum;
      }
    }
    if (auto b = exceeded(prefill, plan.limits.per_step))
      refuse(std::string("under on_limit=fail, the prefill step's known capture costs exceed the per-step limit: ") +
             to_string(*b));
    if (auto b = exceeded(run, plan.limits.cumulative))
      refuse(std::string("under on_limit=fail, the run's known capture costs exceed the cumulative limit: ") +
             to_string(*b));
  }
}

}  // namespace

std::optional<CaptureUsage> value_floor(const CaptureSelection& sel, const ObservationPoint& point,
                                        const CaptureRequest& request, CapturePhase phase, std::uint64_t prediction) {
  if (point.itemsize == 0) return std::nullopt;
  const auto& t = sel.transform;
  std::uint64_t n = 0;  // elements of the selected region, needed only when the payload keeps them
  if (keeps_elements(t.kind)) {
    if (point.axes.empty()) return std::nullopt;  // unknown rank: unknown size
    n = 1;
    for (const auto& axis : point.axes) {
      auto extent = resolve_dim(axis.dim, request, phase, prediction);
      if (!extent) return std::nullopt;  // checked at run time, never treated as zero
      std::uint64_t selected = *extent;
      for (const auto& s : sel.slices)
        if (s.axis == axis.name) selected = slice_extent(s.start, s.end.value_or(*extent), s.stride);
      // A floor past 64 bits is at least UINT64_MAX: saturating keeps it a floor (over any limit).
      n = checked::mul(n, selected).value_or(UINT64_MAX);
    }
  }
  return transform_floor(t, n, point.itemsize);
}

CaptureUsage metadata_envelope(const CaptureSelection& sel, const ObservationPoint& point) {
  using checked::add_or_throw, checked::mul_or_throw;
  const std::string what = "metadata envelope of '" + sel.id + "'";
  std::uint64_t strings = add_or_throw<std::uint64_t>(
      add_or_throw<std::uint64_t>(sel.id.size(), sel.path.size(), what), point.node_id.size(), what);
  std::uint64_t rank = point.axes.empty() ? 32 : point.axes.size();
  std::uint64_t host = add_or_throw<std::uint64_t>(add_or_throw<std::uint64_t>(512, strings, what),
                                                   mul_or_throw<std::uint64_t>(128, rank, what), what);
  std::uint64_t encoded = add_or_throw<std::uint64_t>(
      add_or_throw<std::uint64_t>(2048, mul_or_throw<std::uint64_t>(6, strings, what), what),
      mul_or_throw<std::uint64_t>(64, rank, what), what);
  return {0, 0, host, encoded};
}

CaptureUsage operation_envelope(const InterventionOperation& op) {
  using checked::add_or_throw, checked::mul_or_throw;
  const std::string what = "metadata envelope of '" + op.id + "'";
  std::uint64_t strings = add_or_throw<std::uint64_t>(op.id.size(), op.target.size(), what);
  // The record's keys, its longest outcome, a 256-byte message escaped at 6 bytes a byte,
  // four usage integers at their widest and the separators of four evidence payloads come
  // to under 1800 bytes: 2048 holds them, and each id or target byte escapes to at most 6.
  std::uint64_t host = add_or_throw<std::uint64_t>(512, strings, what);
  std::uint64_t encoded = add_or_throw<std::uint64_t>(2048, mul_or_throw<std::uint64_t>(6, strings, what), what);
  return {0, 0, host, encoded};
}

AdmittedCapturePlan admit(const CapturePlan& plan, const CaptureDiscovery& discovery, const CaptureRequest& request,
                          const CaptureUsage& inherited, std::uint64_t next_prediction) {
  if (plan.schema_version != capture_schema_version)
    refuse("capture plan schema version " + std::to_string(plan.schema_version) + " is not " +
           std::to_string(capture_schema_version));
  if (plan.limits.physical_native_bytes && !discovery.capabilities.physical_native_limit)
    refuse("a physical native byte limit needs a backend that enforces it");
  check_request(request);
  AdmittedCapturePlan admitted;
  std::set<std::string> ids;
  CaptureUsage envelopes;
  for (const auto& sel : plan.selections) {
    if (sel.id.empty()) refuse("selection id is empty");
    if (!ids.insert(sel.id).second) refuse("duplicate selection id '" + sel.id + "'");
    const auto& point = find_point(discovery, sel.path, "selection '" + sel.id + "'");
    check_schedule(sel.schedule, sel.id);
    check_transform(sel, point, discovery, request);
    if (auto message = check_slice_axes(sel.slices, point)) refuse(*message);
    check_support(point, sel.schedule, request, sel.id);
    check_known_extents(sel.slices, point, sel.schedule, request, sel.id);
    auto sum = checked_add(envelopes, metadata_envelope(sel, point));
    if (!sum) refuse("capture envelope overflow");
    envelopes = *sum;
    admitted.points_.push_back(point);
  }
  preflight(plan, admitted.points_, request, inherited, next_prediction, envelopes, "capture envelopes");
  admitted.plan_ = plan;
  admitted.request_ = request;
  admitted.artifact_ = discovery.artifact_identity;
  std::string encoding = canonical(plan, admitted.points_, request, discovery.artifact_identity);
  admitted.encoded_size_ = encoding.size();
  admitted.identity_ = sha256_hex(encoding);
  return admitted;
}

void check_operation_envelopes(const AdmittedCapturePlan& capture, const std::vector<CaptureUsage>& operation_envelopes,
                               const CaptureUsage& inherited, std::uint64_t next_prediction) {
  const auto& selections = capture.plan().selections;
  CaptureUsage envelopes;
  auto add = [&](const CaptureUsage& envelope) {
    auto sum = checked_add(envelopes, envelope);
    if (!sum) refuse("capture and intervention envelopes overflow");
    envelopes = *sum;
  };
  for (std::size_t i = 0; i < selections.size(); ++i) add(metadata_envelope(selections[i], capture.points()[i]));
  for (const auto& envelope : operation_envelopes) add(envelope);
  preflight(capture.plan(), capture.points(), capture.request(), inherited, next_prediction, envelopes,
            "capture and intervention envelopes",
            " (every step reserves each operation's outcome record beside the selections', so the capture "
            "plan's limits must leave room for it even when it captures nothing: CapturePlan.none() leaves "
            "none; give limits that do, e.g. CapturePlan([], unlimited()))");
}

AdmittedInterventionPlan admit_interventions(const InterventionPlan& plan, const CaptureDiscovery& discovery,
                                             const CaptureRequest& request, const std::string& session_identity,
                                             std::uint64_t session_id) {
  check_request(request);
  if (plan.operations.size() > max_intervention_operations)
    refuse("intervention plan has more than " + std::to_string(max_intervention_operations) + " operations");
  AdmittedInterventionPlan admitted;
  std::set<std::string> ids;
  std::size_t payload_bytes = 0;
  for (const auto& op : plan.operations) {
    if (op.id.empty() || op.id.size() > max_operation_id_bytes)
      refuse("intervention id must be 1 to 128 bytes");
    if (!ids.insert(op.id).second) refuse("duplicate intervention id '" + op.id + "'");
    const auto& point = find_point(discovery, op.target, "intervention '" + op.id + "'");
    check_schedule(op.schedule, op.id);
    check_support(point, op.schedule, request, op.id);
    if (auto message = check_slice_axes(op.slices, point)) refuse(*message);
    check_known_extents(op.slices, point, op.schedule, request, op.id);
    if (op.evidence == EvidenceKind::preview && (op.evidence_elements == 0 || op.evidence_elements > max_evidence_elements))
      refuse("preview evidence of '" + op.id + "' must hold 1 to 4096 elements");
    payload_bytes = checked::add_or_throw(
        payload_bytes,
        checked::mul_or_throw<std::size_t>(8, checked::add_or_throw(op.payload.size(), op.ids.size(), "payload size"),
                                           "payload size"),
        "intervention payload bytes");
    for (double v : op.payload)
      if (!std::isfinite(v)) refuse("intervention payload of '" + op.id + "' is not finite");
    auto stage = stage_of(op.action);
    if (stage == InterventionStage::activation) {
      if (point.dtype != ValueDtype::floating) refuse("activation intervention '" + op.id + "' needs a floating point");
      if (point.routing) refuse("'" + op.id + "' is an activation operation on a routing point");
      if (op.action == InterventionAction::scale && !std::isfinite(op.factor))
        refuse("scale factor of '" + op.id + "' is not finite");
      if (op.action == InterventionAction::replace || op.action == InterventionAction::add ||
          op.action == InterventionAction::mask) {
        if (op.payload_shape.empty() || element_count(op.payload_shape) != op.payload.size())
          refuse("payload of '" + op.id + "' does not match its declared shape");
        if (op.action == InterventionAction::mask)
          for (double v : op.payload)
            if (v != 0.0 && v != 1.0) refuse("mask of '" + op.id + "' must hold only 0 and 1");
        // Exact shape, no broadcasting: compare with every extent known now.
        if (!point.axes.empty()) {
          if (op.payload_shape.size() != point.axes.size())
            refuse("payload of '" + op.id + "' has rank " + std::to_string(op.payload_shape.size()) + ", target has " +
                   std::to_string(point.axes.size()));
          for (auto phase : {CapturePhase::prefill, CapturePhase::decode}) {
            auto window = scheduled_window(op.schedule, phase, request);
            if (!window) continue;
            for (std::size_t i = 0; i < point.axes.size(); ++i) {
              auto extent = resolve_dim(point.axes[i].dim, request, phase, window->first);
              if (!extent) continue;
              std::uint64_t selected = *extent;
              for (const auto& s : op.slices)
                if (s.axis == point.axes[i].name)
                  selected = slice_extent(s.start, s.end.value_or(*extent), s.stride);
              if (selected != op.payload_shape[i])
                refuse("payload of '" + op.id + "' has extent " + std::to_string(op.payload_shape[i]) + " on axis '" +
                       point.axes[i].name + "', the target selects " + std::to_string(selected) + " in " +
                       to_string(phase));
            }
          }
        }
      }
    } else if (stage == InterventionStage::logits_before_sampling) {
      if (point.meaning != "logits") refuse("'" + op.id + "' masks logits at a point that is not logits");
      if (!point.axes.empty())
        for (const auto& s : op.slices)
          if (s.axis == point.axes.back().name) refuse("'" + op.id + "' must keep the full vocabulary axis");
      if (op.ids.empty()) refuse("'" + op.id + "' masks no token");
      if (!point.axes.empty() && point.axes.back().dim.kind == DimKind::known)
        for (auto id : op.ids)
          if (id >= point.axes.back().dim.size)
            refuse("token id out of range in '" + op.id + "': " + std::to_string(id) + ", but the last axis '" +
                   point.axes.back().name + "' holds " + std::to_string(point.axes.back().dim.size) + " ids");
    } else {
      if (!point.routing) refuse("'" + op.id + "' targets " + op.target + ", which has no routing policy");
      if (op.evidence == EvidenceKind::summary) refuse("routing operation '" + op.id + "' cannot take summary evidence");
      for (const auto& s : op.slices)
        if (point.axes.empty() || s.axis != point.axes.front().name)
          refuse("routing operation '" + op.id + "' may only slice the token axis");
      const auto& policy = *point.routing;
      if (op.action == InterventionAction::force_experts &&
          (op.payload_shape.size() != 2 || op.payload_shape[1] != policy.top_k ||
           element_count(op.payload_shape) != op.ids.size()))
        refuse("forced experts of '" + op.id + "' must be shaped [rows, top_k]");
      if (auto problem = routing_action_problem(op.action, policy, op.ids, op.payload, std::nullopt))
        refuse("routing operation '" + op.id + "': " + *problem);
      // No overlapping schedules on one routing target: a selector takes one control.
      for (const auto& other : plan.operations) {
        if (&other == &op) break;
        if (other.target != op.target || stage_of(other.action) != InterventionStage::routing_before_dispatch) continue;
        if (schedules_meet(op.schedule, other.schedule, request))
          refuse("routing operations '" + other.id + "' and '" + op.id + "' overlap on " + op.target);
      }
    }
    admitted.points_.push_back(point);
  }
  if (payload_bytes > max_intervention_payload_bytes) refuse("intervention payloads exceed 512 KiB");
  JsonWriter json;
  json.begin_object();
  json.key("plan"); write_intervention_plan(json, plan);
  json.key("points"); write_points(json, admitted.points_);
  json.key("request"); write_request(json, request);
  json.key("artifact"); json.string(discovery.artifact_identity);
  json.key("session"); json.string(session_identity);
  json.key("session_id"); json.integer(session_id);
  json.end_object();
  std::string encoding = json.take();
  if (encoding.size() > max_intervention_plan_bytes) refuse("intervention plan exceeds 1 MiB");
  admitted.plan_ = plan;
  admitted.request_ = request;
  admitted.session_id_ = session_id;
  admitted.encoded_size_ = encoding.size();
  admitted.identity_ = "intervention-v1-" + sha256_hex(encoding);
  return admitted;
}

}  // namespace lifecore::capture
