// C++ loops for the sequence benchmarks: the same lifecycle and decode step as the Python
// sides, without the binding layer. They do the work only; the benchmark harness times each
// call beside the Python sides, so every printed figure comes from one clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace lifecore::sequence {

class AdmissionCoordinator;
class SequenceSession;

// A coordinator with `live` sequences admitted and open the whole time (set up once, outside
// any timed span), on which lifecycles run; and one long sequence on its own coordinator that
// decode steps continue across calls.
class SequenceBenchLoop {
 public:
  SequenceBenchLoop(std::uint64_t live, std::uint64_t target_tokens, std::uint32_t tokens_per_page);
  ~SequenceBenchLoop();
  SequenceBenchLoop(const SequenceBenchLoop&) = delete;
  SequenceBenchLoop& operator=(const SequenceBenchLoop&) = delete;

  // `count` full lifecycles: admit -> open -> frames while extending page by page to
  // `target_tokens` -> complete -> release. `primitives`: try_ensure_backing_covers /
  // acquire_frame / commit per page; else step().
  void lifecycles(std::uint64_t count, bool primitives);
  // `count` decode steps of the long sequence, one token each.
  void decode_steps(std::uint64_t count, bool primitives);

 private:
  std::uint64_t target_tokens_;
  std::uint32_t tokens_per_page_;
  std::shared_ptr<AdmissionCoordinator> coordinator_;
  std::vector<std::unique_ptr<SequenceSession>> others_;
  std::shared_ptr<AdmissionCoordinator> decode_coordinator_;
  std::unique_ptr<SequenceSession> decoding_;
  std::uint64_t decoded_ = 0;
};

// sizeof of the per-sequence and per-extent records (without allocator overhead).
struct BookkeepingSizes {
  std::size_t session_state = 0, session_handle = 0, resources = 0, backing = 0, snapshot = 0, extent = 0;
};
BookkeepingSizes bookkeeping_sizes();

}  // namespace lifecore::sequence
