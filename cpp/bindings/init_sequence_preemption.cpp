// lifecore.sequence binding for preemption by recompute: the candidates' C++ sessions are
// read from the list once, the pass runs in the core without the GIL (a victim's close may
// return pages), and the outcome comes back as plain values for lifecore.sequence.preempt_for
// to put in its report. Translation only: the policy is sequence/preemption.hpp.
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "arguments.hpp"
#include "bindings.hpp"
#include "table_arguments.hpp"
#include "lifecore/error.hpp"
#include "lifecore/sequence/preemption.hpp"

namespace lifecore::bindings {
namespace {

using namespace lifecore::sequence;

using PreemptionValues = std::tuple<std::vector<Authority>, std::vector<TerminalReceipt>,
                                    std::vector<std::pair<Authority, std::string>>, std::vector<CapacitySource>, bool>;

PreemptionValues preempt(nb::handle coordinator, nb::handle deferred, nb::handle candidates, nb::handle limit) {
  constexpr const char* call = "preempt_for";
  auto& c = object_argument<AdmissionCoordinator>(coordinator, call, "coordinator", "an AdmissionCoordinator");
  const auto& d = object_argument<AdmissionDeferred>(deferred, call, "deferred", "an AdmissionDeferred");
  std::optional<std::size_t> most;
  if (!limit.is_none()) most = static_cast<std::size_t>(uint_argument(limit, call, "limit"));
  const auto held = table_out::instance_list<SequenceSession>(candidates, call, "candidates", "SequenceSession");
  const std::vector<SequenceSession*>& sessions = held.objects;
  PreemptionOutcome out;
  {
    GilRelease release;  // the snapshot keeps the sessions alive (another thread may change the list)
    out = preempt_for(c, d, sessions, most);
  }
  std::vector<std::pair<Authority, std::string>> skipped;
  skipped.reserve(out.skipped.size());
  for (auto& s : out.skipped) skipped.emplace_back(s.authority, std::move(s.reason));
  return {std::move(out.victims), std::move(out.receipts), std::move(skipped), std::move(out.freed_sources),
          out.satisfied};
}

}  // namespace

void init_sequence_preemption(nb::module_& m) {
  m.def("_preempt_for", &preempt, nb::arg("coordinator").none(), nb::arg("deferred").none(),
        nb::arg("candidates").none(), nb::arg("limit").none(),
        nb::sig("def _preempt_for(coordinator: AdmissionCoordinator, deferred: AdmissionDeferred, "
                "candidates: list[SequenceSession], limit: int | None) -> tuple[list[Authority], "
                "list[TerminalReceipt], list[tuple[Authority, str]], list[CapacitySource], bool]"),
        "The pass behind lifecore.sequence.preempt_for: (victims, receipts, skipped, freed_sources, satisfied).");
}

}  // namespace lifecore::bindings
