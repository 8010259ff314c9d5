// The op-list recorder: inside a window the runtime keeps the stream's fills, copies and
// launches instead of issuing them, and a replay re-issues the list (see recorder.hpp). For
// drivers without graphs; host work cannot be recorded, so the stream refuses it.
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
  driver::Status launch(driver::Driver& driver, driver::StreamHandle stream) override {
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
    return driver::Status::success();
  }
  void upload(driver::Driver&, driver::StreamHandle) noexcept override {}
  void release(driver::Driver&) noexcept override {}

 private:
  const std::vector<Op> ops_;
  std::vector<Staging> staging_;
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
