// One mock stream's execution engine: a FIFO of work items run in order by one worker thread,
// so the order, fences and synchronisation the runtime relies on are real, not simulated.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "lifecore/driver/status.hpp"

namespace lifecore::driver::mock {

// A device-wide switch that holds every worker before its next item: a test can then see
// work pending (stream_query -> not_ready) deterministically, without timing.
class WorkerGate {
 public:
  void pause();
  void resume();
  void wait_open();

 private:
  std::atomic<bool> paused_{false};
  std::mutex mutex_;
  std::condition_variable open_;
};

class StreamWorker {
 public:
  // A work item; a failed Status becomes the stream's asynchronous error.
  using Task = std::function<Status()>;

  explicit StreamWorker(WorkerGate* gate);
  ~StreamWorker();  // drains the queue and joins the thread
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;

  // False (task dropped) once the worker is stopping.
  bool enqueue(Task task);
  // True when no item is queued or running.
  bool idle() const;
  void wait_idle() const;
  // The first asynchronous error since the last call, cleared (so the stream stays usable).
  Status take_error();
  // Runs what is queued, then joins the thread. Idempotent; enqueue fails afterwards.
  void stop();

 private:
  void run();

  WorkerGate* gate_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  mutable std::condition_variable drained_;
  std::deque<Task> queue_;
  std::size_t pending_ = 0;  // queued + running
  bool waiting_ = false;     // the worker sleeps on work_: only then does enqueue notify
  bool stopping_ = false;
  Status error_;
  std::mutex join_mutex_;
  std::thread thread_;
};

}  // namespace lifecore::driver::mock
