// A sealed capture. A hardware graph is the driver's executable graph; a software graph is
// the list of operations the runtime recorded, replayed by re-issuing them. Either way the
// graph retains every pool slice its recording touched (so the pool cannot hand that memory
// out while a replay writes it), the info-cache entries it launched with, and, for writes a
// hardware graph recorded, their staging host memory (a replay re-reads it).
// destroy() (also on the last reference) waits for the graph's work, then releases all that.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <variant>
#include <vector>

#include "lifecore/runtime/info_cache.hpp"
#include "lifecore/runtime/memory_manager.hpp"
#include "lifecore/driver/driver.hpp"

namespace lifecore::runtime {

class Device;
class Stream;

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
using SoftwareOp = std::variant<LaunchOp, CopyOp, FillOp>;

class Graph {
 public:
  struct Parts {
    std::shared_ptr<Device> device;
    std::shared_ptr<Stream> origin;
    GraphId id = 0;
    bool hardware = false;
    driver::GraphExecHandle exec{};
    std::vector<SoftwareOp> ops;
    std::size_t node_count = 0;
    std::vector<SliceId> retained;
    std::vector<std::shared_ptr<const std::vector<std::uint8_t>>> staging;
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
  driver::GraphExecHandle exec_{};
  std::vector<SoftwareOp> ops_;
  std::vector<SliceId> retained_;
  std::vector<std::shared_ptr<const std::vector<std::uint8_t>>> staging_;
  std::vector<std::weak_ptr<Stream>> replayed_on_;
};

}  // namespace lifecore::runtime
