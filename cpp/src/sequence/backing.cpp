#include "lifecore/sequence/backing.hpp"

#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"
#include "lifecore/sequence/coordinator.hpp"

namespace lifecore::sequence {

PreparedPages::PreparedPages(AdmissionCoordinator& coordinator, const std::vector<std::uint32_t>& domains)
    : coordinator_(coordinator), domains_(domains) {}

PreparedPages::~PreparedPages() {
  // Physical before logical: prepared memory is back before the logical release wakes a waiter.
  release_physical();
  if (logical_pages_ != 0) coordinator_.release_pages(domains_, logical_pages_);
}

bool PreparedPages::allocate_physical(std::uint64_t first_page, std::uint64_t pages) {
  if (pages == 0) return true;
  const std::uint64_t bytes = checked::mul_or_throw(pages, coordinator_.page_bytes(), "backing: pages * page_bytes");
  const auto size = checked::narrow<std::size_t>(bytes);
  if (!size) return false;  // more than this process can address: the device cannot supply it
  extents.reserve(extents.size() + domains_.size());
  for (std::uint32_t d : domains_) {
    PageExtent extent;
    if (!coordinator_.memory()->allocate(*size, &extent)) {
      release_physical();
      return false;
    }
    extents.push_back({d, first_page, pages, extent});
  }
  physical_pages_ = pages;
  return true;
}

void PreparedPages::release_physical() noexcept {
  coordinator_.release_physical(extents);  // advances the physical-memory source
  extents.clear();
  physical_pages_ = 0;
}

SequenceBacking::SequenceBacking(std::shared_ptr<AdmissionCoordinator> coordinator, std::vector<std::uint32_t> domains,
                                 Authority sequence, Authority request, std::string request_id)
    : coordinator_(std::move(coordinator)), domains_(std::move(domains)), sequence_(sequence), request_(request),
      request_id_(std::move(request_id)) {}

SequenceBacking::~SequenceBacking() {
  // Reverse order of allocation (tail pages first), physical before the logical release.
  coordinator_->release_physical(extents_);
  coordinator_->release_sequence(domains_, pages_, sequence_, request_, request_id_);
}

std::size_t SequenceBacking::adopt(PreparedPages& prepared) {
  std::lock_guard<std::mutex> lock(mutex_);
  extents_.insert(extents_.end(), prepared.extents.begin(), prepared.extents.end());
  pages_ += prepared.logical_pages_;  // bounded by the request's fit pages
  prepared.extents.clear();
  prepared.physical_pages_ = 0;
  prepared.logical_pages_ = 0;
  return extents_.size();
}

std::vector<BackingExtent> SequenceBacking::extents(std::size_t count) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {extents_.begin(), extents_.begin() + static_cast<std::ptrdiff_t>(std::min(count, extents_.size()))};
}

std::uint64_t SequenceBacking::pages() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pages_;
}

std::vector<BackingExtent> BackingSnapshot::extents() const {
  auto backing = backing_.lock();
  if (!backing)
    raise(ErrorKind::SessionState, "BackingSnapshot.extents: the backing was released (its session ended and every "
                                   "holder let go); a stale snapshot owns no pages");
  return backing->extents(extent_count_);
}

}  // namespace lifecore::sequence
