#include "lifecore/runtime/graph.hpp"

#include "lifecore/error.hpp"
#include "runtime/blocking_wait.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/pause_points.hpp"
#include "lifecore/runtime/stream.hpp"

namespace lifecore::runtime {
namespace {

// What a destroyed graph's replays use: its retained slices, its info pins, its recording (and
// the staging the recording re-reads) and the foreign memory it holds, released when it goes.
struct GraphRemains {
  std::shared_ptr<Device> device;
  GraphId id = 0;
  std::vector<SliceId> retained;
  std::unique_ptr<Recording> recording;
  std::vector<std::shared_ptr<void>> holds;

  ~GraphRemains() {
    device->memory().release_retained(retained);
    device->info().graph_release(id);
    recording.reset();  // its staging last, once nothing can read it
    holds.clear();      // and the foreign memory, once no recording names its addresses
  }
};

}  // namespace

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
  if (device_->forked()) return false;  // as on a closed device (its lock may be held for ever)
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
  if (!alive_) raise(ErrorKind::Closed, "replay: the graph was destroyed");
  // A stream that is gone is dropped here: replayed on many short-lived streams, the list (and
  // this scan, on every replay) would otherwise grow without bound. An entry that is not expired
  // names the live stream at its address, so comparing addresses is exact.
  bool known = false;
  for (auto it = replayed_on_.begin(); it != replayed_on_.end();) {
    if (it->weak.expired()) {
      it = replayed_on_.erase(it);
      continue;
    }
    if (it->stream == &stream) known = true;
    ++it;
  }
  if (!known) replayed_on_.push_back(ReplayedOn{&stream, stream.weak_from_this()});
  return recording_->launch(device_->driver(), handle);
}

std::size_t Graph::streams_remembered() const {
  std::lock_guard lock(mutex_);
  return replayed_on_.size();
}

void Graph::destroy() noexcept {
  // In a child of fork(): its executable graph and the streams that replayed it are the parent's.
  if (device_->forked()) return;
  std::vector<ReplayedOn> streams;
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
  std::vector<std::shared_ptr<Stream>> unwaited;
  for (auto& replayed : streams)
    if (auto stream = replayed.weak.lock(); stream && !stream->wait_for_graph_work()) unwaited.push_back(std::move(stream));
  pause_points::reach(pause_points::Point::graph_destroy_waited);
  // Released even if the device closed meanwhile: close() releases only the graphs still alive,
  // and this destroy had taken this one (the driver lives as long as the device object does).
  recording->release(device_->driver());
  auto remains = std::make_shared<GraphRemains>();
  remains->device = device_;
  remains->id = id_;
  remains->retained = std::move(retained);
  remains->recording = std::move(recording);
  remains->holds = std::move(holds);
  // A stream whose wait failed (a capture of this thread forbade it, the driver refused it) may
  // still run a replay: what that replay uses goes after the stream's next fence, never now (the
  // pool would hand its memory to a new buffer while the replay writes it).
  for (auto& stream : unwaited) stream->release_after_work(remains);
  remains.reset();
  device_->forget_graph(id_);
}

}  // namespace lifecore::runtime
