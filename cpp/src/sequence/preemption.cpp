#include "lifecore/sequence/preemption.hpp"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>

#include "lifecore/error.hpp"
#include "lifecore/sequence/pause_points.hpp"

namespace lifecore::sequence {
namespace {

// Whether the sequence that asked to grow still holds the pages it held when deferred.
bool requester_unchanged(const AdmissionCoordinator& coordinator, const BackingDeferralContext& backing,
                         const std::string& request_id) {
  try {
    return coordinator.held_pages(backing.sequence_authority, request_id) == backing.held_pages;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::StaleAuthority) throw;
    return false;
  }
}

// A session's reason (closed, ended, busy) without the name of the call that found it: a
// skipped candidate's reason is preempt_for's, and which call read it is not the scheduler's business.
std::string reason_of(const Error& e, std::initializer_list<std::string_view> read_by) {
  std::string reason = e.message();
  for (const std::string_view call : read_by)
    if (reason.starts_with(call)) return reason.erase(0, call.size());
  return reason;
}

}  // namespace

PreemptionOutcome preempt_for(AdmissionCoordinator& coordinator, const AdmissionDeferred& deferred,
                              const std::vector<SequenceSession*>& candidates, std::optional<std::size_t> limit) {
  if (deferred.coordinator_id != coordinator.id())
    raise(ErrorKind::StaleAuthority, "preempt_for: the deferral belongs to another coordinator (foreign coordinator)");
  // Once closed, no extension or admission succeeds: a victim would lose its work for nothing.
  coordinator.require_open("preempt_for");
  // A backing deferral is the demand of the sequence that asked to grow: once that sequence is
  // gone nobody waits on it, and once it holds other pages, the demand it names (the pages
  // between those and its target) is not what it needs: either way a victim could be aborted
  // for nothing.
  if (deferred.backing) {
    std::uint64_t now = 0;
    try {
      now = coordinator.held_pages(deferred.backing->sequence_authority, deferred.request_id);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::StaleAuthority) throw;
      raise(ErrorKind::StaleAuthority,
            std::string("preempt_for: the sequence that asked to grow is gone; its deferral is stale (") + e.message() + ")");
    }
    if (now != deferred.backing->held_pages)
      raise(ErrorKind::StaleAuthority, "preempt_for: the sequence that asked to grow holds " + std::to_string(now) +
                                           " pages now, " + std::to_string(deferred.backing->held_pages) +
                                           " when it was deferred; its deferral is stale (retry the extension)");
  }
  // Every candidate not picked is reported with why, so a scheduler sees the whole pool.
  // `stopped`: why the candidates from here on are not looked at. A fit beyond what a domain
  // holds today waits for growth: no victim's release can serve it, so none is looked at.
  const char* stopped = nullptr;
  const CapacitySnapshot capacity = coordinator.capacity();
  for (const auto& d : deferred.fit.domains)
    if (d.domain_index >= capacity.domains.size() || d.bytes > capacity.domains[d.domain_index].total_bytes)
      stopped = "preempt_for: not looked at, the demand waits for growth (no release can serve it)";
  const std::vector<CapacitySource>& wanted = deferred.wait_condition.sources;
  std::vector<std::uint64_t> before;
  before.reserve(wanted.size());
  for (const auto& source : wanted) before.push_back(coordinator.epoch_of(source));
  const std::optional<Authority> own =
      deferred.backing ? std::optional<Authority>(deferred.backing->sequence_authority) : std::nullopt;

  PreemptionOutcome out;
  std::vector<CapacitySource> sources;
  for (SequenceSession* session : candidates) {
    const Authority authority = session->sequence_authority();
    if (!stopped) {
      if (coordinator.fits_now(deferred)) stopped = "preempt_for: not needed, the demand fits";
      else if (limit && out.victims.size() >= *limit) stopped = "preempt_for: not looked at, the limit of victims is reached";
    }
    if (stopped) {
      out.skipped.push_back({authority, stopped});
      continue;
    }
    if (authority.coordinator_id != coordinator.id()) {
      out.skipped.push_back({authority, "preempt_for: the session belongs to another coordinator"});
      continue;
    }
    if (own && authority == *own) {
      out.skipped.push_back({authority, "preempt_for: the session is the sequence that asked to grow"});
      continue;
    }
    sources.clear();
    try {
      session->write_release_capacity_sources(sources);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::SessionState && e.kind() != ErrorKind::Closed) throw;
      out.skipped.push_back({authority, "preempt_for: " + reason_of(e, {"write_release_capacity_sources: "})});
      continue;
    }
    const bool releases_wanted = std::any_of(sources.begin(), sources.end(), [&](const CapacitySource& s) {
      return std::find(wanted.begin(), wanted.end(), s) != wanted.end();
    });
    if (!releases_wanted) {
      out.skipped.push_back({authority, "preempt_for: the session holds none of the capacity the deferral waits for"});
      continue;
    }
    pause_points::reach(pause_points::Point::candidate_looked_at);
    // The requester may have closed (or grown) since the pass began: asked again before each
    // abort, so no victim is aborted for a demand nobody waits on.
    if (coordinator.closed()) {  // closed since the pass began (its device too): no abort serves anyone now
      stopped = "preempt_for: not aborted, the coordinator closed (no extension or admission can succeed)";
      out.skipped.push_back({authority, stopped});
      continue;
    }
    if (deferred.backing && !requester_unchanged(coordinator, *deferred.backing, deferred.request_id)) {
      stopped = "preempt_for: not aborted, the sequence that asked to grow is gone or holds other pages than when "
                "it was deferred (the deferral is stale)";
      out.skipped.push_back({authority, stopped});
      continue;
    }
    TerminalReceipt receipt;
    try {
      // A poisoned session (a frame closed uncommitted: its forward failed) holds capacity and
      // can never step again; only try_abort ends it, and it is a victim as a quiescent one is.
      receipt = session->phase() == SessionPhase::poisoned ? session->try_abort() : session->try_abort_if_quiescent();
    } catch (const Error& e) {
      // Its owner may end or close it meanwhile (a candidate is anyone's session): skipped, and
      // the victims of this pass are still reported.
      if (e.kind() != ErrorKind::SessionState && e.kind() != ErrorKind::Closed) throw;
      out.skipped.push_back({authority, "preempt_for: " + reason_of(e, {"try_abort_if_quiescent: ", "try_abort: "})});
      continue;
    }
    out.victims.push_back(authority);
    out.receipts.push_back(std::move(receipt));
    session->close();
  }
  for (std::size_t i = 0; i < wanted.size(); ++i)
    if (coordinator.epoch_of(wanted[i]) != before[i]) out.freed_sources.push_back(wanted[i]);
  out.satisfied = coordinator.fits_now(deferred);
  return out;
}

}  // namespace lifecore::sequence
