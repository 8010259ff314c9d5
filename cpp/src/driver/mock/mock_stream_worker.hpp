// One mock stream's execution engine: a FIFO of work items run in order by one worker thread,
// so the order, fences and synchronisation the runtime relies on are real, not simulated.
//
// The eager path is kept cheap because a replay's advantage is measured against it: the queue
// is a ring of reused slots (a kernel node written into a slot reuses the slot's argument
// storage, so a steady stream of launches allocates nothing), and a worker that ran out of
// work in the middle of a burst watches the queue for a short while before it sleeps, so a
// burst of launches wakes it about once instead of once per launch.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lifecore/driver/status.hpp"
#include "driver/mock/mock_work.hpp"

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
  // A work item of its own; a failed Status becomes the stream's asynchronous error.
  using Task = std::function<Status()>;
  // A queue slot: a node run against the stream's memory (named `call` in errors), or a task.
  struct Item {
    WorkNode node;
    const std::string* call = nullptr;
    Task task;
  };

  // Told of a sticky failure the moment an item fails with one, as a CUDA context is poisoned
  // when the fault happens, not when a later call reports it.
  using StickySink = std::function<void(const Status&)>;

  StreamWorker(WorkerGate* gate, AddressSpace* memory, StickySink on_sticky = {});
  ~StreamWorker();  // drains the queue and joins the thread
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;

  // False (nothing queued) once the worker is stopping.
  bool enqueue(Task task);
  bool enqueue(WorkNode node, const std::string* call);
  // A kernel node, written into its slot in place.
  bool enqueue_kernel(const KernelNode& kernel, const std::vector<KernelArg>& args, const std::string* call);
  // True when no item is queued or running.
  bool idle() const;
  void wait_idle() const;
  // The first asynchronous error since the last call, cleared (so the stream stays usable).
  Status take_error();
  // Runs what is queued, then joins the thread. Idempotent; enqueue fails afterwards.
  void stop();

 private:
  // Under mutex_: the slot the next item goes into (the ring grows when full). The item
  // counts as queued only once commit_locked() says so.
  Item& next_slot_locked();
  // Under mutex_: the slot is queued; returns whether the worker must be woken.
  bool commit_locked();
  // Queues one item: `fill` writes it into its slot under the lock. False once stopping.
  template <class Fill>
  bool push(Fill fill);
  void run();
  // Watches the queue without the lock for a short while; true when work arrived.
  bool spin_for_work() const;

  WorkerGate* gate_;
  AddressSpace* memory_;
  StickySink on_sticky_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  mutable std::condition_variable drained_;
  std::vector<Item> ring_;
  std::size_t head_ = 0;                  // the oldest queued slot
  std::size_t count_ = 0;                 // queued slots
  std::atomic<std::size_t> queued_{0};    // count_, for spin_for_work
  std::atomic<bool> stop_requested_{false};
  std::size_t pending_ = 0;  // queued + running
  bool waiting_ = false;     // the worker sleeps on work_: only then does enqueue notify
  bool stopping_ = false;
  Status error_;
  std::mutex join_mutex_;
  std::thread thread_;
};

}  // namespace lifecore::driver::mock
