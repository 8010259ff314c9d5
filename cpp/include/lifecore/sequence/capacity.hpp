// Capacity vocabulary of sequence admission: the sources whose availability a scheduler can
// wait on, demands, blockers, the action a deferral suggests, and the exact wait condition.
// Capacity pressure is a decision (AdmissionDeferred / AdmissionRejected), never an error.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lifecore::sequence {

// physical_memory: the device pages behind the domains. A failed physical allocation defers
// on it, and every physical page release of the coordinator advances it.
enum class SourceKind : std::uint8_t { active_sequence_slots = 0, domain = 1, physical_memory = 2 };

// A scheduler-visible availability source. Ordered (slots first, then domains by index, then
// physical memory) so projections can be sorted and deduplicated; compared by kind and domain
// index within one coordinator. `coordinator_id` names the coordinator that issued it (0: not
// bound to one, e.g. a source a caller named by hand), so a source of another coordinator is
// never taken for one of this coordinator.
struct CapacitySource {
  SourceKind kind = SourceKind::active_sequence_slots;
  std::uint32_t domain_index = 0;  // only for SourceKind::domain
  std::string domain_name;         // carried for display; not part of identity
  std::uint64_t coordinator_id = 0;

  static CapacitySource slots(std::uint64_t coordinator_id = 0) {
    return {SourceKind::active_sequence_slots, 0, {}, coordinator_id};
  }
  static CapacitySource physical(std::uint64_t coordinator_id = 0) {
    return {SourceKind::physical_memory, 0, {}, coordinator_id};
  }
  static CapacitySource domain(std::uint32_t index, std::string name, std::uint64_t coordinator_id = 0) {
    return {SourceKind::domain, index, std::move(name), coordinator_id};
  }
  // Dense key within one coordinator: 0 for the slots, 1 + index for a domain; physical
  // memory sorts last (the coordinator maps it to its own slot, after the domains).
  std::uint64_t key() const noexcept {
    switch (kind) {
      case SourceKind::domain: return std::uint64_t{domain_index} + 1;
      case SourceKind::physical_memory: return std::uint64_t{1} << 32;
      case SourceKind::active_sequence_slots: break;
    }
    return 0;
  }
  friend bool operator==(const CapacitySource& a, const CapacitySource& b) noexcept {
    return a.key() == b.key();
  }
  friend bool operator<(const CapacitySource& a, const CapacitySource& b) noexcept {
    return a.key() < b.key();
  }
};

// (sparse id, generation): sparse ids are recycled, generations never, so an authority of a
// released sequence never matches the sequence that reuses its id.
// `coordinator_id` names the issuing coordinator: an authority of another coordinator never
// matches, even when its (sparse id, generation) pair does.
struct Authority {
  std::uint32_t sparse_id = 0;
  std::uint64_t generation = 0;
  std::uint64_t coordinator_id = 0;
  friend bool operator==(const Authority&, const Authority&) = default;
};

struct DomainDemand {
  std::uint32_t domain_index = 0;
  std::string domain_name;
  std::uint64_t bytes = 0;
};

// What a request needs: sequences (slots), tokens, pages, and bytes in each of its domains.
struct CapacityDemand {
  std::uint32_t sequences = 0;
  std::uint64_t tokens = 0;
  std::uint64_t pages = 0;
  std::vector<DomainDemand> domains;
};

enum class BlockerKind : std::uint8_t {
  immediate_availability,   // the immediate demand does not fit what is free now
  fit_availability,         // the fit demand does not fit what is free now (reported with others)
  backing_growth_required,  // the fit demand exceeds the domain's current total (below its maximum)
  active_sequence_ceiling,  // every active-sequence slot is taken
  permanent_domain_maximum, // the fit demand exceeds the domain's maximum: can never fit
  physical_memory_unavailable,  // the device could not supply the pages now (out of memory)
};

struct CapacityBlocker {
  BlockerKind kind = BlockerKind::immediate_availability;
  CapacitySource source;
};

enum class DeferralAction : std::uint8_t { wait_for_release, await_backing_growth, preempt_and_recompute };

// The exact sources a deferral depends on and the epoch of each when the decision was taken.
struct WaitCondition {
  std::vector<CapacitySource> sources;  // sorted, unique
  std::vector<std::uint64_t> epochs;    // same length
};

struct DomainUsage {
  std::string name;
  std::uint64_t used_bytes = 0;
  std::uint64_t total_bytes = 0;
  std::uint64_t maximum_bytes = 0;
  std::uint64_t epoch = 0;
};

struct CapacitySnapshot {
  std::vector<DomainUsage> domains;
  std::uint32_t active_sequences = 0;
  std::uint32_t max_active_sequences = 0;
  std::uint64_t slots_epoch = 0;
  std::uint64_t release_epoch = 0;
  std::uint64_t physical_epoch = 0;
};

// Set when a deferral came from extending a live sequence's backing.
struct BackingDeferralContext {
  Authority sequence_authority;
  std::uint64_t expected_generation = 0;
  std::uint64_t target_tokens = 0;
  std::uint64_t target_pages = 0;
  // The pages the sequence held when it was deferred: once it holds others, the demand is stale.
  std::uint64_t held_pages = 0;
};

struct AdmissionDeferred {
  std::uint64_t coordinator_id = 0;
  std::string request_id;
  CapacityDemand immediate;
  CapacityDemand fit;
  std::vector<CapacityBlocker> blockers;
  DeferralAction action = DeferralAction::wait_for_release;
  WaitCondition wait_condition;
  CapacitySnapshot capacity;
  std::optional<BackingDeferralContext> backing;
};

struct AdmissionRejected {
  std::uint64_t coordinator_id = 0;
  std::string request_id;
  std::string reason;
  std::vector<CapacityBlocker> blockers;  // permanent ones
};

}  // namespace lifecore::sequence
