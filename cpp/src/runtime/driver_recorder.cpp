// The driver-capture recorder: inside a window the stream keeps issuing to the driver, which
// captures the work; the recording is the driver's executable graph (see recorder.hpp).
#include <string>
#include <utility>

#include "lifecore/runtime/recorder.hpp"

namespace lifecore::runtime {
namespace {

class DriverRecording final : public Recording {
 public:
  DriverRecording(driver::GraphExecHandle exec, std::size_t nodes, std::vector<Staging> staging)
      : exec_(exec), nodes_(nodes), staging_(std::move(staging)) {}

  bool in_driver() const noexcept override { return true; }
  std::size_t node_count() const noexcept override { return nodes_; }
  driver::Status launch(driver::Driver& driver, driver::StreamHandle stream) override {
    return driver.graph_launch(exec_, stream);
  }
  void upload(driver::Driver& driver, driver::StreamHandle stream) noexcept override {
    (void)driver.graph_upload(exec_, stream);
  }
  void release(driver::Driver& driver) noexcept override {
    if (exec_ != driver::GraphExecHandle{}) (void)driver.graph_exec_destroy(exec_);
    exec_ = {};
  }

 private:
  driver::GraphExecHandle exec_;
  const std::size_t nodes_;
  std::vector<Staging> staging_;  // the copies re-read it at every launch
};

class DriverRecorder final : public Recorder {
 public:
  DriverRecorder(driver::Driver& driver, driver::StreamHandle stream) : driver_(driver), stream_(stream) {}

  bool in_driver() const noexcept override { return true; }
  std::string host_work_refusal(const char*) const override { return {}; }

  driver::Status begin(driver::CaptureMode mode) override {
    driver::Status status = driver_.stream_begin_capture(stream_, mode);
    if (status.ok()) capturing_ = true;
    return status;
  }
  driver::Status fill(driver::DevicePtr dst, std::uint32_t value, std::size_t count) override {
    return driver_.memset_d32_async(dst, value, count, stream_);
  }
  driver::Status copy(driver::DevicePtr dst, driver::DevicePtr src, std::size_t bytes) override {
    return driver_.memcpy_dtod_async(dst, src, bytes, stream_);
  }
  driver::Status launch(driver::FunctionHandle function, driver::Dim3 grid, driver::Dim3 block,
                        const std::vector<driver::KernelArg>& args) override {
    return driver_.launch_kernel(function, grid, block, 0, stream_, args);
  }
  void retain(Staging staging) override { staging_.push_back(std::move(staging)); }

  driver::Status end() override { return end_capture(&graph_); }

  std::unique_ptr<Recording> seal(SealRefusal* refusal) override {
    driver::GraphNodeCounts counts;
    if (auto status = driver_.graph_node_counts(graph_, &counts); !status.ok()) {
      *refusal = {"end_capture: counting the graph's nodes failed (" + driver::status_summary(status) + "); nothing was sealed",
                  "driver", status};
      return nullptr;
    }
    const std::size_t memory_nodes = counts.mem_alloc + counts.mem_free;
    if (memory_nodes > 0) {
      *refusal = {"end_capture: capture recorded " + std::to_string(memory_nodes) +
                      " memory node(s): an allocation inside the capture window makes the graph un-relaunchable, so "
                      "the capture is rejected (the persistent pool should have served this allocation: run a "
                      "warmup after graph_prepare, or one more when a pass reads a buffer its previous pass "
                      "allocated, e.g. capture(fn, warmup=2))",
                  "memory_nodes", std::nullopt};
      return nullptr;
    }
    driver::GraphExecHandle exec{};
    if (auto status = driver_.graph_instantiate(graph_, &exec); !status.ok()) {
      *refusal = {"end_capture: instantiating the graph failed (" + driver::status_summary(status) + "); nothing was sealed",
                  "instantiate", status};
      return nullptr;
    }
    (void)driver_.graph_destroy(std::exchange(graph_, {}));
    return std::make_unique<DriverRecording>(exec, counts.total, std::exchange(staging_, {}));
  }

  void discard() noexcept override {
    if (graph_ != driver::GraphHandle{}) (void)driver_.graph_destroy(std::exchange(graph_, {}));
    staging_.clear();
  }

  bool driver_capturing() const noexcept override { return capturing_; }

  driver::Status abandon() override {
    driver::GraphHandle graph{};
    driver::Status status = end_capture(&graph);
    if (graph != driver::GraphHandle{}) (void)driver_.graph_destroy(graph);
    return status;
  }

  void forget() noexcept override { capturing_ = false; }

 private:
  // Ends the driver's capture, retrying once when a failed end left it open; afterwards
  // capturing_ says whether the driver still captures (both attempts failed).
  driver::Status end_capture(driver::GraphHandle* graph) {
    *graph = {};
    driver::Status status = driver_.stream_end_capture(stream_, graph);
    // Success and capture_invalidated (the driver ends the sequence with no graph) end the
    // capture; after a sticky status the context is gone, and its capture with it. Anything else
    // may have left it running (capture_wrong_thread): the driver is asked.
    auto ended = [](const driver::Status& s) {
      return s.ok() || s.code == driver::Code::capture_invalidated || s.sticky;
    };
    if (ended(status)) {
      capturing_ = false;
      return status;
    }
    if (*graph != driver::GraphHandle{}) (void)driver_.graph_destroy(std::exchange(*graph, {}));
    // A sticky status met on the way (the query, the retry) ends the capture with the context:
    // it is what the caller must see (a lost device), never "the driver still captures".
    driver::Status lost;
    capturing_ = still_captures(&lost);
    if (lost.sticky) return lost;
    if (capturing_) {
      // The end itself failed and the driver still captures: one retry before giving up.
      driver::GraphHandle retry{};
      driver::Status retried = driver_.stream_end_capture(stream_, &retry);
      if (retry != driver::GraphHandle{}) (void)driver_.graph_destroy(retry);
      if (retried.sticky) {
        capturing_ = false;
        return retried;
      }
      capturing_ = !ended(retried) && still_captures(&lost);
      if (lost.sticky) return lost;
    }
    return status;
  }

  // *lost: the query's status when it is sticky (the context is gone, and its capture with it).
  bool still_captures(driver::Status* lost) {
    driver::CaptureStatus capture = driver::CaptureStatus::none;
    std::uint64_t id = 0;
    driver::Status status = driver_.stream_capture_info(stream_, &capture, &id);
    if (status.sticky) {
      *lost = status;
      return false;
    }
    // A failed query proves nothing: assume it still captures (the next end finds out).
    return !status.ok() || capture != driver::CaptureStatus::none;
  }

  driver::Driver& driver_;
  const driver::StreamHandle stream_;
  bool capturing_ = false;          // the driver holds a capture on the stream
  driver::GraphHandle graph_{};     // what end() returned, until sealed or discarded
  std::vector<Staging> staging_;    // host memory the window's copies read
};

}  // namespace

std::unique_ptr<Recorder> make_driver_recorder(driver::Driver& driver, driver::StreamHandle stream) {
  return std::make_unique<DriverRecorder>(driver, stream);
}

}  // namespace lifecore::runtime
