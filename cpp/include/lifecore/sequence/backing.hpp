// The backing of one sequence: per domain, the block ids of its pages (in order, append-only)
// plus the logical capacity and the active-sequence slot they were claimed with. Only real
// holders own it (the admitted resources, the session through them, live frames and flights);
// snapshots are immutable views of a prefix of it that only observe it, so a snapshot or
// decision left behind never keeps pages or a slot. The whole backing is released, block
// ids first, when the last holder goes.
//
// Id storage never moves under a view: it is made at admission for the prompt's pages (at
// least min_id_room, at most the fit, small ones rounded up to a size class) and grows by
// doubling up to the fit; a storage a view still reads is kept when outgrown (the same
// prefix), one nobody reads is freed. On release every storage a view may read is
// overwritten with -1, so a view taken earlier can never show ids that another sequence may
// now hold.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "lifecore/sequence/capacity.hpp"
#include "lifecore/sequence/page_memory.hpp"
#include "lifecore/sequence/request_id.hpp"
#include "lifecore/sequence/session_lock.hpp"

namespace lifecore::sequence {

class AdmissionCoordinator;
struct TableRowTarget;  // block_table.hpp

// The domains a sequence holds pages in (coordinator domain indices, sorted) with the
// coordinator's domain names; immutable. A backing and its snapshots share one, and the
// coordinator one for "every domain": a snapshot, made at every extension, keeps one pointer.
struct DomainSet {
  std::shared_ptr<const std::vector<std::string>> names;  // the coordinator's
  std::vector<std::uint32_t> indices;
};

// A run of consecutive block ids of one domain inside one arena chunk (derived, for
// BackingSnapshot::extents).
struct BackingExtent {
  std::uint32_t domain_index = 0;
  std::uint64_t first_page = 0;  // index of the run's first page within the sequence
  std::uint64_t pages = 0;
  PageExtent memory;             // address of the run's first block, pages * page_bytes bytes
};

// A zero-copy, read-only window on a prefix of a sequence's ids in one domain: `data` owns
// the storage (not the capacity).
struct BlockIds {
  std::shared_ptr<const std::int32_t> data;
  std::size_t count = 0;
};

// Block ids taken for an extension but not yet published: given back (and the logical claim
// released, which wakes waiters) unless adopted by a backing. (An admission takes its ids
// straight into its new backing, under the lock of its claim.)
class PreparedPages {
 public:
  // Both must outlive this object (it lives on the stack of an extension).
  PreparedPages(AdmissionCoordinator& coordinator, const std::vector<std::uint32_t>& domains);
  ~PreparedPages();
  PreparedPages(const PreparedPages&) = delete;
  PreparedPages& operator=(const PreparedPages&) = delete;

  // Block ids for `pages` more pages in every domain (no allocation call); false (nothing
  // taken) when the page memory refuses (a physical deferral).
  bool allocate_physical(std::uint64_t pages);
  void mark_logically_claimed() noexcept { logical_pages_ = physical_pages_; }
  void release_physical() noexcept;

  std::vector<std::int32_t> ids;  // domain by domain, physical_pages_ each
  std::uint64_t physical_pages_ = 0;
  std::uint64_t logical_pages_ = 0;

 private:
  AdmissionCoordinator& coordinator_;
  const std::vector<std::uint32_t>& domains_;
};

class SequenceBacking : public std::enable_shared_from_this<SequenceBacking> {
 public:
  // The least room for ids a storage is made with (per domain), unless the fit is smaller.
  static constexpr std::uint64_t min_id_room = 4;

  // `domains` is shared with the snapshots (and, for "every domain", with the coordinator).
  SequenceBacking(std::shared_ptr<AdmissionCoordinator> coordinator,
                  std::shared_ptr<const DomainSet> domains, Authority sequence, Authority request,
                  RequestId request_id, std::uint64_t fit_pages);
  ~SequenceBacking();  // returns what it holds; a backing never admitted (no authority) holds nothing
  SequenceBacking(const SequenceBacking&) = delete;
  SequenceBacking& operator=(const SequenceBacking&) = delete;

  // Takes over prepared pages (already claimed logically). Called only under the lock of the
  // session that extends this backing (published_ids relies on it).
  void adopt(PreparedPages& prepared);
  // Takes over `pages` more ids per domain, domain by domain at `ids`, already taken and
  // claimed by the caller (which gives them back if this throws; nothing changed then). Under
  // the same session lock as adopt().
  void adopt_taken(const std::int32_t* ids, std::uint64_t pages);
  // Runs of consecutive ids over the first `pages` pages, domain by domain.
  std::vector<BackingExtent> extents(std::uint64_t pages) const;
  // The first `pages` ids of domain `slot` (an index into domains()).
  BlockIds block_ids(std::size_t slot, std::uint64_t pages) const;
  // The first `pages` ids of domain `slot`, as one row of a block table.
  void write_table_row(std::size_t slot, std::uint64_t pages, TableRowTarget& target) const;
  // Copies ids [first, pages) of domain `slot` to out + first (none past the backing's pages).
  void copy_ids_from(std::size_t slot, std::uint64_t first, std::uint64_t pages, std::int32_t* out) const;
  // Domain `slot`'s ids, read without this backing's lock by the one caller that holds the lock
  // of the session extending this backing: the id storage only moves in adopt() and
  // adopt_taken(), which run under that lock, and the ids of published pages never change
  // while a holder keeps it.
  const std::int32_t* published_ids(std::size_t slot) const noexcept { return ids_of(slot).current.data.get(); }

  const std::shared_ptr<AdmissionCoordinator>& coordinator() const noexcept { return coordinator_; }
  const std::vector<std::uint32_t>& domains() const noexcept { return domains_->indices; }
  const std::shared_ptr<const DomainSet>& shared_domains() const noexcept { return domains_; }
  const Authority& sequence_authority() const noexcept { return sequence_; }
  const Authority& request_authority() const noexcept { return request_; }
  std::string_view request_id() const noexcept { return request_id_; }
  const RequestId& shared_request_id() const noexcept { return request_id_; }
  std::uint64_t fit_pages() const noexcept { return fit_pages_; }
  std::uint64_t pages() const;
  // How many owners keep it now (resources, live frames, flights); 0 while it is being released.
  long holder_count() const noexcept { return weak_from_this().use_count(); }

 private:
  struct Storage {
    std::shared_ptr<std::int32_t[]> data;
    std::uint64_t capacity = 0;
  };
  struct DomainIds {
    Storage current;
    // Outgrown storage a view still read when it was outgrown; made the first time (rare).
    std::unique_ptr<std::vector<Storage>> retired;
  };
  // Room for at least `needed` ids: a new storage holding the current ids (may throw; nothing
  // of the backing that anyone reads changes, though room to retire the storage it replaces
  // may be reserved), then put in place (cannot fail).
  Storage grown_locked(DomainIds& ids, std::uint64_t needed);
  void replace_storage_locked(DomainIds& ids, Storage next) noexcept;
  void grow_locked(DomainIds& ids, std::uint64_t needed);
  // Room for `pages` ids per domain before any is held and before the backing is shared (no
  // lock): an admission takes the prompt's ids straight into it, so no id is copied.
  void reserve_unshared(std::uint64_t pages);
  DomainIds& ids_of(std::size_t slot) noexcept { return slot == 0 ? first_ids_ : more_ids_[slot - 1]; }
  const DomainIds& ids_of(std::size_t slot) const noexcept { return slot == 0 ? first_ids_ : more_ids_[slot - 1]; }

  std::shared_ptr<AdmissionCoordinator> coordinator_;
  std::shared_ptr<const DomainSet> domains_;  // never null, never empty
  Authority sequence_;
  Authority request_;
  RequestId request_id_;
  std::uint64_t fit_pages_;
  mutable SessionLock mutex_;  // a live sequence's record: one byte, not a 40-byte std::mutex
  // Parallel to domains_: the first domain's inline (most sequences have one domain), the
  // others' (domains_->size() - 1 of them) made at construction, none for one domain.
  DomainIds first_ids_;
  std::unique_ptr<DomainIds[]> more_ids_;
  std::uint64_t pages_ = 0;     // logically claimed pages per domain (= ids per domain)
  std::uint64_t takes_ = 0;     // one per domain per admission or extension
  // Takes an admission's ids into it (and names its authorities); gives the ids back and
  // overwrites them at release.
  friend class AdmissionCoordinator;
};

// Immutable: generation (from 1, strictly growing), committed shape, and the prefix of the
// backing's ids that was published with it. advanced() never changes an existing snapshot.
// It observes its backing without owning it: once the last holder let go, released() is
// true and extents() / block_ids() raise (the pages are gone). Nor does it own its
// coordinator: a snapshot kept after its request (in a receipt, a decision, a variable) keeps
// neither the pages nor the coordinator and its arena; it names its domains by itself.
class BackingSnapshot {
 public:
  BackingSnapshot(const std::shared_ptr<SequenceBacking>& backing, std::uint64_t generation, std::uint64_t tokens,
                  std::uint64_t pages);

  std::uint64_t generation() const noexcept { return generation_; }
  std::uint64_t tokens() const noexcept { return tokens_; }
  std::uint64_t pages() const noexcept { return pages_; }
  bool released() const noexcept { return backing_.expired(); }
  // SessionStateError once released.
  std::vector<BackingExtent> extents() const;
  // This snapshot's ids in domain `domain_index` (a coordinator domain index):
  // InvalidArgumentError when the sequence is not in it, SessionStateError once released.
  BlockIds block_ids(std::uint32_t domain_index) const;
  // The backing while some holder keeps it; null once released.
  std::shared_ptr<SequenceBacking> backing() const noexcept { return backing_.lock(); }
  // Whether `coordinator` took the pages. Its domain names, which this snapshot shares, name
  // it: they cannot be another coordinator's while this snapshot holds them.
  bool taken_by(const AdmissionCoordinator& coordinator) const noexcept;
  // Domains this snapshot's slices live in, sorted.
  const std::vector<std::uint32_t>& domains() const noexcept { return domains_->indices; }
  // The coordinator's domain names, by domain index.
  const std::string& domain_name(std::uint32_t index) const { return domains_->names->at(index); }
  const std::vector<std::string>& domain_names() const noexcept { return *domains_->names; }
  // The index of the coordinator's domain called `name`; -1 when there is none.
  std::int64_t domain_index(const std::string& name) const noexcept {
    const auto& names = *domains_->names;
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return static_cast<std::int64_t>(i);
    return -1;
  }

 private:
  std::weak_ptr<SequenceBacking> backing_;
  std::shared_ptr<const DomainSet> domains_;  // the backing's
  std::uint64_t generation_;
  std::uint64_t tokens_;
  std::uint64_t pages_;
};

}  // namespace lifecore::sequence
