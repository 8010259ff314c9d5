#include "driver/mock/mock_stream_worker.hpp"

#include <utility>

namespace lifecore::driver::mock {

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

StreamWorker::StreamWorker(WorkerGate* gate) : gate_(gate), thread_([this] { run(); }) {}

StreamWorker::~StreamWorker() { stop(); }

bool StreamWorker::enqueue(Task task) {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return false;
    queue_.push_back(std::move(task));
    ++pending_;
    wake = waiting_;
  }
  if (wake) work_.notify_one();
  return true;
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
  }
  work_.notify_all();
  std::lock_guard join_lock(join_mutex_);
  if (thread_.joinable()) thread_.join();
}

void StreamWorker::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    while (queue_.empty() && !stopping_) {
      waiting_ = true;
      work_.wait(lock);
      waiting_ = false;
    }
    if (queue_.empty()) return;  // stopping, and everything queued has run
    Task task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    gate_->wait_open();
    Status status = task();
    task = nullptr;  // release what the item held before reporting it done
    lock.lock();
    if (!status.ok() && error_.ok()) error_ = std::move(status);
    if (--pending_ == 0) drained_.notify_all();
  }
}

}  // namespace lifecore::driver::mock
