// Grouped top-k routing rules (see lifecore/capture/routing.hpp).
#include "lifecore/capture/routing.hpp"

#include "lifecore/capture/session.hpp"
#include "lifecore/error.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "lifecore/checked.hpp"

namespace lifecore::capture {

std::optional<std::string> routing_policy_problem(const RoutingPolicy& p) {
  if (p.num_experts == 0 || p.top_k == 0) return "a routing policy needs experts and top_k > 0";
  if (p.top_k > p.num_experts) return "routing top_k exceeds the number of experts";
  if (p.groups == 0 || p.num_experts % p.groups != 0) return "routing experts must split evenly into groups";
  if (p.topk_groups == 0 || p.topk_groups > p.groups) return "routing topk_groups must be 1 to groups";
  if (p.top_k > p.topk_groups * (p.num_experts / p.groups))
    return "routing top_k cannot be reached within topk_groups groups";
  if (!std::isfinite(p.epsilon) || p.epsilon < 0) return "routing epsilon must be finite and not negative";
  if (!std::isfinite(p.scale) || !(p.scale > 0)) return "routing scale must be finite and positive";
  return std::nullopt;
}

namespace {

// Whether top_k experts remain whichever topk_groups non-empty groups the scores pick:
// the group choice depends on scores not known in advance, so the least-stocked groups count.
// Only groups an exclusion touches are counted one by one (a policy may have 2**40 groups);
// every other group keeps per_group experts, at least as many as any touched one.
bool feasible_after_exclusion(const RoutingPolicy& p, const std::vector<std::uint64_t>& excluded) {
  std::uint64_t per_group = p.num_experts / p.groups;
  std::map<std::uint64_t, std::uint64_t> removed;  // group -> experts excluded from it
  for (auto id : excluded) ++removed[id / per_group];
  std::vector<std::uint64_t> touched;  // what remains in touched groups that still have experts
  for (const auto& [group, count] : removed)
    if (count < per_group) touched.push_back(per_group - count);
  std::uint64_t untouched = p.groups - removed.size();
  auto stocked = checked::add(std::uint64_t{touched.size()}, untouched);
  if (!stocked || *stocked < p.topk_groups) return false;
  std::sort(touched.begin(), touched.end());
  std::uint64_t from_touched = std::min<std::uint64_t>(p.topk_groups, touched.size());
  std::uint64_t reachable = 0;
  for (std::uint64_t g = 0; g < from_touched; ++g) reachable += touched[g];  // <= num_experts
  // The rest come from untouched groups; a product past 64 bits is more than any top_k.
  auto rest = checked::add(checked::mul(p.topk_groups - from_touched, per_group), reachable);
  return !rest || *rest >= p.top_k;
}

}  // namespace

std::optional<std::string> routing_action_problem(InterventionAction action, const RoutingPolicy& p,
                                                  const std::vector<std::uint64_t>& ids,
                                                  const std::vector<double>& biases,
                                                  std::optional<std::uint64_t> forced_rows) {
  if (auto problem = routing_policy_problem(p)) return problem;
  for (auto id : ids)
    if (id >= p.num_experts) return "expert id " + std::to_string(id) + " out of range";
  std::uint64_t per_group = p.num_experts / p.groups;
  if (action == InterventionAction::force_experts) {
    if (ids.empty() || ids.size() % p.top_k != 0) return "forced experts must be shaped [rows, top_k]";
    std::uint64_t rows = ids.size() / p.top_k;
    if (forced_rows && *forced_rows != rows)
      return "forced experts cover " + std::to_string(rows) + " rows, the window selects " + std::to_string(*forced_rows);
    for (std::uint64_t r = 0; r < rows; ++r) {
      std::set<std::uint64_t> row(ids.begin() + r * p.top_k, ids.begin() + (r + 1) * p.top_k), groups;
      if (row.size() != p.top_k) return "forced experts repeat an expert in row " + std::to_string(r);
      for (auto id : row) groups.insert(id / per_group);
      if (groups.size() > p.topk_groups)
        return "forced experts of row " + std::to_string(r) + " span more than topk_groups groups";
    }
    return std::nullopt;
  }
  if (ids.empty()) return "the routing operation names no expert";
  if (std::set<std::uint64_t>(ids.begin(), ids.end()).size() != ids.size()) return "repeated expert id";
  if (action == InterventionAction::exclude_experts && !feasible_after_exclusion(p, ids))
    return "excluding these experts leaves fewer than top_k selectable in the chosen groups";
  if (action == InterventionAction::bias_routing_scores) {
    if (biases.size() != ids.size()) return "routing biases must match the expert ids";
    // Routing works in float32 (the selector's scores are read as float32): a bias past its
    // range would be an infinite score there, and a softmax over it NaN.
    for (double b : biases)
      if (!std::isfinite(b) || std::fabs(b) > static_cast<double>(std::numeric_limits<float>::max())) {
        char text[32];
        const auto end = std::to_chars(text, text + sizeof text, b).ptr;  // the shortest form of the double
        return "routing biases must be finite in float32 (the routing scores' dtype), got " + std::string(text, end);
      }
  }
  return std::nullopt;
}

std::optional<std::string> GroupSelectionControl::problem(const RoutingPolicy& actual, std::uint64_t rows) const {
  if (!(actual == policy)) return "the selector's routing policy does not match the admitted policy at " + target;
  if (rows == 0 || rows != token_rows)
    return "the selector routes " + std::to_string(rows) + " token rows, the control was made for " +
           std::to_string(token_rows);
  if (row_stride == 0 || row_start >= row_end || row_end > token_rows)
    return "the routing window [" + std::to_string(row_start) + ", " + std::to_string(row_end) + ") step " +
           std::to_string(row_stride) + " is not within " + std::to_string(token_rows) + " token rows";
  std::optional<std::uint64_t> forced;
  if (action == InterventionAction::force_experts) forced = selected_rows();
  return routing_action_problem(action, policy, expert_ids, biases, forced);
}

void GroupSelectionControl::validate(const RoutingPolicy& actual, std::uint64_t rows) const {
  if (auto message = problem(actual, rows)) raise(ErrorKind::InvalidArgument, *message);
}

}  // namespace lifecore::capture
