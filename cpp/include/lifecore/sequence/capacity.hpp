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

enum class SourceKind : std::uint8_t { active_sequence_slots = 0, domain = 1 };

// A scheduler-visible availability source. Ordered (slots first, then domains by index) so
// projections can be sorted and deduplicated; compared by kind and domain index.
struct CapacitySource {
  SourceKind kind = SourceKind::active_sequence_slots;
  std::uint32_t domain_index = 0;  // only for SourceKind::domain
  std::string domain_name;         // carried for display; not part of identity

  static CapacitySource slots() { return {}; }
  static CapacitySource domain(std::uint32_t index, std::string name) {
    return {SourceKind::domain, index, std::move(name)};
  }
  // Dense key: 0 for the slots, 1 + index for a domain.
  std::uint32_t key() const noexcept { return kind == SourceKind::domain ? domain_index + 1 : 0; }
  friend bool operator==(const CapacitySource& a, const CapacitySource& b) noexcept {
    return a.key() == b.key();
  }
  friend bool operator<(const CapacitySource& a, const CapacitySource& b) noexcept {
    return a.key() < b.key();
  }
};

// (sparse id, generation): sparse ids are recycled, generations never, so an authority of a
// released sequence never matches the sequence that reuses its id.
struct Authority {
  std::uint32_t sparse_id = 0;
  std::uint64_t generation = 0;
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
};

// Set when a deferral came from extending a live sequence's backing.
struct BackingDeferralContext {
  Authority sequence_authority;
  std::uint64_t expected_generation = 0;
  std::uint64_t target_tokens = 0;
  std::uint64_t target_pages = 0;
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
