#include "lifecore/runtime/drop_queue.hpp"

#include <memory>
#include <new>

#include "lifecore/process_fork.hpp"

namespace lifecore::runtime {

std::size_t DropQueue::in_flight() const noexcept {
  std::size_t count = 0;
  for (const auto& batch : batches_) count += batch.items.size();
  return count;
}

driver::Status DropQueue::flush(driver::Driver& driver, driver::StreamHandle stream) {
  if (pending_.empty()) return driver::Status::success();
  // The batch's room first: a throw here leaves the items pending, as a failed event call does.
  batches_.emplace_back();
  driver::EventHandle event{};
  if (!spare_events_.empty()) {
    event = spare_events_.back();
    spare_events_.pop_back();
  } else if (auto status = driver.event_create(&event, driver::EventTiming::disabled); !status.ok()) {
    batches_.pop_back();
    return status;
  }
  if (auto status = driver.event_record(event, stream); !status.ok()) {
    batches_.pop_back();
    keep_spare(driver, event);
    return status;
  }
  batches_.back().event = event;
  batches_.back().items.swap(pending_);  // pending_ is left empty
  pending_memory_ = 0;
  return driver::Status::success();
}

void DropQueue::keep_spare(driver::Driver& driver, driver::EventHandle event) noexcept {
  try {
    spare_events_.push_back(event);
  } catch (const std::bad_alloc&) {
    (void)driver.event_destroy(event);  // no room to keep it (out of host memory)
  }
}

void DropQueue::retire(driver::Driver& driver, Batch& batch) {
  for (auto& release : batch.items) release();
  batch.items.clear();
  if (batch.event != driver::EventHandle{}) keep_spare(driver, batch.event);
}

void DropQueue::collect(driver::Driver& driver) {
  while (!batches_.empty()) {
    if (!driver.event_query(batches_.front().event).ok()) return;  // not ready (or unknown): keep
    retire(driver, batches_.front());
    batches_.pop_front();
  }
}

void DropQueue::release_all(driver::Driver& driver) {
  while (!batches_.empty()) {
    retire(driver, batches_.front());
    batches_.pop_front();
  }
  for (auto& release : pending_) release();
  pending_.clear();
  pending_memory_ = 0;
  for (auto event : spare_events_) driver.event_destroy(event);
  spare_events_.clear();
}

void DropQueue::abandon_until_exit() noexcept {
  struct Abandoned {
    std::vector<Release> pending;
    std::deque<Batch> batches;
  };
  try {
    auto abandoned = std::make_shared<Abandoned>();
    abandoned->pending.swap(pending_);
    pending_memory_ = 0;
    abandoned->batches.swap(batches_);
    keep_until_exit(std::move(abandoned));
  } catch (...) {
    // No memory for the holder: the items are leaked where they are, never run.
    new (&pending_) std::vector<Release>();
    new (&batches_) std::deque<Batch>();
    pending_memory_ = 0;
  }
  spare_events_.clear();  // handles only: the parent's events, never destroyed here
}

DropQueue::~DropQueue() {
  // The owner calls release_all before going away; anything left here is released without
  // a fence rather than leaked (the device is closing).
  for (auto& batch : batches_)
    for (auto& release : batch.items) release();
  for (auto& release : pending_) release();
}

}  // namespace lifecore::runtime
