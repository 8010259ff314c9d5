// The admission coordinator of one device: capacity domains in bytes (KV pages of one page
// size), a ceiling on active sequences, an availability epoch per source, a release epoch,
// and the waiters subscribed to those epochs. Every release bumps exactly the sources it
// frees and wakes exactly the waiters whose condition names them. Pages are block ids of one
// arena per domain (block_arena.hpp): the arena is allocated at creation (and per growth),
// and an admission, an extension or a release only moves ids.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "lifecore/sequence/capacity.hpp"
#include "lifecore/sequence/backing.hpp"
#include "lifecore/sequence/block_arena.hpp"
#include "lifecore/sequence/page_memory.hpp"
#include "lifecore/sequence/request_index.hpp"

namespace lifecore::sequence {

class AdmittedSequenceResources;
class SequenceBacking;
class CapacityWaitRegistration;
struct WaiterState;

struct DomainConfig {
  std::string name;
  std::uint64_t capacity_bytes = 0;  // total available now
  std::uint64_t maximum_bytes = 0;   // what it may grow to (>= capacity); 0 means = capacity
};

struct CoordinatorConfig {
  std::vector<DomainConfig> domains;
  std::uint64_t page_bytes = 0;
  std::uint32_t tokens_per_page = 0;
  std::uint32_t max_active_sequences = 0;
  std::shared_ptr<PageMemory> memory;  // HostPageMemory when null
};

// One domain's arena now: blocks that exist, free ones, and its chunks. Once the memory's
// device has closed, its close took the chunks back: `returned` and no chunk (the block ids
// stay, as accounting, until their sequences release them).
struct ArenaState {
  std::uint64_t blocks = 0;
  std::uint64_t free_blocks = 0;
  std::vector<ArenaChunk> chunks;
  bool returned = false;
};

struct AdmissionRequest {
  std::string request_id;
  std::int64_t prompt_tokens = 0;
  std::int64_t fit_tokens = 0;
  std::vector<std::string> domains;  // empty: every domain
};

struct Admitted {
  std::shared_ptr<AdmittedSequenceResources> resources;
};
using AdmissionDecision = std::variant<Admitted, AdmissionDeferred, AdmissionRejected>;

// Issues (sparse id, generation) pairs: ids are recycled (dense storage), generations never.
class AuthorityAllocator {
 public:
  explicit AuthorityAllocator(std::uint64_t coordinator_id) : coordinator_id_(coordinator_id) {}
  Authority acquire();
  void release(const Authority& authority) noexcept;
  // The generation that currently holds `sparse_id`, 0 when free.
  std::uint64_t live_generation(std::uint32_t sparse_id) const noexcept;

 private:
  std::vector<std::uint64_t> generation_of_;  // per sparse id; 0 when free
  std::vector<std::uint32_t> free_ids_;
  std::uint64_t next_generation_ = 1;
  std::uint64_t coordinator_id_;
};

// A live sequence that still holds capacity (pages and an active slot), named for a
// diagnosis: `holders` owners (the admitted resources, which the session keeps until it
// closes, each live frame and each unreleased flight) keep it. Snapshots and decisions are never among them.
struct CapacityHolder {
  std::string request_id;
  Authority sequence_authority;
  std::uint64_t pages = 0;  // per domain
  std::vector<std::uint32_t> domains;
  long holders = 0;
};

// Pages of `tokens_per_page` tokens that hold `tokens` (rounded up); OverflowError naming
// `what` if it cannot be computed. A session counts with the coordinator's tokens_per_page,
// and so with this, without reading the coordinator.
std::uint64_t pages_holding(std::uint64_t tokens, std::uint32_t tokens_per_page, const char* what);

// InvalidArgumentError for a domain `name` that is none of `names`, which it lists: "`call`:
// unknown capacity domain 'x' (the domains are 'kv', 'state')".
[[noreturn]] void raise_unknown_domain(const std::string& call, const std::string& name,
                                       const std::vector<std::string>& names);

class AdmissionCoordinator : public std::enable_shared_from_this<AdmissionCoordinator> {
 public:
  // Allocates every domain's arena (floor(capacity_bytes / page_bytes) blocks, exactly that
  // many pages' bytes); an allocation that fails raises and leaves nothing behind.
  static std::shared_ptr<AdmissionCoordinator> create(CoordinatorConfig config);
  ~AdmissionCoordinator();  // returns the arenas

  AdmissionDecision admit(const AdmissionRequest& request);
  // Wakes every waiter with ClosedError; later admissions, extensions and registrations raise
  // ClosedError. Releases still return capacity. Closing the device the pages come from does
  // the same, at once: the device calls back when it closes.
  void close();
  bool closed() const;
  // ClosedError naming `operation` once closed (or once its device is): what an extension
  // prepared outside the lock asks before it publishes, so none lands after close returned.
  void require_open(const char* operation);

  // Raises a domain's total toward its maximum (backing growth): one arena chunk for the new
  // blocks (ids continue from the last chunk); bumps its epoch.
  void grow_domain(const std::string& name, std::uint64_t capacity_bytes);

  CapacitySnapshot capacity() const;
  std::uint64_t epoch_of(const CapacitySource& source) const;
  std::uint64_t release_epoch() const;
  // Whether `deferred`'s immediate demand would be admitted right now (no claim is made): it
  // is free, and its fit demand is within each domain's total (beyond it, only growth helps).
  bool fits_now(const AdmissionDeferred& deferred) const;
  // Throws StaleAuthorityError unless `authority` is this coordinator's and the live holder
  // of its sparse id.
  void verify_sequence_authority(const Authority& authority) const;
  // The pages the live sequence `authority`, admitted as `request_id`, holds now; throws
  // StaleAuthorityError when that sequence is gone.
  std::uint64_t held_pages(const Authority& authority, std::string_view request_id) const;
  // Every live sequence that holds capacity now, sorted by request id; empty once every
  // holder let go.
  std::vector<CapacityHolder> holders() const;
  ArenaState arena_state(std::uint32_t domain_index) const;
  // The domain whose arena shares a byte with [address, address + bytes) of the memory's own
  // addresses (a device's), or none (none either once the memory was returned): a table
  // written there would land on blocks of keys and values.
  std::optional<std::uint32_t> arena_domain_sharing(std::uint64_t address, std::uint64_t bytes) const;
  // Pages handed out and not given back, summed over domains; and the takes behind them (one
  // per domain per admission or extension).
  std::uint64_t live_blocks() const;
  std::uint64_t live_takes() const;
  // Extensions whose ids a session took without waiting, under its own lock (a decode step
  // extending in place), since creation, a take given back after a failed adoption included:
  // what shows that path runs.
  std::uint64_t in_place_takes() const;

  // Errors name `op`, the call that asked (SequenceSession::register_admission_waiter passes its own).
  std::shared_ptr<CapacityWaitRegistration> register_waiter(const AdmissionDeferred& deferred,
                                                            const char* op = "register_waiter");

  std::uint64_t id() const noexcept { return id_; }
  std::uint64_t page_bytes() const noexcept { return config_.page_bytes; }
  std::uint32_t tokens_per_page() const noexcept { return config_.tokens_per_page; }
  std::uint32_t max_active_sequences() const noexcept { return config_.max_active_sequences; }
  std::size_t domain_count() const noexcept { return config_.domains.size(); }
  const std::string& domain_name(std::uint32_t index) const { return config_.domains.at(index).name; }
  // The domain names by index, immutable: what a snapshot names its domains by once the
  // coordinator itself may be gone.
  const std::shared_ptr<const std::vector<std::string>>& shared_domain_names() const noexcept { return all_domains_->names; }
  const std::vector<std::string>& domain_names() const noexcept { return *all_domains_->names; }
  const std::shared_ptr<PageMemory>& memory() const noexcept { return config_.memory; }
  // What a domain of `capacity_bytes` can hand out: no more pages than its int32 block ids.
  // A domain accounts (and reports) these bytes, so two requests that pass the bytes never
  // fail to find ids.
  std::uint64_t servable_bytes(std::uint64_t capacity_bytes) const noexcept;
  // Pages that hold `tokens` (rounded up); OverflowError naming `what` if it cannot be computed.
  std::uint64_t pages_for(std::uint64_t tokens, const char* what) const;
  // The index of the domain called `name`; -1 when there is none.
  std::int64_t domain_index(const std::string& name) const noexcept {
    for (std::size_t i = 0; i < config_.domains.size(); ++i)
      if (config_.domains[i].name == name) return static_cast<std::int64_t>(i);
    return -1;
  }
  CapacitySource domain_source(std::uint32_t index) const {
    return CapacitySource::domain(index, config_.domains.at(index).name, id_);
  }
  CapacitySource slots_source() const noexcept { return CapacitySource::slots(id_); }
  CapacitySource physical_source() const noexcept { return CapacitySource::physical(id_); }
  // Binds `source` to this coordinator: StaleAuthorityError when it names another one,
  // InvalidArgumentError when its domain index is not one of this coordinator's domains.
  CapacitySource resolve_source(const CapacitySource& source, const char* operation) const;

  // --- used by the sequence machinery (backing extension and release) ---
  struct ExtensionClaim {
    bool claimed = false;
    std::optional<AdmissionDeferred> deferred;
    std::uint64_t physical_epoch = 0;  // observed with the decision (before touching the device)
  };
  // `claim` false: only check that the logical capacity is there (nothing changes), so a
  // logical deferral never touches the device. Raises ClosedError once closed; errors name
  // `op`, the session call extending.
  ExtensionClaim claim_extension(const std::vector<std::uint32_t>& domains, std::uint64_t pages,
                                 const BackingDeferralContext& context, std::string_view request_id,
                                 bool claim = true, const char* op = "try_ensure_backing_covers");
  // The deferral of a failed physical allocation: it waits on the physical-memory source,
  // with the epoch observed before the allocation was tried (a release in between is seen).
  AdmissionDeferred physical_deferral(const std::vector<std::uint32_t>& domains, std::uint32_t sequences,
                                      std::uint64_t tokens, std::uint64_t pages, std::uint64_t fit_tokens,
                                      std::uint64_t fit_pages, std::uint64_t observed_physical_epoch,
                                      std::string_view request_id) const;
  // `pages` block ids in every domain of `domains` (written domain by domain to `out`), under
  // one lock; false, nothing taken, when the page memory refuses a domain (a physical
  // deferral; ids taken for earlier domains go back and advance the physical source).
  bool take_blocks(const std::vector<std::uint32_t>& domains, std::uint64_t pages, std::int32_t* ids);
  // An extension that fits, under one lock: the logical claim and the ids of `pages` more
  // pages per domain (what claim_extension's check, take_blocks and its claim do in three calls).
  // `logical_short` (or a closed or poisoned coordinator) changes nothing and leaves the whole
  // answer to those three; `physical_short` is their physical deferral, with the epoch observed
  // before the take: no id or claim is kept, but the page memory's refusal is spent and a take
  // that failed after its first domain advanced the physical source, as take_blocks does.
  // Without `wait`, `busy` (nothing changed) when another thread holds the coordinator's lock:
  // a caller under a session's lock never waits for one held across a driver call.
  enum class FastExtension : std::uint8_t { taken, logical_short, physical_short, busy };
  FastExtension take_extension(const std::vector<std::uint32_t>& domains, std::uint64_t pages, std::int32_t* ids,
                               std::uint64_t& physical_epoch, bool wait = true);
  // Gives prepared ids back and advances the physical-memory source.
  void give_back_blocks(const std::vector<std::uint32_t>& domains, std::uint64_t pages, const std::int32_t* ids) noexcept;
  // A released backing's ids go back; its storage is overwritten with -1 first.
  void release_backing_blocks(SequenceBacking& backing) noexcept;
  // What a backing's last holder returns, under one lock: release_backing_blocks, then
  // release_sequence with its pages, authorities and request id.
  void release_backing(SequenceBacking& backing) noexcept;
  // Runs of consecutive ids within one chunk, for BackingSnapshot::extents.
  void append_runs(std::uint32_t domain_index, const std::vector<std::int32_t>& ids, std::vector<BackingExtent>& out) const;
  void release_pages(const std::vector<std::uint32_t>& domains, std::uint64_t pages) noexcept;
  // Returns the sequence's pages, its slot, both authorities and its request id, in that
  // order, in one step.
  void release_sequence(const std::vector<std::uint32_t>& domains, std::uint64_t pages,
                        const Authority& sequence, const Authority& request, const std::string& request_id) noexcept;
  void unregister_waiter(WaiterState* waiter) noexcept;
  // Epochs now, for each source (locks once).
  std::vector<std::uint64_t> epochs_of(const std::vector<CapacitySource>& sources) const;
  // Number of availability sources: the slots, every domain, physical memory.
  std::size_t source_count() const noexcept { return config_.domains.size() + 2; }

 private:
  explicit AdmissionCoordinator(CoordinatorConfig config);
  struct DomainState {
    std::uint64_t used = 0;
    std::uint64_t total = 0;
    std::uint64_t epoch = 1;
    BlockArena arena;
  };
  // Adds the blocks `total` bytes hold beyond the arena's, with one chunk of memory.
  void add_blocks_locked(std::uint32_t domain_index, std::uint64_t total);
  void release_arenas() noexcept;
  // Dense index of a source (0 slots, 1 + domain, domains + 1 physical); the source must
  // have been resolved (resolve_source) or issued by this coordinator.
  std::size_t slot_of(const CapacitySource& source) const noexcept;
  std::uint64_t epoch_locked(std::size_t slot) const;
  // `last_holder`: called as the backing goes (no view of its ids can be made any more).
  void release_backing_blocks_locked(SequenceBacking& backing, bool last_holder) noexcept;
  // An admission's ids, taken straight into its new backing (room made by reserve_unshared); false,
  // nothing taken, when the page memory refuses a domain (ids of earlier domains go back and
  // advance the physical-memory source).
  bool take_admission_locked(SequenceBacking& backing, std::uint64_t pages);
  // `pages` ids of each domain, domain i's written to destination(i): all of them or none (a
  // refusal answers false, a failure to make room raises), the ids of domains taken before
  // the one that failed given back either way.
  template <class Destination>
  bool take_each_domain_locked(const std::vector<std::uint32_t>& domains, std::uint64_t pages, Destination destination);
  void release_pages_locked(const std::vector<std::uint32_t>& domains, std::uint64_t pages) noexcept;
  // release_sequence less the request id's entry (its callers remove that).
  void release_sequence_locked(const std::vector<std::uint32_t>& domains, std::uint64_t pages,
                               const Authority& sequence, const Authority& request) noexcept;
  void bump_and_notify_locked(std::size_t slot) noexcept;
  // ClosedError when closed or when the device of the page memory is (which closes this).
  void require_open_locked(const char* operation);
  void close_locked() noexcept;
  CapacitySnapshot capacity_locked() const;
  CapacityDemand demand_locked(const std::vector<std::uint32_t>& domains, std::uint32_t sequences,
                               std::uint64_t tokens, std::uint64_t pages) const;
  WaitCondition condition_locked(std::vector<CapacitySource> sources,
                                 std::optional<std::uint64_t> observed_physical_epoch = std::nullopt) const;

  const std::uint64_t id_;
  CoordinatorConfig config_;
  // Recursive: the last reference to a device may be a temporary its page memory takes under
  // this lock; the device's close then calls this coordinator's close watch on the same thread.
  mutable std::recursive_mutex mutex_;
  std::vector<DomainState> domains_;
  std::uint32_t active_ = 0;
  std::uint64_t slots_epoch_ = 1;
  std::uint64_t release_epoch_ = 1;
  std::uint64_t physical_epoch_ = 1;
  bool closed_ = false;
  bool poisoned_ = false;  // accounting found itself inconsistent; every decision refuses
  std::uint64_t live_takes_ = 0;
  std::uint64_t in_place_takes_ = 0;
  AuthorityAllocator sequence_ids_;
  AuthorityAllocator request_ids_;
  // 0 .. domains - 1 ("every domain") with config_.domains' names, which every DomainSet shares.
  std::shared_ptr<const DomainSet> all_domains_;
  // Live request ids and their backings (holders() sorts).
  RequestIndex live_;
  // Waiters indexed by source slot (slot_of). The coordinator shares each state while it is
  // registered: a registration does not keep the coordinator, so one dropped while the
  // coordinator is destroyed (and cannot unregister) leaves a state that is still valid here.
  std::vector<std::unordered_map<WaiterState*, std::shared_ptr<WaiterState>>> waiters_;
  // The device's close closes this coordinator and wakes its waiters (last: let go first).
  std::shared_ptr<void> close_watch_;
};

}  // namespace lifecore::sequence
