#include "lifecore/sequence/coordinator.hpp"

#include <algorithm>
#include <atomic>
#include <limits>

#include "lifecore/error.hpp"
#include "lifecore/sequence/backing.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/waiter.hpp"

namespace lifecore::sequence {
namespace {

std::atomic<std::uint64_t> next_coordinator_id{1};

bool mul_overflows(std::uint64_t a, std::uint64_t b) {
  return b != 0 && a > std::numeric_limits<std::uint64_t>::max() / b;
}

}  // namespace

// ---- AuthorityAllocator ----

Authority AuthorityAllocator::acquire() {
  std::uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    if (generation_of_.size() >= std::numeric_limits<std::uint32_t>::max())
      raise(ErrorKind::Capacity, "authority ids exhausted");
    id = static_cast<std::uint32_t>(generation_of_.size());
    generation_of_.push_back(0);
  }
  generation_of_[id] = next_generation_++;
  return {id, generation_of_[id]};
}

void AuthorityAllocator::release(const Authority& authority) noexcept {
  if (authority.sparse_id < generation_of_.size() &&
      generation_of_[authority.sparse_id] == authority.generation) {
    generation_of_[authority.sparse_id] = 0;
    free_ids_.push_back(authority.sparse_id);
  }
}

std::uint64_t AuthorityAllocator::live_generation(std::uint32_t sparse_id) const noexcept {
  return sparse_id < generation_of_.size() ? generation_of_[sparse_id] : 0;
}

// ---- AdmissionCoordinator ----

std::shared_ptr<AdmissionCoordinator> AdmissionCoordinator::create(CoordinatorConfig config) {
  if (config.domains.empty()) raise(ErrorKind::InvalidArgument, "AdmissionCoordinator: at least one capacity domain is required");
  if (config.page_bytes == 0) raise(ErrorKind::InvalidArgument, "AdmissionCoordinator: page_bytes must be positive");
  if (config.tokens_per_page == 0) raise(ErrorKind::InvalidArgument, "AdmissionCoordinator: tokens_per_page must be positive");
  if (config.max_active_sequences == 0)
    raise(ErrorKind::InvalidArgument, "AdmissionCoordinator: max_active_sequences must be positive");
  for (std::size_t i = 0; i < config.domains.size(); ++i) {
    auto& d = config.domains[i];
    if (d.name.empty()) raise(ErrorKind::InvalidArgument, "AdmissionCoordinator: a domain needs a name");
    for (std::size_t j = 0; j < i; ++j)
      if (config.domains[j].name == d.name)
        raise(ErrorKind::InvalidArgument, "AdmissionCoordinator: domain '" + d.name + "' is named twice");
    if (d.maximum_bytes == 0) d.maximum_bytes = d.capacity_bytes;
    if (d.maximum_bytes < d.capacity_bytes)
      raise(ErrorKind::InvalidArgument, "AdmissionCoordinator: domain '" + d.name + "' has maximum_bytes below capacity_bytes");
  }
  if (!config.memory) config.memory = std::make_shared<HostPageMemory>();
  return std::shared_ptr<AdmissionCoordinator>(new AdmissionCoordinator(std::move(config)));
}

AdmissionCoordinator::AdmissionCoordinator(CoordinatorConfig config)
    : id_(next_coordinator_id.fetch_add(1)), config_(std::move(config)) {
  domains_.resize(config_.domains.size());
  for (std::size_t i = 0; i < domains_.size(); ++i) domains_[i].total = config_.domains[i].capacity_bytes;
  waiters_.resize(domains_.size() + 1);
}

AdmissionCoordinator::~AdmissionCoordinator() = default;

std::uint64_t AdmissionCoordinator::epoch_locked(std::uint32_t key) const {
  return key == 0 ? slots_epoch_ : domains_.at(key - 1).epoch;
}

void AdmissionCoordinator::bump_and_notify_locked(std::uint32_t key) noexcept {
  if (key == 0) ++slots_epoch_;
  else ++domains_[key - 1].epoch;
  for (WaiterState* waiter : waiters_[key]) {
    std::lock_guard<std::mutex> lock(waiter->mutex);
    ++waiter->wakes;
    waiter->changed.notify_all();
  }
}

CapacitySnapshot AdmissionCoordinator::capacity_locked() const {
  CapacitySnapshot s;
  for (std::size_t i = 0; i < domains_.size(); ++i)
    s.domains.push_back({config_.domains[i].name, domains_[i].used, domains_[i].total,
                         config_.domains[i].maximum_bytes, domains_[i].epoch});
  s.active_sequences = active_;
  s.max_active_sequences = config_.max_active_sequences;
  s.slots_epoch = slots_epoch_;
  s.release_epoch = release_epoch_;
  return s;
}

CapacityDemand AdmissionCoordinator::demand_locked(const std::vector<std::uint32_t>& domains, std::uint32_t sequences,
                                                   std::uint64_t tokens, std::uint64_t pages) const {
  CapacityDemand demand{sequences, tokens, pages, {}};
  for (std::uint32_t d : domains) demand.domains.push_back({d, config_.domains[d].name, pages * config_.page_bytes});
  return demand;
}

WaitCondition AdmissionCoordinator::condition_locked(std::vector<CapacitySource> sources) const {
  std::sort(sources.begin(), sources.end());
  sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  WaitCondition condition;
  for (const auto& s : sources) condition.epochs.push_back(epoch_locked(s.key()));
  condition.sources = std::move(sources);
  return condition;
}

AdmissionDecision AdmissionCoordinator::admit(const AdmissionRequest& request) {
  if (request.prompt_tokens <= 0)
    raise(ErrorKind::InvalidArgument, "admit: prompt_tokens must be positive, got " + std::to_string(request.prompt_tokens));
  if (request.fit_tokens < request.prompt_tokens)
    raise(ErrorKind::InvalidArgument, "admit: fit_tokens (" + std::to_string(request.fit_tokens) +
                                          ") must be at least prompt_tokens (" + std::to_string(request.prompt_tokens) + ")");
  std::vector<std::uint32_t> domains;
  if (request.domains.empty()) {
    for (std::uint32_t i = 0; i < config_.domains.size(); ++i) domains.push_back(i);
  } else {
    for (const auto& name : request.domains) {
      auto it = std::find_if(config_.domains.begin(), config_.domains.end(), [&](const DomainConfig& d) { return d.name == name; });
      if (it == config_.domains.end()) raise(ErrorKind::InvalidArgument, "admit: unknown capacity domain '" + name + "'");
      domains.push_back(static_cast<std::uint32_t>(it - config_.domains.begin()));
    }
    std::sort(domains.begin(), domains.end());
    domains.erase(std::unique(domains.begin(), domains.end()), domains.end());
  }
  const auto prompt = static_cast<std::uint64_t>(request.prompt_tokens);
  const auto fit = static_cast<std::uint64_t>(request.fit_tokens);
  const std::uint64_t prompt_pages = pages_for(prompt), fit_pages = pages_for(fit);
  if (mul_overflows(fit_pages, config_.page_bytes)) raise(ErrorKind::InvalidArgument, "admit: fit_tokens overflows the byte count");
  const std::uint64_t prompt_bytes = prompt_pages * config_.page_bytes, fit_bytes = fit_pages * config_.page_bytes;

  Authority sequence, request_authority;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) raise(ErrorKind::Closed, "admit: the admission coordinator is closed");
    if (poisoned_) raise(ErrorKind::Capacity, "admit: the coordinator's accounting is inconsistent (poisoned)");
    AdmissionRejected rejected{id_, request.request_id, {}, {}};
    for (std::uint32_t d : domains)
      if (fit_bytes > config_.domains[d].maximum_bytes) {
        rejected.blockers.push_back({BlockerKind::permanent_domain_maximum, domain_source(d)});
        if (rejected.reason.empty())
          rejected.reason = "fit demand of " + std::to_string(fit_bytes) + " bytes exceeds the maximum of domain '" +
                            config_.domains[d].name + "' (" + std::to_string(config_.domains[d].maximum_bytes) + " bytes)";
      }
    if (!rejected.blockers.empty()) return rejected;

    std::vector<CapacityBlocker> blockers;
    bool blocking = false, growth = false;
    if (active_ >= config_.max_active_sequences) {
      blockers.push_back({BlockerKind::active_sequence_ceiling, CapacitySource::slots()});
      blocking = true;
    }
    for (std::uint32_t d : domains) {
      const auto& state = domains_[d];
      if (prompt_bytes > state.total - state.used) {
        blockers.push_back({BlockerKind::immediate_availability, domain_source(d)});
        blocking = true;
      }
      if (fit_bytes > state.total) {
        blockers.push_back({BlockerKind::backing_growth_required, domain_source(d)});
        blocking = growth = true;
      }
    }
    if (blocking) {
      for (std::uint32_t d : domains)
        if (fit_bytes > domains_[d].total - domains_[d].used)
          blockers.push_back({BlockerKind::fit_availability, domain_source(d)});
      AdmissionDeferred deferred;
      deferred.coordinator_id = id_;
      deferred.request_id = request.request_id;
      deferred.immediate = demand_locked(domains, 1, prompt, prompt_pages);
      deferred.fit = demand_locked(domains, 1, fit, fit_pages);
      std::vector<CapacitySource> sources;
      for (const auto& b : blockers)
        if (b.kind != BlockerKind::fit_availability) sources.push_back(b.source);
      deferred.blockers = std::move(blockers);
      deferred.action = growth ? DeferralAction::await_backing_growth : DeferralAction::wait_for_release;
      deferred.wait_condition = condition_locked(std::move(sources));
      deferred.capacity = capacity_locked();
      return deferred;
    }
    ++active_;
    for (std::uint32_t d : domains) domains_[d].used += prompt_bytes;
    sequence = sequence_ids_.acquire();
    request_authority = request_ids_.acquire();
  }

  // Physical pages outside the lock. On failure the claims above roll back (pages before
  // the slot), which bumps the epochs they touched.
  auto backing = std::make_shared<SequenceBacking>(shared_from_this(), domains, sequence, request_authority);
  auto prepared = std::make_unique<PreparedPages>(*this, backing->domains());
  prepared->logical_pages_ = prompt_pages;
  if (!prepared->allocate_physical(0, prompt_pages)) {
    prepared.reset();  // physical extents first, then the logical pages
    backing.reset();   // then the slot and the authorities
    std::lock_guard<std::mutex> lock(mutex_);
    AdmissionDeferred deferred;
    deferred.coordinator_id = id_;
    deferred.request_id = request.request_id;
    deferred.immediate = demand_locked(domains, 1, prompt, prompt_pages);
    deferred.fit = demand_locked(domains, 1, fit, fit_pages);
    std::vector<CapacitySource> sources;
    for (std::uint32_t d : domains) {
      deferred.blockers.push_back({BlockerKind::backing_growth_required, domain_source(d)});
      sources.push_back(domain_source(d));
    }
    deferred.action = DeferralAction::await_backing_growth;
    deferred.wait_condition = condition_locked(std::move(sources));
    deferred.capacity = capacity_locked();
    return deferred;
  }
  std::size_t extents = backing->adopt(*prepared);
  auto snapshot = std::make_shared<const BackingSnapshot>(backing, 1, prompt, prompt_pages, extents);
  return Admitted{std::make_shared<AdmittedSequenceResources>(request.request_id, prompt, fit, fit_pages, std::move(snapshot))};
}

AdmissionCoordinator::ExtensionClaim AdmissionCoordinator::claim_extension(
    const std::vector<std::uint32_t>& domains, std::uint64_t pages, const BackingDeferralContext& context,
    const std::string& request_id) {
  const std::uint64_t bytes = pages * config_.page_bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) raise(ErrorKind::Closed, "try_ensure_backing_covers: the admission coordinator is closed");
  if (poisoned_) raise(ErrorKind::Capacity, "try_ensure_backing_covers: the coordinator's accounting is inconsistent (poisoned)");
  std::vector<CapacityBlocker> blockers;
  bool growth = false;
  for (std::uint32_t d : domains) {
    const auto& state = domains_[d];
    if (bytes > state.total - state.used) {
      blockers.push_back({BlockerKind::immediate_availability, domain_source(d)});
      // Only growth can help when the delta alone exceeds what the domain holds today.
      if (bytes > state.total) growth = true;
    }
  }
  ExtensionClaim claim;
  if (blockers.empty()) {
    for (std::uint32_t d : domains) domains_[d].used += bytes;
    claim.claimed = true;
    return claim;
  }
  AdmissionDeferred deferred;
  deferred.coordinator_id = id_;
  deferred.request_id = request_id;
  deferred.immediate = demand_locked(domains, 0, context.target_tokens, pages);
  deferred.fit = deferred.immediate;
  std::vector<CapacitySource> sources;
  for (const auto& b : blockers) sources.push_back(b.source);
  deferred.blockers = std::move(blockers);
  deferred.action = growth ? DeferralAction::await_backing_growth : DeferralAction::preempt_and_recompute;
  deferred.wait_condition = condition_locked(std::move(sources));
  deferred.capacity = capacity_locked();
  deferred.backing = context;
  claim.deferred = std::move(deferred);
  return claim;
}

void AdmissionCoordinator::release_pages(const std::vector<std::uint32_t>& domains, std::uint64_t pages) noexcept {
  if (pages == 0) return;
  const std::uint64_t bytes = pages * config_.page_bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::uint32_t d : domains) {
    if (domains_[d].used < bytes) { poisoned_ = true; continue; }
    domains_[d].used -= bytes;
    bump_and_notify_locked(d + 1);
  }
  ++release_epoch_;
}

void AdmissionCoordinator::release_sequence(const std::vector<std::uint32_t>& domains, std::uint64_t pages,
                                            const Authority& sequence, const Authority& request) noexcept {
  const std::uint64_t bytes = pages * config_.page_bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes != 0)
    for (std::uint32_t d : domains) {
      if (domains_[d].used < bytes) { poisoned_ = true; continue; }
      domains_[d].used -= bytes;
      bump_and_notify_locked(d + 1);
    }
  if (active_ == 0) poisoned_ = true;
  else --active_;
  bump_and_notify_locked(0);
  sequence_ids_.release(sequence);
  request_ids_.release(request);
  ++release_epoch_;
}

void AdmissionCoordinator::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return;
  closed_ = true;
  for (auto& set : waiters_)
    for (WaiterState* waiter : set) {
      std::lock_guard<std::mutex> wl(waiter->mutex);
      waiter->closed = true;
      waiter->changed.notify_all();
    }
}

bool AdmissionCoordinator::closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closed_;
}

void AdmissionCoordinator::grow_domain(const std::string& name, std::uint64_t capacity_bytes) {
  auto it = std::find_if(config_.domains.begin(), config_.domains.end(), [&](const DomainConfig& d) { return d.name == name; });
  if (it == config_.domains.end()) raise(ErrorKind::InvalidArgument, "grow_domain: unknown capacity domain '" + name + "'");
  auto index = static_cast<std::uint32_t>(it - config_.domains.begin());
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) raise(ErrorKind::Closed, "grow_domain: the admission coordinator is closed");
  if (capacity_bytes < domains_[index].total)
    raise(ErrorKind::InvalidArgument, "grow_domain: a domain's capacity never shrinks");
  if (capacity_bytes > it->maximum_bytes)
    raise(ErrorKind::InvalidArgument, "grow_domain: " + std::to_string(capacity_bytes) + " bytes exceeds the maximum of domain '" + name + "'");
  if (capacity_bytes == domains_[index].total) return;
  domains_[index].total = capacity_bytes;
  bump_and_notify_locked(index + 1);
}

CapacitySnapshot AdmissionCoordinator::capacity() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return capacity_locked();
}

std::uint64_t AdmissionCoordinator::epoch_of(const CapacitySource& source) const {
  if (source.kind == SourceKind::domain && source.domain_index >= domains_.size())
    raise(ErrorKind::InvalidArgument, "epoch_of: unknown capacity domain");
  std::lock_guard<std::mutex> lock(mutex_);
  return epoch_locked(source.key());
}

std::vector<std::uint64_t> AdmissionCoordinator::epochs_of(const std::vector<CapacitySource>& sources) const {
  std::vector<std::uint64_t> out;
  out.reserve(sources.size());
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& s : sources) out.push_back(epoch_locked(s.key()));
  return out;
}

std::uint64_t AdmissionCoordinator::release_epoch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return release_epoch_;
}

bool AdmissionCoordinator::fits_now(const AdmissionDeferred& deferred) const {
  if (deferred.coordinator_id != id_) raise(ErrorKind::StaleAuthority, "fits_now: the deferral belongs to another coordinator");
  std::lock_guard<std::mutex> lock(mutex_);
  if (deferred.immediate.sequences > 0 && active_ + deferred.immediate.sequences > config_.max_active_sequences) return false;
  for (const auto& d : deferred.immediate.domains)
    if (d.bytes > domains_[d.domain_index].total - domains_[d.domain_index].used) return false;
  return true;
}

void AdmissionCoordinator::verify_sequence_authority(const Authority& authority) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (authority.generation == 0 || sequence_ids_.live_generation(authority.sparse_id) != authority.generation)
    raise(ErrorKind::StaleAuthority, "stale sequence session authority (id " + std::to_string(authority.sparse_id) +
                                         ", generation " + std::to_string(authority.generation) + ")");
}

std::shared_ptr<CapacityWaitRegistration> AdmissionCoordinator::register_waiter(const AdmissionDeferred& deferred) {
  if (deferred.coordinator_id != id_)
    raise(ErrorKind::StaleAuthority, "register_admission_waiter: the deferral belongs to another coordinator (foreign coordinator)");
  const auto& sources = deferred.wait_condition.sources;
  if (sources.empty() || sources.size() != deferred.wait_condition.epochs.size())
    raise(ErrorKind::InvalidArgument, "register_admission_waiter: the deferral has no wait condition");
  auto state = std::make_shared<WaiterState>();
  std::vector<std::uint64_t> registered;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) raise(ErrorKind::Closed, "register_admission_waiter: the admission coordinator is closed");
    for (const auto& s : sources) {
      if (s.key() >= waiters_.size()) raise(ErrorKind::InvalidArgument, "register_admission_waiter: unknown source");
      registered.push_back(epoch_locked(s.key()));
    }
    for (const auto& s : sources) waiters_[s.key()].insert(state.get());
  }
  return std::make_shared<CapacityWaitRegistration>(shared_from_this(), deferred.wait_condition, std::move(registered), state);
}

void AdmissionCoordinator::unregister_waiter(WaiterState* waiter) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& set : waiters_) set.erase(waiter);
}

}  // namespace lifecore::sequence
