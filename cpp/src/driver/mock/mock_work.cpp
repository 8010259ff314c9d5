#include "driver/mock/mock_work.hpp"
#include "driver/mock/mock_address_space.hpp"
#include "driver/mock/mock_status.hpp"

#include <cstring>
#include <sstream>

namespace lifecore::driver::mock {

GraphData::~GraphData() {
  const std::shared_ptr<AddressSpace> memory = space.lock();  // none once the driver went
  if (!memory) return;
  try {
    std::vector<DevicePtr> bases;
    for (const WorkNode& node : nodes)
      if (const auto* alloc = std::get_if<MemAllocNode>(&node)) bases.push_back(alloc->ptr);
    if (!bases.empty()) memory->release(bases);
  } catch (...) {
    // Out of memory for the list: the addresses stay reserved (the space is only the mock's).
  }
}
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

std::string hex(std::uint64_t value) {
  std::ostringstream out;
  out << "0x" << std::hex << value;
  return out.str();
}

Status refused(const ExecContext& context, const char* what, const char* side, DevicePtr ptr, std::size_t bytes) {
  return mock_status(context.access_error, context.call,
                     std::string(what) + ": " + side + " " + hex(ptr) + " with " + std::to_string(bytes) +
                         " bytes is not inside a live allocation");
}

}  // namespace

const char* node_kind_name(const WorkNode& node) {
  static constexpr const char* names[] = {"kernel",  "memcpy_htod", "memcpy_dtoh", "memcpy_dtod",
                                          "memset",  "mem_alloc",   "mem_free"};
  return names[node.index()];
}

Status execute_node(const WorkNode& node, const ExecContext& context) {
  return std::visit(
      Overloaded{
          [&](const KernelNode& kernel) -> Status {
            const std::uint64_t threads = std::uint64_t{kernel.grid.x} * kernel.block.x;
            return kernel.kernel->body(kernel.args, threads, context);
          },
          [&](const CopyHostToDeviceNode& copy) -> Status {
            if (copy.bytes == 0) return {};
            DeviceSpan dst = context.memory.resolve(copy.dst, copy.bytes);
            if (dst.data == nullptr) return refused(context, "memcpy_htod", "destination", copy.dst, copy.bytes);
            std::memcpy(dst.data, copy.src, copy.bytes);
            return {};
          },
          [&](const CopyDeviceToHostNode& copy) -> Status {
            if (copy.bytes == 0) return {};
            DeviceSpan src = context.memory.resolve(copy.src, copy.bytes);
            if (src.data == nullptr) return refused(context, "memcpy_dtoh", "source", copy.src, copy.bytes);
            std::memcpy(copy.dst, src.data, copy.bytes);
            return {};
          },
          [&](const CopyDeviceToDeviceNode& copy) -> Status {
            if (copy.bytes == 0) return {};
            DeviceSpan src = context.memory.resolve(copy.src, copy.bytes);
            if (src.data == nullptr) return refused(context, "memcpy_dtod", "source", copy.src, copy.bytes);
            DeviceSpan dst = context.memory.resolve(copy.dst, copy.bytes);
            if (dst.data == nullptr) return refused(context, "memcpy_dtod", "destination", copy.dst, copy.bytes);
            std::memmove(dst.data, src.data, copy.bytes);  // overlapping ranges of one allocation
            return {};
          },
          [&](const MemsetNode& set) -> Status {
            if (set.count == 0) return {};
            if (set.count > (~std::size_t{0}) / 4) return refused(context, "memset_d32", "destination", set.dst, set.count);
            DeviceSpan dst = context.memory.resolve(set.dst, set.count * 4);
            if (dst.data == nullptr) return refused(context, "memset_d32", "destination", set.dst, set.count * 4);
            for (std::size_t i = 0; i < set.count; ++i) std::memcpy(dst.data + i * 4, &set.value, 4);
            return {};
          },
          [&](const MemAllocNode& alloc) -> Status {
            if (context.memory.back(alloc.ptr)) return {};
            return mock_status(Code::out_of_memory, context.call,
                               "mem_alloc node: backing " + std::to_string(alloc.bytes) + " bytes at " +
                                   hex(alloc.ptr) + " would pass the device's memory limit");
          },
          [&](const MemFreeNode& free) -> Status {
            if (context.memory.free(free.ptr)) return {};
            return mock_status(context.access_error, context.call,
                               "mem_free: " + hex(free.ptr) + " is not a live allocation");
          },
      },
      node);
}

Status run_graph(const std::vector<WorkNode>& nodes, const ExecContext& context) {
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    Status status = execute_node(nodes[i], context);
    if (status.ok()) continue;
    // The launch claimed every alloc node's address; give back those it never reached.
    for (std::size_t j = i + 1; j < nodes.size(); ++j) {
      if (const auto* alloc = std::get_if<MemAllocNode>(&nodes[j])) context.memory.unclaim(alloc->ptr);
    }
    if (const auto* alloc = std::get_if<MemAllocNode>(&nodes[i])) context.memory.unclaim(alloc->ptr);
    status.message = "graph node " + std::to_string(i) + " (" + node_kind_name(nodes[i]) + "): " + status.message;
    return status;
  }
  return {};
}

GraphNodeCounts GraphData::counts() const {
  GraphNodeCounts counts;
  counts.total = nodes.size();
  for (const auto& node : nodes) {
    if (std::holds_alternative<MemAllocNode>(node)) ++counts.mem_alloc;
    if (std::holds_alternative<MemFreeNode>(node)) ++counts.mem_free;
  }
  return counts;
}

bool GraphData::has_memory_nodes() const {
  const GraphNodeCounts c = counts();
  return c.mem_alloc + c.mem_free != 0;
}

GraphUpdateResult compare_for_update(const std::vector<WorkNode>& current, const std::vector<WorkNode>& next,
                                     std::string* why) {
  if (current.size() != next.size()) {
    *why = "the executable graph has " + std::to_string(current.size()) + " nodes, the new graph " +
           std::to_string(next.size());
    return GraphUpdateResult::topology_changed;
  }
  for (std::size_t i = 0; i < current.size(); ++i) {
    if (current[i].index() != next[i].index()) {
      *why = "node " + std::to_string(i) + " is a " + node_kind_name(current[i]) + " node in the executable graph and a " +
             node_kind_name(next[i]) + " node in the new graph";
      return GraphUpdateResult::node_type_changed;
    }
    if (std::holds_alternative<MemAllocNode>(current[i]) || std::holds_alternative<MemFreeNode>(current[i])) {
      *why = "graphs with memory nodes cannot be updated";
      return GraphUpdateResult::not_supported;
    }
    // A kernel node may change its function (CUDA 11.2+, the version the mock reports): one
    // device, one context, so nothing else limits it here.
  }
  return GraphUpdateResult::success;
}

}  // namespace lifecore::driver::mock
