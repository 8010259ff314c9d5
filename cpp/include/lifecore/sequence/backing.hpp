// The backing of one sequence: page extents (one per domain per extension, append-only)
// plus the logical capacity and the active-sequence slot they were claimed with. Only real
// holders own it (the admitted resources, the session through them, and live frames);
// snapshots are immutable views of a prefix of it that only observe it, so a snapshot or
// decision left behind never keeps pages or a slot. The whole backing is released, physical
// extents first, when the last holder goes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lifecore/sequence/capacity.hpp"
#include "lifecore/sequence/page_memory.hpp"

namespace lifecore::sequence {

class AdmissionCoordinator;

struct BackingExtent {
  std::uint32_t domain_index = 0;
  std::uint64_t first_page = 0;  // index of the extent's first page within the sequence
  std::uint64_t pages = 0;
  PageExtent memory;
};

// Pages prepared for an extension but not yet published: rolled back physical first, then
// the logical claim (whose release wakes waiters), unless adopted by a backing.
class PreparedPages {
 public:
  // Both must outlive this object (it lives on the stack of an admission or extension).
  PreparedPages(AdmissionCoordinator& coordinator, const std::vector<std::uint32_t>& domains);
  ~PreparedPages();
  PreparedPages(const PreparedPages&) = delete;
  PreparedPages& operator=(const PreparedPages&) = delete;

  // Physical pages for `pages` more pages starting at `first_page`, in every domain.
  bool allocate_physical(std::uint64_t first_page, std::uint64_t pages);
  void mark_logically_claimed() noexcept { logical_pages_ = physical_pages_; }
  void release_physical() noexcept;

  std::vector<BackingExtent> extents;
  std::uint64_t physical_pages_ = 0;
  std::uint64_t logical_pages_ = 0;

 private:
  AdmissionCoordinator& coordinator_;
  const std::vector<std::uint32_t>& domains_;
};

class SequenceBacking : public std::enable_shared_from_this<SequenceBacking> {
 public:
  SequenceBacking(std::shared_ptr<AdmissionCoordinator> coordinator, std::vector<std::uint32_t> domains,
                  Authority sequence, Authority request, std::string request_id);
  ~SequenceBacking();
  SequenceBacking(const SequenceBacking&) = delete;
  SequenceBacking& operator=(const SequenceBacking&) = delete;

  // Takes over prepared pages (already claimed logically); returns the new extent count.
  std::size_t adopt(PreparedPages& prepared);
  std::vector<BackingExtent> extents(std::size_t count) const;

  const std::shared_ptr<AdmissionCoordinator>& coordinator() const noexcept { return coordinator_; }
  const std::vector<std::uint32_t>& domains() const noexcept { return domains_; }
  const Authority& sequence_authority() const noexcept { return sequence_; }
  const Authority& request_authority() const noexcept { return request_; }
  const std::string& request_id() const noexcept { return request_id_; }
  std::uint64_t pages() const;
  // How many owners keep it now (resources and live frames); 0 while it is being released.
  long holder_count() const noexcept { return weak_from_this().use_count(); }

 private:
  std::shared_ptr<AdmissionCoordinator> coordinator_;
  std::vector<std::uint32_t> domains_;
  Authority sequence_;
  Authority request_;
  std::string request_id_;
  mutable std::mutex mutex_;
  std::vector<BackingExtent> extents_;
  std::uint64_t pages_ = 0;  // logically claimed pages per domain
};

// Immutable: generation (from 1, strictly growing), committed shape, and the extents that
// were published with it. advanced() never changes an existing snapshot. It observes its
// backing without owning it: once the last holder let go, released() is true and extents()
// raises (the pages are gone).
class BackingSnapshot {
 public:
  BackingSnapshot(const std::shared_ptr<SequenceBacking>& backing, std::uint64_t generation, std::uint64_t tokens,
                  std::uint64_t pages, std::size_t extent_count)
      : backing_(backing), coordinator_(backing->coordinator()), domains_(backing->domains()),
        generation_(generation), tokens_(tokens), pages_(pages), extent_count_(extent_count) {}

  std::uint64_t generation() const noexcept { return generation_; }
  std::uint64_t tokens() const noexcept { return tokens_; }
  std::uint64_t pages() const noexcept { return pages_; }
  std::size_t extent_count() const noexcept { return extent_count_; }
  bool released() const noexcept { return backing_.expired(); }
  // SessionStateError once released.
  std::vector<BackingExtent> extents() const;
  // The backing while some holder keeps it; null once released.
  std::shared_ptr<SequenceBacking> backing() const noexcept { return backing_.lock(); }
  const std::shared_ptr<AdmissionCoordinator>& coordinator() const noexcept { return coordinator_; }
  // Domains this snapshot's slices live in, sorted.
  const std::vector<std::uint32_t>& domains() const noexcept { return domains_; }

 private:
  std::weak_ptr<SequenceBacking> backing_;
  std::shared_ptr<AdmissionCoordinator> coordinator_;  // not capacity: names domains after release
  std::vector<std::uint32_t> domains_;
  std::uint64_t generation_;
  std::uint64_t tokens_;
  std::uint64_t pages_;
  std::size_t extent_count_;
};

}  // namespace lifecore::sequence
