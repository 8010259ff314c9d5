#include "lifecore/sequence/coordinator.hpp"

#include <algorithm>
#include <atomic>
#include <limits>
#include <new>

#include "common/address_range.hpp"
#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"
#include "lifecore/sequence/backing.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/waiter.hpp"
#include "sequence/recycling_allocator.hpp"

namespace lifecore::sequence {
namespace {

std::atomic<std::uint64_t> next_coordinator_id{1};

// Where take_each_domain_locked writes domain i's ids in one buffer of `pages` ids per domain.
auto domain_by_domain(std::int32_t* ids, std::uint64_t pages) noexcept {
  return [ids, pages](std::size_t i) noexcept { return ids + i * pages; };
}

}  // namespace

// ---- AuthorityAllocator ----

Authority AuthorityAllocator::acquire() {
  // Checked before anything changes: an exhausted allocator refuses and stays as it was.
  const std::uint64_t generation = checked::add_or_throw(next_generation_, std::uint64_t{1}, "authority generations");
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
  generation_of_[id] = next_generation_;
  next_generation_ = generation;
  return {id, generation_of_[id], coordinator_id_};
}

void AuthorityAllocator::release(const Authority& authority) noexcept {
  if (authority.coordinator_id == coordinator_id_ && authority.sparse_id < generation_of_.size() &&
      generation_of_[authority.sparse_id] == authority.generation) {
    generation_of_[authority.sparse_id] = 0;
    try {
      free_ids_.push_back(authority.sparse_id);
    } catch (const std::bad_alloc&) {
      // No room to list it (out of host memory): the id is never reused, and none is lost to
      // a live sequence (its generation is 0, so no authority of it is live).
    }
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
  // Source slots are 0, 1 + domain index and one past the domains: all must fit in 32 bits.
  if (config.domains.size() >= std::numeric_limits<std::uint32_t>::max() - 1)
    raise(ErrorKind::Overflow, "AdmissionCoordinator: too many capacity domains");
  for (std::size_t i = 0; i < config.domains.size(); ++i) {
    auto& d = config.domains[i];
    if (d.name.empty()) raise(ErrorKind::InvalidArgument, "AdmissionCoordinator: a domain needs a name");
    for (std::size_t j = 0; j < i; ++j)
      if (config.domains[j].name == d.name)
        raise(ErrorKind::InvalidArgument, "AdmissionCoordinator: domain '" + d.name + "' is named twice");
    if (d.maximum_bytes == 0) d.maximum_bytes = d.capacity_bytes;
    if (d.maximum_bytes < d.capacity_bytes)
      raise(ErrorKind::InvalidArgument, "AdmissionCoordinator: domain '" + d.name + "' has maximum_bytes below capacity_bytes");
    // A domain that can never hold a page would reject every request, silently.
    if (d.maximum_bytes < config.page_bytes)
      raise(ErrorKind::InvalidArgument, "AdmissionCoordinator: domain '" + d.name + "' can never hold a page: its " +
                                            (d.maximum_bytes == d.capacity_bytes ? "size" : "maximum") + " (" +
                                            std::to_string(d.maximum_bytes) + " bytes) is below page_bytes (" +
                                            std::to_string(config.page_bytes) + ")");
  }
  if (!config.memory) config.memory = std::make_shared<HostPageMemory>();
  if (config.memory->closed()) raise(ErrorKind::Closed, "AdmissionCoordinator: the device is closed");
  std::shared_ptr<AdmissionCoordinator> coordinator(new AdmissionCoordinator(std::move(config)));
  // Not under the coordinator's lock: a device closed meanwhile calls back at once.
  std::weak_ptr<AdmissionCoordinator> weak = coordinator;
  auto watch = coordinator->config_.memory->watch_close([weak]() noexcept {
    if (auto c = weak.lock()) c->close();
  });
  std::lock_guard<std::recursive_mutex> lock(coordinator->mutex_);
  coordinator->close_watch_ = std::move(watch);
  return coordinator;
}

AdmissionCoordinator::AdmissionCoordinator(CoordinatorConfig config)
    : id_(next_coordinator_id.fetch_add(1)), config_(std::move(config)), sequence_ids_(id_), request_ids_(id_) {
  domains_.resize(config_.domains.size());
  std::vector<std::string> names;
  names.reserve(config_.domains.size());
  for (const auto& domain : config_.domains) names.push_back(domain.name);
  std::vector<std::uint32_t> all(config_.domains.size());
  for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  all_domains_ = std::make_shared<const DomainSet>(
      DomainSet{std::make_shared<const std::vector<std::string>>(std::move(names)), std::move(all)});
  waiters_.resize(source_count());
  try {
    for (std::size_t i = 0; i < domains_.size(); ++i) {
      add_blocks_locked(static_cast<std::uint32_t>(i), config_.domains[i].capacity_bytes);
      domains_[i].total = servable_bytes(config_.domains[i].capacity_bytes);
    }
  } catch (...) {
    release_arenas();  // the chunks made before the refusal
    throw;
  }
}

AdmissionCoordinator::~AdmissionCoordinator() {
  {
    // Registrations do not keep their coordinator: the ones still subscribed learn it closed.
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    close_locked();
  }
  release_arenas();
}

void AdmissionCoordinator::release_arenas() noexcept {
  for (auto& d : domains_)
    for (const auto& chunk : d.arena.chunks()) config_.memory->release(chunk.memory);
}

void AdmissionCoordinator::add_blocks_locked(std::uint32_t index, std::uint64_t total) {
  auto& arena = domains_[index].arena;
  // A block past the int32 ids could never be handed out: no memory is made for it.
  const std::uint64_t blocks = std::min(total / config_.page_bytes, BlockArena::max_ids);
  if (blocks <= arena.blocks()) return;
  const std::uint64_t added = blocks - arena.blocks();
  // Exact bytes: added * page_bytes <= total, so it cannot wrap.
  const auto bytes = checked::narrow<std::size_t>(added * config_.page_bytes);
  if (!bytes) checked::overflow("AdmissionCoordinator: the arena's bytes");
  const PageExtent chunk = config_.memory->allocate(*bytes);  // throws: nothing changed
  arena.add_blocks(added, &chunk);
}

std::uint64_t AdmissionCoordinator::servable_bytes(std::uint64_t capacity_bytes) const noexcept {
  // Saturates: with pages of 2^33 bytes or more the ids never bind before the u64 bytes do.
  const auto id_bytes = checked::mul(BlockArena::max_ids, config_.page_bytes);
  return id_bytes ? std::min(capacity_bytes, *id_bytes) : capacity_bytes;
}

std::uint64_t pages_holding(std::uint64_t tokens, std::uint32_t tokens_per_page, const char* what) {
  const std::uint64_t per_page = tokens_per_page;
  return checked::add_or_throw(tokens, per_page - 1, what) / per_page;
}

void raise_unknown_domain(const std::string& call, const std::string& name, const std::vector<std::string>& names) {
  std::string known;
  for (const auto& each : names) known += (known.empty() ? "'" : ", '") + each + "'";
  raise(ErrorKind::InvalidArgument, call + ": unknown capacity domain '" + name + "' (" +
                                        (names.size() == 1 ? "the domain is " : "the domains are ") + known + ")");
}

std::uint64_t AdmissionCoordinator::pages_for(std::uint64_t tokens, const char* what) const {
  return pages_holding(tokens, config_.tokens_per_page, what);
}

CapacitySource AdmissionCoordinator::resolve_source(const CapacitySource& source, const char* operation) const {
  if (source.coordinator_id != 0 && source.coordinator_id != id_)
    raise(ErrorKind::StaleAuthority, std::string(operation) + ": the capacity source belongs to another coordinator (foreign coordinator)");
  CapacitySource out = source;
  out.coordinator_id = id_;
  if (source.kind == SourceKind::domain) {
    if (source.coordinator_id == 0) {
      // A source named by hand: the name says which domain.
      const auto index = domain_index(source.domain_name);
      if (index < 0) raise_unknown_domain(operation, source.domain_name, domain_names());
      out.domain_index = static_cast<std::uint32_t>(index);
    } else if (source.domain_index >= config_.domains.size()) {
      raise(ErrorKind::InvalidArgument, std::string(operation) + ": capacity domain index " + std::to_string(source.domain_index) +
                                            " is not below the number of domains (" + std::to_string(config_.domains.size()) + ")");
    }
    out.domain_name = config_.domains[out.domain_index].name;
  }
  return out;
}

std::size_t AdmissionCoordinator::slot_of(const CapacitySource& source) const noexcept {
  switch (source.kind) {
    case SourceKind::domain: return std::size_t{source.domain_index} + 1;
    case SourceKind::physical_memory: return config_.domains.size() + 1;
    case SourceKind::active_sequence_slots: break;
  }
  return 0;
}

std::uint64_t AdmissionCoordinator::epoch_locked(std::size_t slot) const {
  if (slot == 0) return slots_epoch_;
  if (slot == domains_.size() + 1) return physical_epoch_;
  return domains_.at(slot - 1).epoch;
}

void AdmissionCoordinator::bump_and_notify_locked(std::size_t slot) noexcept {
  std::uint64_t& epoch = slot == 0 ? slots_epoch_ : slot == domains_.size() + 1 ? physical_epoch_ : domains_[slot - 1].epoch;
  // An epoch never wraps: an exhausted one poisons the coordinator (every decision refuses).
  if (auto next = checked::add(epoch, std::uint64_t{1})) epoch = *next;
  else poisoned_ = true;
  // A waiter is signalled once: its wait condition has changed, so every wait on it returns at
  // once from now on, and kept subscribed it would make every later release pay for it (a
  // registration left unawaited, or awaited and dropped late, by the thousand).
  auto& signalled = waiters_[slot];
  for (const auto& [waiter, kept] : signalled) {
    std::lock_guard<std::mutex> lock(waiter->mutex);
    ++waiter->wakes;
    waiter->changed.notify_all();
    waiter->notify_locked();
  }
  for (std::size_t other = 0; other < waiters_.size(); ++other)
    if (other != slot)
      for (const auto& [waiter, kept] : signalled) waiters_[other].erase(waiter);
  signalled.clear();
}

void AdmissionCoordinator::close_locked() noexcept {
  if (closed_) return;
  closed_ = true;
  for (auto& set : waiters_)
    for (const auto& [waiter, kept] : set) {
      std::lock_guard<std::mutex> wl(waiter->mutex);
      waiter->closed = true;
      waiter->changed.notify_all();
      waiter->notify_locked();
    }
}

void AdmissionCoordinator::require_open_locked(const char* operation) {
  if (!closed_ && config_.memory->closed()) close_locked();  // the device went first
  if (!closed_) return;
  if (!config_.memory->closed()) raise(ErrorKind::Closed, std::string(operation) + ": the admission coordinator is closed");
  const std::string reason = config_.memory->closed_reason();
  raise(ErrorKind::Closed, std::string(operation) + ": the device of the admission coordinator is closed" +
                               (reason.empty() ? std::string() : " (" + reason + ")"));
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
  s.physical_epoch = physical_epoch_;
  return s;
}

CapacityDemand AdmissionCoordinator::demand_locked(const std::vector<std::uint32_t>& domains, std::uint32_t sequences,
                                                   std::uint64_t tokens, std::uint64_t pages) const {
  CapacityDemand demand{sequences, tokens, pages, {}};
  // Callers computed pages * page_bytes checked already; repeated here so no path wraps.
  const std::uint64_t bytes = checked::mul_or_throw(pages, config_.page_bytes, "demand: pages * page_bytes");
  for (std::uint32_t d : domains) demand.domains.push_back({d, config_.domains[d].name, bytes});
  return demand;
}

WaitCondition AdmissionCoordinator::condition_locked(std::vector<CapacitySource> sources,
                                                     std::optional<std::uint64_t> observed_physical_epoch) const {
  std::sort(sources.begin(), sources.end());
  sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  WaitCondition condition;
  for (const auto& s : sources)
    condition.epochs.push_back(s.kind == SourceKind::physical_memory && observed_physical_epoch ? *observed_physical_epoch
                                                                                                : epoch_locked(slot_of(s)));
  condition.sources = std::move(sources);
  return condition;
}

AdmissionDeferred AdmissionCoordinator::physical_deferral(const std::vector<std::uint32_t>& domains, std::uint32_t sequences,
                                                          std::uint64_t tokens, std::uint64_t pages, std::uint64_t fit_tokens,
                                                          std::uint64_t fit_pages, std::uint64_t observed_physical_epoch,
                                                          std::string_view request_id) const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  AdmissionDeferred deferred;
  deferred.coordinator_id = id_;
  deferred.request_id = std::string(request_id);
  deferred.immediate = demand_locked(domains, sequences, tokens, pages);
  deferred.fit = demand_locked(domains, sequences, fit_tokens, fit_pages);
  deferred.blockers.push_back({BlockerKind::physical_memory_unavailable, physical_source()});
  deferred.action = DeferralAction::wait_for_release;
  deferred.wait_condition = condition_locked({physical_source()}, observed_physical_epoch);
  deferred.capacity = capacity_locked();
  return deferred;
}

AdmissionDecision AdmissionCoordinator::admit(const AdmissionRequest& request) {
  if (request.prompt_tokens <= 0)
    raise(ErrorKind::InvalidArgument, "admit: prompt_tokens must be positive, got " + std::to_string(request.prompt_tokens));
  if (request.fit_tokens < request.prompt_tokens)
    raise(ErrorKind::InvalidArgument, "admit: fit_tokens (" + std::to_string(request.fit_tokens) +
                                          ") must be at least prompt_tokens (" + std::to_string(request.prompt_tokens) + ")");
  // "Every domain" is one list the coordinator shares with its backings and snapshots.
  std::shared_ptr<const DomainSet> shared_domains = all_domains_;
  if (!request.domains.empty()) {
    std::vector<std::uint32_t> named_domains;
    for (const auto& name : request.domains) {
      auto it = std::find_if(config_.domains.begin(), config_.domains.end(), [&](const DomainConfig& d) { return d.name == name; });
      if (it == config_.domains.end()) raise_unknown_domain("admit", name, domain_names());
      named_domains.push_back(static_cast<std::uint32_t>(it - config_.domains.begin()));
    }
    std::sort(named_domains.begin(), named_domains.end());
    named_domains.erase(std::unique(named_domains.begin(), named_domains.end()), named_domains.end());  // a set of names
    if (named_domains != all_domains_->indices)
      shared_domains = std::make_shared<const DomainSet>(DomainSet{all_domains_->names, std::move(named_domains)});
  }
  const std::vector<std::uint32_t>& domains = shared_domains->indices;  // the backing keeps it from below
  const auto prompt = static_cast<std::uint64_t>(request.prompt_tokens);
  const auto fit = static_cast<std::uint64_t>(request.fit_tokens);
  const std::uint64_t prompt_pages = pages_for(prompt, "admit: prompt_tokens in pages");
  const std::uint64_t fit_pages = pages_for(fit, "admit: fit_tokens in pages");
  // A fit past 2**64 bytes is beyond every domain's maximum: a rejection below, as a fit past
  // the int32 ids is (it raised an overflow instead, for the same request with larger pages).
  const std::optional<std::uint64_t> fit_product = checked::mul(fit_pages, config_.page_bytes);
  const std::uint64_t fit_bytes = fit_product.value_or(0);
  // prompt_pages <= fit_pages: where the fit's bytes do not wrap, the prompt's cannot (and
  // where they do, the request is rejected before the prompt's bytes are read).
  const std::uint64_t prompt_bytes = fit_product ? prompt_pages * config_.page_bytes : 0;

  // The backing is made before the lock and the prompt's ids are taken straight into it
  // under the lock of the claim: one lock round trip, no id copied. Until it holds the
  // authorities it claims nothing, so dropping it on a refusal returns nothing. Room for a
  // small prompt is made here too; a large one's only once it is known to fit (below).
  auto backing = make_recycled<SequenceBacking>(shared_from_this(), std::move(shared_domains), Authority{},
                                                Authority{}, RequestId(request.request_id), fit_pages);
  const std::uint64_t request_hash = RequestIndex::hash(request.request_id);
  constexpr std::uint64_t speculative_id_room = 4096;  // pages per domain (16 KiB of ids)
  // The ids of a prompt of 2**31 pages (host accounting of 1-byte pages, say) are 8 GiB per
  // domain: more than the host may give is the caller's request, refused with nothing changed.
  auto reserve_ids = [&] {
    try {
      backing->reserve_unshared(prompt_pages);
    } catch (const std::bad_alloc&) {
      raise(ErrorKind::Overflow, "admit: the block ids of a prompt of " + std::to_string(prompt_pages) +
                                     " pages are more than the host's memory holds; nothing was changed");
    }
  };
  if (prompt_pages <= speculative_id_room) reserve_ids();

  std::uint64_t physical_epoch = 0;
  bool taken = false;
  {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    require_open_locked("admit");
    if (poisoned_) raise(ErrorKind::Capacity, "admit: the coordinator's accounting is inconsistent (poisoned)");
    // One live sequence per request id (as a serving engine keys its requests): a second
    // admission under a live id is a caller error, refused before any claim. The entry is
    // made here, naming the backing, and goes again on every way out before the claims
    // (nobody sees it before this lock is let go).
    if (!live_.insert(backing.get(), request_hash))
      raise(ErrorKind::InvalidArgument, "admit: request id '" + request.request_id +
                                            "' is already live; complete or close its sequence first");
    struct Reservation {
      RequestIndex& live;
      const SequenceBacking* backing;
      std::uint64_t hash;
      bool kept = false;
      ~Reservation() {
        if (!kept) live.erase(backing, hash);
      }
    } reservation{live_, backing.get(), request_hash};

    // Beyond a domain's maximum, or beyond the int32 block ids it can hand out: never served.
    const bool beyond_ids = fit_pages > BlockArena::max_ids;
    const auto beyond_maximum = [&](std::uint32_t d) {
      return beyond_ids || !fit_product || fit_bytes > config_.domains[d].maximum_bytes;
    };
    if (std::any_of(domains.begin(), domains.end(), beyond_maximum)) {
      AdmissionRejected rejected{id_, request.request_id, {}, {}};
      for (std::uint32_t d : domains)
        if (beyond_maximum(d)) {
          rejected.blockers.push_back({BlockerKind::permanent_domain_maximum, domain_source(d)});
          if (!rejected.reason.empty()) continue;
          if (beyond_ids)
            rejected.reason = "fit demand of " + std::to_string(fit_pages) + " pages exceeds the " +
                              std::to_string(BlockArena::max_ids) + " block ids (int32) of domain '" +
                              config_.domains[d].name + "'";
          else if (!fit_product)
            rejected.reason = "fit demand of " + std::to_string(fit_pages) + " pages of " +
                              std::to_string(config_.page_bytes) + " bytes exceeds 2**64 bytes, beyond the maximum of "
                              "domain '" + config_.domains[d].name + "' (" +
                              std::to_string(config_.domains[d].maximum_bytes) + " bytes)";
          else
            rejected.reason = "fit demand of " + std::to_string(fit_bytes) + " bytes exceeds the maximum of domain '" +
                              config_.domains[d].name + "' (" + std::to_string(config_.domains[d].maximum_bytes) + " bytes)";
        }
      return rejected;
    }

    std::vector<CapacityBlocker> blockers;
    bool blocking = false, growth = false;
    if (active_ >= config_.max_active_sequences) {
      blockers.push_back({BlockerKind::active_sequence_ceiling, slots_source()});
      blocking = true;
    }
    for (std::uint32_t d : domains) {
      const auto& state = domains_[d];
      if (prompt_bytes > state.total - state.used) {  // used <= total always holds
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
    // It fits, so the pages exist: room for their ids is in proportion to them.
    if (prompt_pages > speculative_id_room) reserve_ids();
    // Both authorities first (they may refuse), then the claims: a refusal changes nothing.
    const Authority sequence = sequence_ids_.acquire();
    Authority request_authority;
    try {
      request_authority = request_ids_.acquire();
    } catch (...) {
      sequence_ids_.release(sequence);
      throw;
    }
    ++active_;  // below max_active_sequences (a u32), so it cannot wrap
    reservation.kept = true;  // from here the release below (or the backing's) erases it
    for (std::uint32_t d : domains) domains_[d].used += prompt_bytes;  // fits: prompt_bytes <= total - used
    physical_epoch = physical_epoch_;
    backing->sequence_ = sequence;
    backing->request_ = request_authority;

    // Physical pages. On failure the claims roll back (pages before the slot), which bumps
    // the epochs they touched, and the request waits on physical memory.
    const auto roll_back = [&]() noexcept {
      release_pages_locked(domains, prompt_pages);
      live_.erase(backing.get(), request_hash);
      release_sequence_locked(domains, 0, sequence, request_authority);
      backing->sequence_ = Authority{};  // claims nothing now: its release returns nothing
      backing->request_ = Authority{};
    };
    try {
      taken = take_admission_locked(*backing, prompt_pages);
    } catch (...) {
      roll_back();
      throw;
    }
    if (!taken) roll_back();
  }
  if (!taken) {  // the backing, claiming nothing now, goes with this scope
    return physical_deferral(domains, 1, prompt, prompt_pages, fit, fit_pages, physical_epoch, request.request_id);
  }
  auto snapshot = make_recycled<const BackingSnapshot>(backing, 1, prompt, prompt_pages);
  return Admitted{make_recycled<AdmittedSequenceResources>(prompt, fit, std::move(backing), std::move(snapshot))};
}

AdmissionCoordinator::ExtensionClaim AdmissionCoordinator::claim_extension(
    const std::vector<std::uint32_t>& domains, std::uint64_t pages, const BackingDeferralContext& context,
    std::string_view request_id, bool claim, const char* op) {
  const auto product = checked::mul(pages, config_.page_bytes);
  if (!product) checked::overflow(std::string(op) + ": pages * page_bytes");
  const std::uint64_t bytes = *product;
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  require_open_locked(op);
  if (poisoned_) raise(ErrorKind::Capacity, std::string(op) + ": the coordinator's accounting is inconsistent (poisoned)");
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
  ExtensionClaim result;
  result.physical_epoch = physical_epoch_;
  if (blockers.empty()) {
    if (claim)
      for (std::uint32_t d : domains) domains_[d].used += bytes;  // fits: bytes <= total - used
    result.claimed = claim;
    return result;
  }
  AdmissionDeferred deferred;
  deferred.coordinator_id = id_;
  deferred.request_id = std::string(request_id);
  deferred.immediate = demand_locked(domains, 0, context.target_tokens, pages);
  deferred.fit = deferred.immediate;
  std::vector<CapacitySource> sources;
  for (const auto& b : blockers) sources.push_back(b.source);
  deferred.blockers = std::move(blockers);
  deferred.action = growth ? DeferralAction::await_backing_growth : DeferralAction::preempt_and_recompute;
  deferred.wait_condition = condition_locked(std::move(sources));
  deferred.capacity = capacity_locked();
  deferred.backing = context;
  result.deferred = std::move(deferred);
  return result;
}

template <class Destination>
bool AdmissionCoordinator::take_each_domain_locked(const std::vector<std::uint32_t>& domains, std::uint64_t pages,
                                                   Destination destination) {
  // The domains taken before domain i give their ids back (last first), whether domain i was
  // refused or its arena could not make room (bad_alloc).
  const auto give_back_before = [&](std::size_t i) noexcept {
    for (std::size_t j = i; j-- > 0;) domains_[domains[j]].arena.give_back(destination(j), pages);
    if (i > 0) bump_and_notify_locked(domains_.size() + 1);
  };
  for (std::size_t i = 0; i < domains.size(); ++i) {
    bool took = false;
    try {
      took = !config_.memory->closed() && config_.memory->take_permitted() &&
             domains_[domains[i]].arena.take(pages, destination(i));
    } catch (...) {
      give_back_before(i);
      throw;
    }
    if (!took) {
      give_back_before(i);
      return false;
    }
  }
  live_takes_ += domains.size();
  return true;
}

bool AdmissionCoordinator::take_blocks(const std::vector<std::uint32_t>& domains, std::uint64_t pages,
                                       std::int32_t* ids) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return take_each_domain_locked(domains, pages, domain_by_domain(ids, pages));
}

AdmissionCoordinator::FastExtension AdmissionCoordinator::take_extension(const std::vector<std::uint32_t>& domains,
                                                                         std::uint64_t pages, std::int32_t* ids,
                                                                         std::uint64_t& physical_epoch, bool wait) {
  const auto bytes = checked::mul(pages, config_.page_bytes);
  if (!bytes) return FastExtension::logical_short;  // the three-call path names the overflow
  std::unique_lock<std::recursive_mutex> lock(mutex_, std::defer_lock);
  if (wait) lock.lock();
  else if (!lock.try_lock()) return FastExtension::busy;
  if (closed_ || poisoned_ || config_.memory->closed()) return FastExtension::logical_short;
  for (std::uint32_t d : domains)
    if (*bytes > domains_[d].total - domains_[d].used) return FastExtension::logical_short;
  physical_epoch = physical_epoch_;
  if (!take_each_domain_locked(domains, pages, domain_by_domain(ids, pages)))
    return FastExtension::physical_short;
  for (std::uint32_t d : domains) domains_[d].used += *bytes;  // fits: checked above
  if (!wait) ++in_place_takes_;  // fewer than 2^64 extensions are ever taken
  return FastExtension::taken;
}

bool AdmissionCoordinator::take_admission_locked(SequenceBacking& backing, std::uint64_t pages) {
  const auto into_backing = [&backing](std::size_t i) noexcept { return backing.ids_of(i).current.data.get(); };
  if (!take_each_domain_locked(backing.domains(), pages, into_backing)) return false;
  backing.pages_ = pages;
  backing.takes_ = backing.domains().size();
  return true;
}

void AdmissionCoordinator::give_back_blocks(const std::vector<std::uint32_t>& domains, std::uint64_t pages,
                                            const std::int32_t* ids) noexcept {
  if (pages == 0 || domains.empty()) return;
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  for (std::size_t j = domains.size(); j-- > 0;) domains_[domains[j]].arena.give_back(ids + j * pages, pages);
  live_takes_ -= std::min<std::uint64_t>(live_takes_, domains.size());
  bump_and_notify_locked(domains_.size() + 1);
}

void AdmissionCoordinator::release_backing_blocks(SequenceBacking& backing) noexcept {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  release_backing_blocks_locked(backing, /*last_holder=*/false);
}

void AdmissionCoordinator::release_backing(SequenceBacking& backing) noexcept {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  release_backing_blocks_locked(backing, /*last_holder=*/true);
  // The id may be admitted again. Hashed again rather than kept: a few nanoseconds of a
  // release, against eight bytes in every live sequence.
  live_.erase(&backing, RequestIndex::hash(backing.request_id()));
  release_sequence_locked(backing.domains(), backing.pages_, backing.sequence_, backing.request_);
}

void AdmissionCoordinator::release_backing_blocks_locked(SequenceBacking& backing, bool last_holder) noexcept {
  // The last holder gone, nobody else can reach the backing (holders() waits for this lock).
  std::unique_lock<SessionLock> backing_lock(backing.mutex_, std::defer_lock);
  if (!last_holder) backing_lock.lock();
  if (backing.pages_ == 0) return;
  const auto& domains = backing.domains();
  for (std::size_t j = domains.size(); j-- > 0;) {
    auto& ids = backing.ids_of(j);
    domains_[domains[j]].arena.give_back(ids.current.data.get(), backing.pages_);
    // No view may show ids another sequence can now take. Once the last holder went, no view
    // can be made any more: a storage only the backing holds is freed unread, not overwritten.
    if (!last_holder || ids.current.data.use_count() > 1) std::fill_n(ids.current.data.get(), backing.pages_, -1);
    if (ids.retired)
      for (auto& old : *ids.retired) std::fill_n(old.data.get(), old.capacity, -1);
  }
  live_takes_ -= std::min(live_takes_, backing.takes_);
  bump_and_notify_locked(domains_.size() + 1);
}

void AdmissionCoordinator::append_runs(std::uint32_t domain_index, const std::vector<std::int32_t>& ids,
                                       std::vector<BackingExtent>& out) const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const auto& arena = domains_.at(domain_index).arena;
  // Host accounting has no memory behind its chunks, and the device's close took the arena
  // back: neither names an address (0).
  const bool backed = config_.memory->has_addresses() && !config_.memory->closed();
  std::size_t start = 0;
  for (std::size_t p = 1; p <= ids.size(); ++p) {
    if (p < ids.size() && ids[p] == ids[p - 1] + 1 && arena.chunk_of(ids[p]) == arena.chunk_of(ids[start])) continue;
    BackingExtent e;
    e.domain_index = domain_index;
    e.first_page = start;
    e.pages = p - start;
    e.memory.address = backed ? arena.address_of(ids[start], config_.page_bytes) : 0;
    e.memory.bytes = e.pages * config_.page_bytes;  // pages of one chunk: cannot wrap
    out.push_back(e);
    start = p;
  }
}

ArenaState AdmissionCoordinator::arena_state(std::uint32_t domain_index) const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const auto& arena = domains_.at(domain_index).arena;
  if (config_.memory->closed()) return {arena.blocks(), arena.free_blocks(), {}, true};
  return {arena.blocks(), arena.free_blocks(), arena.chunks(), false};
}

std::optional<std::uint32_t> AdmissionCoordinator::arena_domain_sharing(std::uint64_t address,
                                                                         std::uint64_t bytes) const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (config_.memory->closed()) return std::nullopt;
  for (std::uint32_t d = 0; d < domains_.size(); ++d)
    for (const ArenaChunk& chunk : domains_[d].arena.chunks())
      if (shares_a_byte(chunk.memory.address, chunk.memory.bytes, address, bytes)) return d;
  return std::nullopt;
}

std::uint64_t AdmissionCoordinator::live_blocks() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  std::uint64_t live = 0;
  for (const auto& d : domains_) live += d.arena.live();
  return live;
}

std::uint64_t AdmissionCoordinator::live_takes() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return live_takes_;
}

std::uint64_t AdmissionCoordinator::in_place_takes() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return in_place_takes_;
}

void AdmissionCoordinator::release_pages(const std::vector<std::uint32_t>& domains, std::uint64_t pages) noexcept {
  if (pages == 0) return;
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  release_pages_locked(domains, pages);
}

void AdmissionCoordinator::release_pages_locked(const std::vector<std::uint32_t>& domains, std::uint64_t pages) noexcept {
  if (pages == 0) return;
  const auto bytes = checked::mul(pages, config_.page_bytes);
  for (std::uint32_t d : domains) {
    if (!bytes || domains_[d].used < *bytes) { poisoned_ = true; continue; }
    domains_[d].used -= *bytes;
    bump_and_notify_locked(std::size_t{d} + 1);
  }
  if (auto next = checked::add(release_epoch_, std::uint64_t{1})) release_epoch_ = *next;
  else poisoned_ = true;
}

void AdmissionCoordinator::release_sequence(const std::vector<std::uint32_t>& domains, std::uint64_t pages,
                                            const Authority& sequence, const Authority& request,
                                            const std::string& request_id) noexcept {
  const std::uint64_t h = RequestIndex::hash(request_id);
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (const SequenceBacking* named = live_.find(request_id, h)) live_.erase(named, h);  // the id may be admitted again
  release_sequence_locked(domains, pages, sequence, request);
}

void AdmissionCoordinator::release_sequence_locked(const std::vector<std::uint32_t>& domains, std::uint64_t pages,
                                                   const Authority& sequence, const Authority& request) noexcept {
  const auto bytes = checked::mul(pages, config_.page_bytes);
  if (pages != 0)
    for (std::uint32_t d : domains) {
      if (!bytes || domains_[d].used < *bytes) { poisoned_ = true; continue; }
      domains_[d].used -= *bytes;
      bump_and_notify_locked(std::size_t{d} + 1);
    }
  if (active_ == 0) poisoned_ = true;
  else --active_;
  bump_and_notify_locked(0);
  sequence_ids_.release(sequence);
  request_ids_.release(request);
  if (auto next = checked::add(release_epoch_, std::uint64_t{1})) release_epoch_ = *next;
  else poisoned_ = true;
}

void AdmissionCoordinator::close() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  close_locked();
}

void AdmissionCoordinator::require_open(const char* operation) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  require_open_locked(operation);
}

bool AdmissionCoordinator::closed() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return closed_ || config_.memory->closed();
}

void AdmissionCoordinator::grow_domain(const std::string& name, std::uint64_t capacity_bytes) {
  auto it = std::find_if(config_.domains.begin(), config_.domains.end(), [&](const DomainConfig& d) { return d.name == name; });
  if (it == config_.domains.end()) raise_unknown_domain("grow_domain", name, domain_names());
  auto index = static_cast<std::uint32_t>(it - config_.domains.begin());
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  require_open_locked("grow_domain");
  if (capacity_bytes < domains_[index].total)
    raise(ErrorKind::InvalidArgument, "grow_domain: " + std::to_string(capacity_bytes) + " bytes is below the total of domain '" +
                                          name + "' (" + std::to_string(domains_[index].total) +
                                          " bytes): a domain's capacity never shrinks");
  if (capacity_bytes > it->maximum_bytes)
    raise(ErrorKind::InvalidArgument, "grow_domain: " + std::to_string(capacity_bytes) + " bytes exceeds the maximum of domain '" +
                                          name + "' (" + std::to_string(it->maximum_bytes) + " bytes)");
  const std::uint64_t servable = servable_bytes(capacity_bytes);
  if (servable == domains_[index].total) return;
  add_blocks_locked(index, capacity_bytes);  // throws (the device refused the chunk): nothing changed
  // Bytes short of a page serve no demand (every demand is whole pages): waiters wake only
  // for a page more.
  const bool more_pages = servable / config_.page_bytes != domains_[index].total / config_.page_bytes;
  domains_[index].total = servable;
  if (more_pages) bump_and_notify_locked(std::size_t{index} + 1);
}

CapacitySnapshot AdmissionCoordinator::capacity() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return capacity_locked();
}

std::uint64_t AdmissionCoordinator::epoch_of(const CapacitySource& source) const {
  const CapacitySource resolved = resolve_source(source, "epoch");
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return epoch_locked(slot_of(resolved));
}

std::vector<std::uint64_t> AdmissionCoordinator::epochs_of(const std::vector<CapacitySource>& sources) const {
  std::vector<std::uint64_t> out;
  out.reserve(sources.size());
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  for (const auto& s : sources) out.push_back(epoch_locked(slot_of(s)));
  return out;
}

std::uint64_t AdmissionCoordinator::release_epoch() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return release_epoch_;
}

bool AdmissionCoordinator::fits_now(const AdmissionDeferred& deferred) const {
  if (deferred.coordinator_id != id_) raise(ErrorKind::StaleAuthority, "fits_now: the deferral belongs to another coordinator");
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (deferred.immediate.sequences > 0) {
    const auto active = checked::add(std::uint64_t{active_}, std::uint64_t{deferred.immediate.sequences});
    if (!active || *active > config_.max_active_sequences) return false;
  }
  for (const auto& d : deferred.immediate.domains)
    if (d.bytes > domains_.at(d.domain_index).total - domains_.at(d.domain_index).used) return false;
  // As admit: a fit beyond what a domain holds today waits for growth, whatever is free.
  for (const auto& d : deferred.fit.domains)
    if (d.bytes > domains_.at(d.domain_index).total) return false;
  return true;
}

void AdmissionCoordinator::verify_sequence_authority(const Authority& authority) const {
  if (authority.coordinator_id != id_)
    raise(ErrorKind::StaleAuthority, "verify_sequence_authority: the authority belongs to another coordinator (foreign coordinator)");
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (authority.generation == 0 || sequence_ids_.live_generation(authority.sparse_id) != authority.generation)
    raise(ErrorKind::StaleAuthority, "stale sequence session authority (id " + std::to_string(authority.sparse_id) +
                                         ", generation " + std::to_string(authority.generation) + ")");
}

std::uint64_t AdmissionCoordinator::held_pages(const Authority& authority, std::string_view request_id) const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  verify_sequence_authority(authority);
  // A live authority's backing is in the index: both leave it under this lock, together.
  const SequenceBacking* backing = live_.find(request_id, RequestIndex::hash(request_id));
  if (!backing || !(backing->sequence_authority() == authority))
    raise(ErrorKind::StaleAuthority, "stale sequence session authority (id " + std::to_string(authority.sparse_id) +
                                         ", generation " + std::to_string(authority.generation) +
                                         "): it was not admitted under that request id");
  return backing->pages();  // its lock under this one, as a release takes it
}

std::shared_ptr<CapacityWaitRegistration> AdmissionCoordinator::register_waiter(const AdmissionDeferred& deferred,
                                                                                 const char* op) {
  if (deferred.coordinator_id != id_)
    raise(ErrorKind::StaleAuthority, std::string(op) + ": the deferral belongs to another coordinator (foreign coordinator)");
  WaitCondition observed = deferred.wait_condition;
  if (observed.sources.empty() || observed.sources.size() != observed.epochs.size())
    raise(ErrorKind::InvalidArgument, std::string(op) + ": the deferral has no wait condition");
  for (auto& s : observed.sources) s = resolve_source(s, op);  // foreign or unknown: refused
  const auto& sources = observed.sources;
  auto state = std::make_shared<WaiterState>();
  std::vector<std::uint64_t> registered;
  {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    require_open_locked(op);
    for (const auto& s : sources) registered.push_back(epoch_locked(slot_of(s)));
    for (const auto& s : sources) waiters_[slot_of(s)].emplace(state.get(), state);
  }
  return std::make_shared<CapacityWaitRegistration>(shared_from_this(), std::move(observed), std::move(registered), state);
}

void AdmissionCoordinator::unregister_waiter(WaiterState* waiter) noexcept {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  for (auto& set : waiters_) set.erase(waiter);
}

std::vector<CapacityHolder> AdmissionCoordinator::holders() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  std::vector<CapacityHolder> out;
  out.reserve(live_.size());
  live_.for_each([&](const SequenceBacking& backing) {
    out.push_back({std::string(backing.request_id()), backing.sequence_authority(), backing.pages(), backing.domains(),
                   backing.holder_count()});
  });
  std::sort(out.begin(), out.end(), [](const CapacityHolder& a, const CapacityHolder& b) { return a.request_id < b.request_id; });
  return out;
}

}  // namespace lifecore::sequence
