// Resources a stream's queued work may still read (freed slices, staging host copies,
// evicted info buffers) are released only once that work is done: a fenced flush records an
// event after everything pushed so far, and the batch is released when the event completes
// (or the stream is known idle after a successful synchronize).
// Not thread-safe on its own: the owning Stream serialises calls.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <vector>

#include "lifecore/driver/driver.hpp"

namespace lifecore::runtime {

class DropQueue {
 public:
  using Release = std::function<void()>;  // must not throw

  // Flush automatically once this many operations were issued with something pending.
  static constexpr std::size_t flush_threshold = 64;

  void push(Release release) { pending_.push_back(std::move(release)); }
  // A release that gives device memory back to the pool (a slice's unbind or unpin): counted, so
  // an allocation the pool cannot serve knows whether a fence now could serve it.
  void push_memory(Release release) {
    pending_.push_back(std::move(release));
    ++pending_memory_;
  }
  std::size_t pending() const noexcept { return pending_.size(); }
  std::size_t pending_memory() const noexcept { return pending_memory_; }
  std::size_t in_flight() const noexcept;

  // Records a fence after everything pushed so far. A failed event call leaves the items
  // pending (a later flush or synchronize releases them) and returns the status.
  driver::Status flush(driver::Driver& driver, driver::StreamHandle stream);
  // Releases the batches whose fence completed, in order; never blocks.
  void collect(driver::Driver& driver);
  // The stream was synchronized successfully: everything pushed so far is done.
  void release_all(driver::Driver& driver);

  // In a forked child: every item and event is kept until the process exits, never run or
  // destroyed (a release takes locks and calls the driver of the parent's).
  void abandon_until_exit() noexcept;

  ~DropQueue();

 private:
  struct Batch {
    driver::EventHandle event{};
    std::vector<Release> items;
  };
  void retire(driver::Driver& driver, Batch& batch);
  // A fence's event kept for the next flush, or destroyed when there is no room to keep it.
  void keep_spare(driver::Driver& driver, driver::EventHandle event) noexcept;

  std::vector<Release> pending_;
  std::size_t pending_memory_ = 0;  // of pending_, those push_memory queued
  std::deque<Batch> batches_;
  std::vector<driver::EventHandle> spare_events_;
};

}  // namespace lifecore::runtime
