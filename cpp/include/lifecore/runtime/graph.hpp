// A sealed capture: its Recording (the driver's executable graph, or the runtime's op list; see
// recorder.hpp), launched one way whichever it is. The graph retains every pool slice its
// recording touched (so the pool cannot hand that memory out while a replay writes it) and the
// info-cache entries it launched with; the recording keeps the staging host memory its copies
// re-read, and the graph holds the foreign tensors it was recorded with. destroy() (also on the
// last reference) waits for the graph's work, then releases all that; what a stream it could
// not wait for (the wait failed) may still run is released at that stream's next fence instead.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "lifecore/runtime/info_cache.hpp"
#include "lifecore/runtime/memory_manager.hpp"
#include "lifecore/runtime/recorder.hpp"
#include "lifecore/driver/driver.hpp"

namespace lifecore::runtime {

class Device;
class Stream;

class Graph {
 public:
  struct Parts {
    std::shared_ptr<Device> device;
    std::shared_ptr<Stream> origin;
    GraphId id = 0;
    std::unique_ptr<Recording> recording;
    std::vector<SliceId> retained;
    // Foreign memory the recording reads or writes (runtime/foreign_memory.hpp): released
    // after the graph's work and its recording, so no replay reaches memory its owner freed.
    std::vector<std::shared_ptr<void>> holds;
  };
  explicit Graph(Parts parts);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // On `stream` (of the same device), or the stream that captured it when null.
  void replay(Stream* stream);
  // Idempotent; never throws.
  void destroy() noexcept;
  bool alive() const;
  bool is_hardware() const noexcept { return hardware_; }
  std::size_t node_count() const noexcept { return node_count_; }
  GraphId id() const noexcept { return id_; }
  const std::shared_ptr<Device>& device() const noexcept { return device_; }
  // How many streams the graph remembers having replayed on (destroy waits for each). A stream
  // that is gone is forgotten at the next replay, so this stays at the streams still alive.
  std::size_t streams_remembered() const;

  // Called by Stream::replay with the stream's lock held: issues the graph's work.
  // ClosedError when destroyed. Driver failures are returned, not thrown.
  driver::Status launch_on(Stream& stream, driver::StreamHandle handle);

 private:
  std::shared_ptr<Device> device_;
  std::shared_ptr<Stream> origin_;
  const GraphId id_;
  const bool hardware_;
  const std::size_t node_count_;

  mutable std::mutex mutex_;
  bool alive_ = true;
  std::unique_ptr<Recording> recording_;  // null once destroyed
  std::vector<SliceId> retained_;
  std::vector<std::shared_ptr<void>> holds_;
  // The streams it was replayed on, each by address (compared on every replay without locking
  // the weak reference) and weakly (destroy waits for the live ones).
  struct ReplayedOn {
    const Stream* stream = nullptr;
    std::weak_ptr<Stream> weak;
  };
  std::vector<ReplayedOn> replayed_on_;
};

}  // namespace lifecore::runtime
