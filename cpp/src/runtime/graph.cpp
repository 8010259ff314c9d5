#include "lifecore/runtime/graph.hpp"

#include "lifecore/error.hpp"
#include "runtime/blocking_wait.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/stream.hpp"

namespace lifecore::runtime {

Graph::Graph(Parts parts)
    : device_(std::move(parts.device)),
      origin_(std::move(parts.origin)),
      id_(parts.id),
      hardware_(parts.recording->in_driver()),
      node_count_(parts.recording->node_count()),
      recording_(std::move(parts.recording)),
      retained_(std::move(parts.retained)),
      holds_(std::move(parts.holds)) {}

Graph::~Graph() { destroy(); }

bool Graph::alive() const {
  std::lock_guard lock(mutex_);
  return alive_;
}

void Graph::replay(Stream* stream) {
  Stream& target = stream ? *stream : *origin_;
  if (target.device().get() != device_.get())
    raise(ErrorKind::InvalidArgument, "replay: the stream belongs to another device than the graph");
  target.replay(*this);
}

driver::Status Graph::launch_on(Stream& stream, driver::StreamHandle handle) {
  std::lock_guard lock(mutex_);
  if (!alive_) raise(ErrorKind::Closed, "replay was given an unknown or already-destroyed graph");
  bool known = false;
  for (auto& weak : replayed_on_) {
    auto s = weak.lock();
    if (s.get() == &stream) known = true;
  }
  if (!known) replayed_on_.push_back(stream.weak_from_this());
  return recording_->launch(device_->driver(), handle);
}

void Graph::destroy() noexcept {
  std::vector<std::weak_ptr<Stream>> streams;
  std::vector<SliceId> retained;
  std::unique_ptr<Recording> recording;
  std::vector<std::shared_ptr<void>> holds;
  {
    std::lock_guard lock(mutex_);
    if (!alive_) return;
    alive_ = false;
    streams = std::move(replayed_on_);
    retained = std::move(retained_);
    recording = std::move(recording_);
    holds = std::move(holds_);
  }
  // Wait for the graph's work before its memory, pins and staging can be reused. The last
  // reference may be dropped from Python: never wait with the interpreter lock held.
  BlockingWait blocking;
  for (auto& weak : streams)
    if (auto stream = weak.lock()) stream->wait_for_graph_work();
  if (!device_->closed()) recording->release(device_->driver());
  device_->memory().release_retained(retained);
  device_->info().graph_release(id_);
  recording.reset();  // its staging last, once nothing can read it
  holds.clear();      // and the foreign memory, once no recording names its addresses
  device_->forget_graph(id_);
}

}  // namespace lifecore::runtime
