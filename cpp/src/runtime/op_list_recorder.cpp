// The op-list recorder: inside a window the runtime keeps the stream's fills, copies and
// launches instead of issuing them, and a replay re-issues the list (see recorder.hpp). For
// drivers without graphs; host work cannot be recorded, so the stream refuses it.
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "lifecore/runtime/recorder.hpp"

namespace lifecore::runtime {
namespace {

struct LaunchOp {
  driver::FunctionHandle function{};
  driver::Dim3 grid;
  driver::Dim3 block;
  std::vector<driver::KernelArg> args;
};
struct CopyOp {
  driver::DevicePtr dst = 0;
  driver::DevicePtr src = 0;
  std::size_t bytes = 0;
};
struct FillOp {
  driver::DevicePtr dst = 0;
  std::uint32_t value = 0;
  std::size_t count = 0;
};
using Op = std::variant<LaunchOp, CopyOp, FillOp>;

class OpListRecording final : public Recording {
 public:
  OpListRecording(std::vector<Op> ops, std::vector<Staging> staging)
      : ops_(std::move(ops)), staging_(std::move(staging)) {}

  bool in_driver() const noexcept override { return false; }
  std::size_t node_count() const noexcept override { return ops_.size(); }
  // Called under the graph's lock, one replay at a time. Each replay is ordered behind the one
  // before, as a driver orders an executable graph's launches: replayed on another stream, it
  // first waits, on the device, for the event that marked the previous replay's end (two
  // replays running at once would race on the same memory).
  driver::Status launch(driver::Driver& driver, driver::StreamHandle stream) override {
    if (ended_ == driver::EventHandle{}) {
      if (auto status = driver.event_create(&ended_, driver::EventTiming::disabled); !status.ok()) {
        ended_ = {};
        return status;
      }
    }
    if (last_stream_ && *last_stream_ != stream) {
      if (auto status = driver.stream_wait_event(driver.stream_native_handle(stream), ended_); !status.ok())
        return status;
    }
    for (const Op& op : ops_) {
      driver::Status status;
      if (const auto* launch = std::get_if<LaunchOp>(&op))
        status = driver.launch_kernel(launch->function, launch->grid, launch->block, 0, stream, launch->args);
      else if (const auto* copy = std::get_if<CopyOp>(&op))
        status = driver.memcpy_dtod_async(copy->dst, copy->src, copy->bytes, stream);
      else if (const auto* fill = std::get_if<FillOp>(&op))
        status = driver.memset_d32_async(fill->dst, fill->value, fill->count, stream);
      if (!status.ok()) return status;
    }
    // The replay issued with no mark after it: a replay on another stream would not wait for
    // it (only for the one marked before), so a failed record is the replay's failure.
    if (auto status = driver.event_record(ended_, stream); !status.ok()) return status;
    last_stream_ = stream;
    return driver::Status::success();
  }
  void upload(driver::Driver&, driver::StreamHandle) noexcept override {}
  void release(driver::Driver& driver) noexcept override {
    if (ended_ != driver::EventHandle{}) (void)driver.event_destroy(ended_);  // an enqueued wait outlives it
    ended_ = {};
    last_stream_.reset();
  }

 private:
  const std::vector<Op> ops_;
  std::vector<Staging> staging_;
  driver::EventHandle ended_{};                       // recorded after each replay, made at the first
  std::optional<driver::StreamHandle> last_stream_;   // where the last replay ran, when it was marked
};

class OpListRecorder final : public Recorder {
 public:
  bool in_driver() const noexcept override { return false; }
  std::string host_work_refusal(const char* op) const override {
    return std::string(op) +
           ": a software capture window records launches, fills and copies only, so this operation cannot be "
                       "part of a graph";
  }

  driver::Status begin(driver::CaptureMode) override {
    ops_.clear();
    return driver::Status::success();
  }
  driver::Status fill(driver::DevicePtr dst, std::uint32_t value, std::size_t count) override {
    ops_.push_back(FillOp{dst, value, count});
    return driver::Status::success();
  }
  driver::Status copy(driver::DevicePtr dst, driver::DevicePtr src, std::size_t bytes) override {
    ops_.push_back(CopyOp{dst, src, bytes});
    return driver::Status::success();
  }
  driver::Status launch(driver::FunctionHandle function, driver::Dim3 grid, driver::Dim3 block,
                        const std::vector<driver::KernelArg>& args) override {
    ops_.push_back(LaunchOp{function, grid, block, args});
    return driver::Status::success();
  }
  void retain(Staging staging) override { staging_.push_back(std::move(staging)); }

  driver::Status end() override { return driver::Status::success(); }
  std::unique_ptr<Recording> seal(SealRefusal*) override {
    return std::make_unique<OpListRecording>(std::exchange(ops_, {}), std::exchange(staging_, {}));
  }
  void discard() noexcept override {
    ops_.clear();
    staging_.clear();
  }

  // Nothing of the driver's is held.
  bool driver_capturing() const noexcept override { return false; }
  driver::Status abandon() override { return driver::Status::success(); }
  void forget() noexcept override {}

 private:
  std::vector<Op> ops_;
  std::vector<Staging> staging_;
};

}  // namespace

std::unique_ptr<Recorder> make_op_list_recorder() { return std::make_unique<OpListRecorder>(); }

}  // namespace lifecore::runtime
