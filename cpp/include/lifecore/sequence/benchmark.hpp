// C++ loops for the sequence benchmarks (benchmarks/bench_sequence.py prints them beside the
// Python figures): the same lifecycle and decode step, without the binding layer.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lifecore::sequence {

struct SequenceBenchResult {
  double seconds = 0;
  std::uint64_t operations = 0;  // lifecycles or steps
};

// Full lifecycles (admit -> open -> frames while extending page by page to `target_tokens`
// -> complete -> release) with `live` other sequences admitted and open the whole time.
// `primitives`: try_ensure_backing_covers / acquire_frame / commit per page; else step().
SequenceBenchResult bench_lifecycles(std::uint64_t lifecycles, std::uint64_t live, std::uint64_t target_tokens,
                                     std::uint32_t tokens_per_page, bool primitives);
// Decode steps of one sequence: `primitives` = acquire_frame / try_ensure_backing_covers /
// commit as separate calls; otherwise the one-call step().
SequenceBenchResult bench_decode_steps(std::uint64_t steps, std::uint32_t tokens_per_page, bool primitives);

// sizeof of the per-sequence and per-extent records (without allocator overhead).
struct BookkeepingSizes {
  std::size_t session_state = 0, session_handle = 0, resources = 0, backing = 0, snapshot = 0, extent = 0;
};
BookkeepingSizes bookkeeping_sizes();

}  // namespace lifecore::sequence
