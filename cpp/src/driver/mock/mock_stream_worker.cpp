#include "driver/mock/mock_stream_worker.hpp"

#include <chrono>
#include <utility>

namespace lifecore::driver::mock {
namespace {

// Long enough to bridge the gap between two launches issued back to back from Python, short
// enough that a drained stream costs next to nothing. A busy watch, not a yield: yielding on a
// loaded machine hands the core away for a whole time slice.
constexpr std::chrono::microseconds spin_window{10};

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

void WorkerGate::pause() {
  std::lock_guard lock(mutex_);
  paused_.store(true);
}

void WorkerGate::resume() {
  {
    std::lock_guard lock(mutex_);
    paused_.store(false);
  }
  open_.notify_all();
}

void WorkerGate::wait_open() {
  if (!paused_.load()) return;  // the common case costs one atomic load
  std::unique_lock lock(mutex_);
  open_.wait(lock, [this] { return !paused_.load(); });
}

StreamWorker::StreamWorker(WorkerGate* gate, AddressSpace* memory, StickySink on_sticky)
    : gate_(gate), memory_(memory), on_sticky_(std::move(on_sticky)), ring_(16), thread_([this] { run(); }) {}

StreamWorker::~StreamWorker() { stop(); }

StreamWorker::Item& StreamWorker::next_slot_locked() {
  if (count_ == ring_.size()) {
    std::vector<Item> grown(ring_.size() * 2);
    for (std::size_t i = 0; i < count_; ++i) grown[i] = std::move(ring_[(head_ + i) % ring_.size()]);
    ring_ = std::move(grown);
    head_ = 0;
  }
  return ring_[(head_ + count_) % ring_.size()];
}

bool StreamWorker::commit_locked() {
  ++count_;
  ++pending_;
  queued_.store(count_, std::memory_order_release);
  return waiting_;
}

template <class Fill>
bool StreamWorker::push(Fill fill) {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return false;
    fill(next_slot_locked());
    wake = commit_locked();
  }
  if (wake) work_.notify_one();
  return true;
}

bool StreamWorker::enqueue(Task task) {
  return push([&](Item& slot) {
    slot.task = std::move(task);
    slot.call = nullptr;
  });
}

bool StreamWorker::enqueue(WorkNode node, const std::string* call) {
  return push([&](Item& slot) {
    slot.node = std::move(node);
    slot.call = call;
    slot.task = nullptr;
  });
}

bool StreamWorker::enqueue_kernel(const KernelNode& kernel, const std::vector<KernelArg>& args,
                                  const std::string* call) {
  return push([&](Item& slot) {
    if (auto* reused = std::get_if<KernelNode>(&slot.node)) {
      reused->function = kernel.function;
      reused->kernel = kernel.kernel;
      reused->grid = kernel.grid;
      reused->block = kernel.block;
      reused->shared_bytes = kernel.shared_bytes;
      reused->args.assign(args.begin(), args.end());  // within the slot's capacity after the first lap
    } else {
      KernelNode fresh = kernel;
      fresh.args = args;
      slot.node = std::move(fresh);
    }
    slot.call = call;
    slot.task = nullptr;
  });
}

bool StreamWorker::idle() const {
  std::lock_guard lock(mutex_);
  return pending_ == 0;
}

void StreamWorker::wait_idle() const {
  std::unique_lock lock(mutex_);
  drained_.wait(lock, [this] { return pending_ == 0; });
}

Status StreamWorker::take_error() {
  std::lock_guard lock(mutex_);
  return std::exchange(error_, Status{});
}

void StreamWorker::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    stop_requested_.store(true);
  }
  work_.notify_all();
  std::lock_guard join_lock(join_mutex_);
  if (thread_.joinable()) thread_.join();
}

bool StreamWorker::spin_for_work() const {
  const auto until = std::chrono::steady_clock::now() + spin_window;
  for (unsigned i = 1;; ++i) {
    if (queued_.load(std::memory_order_acquire) != 0 || stop_requested_.load()) return true;
    cpu_relax();
    if (i % 32 == 0 && std::chrono::steady_clock::now() >= until) return false;
  }
}

void StreamWorker::run() {
  Item current;  // swapped with the queue's slot: the slot keeps this item's storage for reuse
  // Work is arriving in a burst (items queued up behind the one taken, or one arrived while
  // watching): only then is watching for the next item worth a core. Work issued one call at
  // a time, each waited for, never makes the worker watch.
  bool burst = false;
  std::unique_lock lock(mutex_);
  for (;;) {
    if (count_ == 0 && !stopping_) {
      if (burst) {
        lock.unlock();
        burst = spin_for_work();
        lock.lock();
      }
      while (count_ == 0 && !stopping_) {
        waiting_ = true;
        work_.wait(lock);
        waiting_ = false;
      }
    }
    if (count_ == 0) return;  // stopping, and everything queued has run
    if (count_ > 1) burst = true;
    std::swap(current, ring_[head_]);
    head_ = (head_ + 1) % ring_.size();
    --count_;
    queued_.store(count_, std::memory_order_release);
    lock.unlock();
    gate_->wait_open();
    Status status = current.task ? current.task()
                                 : execute_node(current.node, ExecContext{*memory_, *current.call,
                                                                          Code::illegal_address});
    if (!status.ok() && status.sticky && on_sticky_) on_sticky_(status);
    // Release what the item held before reporting it done; a kernel node keeps its storage.
    current.task = nullptr;
    if (!std::holds_alternative<KernelNode>(current.node)) current.node = MemsetNode{};
    lock.lock();
    if (!status.ok() && error_.ok()) error_ = std::move(status);
    if (--pending_ == 0) drained_.notify_all();
  }
}

}  // namespace lifecore::driver::mock
