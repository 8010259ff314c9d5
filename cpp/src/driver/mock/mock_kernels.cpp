#include "driver/mock/mock_kernels.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <sstream>

namespace lifecore::driver::mock {
namespace {

float f32_arg(const KernelArg& arg) { return std::bit_cast<float>(static_cast<std::uint32_t>(arg.bits)); }
std::uint32_t u32_arg(const KernelArg& arg) { return static_cast<std::uint32_t>(arg.bits); }

// Element access through memcpy: device offsets need not be 4-aligned on the host side.
float load(const std::byte* base, std::uint64_t i) {
  float value;
  std::memcpy(&value, base + i * sizeof(float), sizeof(float));
  return value;
}
void store(std::byte* base, std::uint64_t i, float value) {
  std::memcpy(base + i * sizeof(float), &value, sizeof(float));
}

// The host bytes behind a pointer parameter, or the access error naming kernel and parameter.
Status access(const ExecContext& context, std::string_view kernel, std::string_view param, DevicePtr ptr,
              std::uint64_t bytes, DeviceSpan* out) {
  *out = context.memory.resolve(ptr, bytes);
  if (out->data != nullptr) return {};
  std::ostringstream message;
  message << kernel << ": parameter " << param << " = 0x" << std::hex << ptr << std::dec << " with " << bytes
          << " bytes to access is not inside a live allocation";
  return mock_status(context.access_error, context.call, message.str());
}

// axpy_f32(n, a, x, y) and its info-buffer twin share this loop.
Status axpy(std::string_view kernel, std::uint64_t count, float a, DevicePtr x, DevicePtr y,
            const ExecContext& context) {
  if (count == 0) return {};
  DeviceSpan xs, ys;
  if (auto s = access(context, kernel, "x", x, count * 4, &xs); !s.ok()) return s;
  if (auto s = access(context, kernel, "y", y, count * 4, &ys); !s.ok()) return s;
  for (std::uint64_t i = 0; i < count; ++i) store(ys.data, i, a * load(xs.data, i) + load(ys.data, i));
  return {};
}

Status axpy_f32(const std::vector<KernelArg>& args, std::uint64_t threads, const ExecContext& context) {
  const std::uint64_t count = std::min<std::uint64_t>(u32_arg(args[0]), threads);
  return axpy("axpy_f32", count, f32_arg(args[1]), args[2].bits, args[3].bits, context);
}

Status scale_f32(const std::vector<KernelArg>& args, std::uint64_t threads, const ExecContext& context) {
  const std::uint64_t count = std::min<std::uint64_t>(u32_arg(args[0]), threads);
  if (count == 0) return {};
  const float a = f32_arg(args[1]);
  DeviceSpan xs, outs;
  if (auto s = access(context, "scale_f32", "x", args[2].bits, count * 4, &xs); !s.ok()) return s;
  if (auto s = access(context, "scale_f32", "out", args[3].bits, count * 4, &outs); !s.ok()) return s;
  for (std::uint64_t i = 0; i < count; ++i) store(outs.data, i, a * load(xs.data, i));
  return {};
}

Status add_f32(const std::vector<KernelArg>& args, std::uint64_t threads, const ExecContext& context) {
  const std::uint64_t count = std::min<std::uint64_t>(u32_arg(args[0]), threads);
  if (count == 0) return {};
  DeviceSpan xs, ys, outs;
  if (auto s = access(context, "add_f32", "x", args[1].bits, count * 4, &xs); !s.ok()) return s;
  if (auto s = access(context, "add_f32", "y", args[2].bits, count * 4, &ys); !s.ok()) return s;
  if (auto s = access(context, "add_f32", "out", args[3].bits, count * 4, &outs); !s.ok()) return s;
  for (std::uint64_t i = 0; i < count; ++i) store(outs.data, i, load(xs.data, i) + load(ys.data, i));
  return {};
}

// n and the bits of a come from a device buffer, read when the kernel runs: a graph replay
// sees whatever the runtime's info cache holds at that moment.
Status axpy_info_f32(const std::vector<KernelArg>& args, std::uint64_t threads, const ExecContext& context) {
  if (threads == 0) return {};
  DeviceSpan info;
  if (auto s = access(context, "axpy_info_f32", "info", args[0].bits, 8, &info); !s.ok()) return s;
  std::uint32_t words[2];
  std::memcpy(words, info.data, sizeof(words));
  const std::uint64_t count = std::min<std::uint64_t>(words[0], threads);
  return axpy("axpy_info_f32", count, std::bit_cast<float>(words[1]), args[1].bits, args[2].bits, context);
}

const std::vector<MockKernel>& mock_kernels() {
  static const std::vector<MockKernel> kernels = [] {
    const std::array<std::pair<std::string_view, KernelBody>, 4> bodies{{
        {"axpy_f32", &axpy_f32},
        {"scale_f32", &scale_f32},
        {"add_f32", &add_f32},
        {"axpy_info_f32", &axpy_info_f32},
    }};
    std::vector<MockKernel> out;
    for (const auto& [name, body] : bodies) out.push_back({find_builtin_kernel(name), body});
    return out;
  }();
  return kernels;
}

}  // namespace

const MockKernel* find_mock_kernel(std::string_view name) {
  for (const auto& kernel : mock_kernels())
    if (kernel.signature != nullptr && kernel.signature->name == name) return &kernel;
  return nullptr;
}

std::string mock_kernel_names() {
  std::string names;
  for (const auto& kernel : mock_kernels()) {
    if (kernel.signature == nullptr) continue;
    if (!names.empty()) names += ", ";
    names += kernel.signature->name;
  }
  return names;
}

}  // namespace lifecore::driver::mock
