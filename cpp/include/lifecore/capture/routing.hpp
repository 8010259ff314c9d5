// Routing rules shared by admission, routing_control and GroupSelectionControl::validate:
// a grouped top-k policy must be coherent, and an action's expert ids must leave that
// policy satisfiable whatever the scores turn out to be.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lifecore/capture/intervention_plan.hpp"
#include "lifecore/capture/types.hpp"

namespace lifecore::capture {

// Why a policy is incoherent (experts split evenly into groups, topk_groups <= groups,
// top_k reachable within topk_groups groups, finite epsilon >= 0, finite scale > 0).
std::optional<std::string> routing_policy_problem(const RoutingPolicy& policy);

// Why an action's ids / biases / forced rows do not fit the policy: ids in range (and
// unique except forced rows across rows), grouped top-k still feasible after exclusion,
// finite biases matching the ids, forced ids shaped [rows, top_k] with unique ids per row
// spanning at most topk_groups groups. `forced_rows`: the rows the forced ids must cover.
std::optional<std::string> routing_action_problem(InterventionAction action, const RoutingPolicy& policy,
                                                  const std::vector<std::uint64_t>& ids,
                                                  const std::vector<double>& biases,
                                                  std::optional<std::uint64_t> forced_rows);

}  // namespace lifecore::capture
