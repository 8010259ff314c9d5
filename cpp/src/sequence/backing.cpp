#include "lifecore/sequence/backing.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"
#include "lifecore/sequence/block_table.hpp"
#include "lifecore/sequence/coordinator.hpp"

namespace lifecore::sequence {
namespace {

std::size_t to_size(std::uint64_t value, const char* what) {
  const auto n = checked::narrow<std::size_t>(value);
  if (!n) checked::overflow(what);
  return *n;
}

// Room for at least `capacity` ids (rounded up to what was made). Storages of up to 32 ids
// are made as fixed-size arrays, in classes of 4, 8, 16 and 32: the unbounded-array form adds
// 28 bytes of header and padding, half again a one-block sequence's ids, in every live
// sequence.
template <std::size_t SizeClass = 4>
std::shared_ptr<std::int32_t[]> make_id_storage(std::uint64_t& capacity) {
  if (capacity <= SizeClass) {
    capacity = SizeClass;
    auto block = std::make_shared_for_overwrite<std::array<std::int32_t, SizeClass>>();
    return std::shared_ptr<std::int32_t[]>(block, block->data());
  }
  if constexpr (SizeClass < 32) {
    return make_id_storage<SizeClass * 2>(capacity);
  } else {
    return std::make_shared_for_overwrite<std::int32_t[]>(to_size(capacity, "backing: id storage"));
  }
}

}  // namespace

PreparedPages::PreparedPages(AdmissionCoordinator& coordinator, const std::vector<std::uint32_t>& domains)
    : coordinator_(coordinator), domains_(domains) {}

PreparedPages::~PreparedPages() {
  // Physical before logical: the ids are back before the logical release wakes a waiter.
  release_physical();
  if (logical_pages_ != 0) coordinator_.release_pages(domains_, logical_pages_);
}

bool PreparedPages::allocate_physical(std::uint64_t pages) {
  if (pages == 0) return true;
  const std::uint64_t count = checked::mul_or_throw(pages, std::uint64_t{domains_.size()}, "backing: pages * domains");
  ids.resize(to_size(count, "backing: block ids"));
  if (!coordinator_.take_blocks(domains_, pages, ids.data())) {
    ids.clear();
    return false;
  }
  physical_pages_ = pages;
  return true;
}

void PreparedPages::release_physical() noexcept {
  if (physical_pages_ != 0) coordinator_.give_back_blocks(domains_, physical_pages_, ids.data());
  ids.clear();
  physical_pages_ = 0;
}

SequenceBacking::SequenceBacking(std::shared_ptr<AdmissionCoordinator> coordinator,
                                 std::shared_ptr<const DomainSet> domains, Authority sequence,
                                 Authority request, RequestId request_id, std::uint64_t fit_pages)
    : coordinator_(std::move(coordinator)), domains_(std::move(domains)), sequence_(sequence), request_(request),
      request_id_(std::move(request_id)), fit_pages_(fit_pages),
      more_ids_(domains_->indices.size() > 1 ? std::make_unique<DomainIds[]>(domains_->indices.size() - 1)
                                             : nullptr) {}

SequenceBacking::~SequenceBacking() {
  // An admission refused before its claims made no authority: nothing was claimed.
  if (sequence_.generation == 0) return;
  // Ids first (overwritten with -1 before anyone can take them again), then the logical release.
  coordinator_->release_backing(*this);
}

SequenceBacking::Storage SequenceBacking::grown_locked(DomainIds& ids, std::uint64_t needed) {
  std::uint64_t capacity = std::max<std::uint64_t>(ids.current.capacity * 2, min_id_room);
  capacity = std::min(std::max(capacity, needed), std::max(fit_pages_, needed));
  Storage next;
  next.data = make_id_storage(capacity);
  next.capacity = capacity;
  if (pages_ != 0) std::memcpy(next.data.get(), ids.current.data.get(), pages_ * sizeof(std::int32_t));
  // Room to keep the storage it replaces while a view reads it (views are made under this
  // lock, so one nobody else holds now never gets one), made here so replacing cannot fail.
  if (ids.current.data && ids.current.data.use_count() > 1) {
    if (!ids.retired) ids.retired = std::make_unique<std::vector<Storage>>();
    ids.retired->reserve(ids.retired->size() + 1);
  }
  return next;
}

void SequenceBacking::replace_storage_locked(DomainIds& ids, Storage next) noexcept {
  // One a view still reads is kept (and overwritten at release); one nobody reads goes.
  if (ids.current.data && ids.current.data.use_count() > 1) ids.retired->push_back(std::move(ids.current));
  ids.current = std::move(next);
}

void SequenceBacking::grow_locked(DomainIds& ids, std::uint64_t needed) {
  replace_storage_locked(ids, grown_locked(ids, needed));
}

void SequenceBacking::adopt(PreparedPages& prepared) {
  adopt_taken(prepared.ids.data(), prepared.physical_pages_);
  prepared.ids.clear();
  prepared.physical_pages_ = 0;
  prepared.logical_pages_ = 0;
}

void SequenceBacking::adopt_taken(const std::int32_t* ids, std::uint64_t delta) {
  if (delta == 0) return;
  std::lock_guard<SessionLock> lock(mutex_);
  const std::uint64_t total = pages_ + delta;  // bounded by the request's fit pages
  const std::size_t count = domains().size();
  // Every storage that must grow is made before any is replaced: a failure leaves the backing,
  // and the ids its session reads beside its lock, as they were. (A growth doubles: rare.)
  std::vector<Storage> grown;
  for (std::size_t i = 0; i < count; ++i) {
    if (total <= ids_of(i).current.capacity) continue;
    if (grown.empty()) grown.resize(count);
    grown[i] = grown_locked(ids_of(i), total);
  }
  for (std::size_t i = 0; i < grown.size(); ++i)
    if (grown[i].data) replace_storage_locked(ids_of(i), std::move(grown[i]));
  for (std::size_t i = 0; i < count; ++i)
    std::memcpy(ids_of(i).current.data.get() + pages_, ids + i * delta, delta * sizeof(std::int32_t));
  pages_ = total;
  takes_ += count;
}

void SequenceBacking::reserve_unshared(std::uint64_t pages) {
  for (std::size_t i = 0; i < domains().size(); ++i) {
    auto& d = ids_of(i);
    if (pages > d.current.capacity) grow_locked(d, pages);
  }
}

std::vector<BackingExtent> SequenceBacking::extents(std::uint64_t pages) const {
  // The ids are copied under this backing's lock, the runs found under the coordinator's
  // (which names the chunks): never both at once here.
  std::vector<std::vector<std::int32_t>> copies(domains().size());
  {
    std::lock_guard<SessionLock> lock(mutex_);
    pages = std::min(pages, pages_);
    for (std::size_t i = 0; i < copies.size(); ++i)
      if (pages != 0) copies[i].assign(ids_of(i).current.data.get(), ids_of(i).current.data.get() + pages);
  }
  std::vector<BackingExtent> out;
  for (std::size_t i = 0; i < copies.size(); ++i) coordinator_->append_runs(domains()[i], copies[i], out);
  return out;
}

BlockIds SequenceBacking::block_ids(std::size_t slot, std::uint64_t pages) const {
  if (slot >= domains().size()) raise(ErrorKind::InvalidArgument, "block_ids: no such domain slot");
  std::lock_guard<SessionLock> lock(mutex_);
  const auto& storage = ids_of(slot).current;
  return {std::shared_ptr<const std::int32_t>(storage.data, storage.data.get()),
          static_cast<std::size_t>(std::min(pages, pages_))};
}

void SequenceBacking::write_table_row(std::size_t slot, std::uint64_t pages, TableRowTarget& target) const {
  std::lock_guard<SessionLock> lock(mutex_);
  write_table_row_ids(ids_of(slot).current.data.get(), std::min(pages, pages_), target);
}

void SequenceBacking::copy_ids_from(std::size_t slot, std::uint64_t first, std::uint64_t pages,
                                    std::int32_t* out) const {
  std::lock_guard<SessionLock> lock(mutex_);
  pages = std::min(pages, pages_);
  if (pages > first)
    std::memcpy(out + first, ids_of(slot).current.data.get() + first, (pages - first) * sizeof(std::int32_t));
}

std::uint64_t SequenceBacking::pages() const {
  std::lock_guard<SessionLock> lock(mutex_);
  return pages_;
}

namespace {
[[noreturn]] void raise_released(const char* what) {
  raise(ErrorKind::SessionState, std::string("BackingSnapshot.") + what +
                                     ": the backing was released (its session ended and every holder let go); a "
                                     "stale snapshot owns no pages");
}
}  // namespace

BackingSnapshot::BackingSnapshot(const std::shared_ptr<SequenceBacking>& backing, std::uint64_t generation,
                                 std::uint64_t tokens, std::uint64_t pages)
    : backing_(backing), domains_(backing->shared_domains()), generation_(generation), tokens_(tokens), pages_(pages) {}

bool BackingSnapshot::taken_by(const AdmissionCoordinator& coordinator) const noexcept {
  return domains_->names == coordinator.shared_domain_names();
}

std::vector<BackingExtent> BackingSnapshot::extents() const {
  auto backing = backing_.lock();
  if (!backing) raise_released("extents");
  return backing->extents(pages_);
}

BlockIds BackingSnapshot::block_ids(std::uint32_t domain_index) const {
  auto it = std::find(domains().begin(), domains().end(), domain_index);
  if (it == domains().end())
    raise(ErrorKind::InvalidArgument, "BackingSnapshot.block_ids: the sequence holds no pages in domain '" +
                                          domain_name(domain_index) + "'");
  auto backing = backing_.lock();
  if (!backing) raise_released("block_ids");
  return backing->block_ids(static_cast<std::size_t>(it - domains().begin()), pages_);
}

}  // namespace lifecore::sequence
