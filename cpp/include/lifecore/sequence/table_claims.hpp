// The memory live decode tables write. A DecodeTable keeps what it wrote per row and writes
// only what changed, so any other writer of its memory (a second table, a block_table with
// that memory as `out`) leaves rows showing ids the table no longer knows of: an attention
// kernel would read another sequence's blocks. A table claims its memory while it lives;
// a claimed range is refused to the others.
//
// Bytes are compared where they are: a Buffer on a device whose memory is host memory (the
// mock) by its host bytes, so a host view of it (NumPy through DLPack) is the same memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace lifecore::runtime {
class Buffer;
}

namespace lifecore::sequence {

class TableClaim {
 public:
  // Whether a host table's memory is still where it was claimed: an array can be resized
  // behind its export and its old memory freed, and that memory then is no table's. Called
  // with no lock of the claims held, when another writer meets the claim.
  using StillThere = std::function<bool()>;

  // [data, data + bytes) of host memory, or the first `bytes` of `buffer`: InvalidArgumentError
  // naming `call` when a live table claimed any byte of it (nothing claimed then).
  TableClaim(const void* data, std::size_t bytes, const char* call, std::shared_ptr<const StillThere> still_there);
  TableClaim(std::shared_ptr<runtime::Buffer> buffer, std::size_t bytes, const char* call);
  ~TableClaim();
  TableClaim(const TableClaim&) = delete;
  TableClaim& operator=(const TableClaim&) = delete;

 private:
  std::uint64_t id_ = 0;
};

// InvalidArgumentError naming `call` when a live table claimed a byte of host memory
// [data, data + bytes), or of `buffer`'s first `bytes`: for a writer that is not the table.
void refuse_a_claimed_table(const void* data, std::size_t bytes, const char* call);
void refuse_a_claimed_table(const runtime::Buffer& buffer, std::size_t bytes, const char* call);

}  // namespace lifecore::sequence
