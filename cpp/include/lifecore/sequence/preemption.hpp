// Preemption by recompute: free capacity for a deferred demand by aborting quiescent
// sequences whose release would return a source the demand waits on. One pass over the
// candidates in the caller's order, each either a victim (aborted, then its session closed)
// or left alone with the reason; a candidate is never half-changed.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "lifecore/sequence/capacity.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/session.hpp"

namespace lifecore::sequence {

struct PreemptionSkip {
  Authority authority;
  std::string reason;
};

struct PreemptionOutcome {
  std::vector<Authority> victims;          // in the order they were picked
  std::vector<TerminalReceipt> receipts;   // parallel to victims
  std::vector<PreemptionSkip> skipped;     // every candidate not picked, with why
  std::vector<CapacitySource> freed_sources;  // the demand's sources whose epochs advanced
  bool satisfied = false;                  // the deferred demand fits now
};

// Stops once `deferred` fits now, or after `limit` victims; picks none for a demand only growth
// can serve (its fit beyond a domain's total). StaleAuthorityError for a deferral
// of another coordinator, or a backing deferral whose sequence is gone, before anything changes. The deferral's own sequence is never a
// victim. Capacity comes back once every other holder of a victim is gone too: freed_sources
// says what actually came back.
PreemptionOutcome preempt_for(AdmissionCoordinator& coordinator, const AdmissionDeferred& deferred,
                              const std::vector<SequenceSession*>& candidates, std::optional<std::size_t> limit);

}  // namespace lifecore::sequence
