// The op-list recorder: inside a window the runtime keeps the stream's fills, copies and
// launches instead of issuing them, and a replay re-issues the list (see recorder.hpp). For
// drivers without graphs; host work cannot be recorded, so the stream refuses it.
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "lifecore/runtime/recorder.hpp"
#include "runtime/relaxed_capture_mode.hpp"

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
    if (unmarked_ && *unmarked_ != stream) {
      // Work issued with no mark after it (its record failed): waited for on the host, in
      // relaxed mode (no recording elsewhere refuses the wait or is invalidated by it). A stream
      // destroyed since finished its work first, so its refusal is no matter.
      RelaxedCaptureMode relaxed(driver);
      (void)driver.stream_synchronize(*unmarked_);
      unmarked_.reset();
    }
    driver::Status failed;
    for (const Op& op : ops_) {
      if (const auto* launch = std::get_if<LaunchOp>(&op))
        failed = driver.launch_kernel(launch->function, launch->grid, launch->block, 0, stream, launch->args);
      else if (const auto* copy = std::get_if<CopyOp>(&op))
        failed = driver.memcpy_dtod_async(copy->dst, copy->src, copy->bytes, stream);
      else if (const auto* fill = std::get_if<FillOp>(&op))
        failed = driver.memset_d32_async(fill->dst, fill->value, fill->count, stream);
      if (!failed.ok()) break;
    }
    // Marked whatever was issued, a failed replay's first operations included: the next replay
    // on another stream waits for them too.
    driver::Status marked = driver.event_record(ended_, stream);
    if (marked.ok()) {
      last_stream_ = stream;
      unmarked_.reset();
    } else {
      unmarked_ = stream;
    }
    return failed.ok() ? marked : failed;
  }
  void upload(driver::Driver&, driver::StreamHandle) noexcept override {}
  void release(driver::Driver& driver) noexcept override {
    if (ended_ != driver::EventHandle{}) (void)driver.event_destroy(ended_);  // an enqueued wait outlives it
    ended_ = {};
    last_stream_.reset();
    unmarked_.reset();
  }

 private:
  const std::vector<Op> ops_;
  std::vector<Staging> staging_;
  driver::EventHandle ended_{};                       // recorded after each replay, made at the first
  std::optional<driver::StreamHandle> last_stream_;   // where the last marked replay ran
  std::optional<driver::StreamHandle> unmarked_;      // where a replay ran whose mark failed
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
