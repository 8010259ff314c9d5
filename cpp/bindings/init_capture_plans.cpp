// Plans, discovery, limits and admission: conversion only; every rule is in the core.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "capture_bindings.hpp"
#include "capture_reprs.hpp"
#include "lifecore/capture/admission.hpp"
#include "lifecore/capture/backend.hpp"
#include "lifecore/capture/routing.hpp"
#include "lifecore/capture/transform_cost.hpp"
#include "lifecore/error.hpp"

namespace lifecore::bindings {

using namespace lifecore::capture;

namespace {

Dim dim_from_python(nb::handle size) {
  if (PyIndex_Check(size.ptr()) && !PyBool_Check(size.ptr()))  // an int or a NumPy integer
    return {DimKind::known, count_argument(size, "Axis", "size")};
  if (size.is_none()) return {DimKind::unknown, 0};
  if (!PyUnicode_Check(size.ptr()))
    raise(ErrorKind::TypeMismatch, "Axis: argument 'size' must be an int, a symbol (str) or None, got " +
                                       type_name_of(size));
  auto name = str_argument(size, "Axis", "size");
  for (auto kind : {DimKind::batch, DimKind::sequence, DimKind::token_rows, DimKind::context, DimKind::media_positions,
                    DimKind::unknown})
    if (name == to_string(kind)) return {kind, 0};
  raise(ErrorKind::InvalidArgument, "unknown symbolic axis size '" + name +
                                        "' (batch, sequence, token_rows, context, media_positions, unknown)");
}

nb::object dim_to_python(const Dim& d) {
  if (d.kind == DimKind::known) return nb::int_(d.size);
  return nb::str(to_string(d.kind));
}

[[noreturn]] void refuse_pickle(nb::handle) {
  raise(ErrorKind::TypeMismatch, "deserialization cannot forge admission: admitted plans are not picklable");
}

// A CaptureUsage field, settable only to a count that fits in 64 bits.
template <std::uint64_t CaptureUsage::*Field>
void usage_field(nb::class_<CaptureUsage>& cls, const char* name, const char* setter_sig, const char* doc) {
  cls.def_prop_rw(
      name, [](const CaptureUsage& u) { return u.*Field; },
      [name](CaptureUsage& u, nb::handle value) { u.*Field = count_argument(value, "CaptureUsage", name); },
      nb::for_setter(nb::sig(setter_sig)), nb::for_setter(nb::arg("value").none()), doc);
}

void bind_plan_enums(nb::module_& m) {
  nb::enum_<CapturePhase>(m, "CapturePhase",
       "The phase of a step: PREFILL (the prompt, prediction 0) or DECODE (one generated token, predictions "
       "1 on).")
      .value("PREFILL", CapturePhase::prefill, "the prompt's forward; its prediction is 0")
      .value("DECODE", CapturePhase::decode, "one generated token's forward; predictions 1 and on");
  nb::enum_<ValueDtype>(m, "ValueDtype",
       "The kind of value a point holds. Activation interventions need a FLOATING point.")
      .value("FLOATING", ValueDtype::floating, "floating-point values")
      .value("INTEGER", ValueDtype::integer, "integer values (ids, indices)")
      .value("BOOLEAN", ValueDtype::boolean, "boolean values (masks)")
      .value("UNKNOWN", ValueDtype::unknown, "not declared by the backend");
  nb::enum_<PointPosition>(m, "PointPosition",
       "Where a point's value sits relative to the interventions at its hook; copied onto its records.")
      .value("BEFORE_INTERVENTION", PointPosition::before_intervention, "the value before interventions change it")
      .value("READ_ONLY", PointPosition::read_only, "a value interventions do not change")
      .value("AFTER_INTERVENTION", PointPosition::after_intervention, "the value after interventions changed it");
  nb::enum_<PhaseSupport>(m, "PhaseSupport",
       "How a point supports capture in a phase. Admission schedules a point only in a phase where it is "
       "SUPPORTED.")
      .value("SUPPORTED", PhaseSupport::supported, "observed as declared; may be scheduled")
      .value("CONDITIONAL", PhaseSupport::conditional,
           "observed only under conditions not guaranteed; admission refuses it")
      .value("UNSUPPORTED", PhaseSupport::unsupported, "not observed in this phase; admission refuses it")
      .value("UNVERIFIED", PhaseSupport::unverified, "not verified for this phase; admission refuses it");
  nb::enum_<TransformKind>(m, "TransformKind",
       "What a transform keeps of a selected region; CaptureTransform builds each kind.")
      .value("PREVIEW", TransformKind::preview,
           "the first max_elements elements, flattened (TRUNCATED when the region holds more)")
      .value("SLICE", TransformKind::slice, "the region the selection's slices pick (at least one slice is required)")
      .value("FULL_TENSOR", TransformKind::full_tensor, "every element of the selected region")
      .value("SUMMARY", TransformKind::summary, "count, nonfinite, and min, max, mean, std of the finite values")
      .value("HISTOGRAM", TransformKind::histogram, "counts per bin between strictly increasing finite edges")
      .value("TOP_CANDIDATES", TransformKind::top_candidates, "the best-scoring ids of unsliced logits (batch 1)");
  nb::enum_<OnLimit>(m, "OnLimit", "What a capture that would exceed a limit does: FAIL or SKIP.")
      .value("FAIL", OnLimit::fail, "the record is FAILED and observe raises BudgetExceededError")
      .value("SKIP", OnLimit::skip, "the record is SKIPPED (skip_reason 'limit'); no transform runs");
}

void bind_usage(nb::module_& m) {
  nb::class_<CaptureUsage> usage(m, "CaptureUsage",
                                 "Captures, retained bytes, host bytes and encoded (JSON) bytes. A value: what a "
                                 "plan, limit, record or checkpoint hands out is a copy.");
  usage.def("__init__",
            [](CaptureUsage* u, nb::handle captures, nb::handle retained, nb::handle host, nb::handle encoded) {
              new (u) CaptureUsage{count_argument(captures, "CaptureUsage", "captures"),
                                   count_argument(retained, "CaptureUsage", "retained_bytes"),
                                   count_argument(host, "CaptureUsage", "host_bytes"),
                                   count_argument(encoded, "CaptureUsage", "encoded_bytes")};
            },
            nb::arg("captures").none() = 0, nb::arg("retained_bytes").none() = 0, nb::arg("host_bytes").none() = 0,
            nb::arg("encoded_bytes").none() = 0,
            nb::sig("def __init__(self, captures: int = 0, retained_bytes: int = 0, host_bytes: int = 0, "
                    "encoded_bytes: int = 0) -> None"));
  usage_field<&CaptureUsage::captures>(usage, "captures", "def captures(self, value: int, /) -> None",
                                       "Captures: one per transform that ran (record metadata counts none).");
  usage_field<&CaptureUsage::retained_bytes>(usage, "retained_bytes", "def retained_bytes(self, value: int, /) -> None",
                                             "Bytes of payload values kept.");
  usage_field<&CaptureUsage::host_bytes>(usage, "host_bytes", "def host_bytes(self, value: int, /) -> None",
                                         "Bytes held in host memory: record metadata and values brought to the host.");
  usage_field<&CaptureUsage::encoded_bytes>(usage, "encoded_bytes", "def encoded_bytes(self, value: int, /) -> None",
                                            "Bytes of the records' JSON encoding (a bound on to_json's length).");
  usage.def("__eq__", [](const CaptureUsage& a, nb::handle b) {
        CaptureUsage* other = nullptr;
        return nb::try_cast<CaptureUsage*>(b, other) && other && a == *other;
      })
      .def("as_tuple", [](const CaptureUsage& u) {
        return nb::make_tuple(u.captures, u.retained_bytes, u.host_bytes, u.encoded_bytes);
      }, nb::sig("def as_tuple(self) -> tuple[int, int, int, int]"),
         "(captures, retained_bytes, host_bytes, encoded_bytes) as a tuple of ints.")
      .def("__repr__", &reprs::usage);
  // Equal by value and mutable: no hash, as for a list (as_tuple() is the hashable form).
  usage.attr("__hash__") = nb::none();
}

void bind_points(nb::module_& m) {
  nb::class_<Axis>(m, "Axis", "A named axis; size is an int (known) or a symbol: batch, sequence, token_rows, context, media_positions, unknown.")
      .def("__repr__", &reprs::axis)
      .def("__init__",
           [](Axis* a, nb::handle name, nb::handle size) {
             new (a) Axis{str_argument(name, "Axis", "name"), dim_from_python(size)};
           },
           nb::arg("name").none(), nb::arg("size").none() = nb::none(),
           nb::sig("def __init__(self, name: str, size: int | str | None = None) -> None"))
      .def_ro("name", &Axis::name, "The axis name that slices refer to.")
      .def_prop_ro("size", [](const Axis& a) { return dim_to_python(a.dim); },
           nb::for_getter(nb::sig("def size(self, /) -> int | str")),
           "The extent: an int when known, else a symbol resolved from the request at run time ('batch', "
           "'sequence', 'token_rows', 'context', 'media_positions' or 'unknown').");

  nb::class_<RoutingPolicy>(m, "RoutingPolicy",
                            "Expected grouped top-k routing: scoring ('softmax' or 'sigmoid'), experts split into "
                            "`groups`, the best `topk_groups` groups kept, coefficients normalized with `epsilon` "
                            "and multiplied by `scale` (and learned per-expert scales when "
                            "`learned_coefficient_scale`). The defaults are plain top-k.")
      .def("__init__",
           [](RoutingPolicy* p, nb::handle experts_arg, nb::handle top_k_arg, nb::handle scoring_arg,
              nb::handle groups_arg, nb::handle topk_groups_arg, nb::handle epsilon_arg, nb::handle scale_arg,
              nb::handle learned_arg) {
             const char* call = "RoutingPolicy";
             std::uint64_t experts = count_argument(experts_arg, call, "num_experts");
             std::uint64_t top_k = count_argument(top_k_arg, call, "top_k");
             std::string scoring = str_argument(scoring_arg, call, "scoring");
             std::uint64_t groups = count_argument(groups_arg, call, "groups");
             std::optional<std::uint64_t> topk_groups = optional_uint_argument(topk_groups_arg, call, "topk_groups");
             double epsilon = real_argument(epsilon_arg, call, "epsilon");
             double scale = real_argument(scale_arg, call, "scale");
             bool learned = bool_argument(learned_arg, call, "learned_coefficient_scale");
             RoutingScoring kind = RoutingScoring::softmax;
             if (scoring == "sigmoid") kind = RoutingScoring::sigmoid;
             else if (scoring != "softmax")
               raise(ErrorKind::InvalidArgument, "routing scoring is 'softmax' or 'sigmoid', not '" + scoring + "'");
             RoutingPolicy policy{experts, top_k, kind, groups, topk_groups.value_or(groups), epsilon, scale, learned};
             if (auto problem = routing_policy_problem(policy)) raise(ErrorKind::InvalidArgument, *problem);
             new (p) RoutingPolicy(policy);
           },
           nb::arg("num_experts").none(), nb::arg("top_k").none(), nb::kw_only(), nb::arg("scoring").none() = "softmax",
           nb::arg("groups").none() = 1, nb::arg("topk_groups").none() = nb::none(), nb::arg("epsilon").none() = 0.0,
           nb::arg("scale").none() = 1.0, nb::arg("learned_coefficient_scale").none() = false,
           nb::sig("def __init__(self, num_experts: int, top_k: int, *, scoring: str = 'softmax', groups: int = 1, "
                   "topk_groups: int | None = None, epsilon: float = 0.0, scale: float = 1.0, "
                   "learned_coefficient_scale: bool = False) -> None"))
      .def_ro("num_experts", &RoutingPolicy::num_experts, "Experts the selector chooses among.")
      .def_ro("top_k", &RoutingPolicy::top_k, "Experts chosen per token row.")
      .def_prop_ro("scoring", [](const RoutingPolicy& p) { return to_string(p.scoring); },
           "'softmax' or 'sigmoid': how router logits become scores.")
      .def_ro("groups", &RoutingPolicy::groups, "Equal groups the experts are split into (1: plain top-k).")
      .def_ro("topk_groups", &RoutingPolicy::topk_groups,
           "Best groups kept before top_k experts are chosen among them.")
      .def_ro("epsilon", &RoutingPolicy::epsilon, "Added to the denominator when coefficients are normalized.")
      .def_ro("scale", &RoutingPolicy::scale, "Factor the normalized coefficients are multiplied by.")
      .def_ro("learned_coefficient_scale", &RoutingPolicy::learned_coefficient_scale,
           "Whether the selector also multiplies coefficients by learned per-expert scales.")
      .def("__eq__", [](const RoutingPolicy& a, nb::handle b) {
        RoutingPolicy* other = nullptr;
        return nb::try_cast<RoutingPolicy*>(b, other) && other && a == *other;
      })
      .def("__hash__", [](const RoutingPolicy& p) {  // equal policies hash alike (read-only fields)
        return nb::hash(nb::make_tuple(p.num_experts, p.top_k, static_cast<int>(p.scoring), p.groups, p.topk_groups,
                                       p.epsilon, p.scale, p.learned_coefficient_scale));
      })
      .def("__repr__", [](const RoutingPolicy& p) {
        return "RoutingPolicy(" + std::to_string(p.num_experts) + ", " + std::to_string(p.top_k) + ", scoring='" +
               to_string(p.scoring) + "', groups=" + std::to_string(p.groups) + ", topk_groups=" +
               std::to_string(p.topk_groups) + ")";
      });

  nb::class_<ObservationPoint>(m, "ObservationPoint", "A place in the model where a value can be observed.")
      .def("__init__",
           [](ObservationPoint* p, nb::handle path, nb::handle axes, nb::handle node_id, nb::handle meaning,
              nb::handle dtype, nb::handle prefill, nb::handle decode, nb::handle position, nb::handle prefill_support,
              nb::handle decode_support, nb::handle routing, nb::handle itemsize) {
             const char* call = "ObservationPoint";
             ObservationPoint point{argument<std::string>(path, call, "path"),
                                    argument<std::string>(node_id, call, "node_id"),
                                    argument<std::string>(meaning, call, "meaning"),
                                    argument<ValueDtype>(dtype, call, "dtype"),
                                    argument<std::vector<Axis>>(axes, call, "axes"),
                                    argument<bool>(prefill, call, "prefill"),
                                    argument<bool>(decode, call, "decode"),
                                    argument<PointPosition>(position, call, "position"),
                                    argument<PhaseSupport>(prefill_support, call, "prefill_support"),
                                    argument<PhaseSupport>(decode_support, call, "decode_support"),
                                    argument<std::optional<RoutingPolicy>>(routing, call, "routing"),
                                    argument<std::uint64_t>(itemsize, call, "itemsize")};
             // A slice, an intervention's region and a payload's shape name an axis: two of one
             // name would be read as either (admission checked both, the capture sliced one).
             for (std::size_t i = 0; i < point.axes.size(); ++i)
               for (std::size_t j = 0; j < i; ++j)
                 if (point.axes[j].name == point.axes[i].name)
                   raise(ErrorKind::InvalidArgument, std::string(call) + ": axis name '" + point.axes[i].name +
                                                         "' appears twice at " + point.path +
                                                         " (axes " + std::to_string(j) + " and " + std::to_string(i) +
                                                         "; a slice names its axis)");
             if (point.node_id.empty()) point.node_id = point.path;
             new (p) ObservationPoint(std::move(point));
           },
           nb::arg("path").none(), nb::arg("axes").none() = nb::list(), nb::kw_only(), nb::arg("node_id").none() = "",
           nb::arg("meaning").none() = "activation", nb::arg("dtype").none() = ValueDtype::floating,
           nb::arg("prefill").none() = true, nb::arg("decode").none() = true,
           nb::arg("position").none() = PointPosition::read_only,
           nb::arg("prefill_support").none() = PhaseSupport::supported,
           nb::arg("decode_support").none() = PhaseSupport::supported, nb::arg("routing").none() = nb::none(),
           nb::arg("itemsize").none() = 0,
           nb::sig("def __init__(self, path: str, axes: collections.abc.Sequence[Axis] = [], *, node_id: str = '', "
                   "meaning: str = 'activation', dtype: ValueDtype = ..., prefill: bool = True, "
                   "decode: bool = True, position: PointPosition = ..., "
                   "prefill_support: PhaseSupport = ..., "
                   "decode_support: PhaseSupport = ..., routing: RoutingPolicy | None = None, "
                   "itemsize: int = 0) -> None"))
      .def_ro("path", &ObservationPoint::path,
           "The point's path, unique in its catalog; selections and operations name it.")
      .def_ro("node_id", &ObservationPoint::node_id, "The model node it observes (the path when not given).")
      .def_ro("meaning", &ObservationPoint::meaning,
           "What the value is: 'activation', 'logits', 'routing', ... (TOP_CANDIDATES and MASK_LOGITS need "
           "'logits').")
      .def_ro("dtype", &ObservationPoint::dtype, "The ValueDtype of its value.")
      .def_ro("axes", &ObservationPoint::axes, "Its axes, outermost first, as a list of Axis.")
      .def_ro("prefill", &ObservationPoint::prefill, "Whether the point is reached in prefill.")
      .def_ro("decode", &ObservationPoint::decode, "Whether the point is reached in decode.")
      .def_ro("position", &ObservationPoint::position, "Its PointPosition relative to interventions at the same hook.")
      .def_ro("prefill_support", &ObservationPoint::prefill_support, "Its PhaseSupport in prefill.")
      .def_ro("decode_support", &ObservationPoint::decode_support, "Its PhaseSupport in decode.")
      .def_ro("routing", &ObservationPoint::routing,
           "The RoutingPolicy of a routing selector observed here, else None (routing operations need one).")
      .def_ro("itemsize", &ObservationPoint::itemsize, "Bytes per element, 0 when unknown.")
      .def("__repr__", [](const ObservationPoint& p) { return "ObservationPoint(" + reprs::quoted(p.path) + ")"; });
}

void bind_discovery(nb::module_& m) {
  nb::class_<BackendCapabilities>(m, "BackendCapabilities",
       "What the capture backend can do: its transforms, its largest histogram, and whether it enforces a "
       "physical native byte limit. Admission refuses a plan that needs more.")
      .def("__repr__", &reprs::capabilities)
      .def("__init__",
           [](BackendCapabilities* c, nb::handle transforms, nb::handle bins, nb::handle physical) {
             const char* call = "BackendCapabilities";
             BackendCapabilities caps;
             if (auto kinds = argument<std::optional<std::vector<TransformKind>>>(transforms, call, "transforms"))
               caps.transforms = std::move(*kinds);
             caps.max_histogram_bins = argument<std::uint64_t>(bins, call, "max_histogram_bins");
             caps.physical_native_limit = argument<bool>(physical, call, "physical_native_limit");
             new (c) BackendCapabilities(std::move(caps));
           },
           nb::arg("transforms").none() = nb::none(), nb::arg("max_histogram_bins").none() = 4096,
           nb::arg("physical_native_limit").none() = false,
           nb::sig("def __init__(self, transforms: collections.abc.Sequence[TransformKind] | None = None, "
                   "max_histogram_bins: int = 4096, physical_native_limit: bool = False) -> None"))
      .def_ro("transforms", &BackendCapabilities::transforms,
           "The TransformKinds the backend produces (all six by default).")
      .def_ro("max_histogram_bins", &BackendCapabilities::max_histogram_bins, "The most bins a HISTOGRAM may have.")
      .def_ro("physical_native_limit", &BackendCapabilities::physical_native_limit,
           "Whether the backend reports native bytes, so a plan may set CaptureLimits.physical_native_bytes.");

  nb::class_<CaptureDiscovery>(m, "CaptureDiscovery", "Facts retained from the loaded model: identity, catalog, capabilities.")
      .def("__repr__", &reprs::discovery)
      .def("__init__",
           [](CaptureDiscovery* d, nb::handle artifact, nb::handle catalog, nb::handle caps) {
             const char* call = "CaptureDiscovery";
             CaptureDiscovery discovery{argument<std::string>(artifact, call, "artifact_identity"),
                                        argument<std::vector<ObservationPoint>>(catalog, call, "catalog"),
                                        argument<std::optional<BackendCapabilities>>(caps, call, "capabilities")
                                            .value_or(BackendCapabilities{})};
             std::vector<std::string> seen;
             for (const auto& p : discovery.catalog) {
               for (const auto& s : seen)
                 if (s == p.path) raise(ErrorKind::InvalidArgument, "duplicate observation path " + p.path);
               seen.push_back(p.path);
             }
             new (d) CaptureDiscovery(std::move(discovery));
           },
           nb::arg("artifact_identity").none(), nb::arg("catalog").none(), nb::arg("capabilities").none() = nb::none(),
           nb::sig("def __init__(self, artifact_identity: str, catalog: collections.abc.Sequence[ObservationPoint], "
                   "capabilities: BackendCapabilities | None = None) -> None"))
      .def_ro("artifact_identity", &CaptureDiscovery::artifact_identity,
           "The loaded model's identity; admissions, checkpoints and forks are bound to it.")
      .def_ro("catalog", &CaptureDiscovery::catalog, "The ObservationPoints of the model, paths unique.")
      .def_ro("capabilities", &CaptureDiscovery::capabilities, "The backend's BackendCapabilities.")
      .def("point",
           [](const CaptureDiscovery& d, nb::handle path_arg) -> std::optional<ObservationPoint> {
             std::string path = argument<std::string>(path_arg, "CaptureDiscovery.point", "path");
             for (const auto& p : d.catalog)
               if (p.path == path) return p;
             return std::nullopt;
           },
           nb::arg("path").none(), nb::sig("def point(self, path: str) -> ObservationPoint | None"),
           "The ObservationPoint at `path`, or None when the catalog has none. LifecoreTypeError when path is "
           "not a str.");
}

void bind_request_and_schedule(nb::module_& m) {
  nb::class_<CaptureRequest>(m, "CaptureRequest", "What the run will execute: batch, prompt tokens, predictions.")
      .def("__repr__", &reprs::request)
      .def("__init__",
           [](CaptureRequest* r, nb::handle batch, nb::handle prompt_tokens, nb::handle max_predictions) {
             new (r) CaptureRequest{count_argument(batch, "CaptureRequest", "batch"),
                                    count_argument(prompt_tokens, "CaptureRequest", "prompt_tokens"),
                                    count_argument(max_predictions, "CaptureRequest", "max_predictions")};
           },
           nb::arg("batch").none() = 1, nb::arg("prompt_tokens").none() = 1, nb::arg("max_predictions").none() = 1,
           nb::sig("def __init__(self, batch: int = 1, prompt_tokens: int = 1, max_predictions: int = 1) -> None"))
      .def_ro("batch", &CaptureRequest::batch, "Sequences run together.")
      .def_ro("prompt_tokens", &CaptureRequest::prompt_tokens, "Prompt tokens per sequence (the prefill step's rows).")
      .def_ro("max_predictions", &CaptureRequest::max_predictions,
           "Steps the run may take, prefill included: predictions 0 to max_predictions - 1.")
      .def("__eq__", [](const CaptureRequest& a, nb::handle b) {
             return nb::isinstance<CaptureRequest>(b) && a == nb::cast<const CaptureRequest&>(b);
           }, nb::sig("def __eq__(self, other: object, /) -> bool"))
      .def("__hash__", [](const CaptureRequest& r) {  // equal requests hash alike (read-only fields)
        return nb::hash(nb::make_tuple(r.batch, r.prompt_tokens, r.max_predictions));
      });

  nb::class_<CaptureSchedule>(m, "CaptureSchedule", "When a selection fires: phases, [first, end) predictions, every n.")
      .def("__repr__", &reprs::schedule)
      .def("__init__",
           [](CaptureSchedule* s, nb::handle prefill, nb::handle decode, nb::handle first, nb::handle end,
              nb::handle every) {
             const char* call = "CaptureSchedule";
             new (s) CaptureSchedule{bool_argument(prefill, call, "prefill"), bool_argument(decode, call, "decode"),
                                     count_argument(first, call, "first_prediction"),
                                     optional_uint_argument(end, call, "end_prediction"),
                                     count_argument(every, call, "every")};
           },
           nb::kw_only(), nb::arg("prefill").none() = true, nb::arg("decode").none() = true,
           nb::arg("first_prediction").none() = 0,
           nb::arg("end_prediction").none() = nb::none(), nb::arg("every").none() = 1,
           nb::sig("def __init__(self, *, prefill: bool = True, decode: bool = True, first_prediction: int = 0, "
                   "end_prediction: int | None = None, every: int = 1) -> None"))
      .def_ro("prefill", &CaptureSchedule::prefill, "Whether the selection fires in the prefill step.")
      .def_ro("decode", &CaptureSchedule::decode, "Whether it fires in decode steps.")
      .def_ro("first_prediction", &CaptureSchedule::first_prediction, "The first prediction it fires at.")
      .def_ro("end_prediction", &CaptureSchedule::end_prediction,
           "The prediction it stops before (exclusive), or None for no end.")
      .def_ro("every", &CaptureSchedule::every, "It fires every `every` predictions from first_prediction.")
      .def("scheduled",
           [](const CaptureSchedule& s, nb::handle phase, nb::handle prediction) {
             return s.scheduled(argument<CapturePhase>(phase, "CaptureSchedule.scheduled", "phase"),
                                argument<std::uint64_t>(prediction, "CaptureSchedule.scheduled", "prediction"));
           },
           nb::arg("phase").none(), nb::arg("prediction").none(),
           nb::sig("def scheduled(self, phase: CapturePhase, prediction: int) -> bool"),
           "Whether the schedule fires at (phase, prediction): the phase is enabled and the prediction is in "
           "[first_prediction, end_prediction) on the every-step grid. LifecoreTypeError on a wrong argument "
           "type.");

  nb::class_<CaptureSlice>(m, "CaptureSlice", "A half-open slice [start, end) with a positive stride on a named axis.")
      .def("__repr__", &reprs::slice)
      .def("__init__",
           [](CaptureSlice* s, nb::handle axis, nb::handle start, nb::handle end, nb::handle stride) {
             const char* call = "CaptureSlice";
             new (s) CaptureSlice{str_argument(axis, call, "axis"), count_argument(start, call, "start"),
                                  optional_uint_argument(end, call, "end"), count_argument(stride, call, "stride")};
           },
           nb::arg("axis").none(), nb::arg("start").none() = 0, nb::arg("end").none() = nb::none(), nb::arg("stride").none() = 1,
           nb::sig("def __init__(self, axis: str, start: int = 0, end: int | None = None, stride: int = 1) -> None"))
      .def_ro("axis", &CaptureSlice::axis, "The name of the point's axis it slices.")
      .def_ro("start", &CaptureSlice::start, "The first index kept.")
      .def_ro("end", &CaptureSlice::end, "The index it stops before, or None for the end of the axis.")
      .def_ro("stride", &CaptureSlice::stride, "The step between kept indices.");
}

void bind_transforms(nb::module_& m) {
  nb::class_<CaptureTransform>(m, "CaptureTransform", "What is kept of a selected value.")
      .def("__repr__", &reprs::transform)
      .def_static("preview",
                  [](nb::handle n) {
                    return CaptureTransform{TransformKind::preview,
                                            count_argument(n, "CaptureTransform.preview", "max_elements"), {}, 0};
                  },
                  nb::arg("max_elements").none(), nb::sig("def preview(max_elements: int) -> CaptureTransform"),
                  "Keeps at most the first max_elements elements of the region, flattened (TRUNCATED when it holds "
                  "more). Admission refuses max_elements 0.")
      .def_static("slice", [] { return CaptureTransform{TransformKind::slice, 0, {}, 0}; },
           "Keeps the region picked by the selection's slices; admission refuses it without slices.")
      .def_static("full_tensor", [] { return CaptureTransform{TransformKind::full_tensor, 0, {}, 0}; },
           "Keeps every element of the selected region.")
      .def_static("summary", [] { return CaptureTransform{TransformKind::summary, 0, {}, 0}; },
           "Keeps count, nonfinite, and min, max, mean, std of the finite values (the default transform).")
      .def_static("histogram",
                  [](nb::handle edges) {
                    return CaptureTransform{TransformKind::histogram, 0,
                                            argument<std::vector<double>>(edges, "CaptureTransform.histogram", "edges"), 0};
                  },
                  nb::arg("edges").none(),
                  nb::sig("def histogram(edges: collections.abc.Sequence[float]) -> CaptureTransform"),
                  "Keeps counts per bin between `edges`; admission needs at least two strictly increasing finite edges,"
                  " within the backend's max_histogram_bins.")
      .def_static("top_candidates",
                  [](nb::handle k) {
                    return CaptureTransform{TransformKind::top_candidates, 0, {},
                                            count_argument(k, "CaptureTransform.top_candidates", "count")};
                  },
                  nb::arg("count").none(), nb::sig("def top_candidates(count: int) -> CaptureTransform"),
                  "Keeps the `count` best-scoring ids and their scores from the last row of unsliced logits (batch 1); "
                  "admission refuses count 0.")
      .def_ro("kind", &CaptureTransform::kind, "Its TransformKind.")
      .def_ro("max_elements", &CaptureTransform::max_elements, "PREVIEW: the most elements kept (0 for other kinds).")
      .def_ro("edges", &CaptureTransform::edges, "HISTOGRAM: the bin edges (empty for other kinds).")
      .def_ro("count", &CaptureTransform::count, "TOP_CANDIDATES: the candidates kept (0 for other kinds).");

  // The core's cost table, so the backends' charges and the tests' models never restate it.
  m.def("transform_size",
        [](nb::handle kind, nb::handle selected_elements, nb::handle max_elements, nb::handle edge_count,
           nb::handle count) {
          const char* call = "transform_size";
          TransformSize size = transform_size(
              argument<TransformKind>(kind, call, "kind"), count_argument(selected_elements, call, "selected_elements"),
              count_argument(max_elements, call, "max_elements"), count_argument(edge_count, call, "edge_count"),
              count_argument(count, call, "count"));
          return nb::make_tuple(size.kept_elements, size.numbers);
        },
        nb::arg("kind").none(), nb::arg("selected_elements").none(), nb::kw_only(), nb::arg("max_elements").none() = 0,
        nb::arg("edge_count").none() = 0, nb::arg("count").none() = 0,
        nb::sig("def transform_size(kind: TransformKind, selected_elements: int, *, max_elements: int = 0, "
                "edge_count: int = 0, count: int = 0) -> tuple[int, int]"),
        "(elements kept, numbers held) of a transform's payload over a selected region of that many elements.");
  m.def("transform_usage",
        [](nb::handle kind, nb::handle selected_shape, nb::handle itemsize, nb::handle max_elements,
           nb::handle edge_count, nb::handle count, nb::handle on_host) {
          const char* call = "transform_usage";
          return transform_usage(argument<TransformKind>(kind, call, "kind"),
                                 argument<std::vector<std::uint64_t>>(selected_shape, call, "selected_shape"),
                                 count_argument(itemsize, call, "itemsize"), count_argument(max_elements, call, "max_elements"),
                                 count_argument(edge_count, call, "edge_count"), count_argument(count, call, "count"),
                                 bool_argument(on_host, call, "on_host"));
        },
        nb::arg("kind").none(), nb::arg("selected_shape").none(), nb::arg("itemsize").none(), nb::kw_only(),
        nb::arg("max_elements").none() = 0, nb::arg("edge_count").none() = 0, nb::arg("count").none() = 0,
        nb::arg("on_host").none() = true,
        nb::sig("def transform_usage(kind: TransformKind, selected_shape: collections.abc.Sequence[int], itemsize: int, "
                "*, max_elements: int = 0, edge_count: int = 0, count: int = 0, on_host: bool = True) -> CaptureUsage"),
        "The bundled backends' cost of one capture, as the session prices a backend's describe() facts: tensor "
        "payloads at their real bytes, reductions at 8 bytes per number.");
  m.def("transform_floor",
        [](nb::handle transform, nb::handle selected_elements, nb::handle itemsize) {
          const char* call = "transform_floor";
          return transform_floor(argument<CaptureTransform>(transform, call, "transform"),
                                 count_argument(selected_elements, call, "selected_elements"),
                                 count_argument(itemsize, call, "itemsize"));
        },
        nb::arg("transform").none(), nb::arg("selected_elements").none(), nb::arg("itemsize").none(),
        nb::sig("def transform_floor(transform: CaptureTransform, selected_elements: int, itemsize: int) "
                "-> CaptureUsage"),
        "The least value cost any backend charges for one capture (the admission preflight's floor).");
}

void bind_plans(nb::module_& m) {
  nb::class_<CaptureSelection>(m, "CaptureSelection", "One value to capture: id, point path, schedule, slices, transform.")
      .def("__repr__", &reprs::selection)
      .def("__init__",
           [](CaptureSelection* s, nb::handle id, nb::handle path, nb::handle transform, nb::handle schedule,
              nb::handle slices) {
             const char* call = "CaptureSelection";
             CaptureSelection selection{
                 argument<std::string>(id, call, "id"), argument<std::string>(path, call, "path"),
                 argument<std::optional<CaptureSchedule>>(schedule, call, "schedule").value_or(CaptureSchedule{}),
                 argument<std::vector<CaptureSlice>>(slices, call, "slices"),
                 argument<std::optional<CaptureTransform>>(transform, call, "transform").value_or(CaptureTransform{})};
             new (s) CaptureSelection(std::move(selection));
           },
           nb::arg("id").none(), nb::arg("path").none(), nb::arg("transform").none() = nb::none(), nb::kw_only(),
           nb::arg("schedule").none() = nb::none(), nb::arg("slices").none() = nb::list(),
           nb::sig("def __init__(self, id: str, path: str, transform: CaptureTransform | None = None, *, "
                   "schedule: CaptureSchedule | None = None, slices: collections.abc.Sequence[CaptureSlice] = []) "
                   "-> None"))
      .def_ro("id", &CaptureSelection::id, "Its id, which names its records.")
      .def_ro("path", &CaptureSelection::path, "The path of the ObservationPoint it captures.")
      .def_ro("schedule", &CaptureSelection::schedule, "Its CaptureSchedule (every step by default).")
      .def_ro("slices", &CaptureSelection::slices, "Its CaptureSlices, by axis name; none selects the whole value.")
      .def_ro("transform", &CaptureSelection::transform, "Its CaptureTransform (summary by default).");

  nb::class_<CaptureLimits>(m, "CaptureLimits", "Per-step and cumulative budgets and what to do on a limit.")
      .def("__repr__", &reprs::limits)
      .def("__init__",
           [](CaptureLimits* l, nb::handle per_step, nb::handle cumulative, nb::handle on_limit, nb::handle physical) {
             const char* call = "CaptureLimits";
             const auto& step = object_argument<CaptureUsage>(per_step, call, "per_step", "a CaptureUsage");
             const auto& total = object_argument<CaptureUsage>(cumulative, call, "cumulative", "a CaptureUsage");
             if (!nb::isinstance(on_limit, nb::type<OnLimit>()))
               raise(ErrorKind::TypeMismatch, argument_label(call, "on_limit") + " must be an OnLimit (FAIL or SKIP), got " +
                                                  type_name_of(on_limit));
             OnLimit policy = nb::cast<OnLimit>(on_limit);
             auto native = optional_uint_argument(physical, call, "physical_native_bytes");
             new (l) CaptureLimits{step, total, native, policy};
           },
           nb::arg("per_step").none(), nb::arg("cumulative").none(), nb::arg("on_limit").none() = OnLimit::fail,
           nb::arg("physical_native_bytes").none() = nb::none(),
           nb::sig("def __init__(self, per_step: CaptureUsage, cumulative: CaptureUsage, on_limit: OnLimit = "
                   "..., physical_native_bytes: int | None = None) -> None"))
      // Copies: a limit handed out can be changed without changing what anything enforces.
      .def_ro("per_step", &CaptureLimits::per_step, nb::rv_policy::copy,
           "The CaptureUsage one step may charge (a copy).")
      .def_ro("cumulative", &CaptureLimits::cumulative, nb::rv_policy::copy,
           "The CaptureUsage the whole run may charge (a copy).")
      .def_ro("on_limit", &CaptureLimits::on_limit, "OnLimit.FAIL or OnLimit.SKIP: what a capture over a limit does.")
      .def_ro("physical_native_bytes", &CaptureLimits::physical_native_bytes,
           "The most native bytes one capture may materialize, or None for no limit (needs a backend with "
           "physical_native_limit).");

  nb::class_<CapturePlan>(m, "CapturePlan", "Selections and limits. An empty plan captures nothing (there is no capture-all).")
      .def("__repr__", &reprs::plan)
      .def("__init__",
           [](CapturePlan* p, nb::handle selections, nb::handle limits, nb::handle version) {
             const char* call = "CapturePlan";
             CapturePlan plan{argument<std::uint32_t>(version, call, "schema_version"),
                              argument<std::vector<CaptureSelection>>(selections, call, "selections"),
                              argument<CaptureLimits>(limits, call, "limits")};
             new (p) CapturePlan(std::move(plan));
           },
           nb::arg("selections").none(), nb::arg("limits").none(), nb::kw_only(),
           nb::arg("schema_version").none() = capture_schema_version,
           nb::sig("def __init__(self, selections: collections.abc.Sequence[CaptureSelection], limits: CaptureLimits, "
                   "*, schema_version: int = 1) -> None"))
      .def_static("none", [] { return CapturePlan{}; }, "The plan that captures nothing, with every budget zero.")
      .def_ro("schema_version", &CapturePlan::schema_version, "The plan format's version; admission accepts only 1.")
      .def_ro("selections", &CapturePlan::selections, "Its CaptureSelections, in order.")
      .def_ro("limits", &CapturePlan::limits, "Its CaptureLimits.")
      .def("admit",
           [](const CapturePlan& plan, nb::handle discovery, nb::handle request) {
             return admit(plan, argument<CaptureDiscovery>(discovery, "CapturePlan.admit", "discovery"),
                          argument<CaptureRequest>(request, "CapturePlan.admit", "request"));
           },
           nb::arg("discovery").none(), nb::arg("request").none(),
           nb::sig("def admit(self, discovery: CaptureDiscovery, request: CaptureRequest) -> AdmittedCapturePlan"),
           "Applies every admission rule; the only way to obtain an AdmittedCapturePlan.");

  nb::class_<AdmittedCapturePlan>(m, "AdmittedCapturePlan",
                                  "A plan admitted against a discovery. Only CapturePlan.admit creates one.")
      // Copies: an admitted plan cannot be changed from Python (what is handed out is a value).
      .def_prop_ro("plan", &AdmittedCapturePlan::plan, nb::rv_policy::copy, "The CapturePlan admitted (a copy).")
      .def_prop_ro("points", &AdmittedCapturePlan::points, nb::rv_policy::copy,
           "The ObservationPoint of each selection, in selection order (copies).")
      .def_prop_ro("request", &AdmittedCapturePlan::request, nb::rv_policy::copy,
           "The CaptureRequest it was admitted for (a copy).")
      .def_prop_ro("identity", &AdmittedCapturePlan::identity,
           "SHA-256 (hex) of the canonical encoding of plan, points, request and artifact.")
      .def_prop_ro("artifact_identity", &AdmittedCapturePlan::artifact_identity,
           "The artifact_identity of the discovery it was admitted against.")
      .def("__reduce__", &refuse_pickle, nb::sig("def __reduce__(self) -> typing.NoReturn"))
      .def("__reduce_ex__", [](nb::handle self, int) { refuse_pickle(self); }, nb::sig("def __reduce_ex__(self, protocol: typing.SupportsIndex, /) -> typing.NoReturn"))
      .def("__repr__", [](const AdmittedCapturePlan& a) { return "AdmittedCapturePlan(" + a.identity() + ")"; });
}

void bind_backend_contract(nb::module_& m) {
  nb::class_<ResolvedSlice>(m, "ResolvedSlice",
       "One axis of a request's region: [start, end) step stride, resolved against the tensor's shape.")
      .def_ro("start", &ResolvedSlice::start, "The first index.")
      .def_ro("end", &ResolvedSlice::end, "The index it stops before.")
      .def_ro("stride", &ResolvedSlice::stride, "The step.")
      .def("as_slice", [](const ResolvedSlice& s) {
        return nb::steal(PySlice_New(nb::int_(s.start).ptr(), nb::int_(s.end).ptr(), nb::int_(s.stride).ptr()));
      }, nb::sig("def as_slice(self) -> slice"), "The region of this axis as a Python slice.");

  nb::class_<TransformRequest>(m, "TransformRequest", "What a backend must estimate or produce for one selection.")
      .def_ro("kind", &TransformRequest::kind, "The TransformKind to estimate or produce.")
      .def_ro("source_shape", &TransformRequest::source_shape, "The observed tensor's shape.")
      .def_ro("region", &TransformRequest::region, "One ResolvedSlice per axis of the source.")
      .def_ro("selected_shape", &TransformRequest::selected_shape, "The shape of the selected region.")
      .def_ro("max_elements", &TransformRequest::max_elements, "PREVIEW: the most elements to keep.")
      .def_ro("edges", &TransformRequest::edges, "HISTOGRAM: the bin edges.")
      .def_ro("count", &TransformRequest::count, "TOP_CANDIDATES: the candidates to keep.")
      .def_prop_ro("whole", [](const TransformRequest& r) {
        for (std::size_t i = 0; i < r.region.size(); ++i)
          if (r.region[i].start != 0 || r.region[i].stride != 1 || r.region[i].end != r.source_shape[i]) return false;
        return true;
      }, "Whether the region is the whole tensor (a backend may skip the indexing).")
      .def_prop_ro("index", [](const TransformRequest& r) {
        nb::list items;
        for (const auto& s : r.region)
          items.append(nb::steal(PySlice_New(nb::int_(s.start).ptr(), nb::int_(s.end).ptr(), nb::int_(s.stride).ptr())));
        return nb::tuple(items);
      }, nb::for_getter(nb::sig("def index(self, /) -> tuple[slice, ...]")), "The region as a tuple of Python slices.");

}

}  // namespace

void init_capture_plans(nb::module_& m) {
  bind_plan_enums(m);
  bind_usage(m);
  bind_points(m);
  bind_discovery(m);
  bind_request_and_schedule(m);
  bind_transforms(m);
  bind_plans(m);
  bind_backend_contract(m);
}

}  // namespace lifecore::bindings
