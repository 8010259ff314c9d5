#include "runtime/launch_extents.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "lifecore/error.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/foreign_memory.hpp"

namespace lifecore::runtime {

namespace {

// The element type an argument names: a tensor's, or a typed view's; empty for a Buffer (bytes).
std::string_view named_element_type(const LaunchArg& arg) {
  if (arg.kind == LaunchArg::Kind::foreign) return arg.foreign->element_type;
  if (arg.kind == LaunchArg::Kind::buffer) return arg.view_type;
  return {};
}

// n as the kernel will read it, when the caller gave a valid one.
std::optional<std::uint64_t> element_count(const Kernel& kernel, const LaunchArg* args, std::size_t count,
                                           const InfoWords* info, std::size_t offset) {
  if (kernel.count_param() < 0) {
    if (!info || info->empty()) return std::nullopt;
    return info->front();
  }
  const auto param = static_cast<std::size_t>(kernel.count_param());
  if (param < offset || param - offset >= count) return std::nullopt;
  const LaunchArg& arg = args[param - offset];
  if (arg.kind != LaunchArg::Kind::integer || arg.above_int64 || arg.integer < 0 || arg.integer > UINT32_MAX)
    return std::nullopt;
  return static_cast<std::uint64_t>(arg.integer);
}

}  // namespace

void check_builtin_extents(const Kernel& kernel, driver::Dim3 grid, driver::Dim3 block, const LaunchArg* args,
                           std::size_t count, const InfoWords* info, std::size_t offset) {
  if (!kernel.has_extents()) return;
  // A built-in kernel indexes its elements by x alone, in 32 bits: on a device each block along
  // y or z would redo the x range, and a thread past 2^32 would wrap onto an element another
  // thread does, so y = x + y would land more than once (the emulated device runs x once).
  if (grid.y != 1 || grid.z != 1 || block.y != 1 || block.z != 1)
    raise(ErrorKind::InvalidArgument,
          "launch: " + kernel.signature() + ": a built-in kernel is one-dimensional, but grid is (" +
              std::to_string(grid.x) + ", " + std::to_string(grid.y) + ", " + std::to_string(grid.z) +
              ") and block is (" + std::to_string(block.x) + ", " + std::to_string(block.y) + ", " +
              std::to_string(block.z) + "): on a device every block along y or z would repeat the x range; give "
                                        "y = z = 1 (nothing was issued)");
  if (const std::uint64_t threads = std::uint64_t{grid.x} * block.x; threads > (std::uint64_t{1} << 32))
    raise(ErrorKind::InvalidArgument,
          "launch: " + kernel.signature() + ": grid.x * block.x = " + std::to_string(threads) +
              " threads, above 2^32: a built-in kernel's element index is 32 bits, and on a device the threads "
              "past it would wrap onto elements others do; launch at most 2^32 threads (nothing was issued)");
  if (info && info->size() < kernel.info_words())
    raise(ErrorKind::InvalidArgument, "launch: " + kernel.signature() + ": info holds " + std::to_string(info->size()) +
                                          " word(s), but the kernel reads " + std::to_string(kernel.info_words()) +
                                          " (" + std::string(kernel.summary()) + ") (nothing was issued)");
  // A tensor or a typed view names its element type: one of another type would be read as the
  // kernel's own (float64 read as float32 gives numbers, wrong ones). A Buffer is bytes.
  for (std::size_t i = 0; i < count; ++i) {
    const std::string_view held = named_element_type(args[i]);
    if (held.empty() || held == kernel.element_type()) continue;
    const std::string type(kernel.element_type());
    raise(ErrorKind::InvalidArgument,
          "launch: " + kernel.signature() + ": argument '" + kernel.param_names()[i + offset] + "' holds " +
              std::string(held) + " elements, but the kernel reads " + type + " (" +
              std::string(kernel.summary()) + "); pass a " + type + " tensor, or a Buffer (nothing was issued)");
  }
  const std::optional<std::uint64_t> n = element_count(kernel, args, count, info, offset);
  if (!n) return;
  // Both below 2^32 and the element a few bytes: the products fit.
  const std::uint64_t covered = std::min(*n, std::uint64_t{grid.x} * block.x);
  const std::uint64_t needed = covered * kernel.element_bytes();
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t param = i + offset;
    if (kernel.params()[param] != driver::ArgKind::pointer) continue;
    const LaunchArg& arg = args[i];
    std::size_t holds = 0;
    if (arg.kind == LaunchArg::Kind::buffer && arg.buffer) holds = arg.buffer->nbytes();
    else if (arg.kind == LaunchArg::Kind::foreign && arg.foreign) holds = arg.foreign->nbytes;
    else continue;  // not memory: the launch refuses it with the usual message
    if (holds < needed)
      raise(ErrorKind::InvalidArgument,
            "launch: " + kernel.signature() + ": argument '" + kernel.param_names()[param] + "' holds " +
                std::to_string(holds) + " bytes, but the launch covers " + std::to_string(covered) +
                " elements of " + std::to_string(kernel.element_bytes()) + " bytes (min(n = " + std::to_string(*n) +
                ", grid.x * block.x)): " + std::to_string(needed) + " (nothing was issued)");
  }
}

}  // namespace lifecore::runtime
