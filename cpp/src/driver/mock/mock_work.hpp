// Units of device work, shared by the eager path (one queued item each) and by graphs (a
// captured list replayed in order inside one item), so both run exactly the same code.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "lifecore/driver/driver.hpp"
#include "driver/mock/mock_event.hpp"
#include "driver/mock/mock_kernels.hpp"

namespace lifecore::driver::mock {

struct KernelNode {
  FunctionHandle function{};
  const MockKernel* kernel = nullptr;
  Dim3 grid, block;
  std::uint32_t shared_bytes = 0;
  std::vector<KernelArg> args;
};
// The host side is read (or written) when the node runs, at every replay, as in CUDA.
struct CopyHostToDeviceNode {
  DevicePtr dst = 0;
  const void* src = nullptr;
  std::size_t bytes = 0;
};
struct CopyDeviceToHostNode {
  void* dst = nullptr;
  DevicePtr src = 0;
  std::size_t bytes = 0;
};
struct CopyDeviceToDeviceNode {
  DevicePtr dst = 0;
  DevicePtr src = 0;
  std::size_t bytes = 0;
};
struct MemsetNode {
  DevicePtr dst = 0;
  std::uint32_t value = 0;
  std::size_t count = 0;  // 32-bit words
};
// Graph memory: the address was fixed at capture; each launch backs it anew.
struct MemAllocNode {
  DevicePtr ptr = 0;
  std::size_t bytes = 0;
};
struct MemFreeNode {
  DevicePtr ptr = 0;
};
// No event-record node: a plain event record inside a capture makes no node in CUDA (only
// the EXTERNAL record flag would, which the driver interface does not use), so a replay never
// records the event.

using WorkNode = std::variant<KernelNode, CopyHostToDeviceNode, CopyDeviceToHostNode, CopyDeviceToDeviceNode,
                              MemsetNode, MemAllocNode, MemFreeNode>;

const char* node_kind_name(const WorkNode& node);

// Runs a kernel, copy, memset or free node. (Alloc nodes need launch state: run_graph.)
Status execute_node(const WorkNode& node, const ExecContext& context);

// Runs a graph's nodes in order and stops at the first failure.
Status run_graph(const std::vector<WorkNode>& nodes, const ExecContext& context);

// A recorded graph. `live_execs` is guarded by the owning driver's table mutex.
class AddressSpace;

struct GraphData {
  std::vector<WorkNode> nodes;
  std::size_t live_execs = 0;
  // Where its memory nodes' addresses were reserved: they go back when the last holder of the
  // graph (its handle, an executable graph of it, or the capture recording it) lets go.
  std::weak_ptr<AddressSpace> space;

  GraphData() = default;
  GraphData(const GraphData&) = delete;
  GraphData& operator=(const GraphData&) = delete;
  ~GraphData();

  GraphNodeCounts counts() const;
  bool has_memory_nodes() const;
};

// CUDA's exec-update rule: identical topology (node count, kinds in order); parameters, and a
// kernel node's function, may change. *why explains a refusal.
GraphUpdateResult compare_for_update(const std::vector<WorkNode>& current, const std::vector<WorkNode>& next,
                                     std::string* why);

}  // namespace lifecore::driver::mock
