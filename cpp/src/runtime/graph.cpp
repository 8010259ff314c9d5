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
      hardware_(parts.hardware),
      node_count_(parts.node_count),
      exec_(parts.exec),
      ops_(std::move(parts.ops)),
      retained_(std::move(parts.retained)),
      staging_(std::move(parts.staging)) {}

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
  driver::Driver& driver = device_->driver();
  if (hardware_) return driver.graph_launch(exec_, handle);
  for (const SoftwareOp& op : ops_) {
    driver::Status status;
    if (const auto* launch = std::get_if<LaunchOp>(&op))
      status = driver.launch_kernel(launch->function, launch->grid, launch->block, 0, handle, launch->args);
    else if (const auto* copy = std::get_if<CopyOp>(&op))
      status = driver.memcpy_dtod_async(copy->dst, copy->src, copy->bytes, handle);
    else if (const auto* fill = std::get_if<FillOp>(&op))
      status = driver.memset_d32_async(fill->dst, fill->value, fill->count, handle);
    if (!status.ok()) return status;
  }
  return driver::Status::success();
}

void Graph::destroy() noexcept {
  std::vector<std::weak_ptr<Stream>> streams;
  std::vector<SliceId> retained;
  driver::GraphExecHandle exec{};
  {
    std::lock_guard lock(mutex_);
    if (!alive_) return;
    alive_ = false;
    streams = std::move(replayed_on_);
    retained = std::move(retained_);
    exec = exec_;
    exec_ = {};
    ops_.clear();
  }
  // Wait for the graph's work before its memory, pins and staging can be reused. The last
  // reference may be dropped from Python: never wait with the interpreter lock held.
  BlockingWait blocking;
  for (auto& weak : streams)
    if (auto stream = weak.lock()) stream->wait_for_graph_work();
  if (hardware_ && exec != driver::GraphExecHandle{} && !device_->closed())
    (void)device_->driver().graph_exec_destroy(exec);
  device_->memory().release_retained(retained);
  device_->info().graph_release(id_);
  {
    std::lock_guard lock(mutex_);
    staging_.clear();
  }
  device_->forget_graph(id_);
}

}  // namespace lifecore::runtime
