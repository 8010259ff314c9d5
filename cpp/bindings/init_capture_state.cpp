// StreamCaptureState, CaptureEnd, CacheMode and CaptureVariant: the seed's value type, bound as is.
#include <nanobind/operators.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "lifecore/runtime/stream_capture_state.hpp"

namespace lifecore::bindings {

namespace {
// The value type's refusals name its own methods (no stream, no graph_prepare, exists there).
constexpr CaptureStateOperations standalone_operations{"StreamCaptureState.prepare", "StreamCaptureState.begin",
                                                       "StreamCaptureState.end"};
}  // namespace

void init_capture_state(nb::module_& m) {
  using namespace nb::literals;

  nb::enum_<CacheMode>(m, "CacheMode", "How the metadata info cache behaves at a lifecycle position.")
      .value("NORMAL", CacheMode::normal, "size-limited, bounded, least recently used entries evicted")
      .value("CAPTURE", CacheMode::capture,
             "caches any size and pins what the window uses (never evicted while the window or its graph lives); "
             "unpinned entries past the count are still evicted, least recently used first");

  nb::enum_<CaptureVariant>(m, "CaptureVariant", "Where a stream sits in the graph-capture lifecycle.")
      .value("NO_CAPTURE", CaptureVariant::no_capture, "no capture is prepared or recording")
      .value("PREPARE", CaptureVariant::prepare, "graph_prepare armed the pools; warmup runs eagerly")
      .value("CAPTURE", CaptureVariant::capture, "launches are being recorded into a graph");

  nb::class_<CaptureEnd>(m, "CaptureEnd", "What StreamCaptureState.end reports: owner, caller, abandoned.")
      .def_ro("owner", &CaptureEnd::owner, "The owner that opened the window")
      .def_ro("caller", &CaptureEnd::caller, "Who closed it")
      .def_ro("abandoned", &CaptureEnd::abandoned,
              "True when the caller is not the owner: the window is discarded, nothing is sealed")
      .def("__eq__", [](const CaptureEnd& a, nb::handle b) { return nb::isinstance<CaptureEnd>(b) && a == nb::cast<const CaptureEnd&>(b); },
           nb::sig("def __eq__(self, other: object, /) -> bool"))
      // Equal values hash alike (a set or dict key), as the reference model's do.
      .def("__hash__", [](const CaptureEnd& end) { return nb::hash(nb::make_tuple(end.owner, end.caller, end.abandoned)); })
      .def("__repr__", [](const CaptureEnd& end) {
        return "CaptureEnd(owner=" + std::to_string(end.owner) + ", caller=" + std::to_string(end.caller) +
               ", abandoned=" + (end.abandoned ? "True" : "False") + ")";
      });

  nb::class_<StreamCaptureState>(
      m, "StreamCaptureState",
      "Where a stream sits in the graph-capture lifecycle, and the only thing allowed to move it:\n"
      "NO_CAPTURE -> PREPARE -> CAPTURE -> NO_CAPTURE. A rejected transition raises\n"
      "CaptureStateError and changes nothing. Equal states hash alike, so a transition changes\n"
      "the hash: a state kept as a set or dict key is a copy (copy.copy, or Stream.capture_state)\n"
      "that is not moved afterwards.")
      .def(nb::init<>())
      .def("prepare", [](StreamCaptureState& s, CaptureOwner owner) { s.prepare(owner, standalone_operations); },
           "owner"_a = 0, "NO_CAPTURE -> PREPARE (graph_prepare). Refused when a capture is prepared or recording.")
      .def("begin", [](StreamCaptureState& s) { s.begin(standalone_operations); },
           "PREPARE -> CAPTURE (begin_capture). Refused without a prepare, or while recording.")
      .def("end", [](StreamCaptureState& s, CaptureOwner caller) { return s.end(caller, standalone_operations); },
           "caller"_a = 0, "CAPTURE -> NO_CAPTURE (end_capture). abandoned=True when caller is not the owner.")
      .def("abort", &StreamCaptureState::abort, "Back to NO_CAPTURE from anywhere; never fails.")
      .def("is_recording", &StreamCaptureState::is_recording, "True in CAPTURE")
      .def("is_active", &StreamCaptureState::is_active, "True in PREPARE or CAPTURE")
      .def("cache_mode", &StreamCaptureState::cache_mode, "CAPTURE in PREPARE and CAPTURE, else NORMAL")
      .def_prop_ro("owner", &StreamCaptureState::owner, "The window's owner; None in NO_CAPTURE")
      .def_prop_ro("variant", &StreamCaptureState::variant, "NO_CAPTURE, PREPARE or CAPTURE")
      .def("__eq__",
           [](const StreamCaptureState& a, nb::handle b) {
             return nb::isinstance<StreamCaptureState>(b) && a == nb::cast<const StreamCaptureState&>(b);
           },
           nb::sig("def __eq__(self, other: object, /) -> bool"))
      .def("__hash__",
           [](const StreamCaptureState& state) {
             return nb::hash(nb::make_tuple(static_cast<int>(state.variant()), state.owner()));
           })
      .def("__copy__", [](const StreamCaptureState& state) { return state; })
      .def("__deepcopy__", [](const StreamCaptureState& state, nb::handle) { return state; }, "memo"_a)
      .def("__repr__", &StreamCaptureState::repr);
}

}  // namespace lifecore::bindings
