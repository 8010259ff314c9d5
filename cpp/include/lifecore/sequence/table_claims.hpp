// The memory live decode tables write. A DecodeTable keeps what it wrote per row and writes
// only what changed, so any other writer of its memory (a second table, a block_table with
// that memory as `out`) leaves rows showing ids the table no longer knows of: an attention
// kernel would read another sequence's blocks. A table claims its memory while it lives;
// a claimed range is refused to the others.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace lifecore::runtime {
class Buffer;
}

namespace lifecore::sequence {

class TableClaim {
 public:
  // [data, data + bytes) of host memory, or the first `bytes` of `buffer`: InvalidArgumentError
  // naming `call` when a live table claimed any byte of it (nothing claimed then).
  TableClaim(const void* data, std::size_t bytes, const char* call);
  TableClaim(std::shared_ptr<runtime::Buffer> buffer, std::size_t bytes, const char* call);
  ~TableClaim();
  TableClaim(const TableClaim&) = delete;
  TableClaim& operator=(const TableClaim&) = delete;

 private:
  std::uint64_t id_;
};

// InvalidArgumentError naming `call` when a live table claimed a byte of host memory
// [data, data + bytes), or of `buffer`'s first `bytes`: for a writer that is not the table.
void refuse_a_claimed_table(const void* data, std::size_t bytes, const char* call);
void refuse_a_claimed_table(const runtime::Buffer& buffer, std::size_t bytes, const char* call);

}  // namespace lifecore::sequence
