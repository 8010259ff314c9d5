#include "lifecore/sequence/block_table.hpp"

#include <algorithm>
#include <memory>
#include <string>

#include "lifecore/error.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/session.hpp"

namespace lifecore::sequence {
namespace {

struct Resolved {
  std::shared_ptr<SequenceBacking> backing;
  std::size_t slot = 0;
  std::uint64_t pages = 0;
};

[[noreturn]] void refuse(ErrorKind kind, std::size_t row, const std::string& why) {
  raise(kind, "block_table: row " + std::to_string(row) + ": " + why + " (nothing was written)");
}

}  // namespace

void build_block_table(const AdmissionCoordinator& coordinator, const std::vector<BlockTableRow>& rows,
                       std::optional<std::uint32_t> domain, std::size_t width, std::int32_t pad, std::int32_t* out) {
  const std::uint32_t d = domain.value_or(0);
  if (d >= coordinator.domain_count()) raise(ErrorKind::InvalidArgument, "block_table: unknown domain index");
  std::vector<Resolved> resolved(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const AdmissionCoordinator* owner = nullptr;
    std::size_t slot = std::string::npos;
    if (rows[r].session) {
      // One lock, one reference: the common row of a decode batch.
      auto source = rows[r].session->table_source(d);
      owner = source.coordinator;
      slot = source.slot;
      resolved[r].backing = std::move(source.backing);
      resolved[r].pages = source.pages;
    } else {
      if (rows[r].frame->finalized() || !rows[r].frame->snapshot())
        refuse(ErrorKind::SessionState, r, "the frame is finalized (its snapshot was let go)");
      const auto& snapshot = rows[r].frame->snapshot();
      owner = snapshot->coordinator().get();
      const auto& domains = snapshot->domains();
      auto it = std::find(domains.begin(), domains.end(), d);
      if (it != domains.end()) slot = static_cast<std::size_t>(it - domains.begin());
      resolved[r].backing = snapshot->backing();  // the live frame pins it
      resolved[r].pages = snapshot->pages();
    }
    if (owner != &coordinator) refuse(ErrorKind::StaleAuthority, r, "the sequence belongs to another coordinator (foreign)");
    if (slot == std::string::npos)
      refuse(ErrorKind::InvalidArgument, r, "the sequence holds no pages in domain '" + coordinator.domain_name(d) + "'");
    if (resolved[r].pages > width)
      refuse(ErrorKind::InvalidArgument, r,
             std::to_string(resolved[r].pages) + " blocks do not fit in width " + std::to_string(width));
    if (!resolved[r].backing) refuse(ErrorKind::SessionState, r, "the backing was released");
    resolved[r].slot = slot;
  }
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::int32_t* row = out + r * width;
    const auto& x = resolved[r];
    x.backing->copy_ids(x.slot, x.pages, row);
    std::fill(row + x.pages, row + width, pad);
  }
}

}  // namespace lifecore::sequence
