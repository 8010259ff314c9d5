// A mock event: a marker that completes when the stream's worker reaches it, with the time
// it did. Generations let a re-record on another stream and an older marker coexist.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace lifecore::driver::mock {

class EventState {
 public:
  using Clock = std::chrono::steady_clock;

  // A new record was enqueued: returns its generation, which complete() will be given.
  std::uint64_t begin_record();
  // The worker reached that record.
  void complete(std::uint64_t generation);
  bool ever_recorded() const;
  // True when every record enqueued so far has completed (also when never recorded, as CUDA).
  bool done() const;
  // Waits for the records enqueued before this call.
  void wait() const;
  Clock::time_point timestamp() const;
  // The generation of the latest record enqueued so far (0: never recorded), and a wait for
  // that one (not for later records: a stream waiting on its own later record would hang).
  std::uint64_t latest_generation() const;
  void wait_for(std::uint64_t generation) const;

  // The capture that last recorded this event (0: the last record was not captured).
  // Guarded by the owning driver's table mutex, not by this object's.
  std::uint64_t captured_by = 0;
  // Whether it was created with timing (elapsed time is refused otherwise). Set at creation.
  bool timing = true;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable completed_cv_;
  std::uint64_t recorded_ = 0;
  std::uint64_t completed_ = 0;
  Clock::time_point timestamp_{};
};

}  // namespace lifecore::driver::mock
