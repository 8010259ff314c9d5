// A kernel as the runtime sees it: a name and the kinds of its parameters, and the checks a
// launch must pass before anything reaches the driver (argument count and kinds, value
// ranges, grid and block shapes). Built-in kernels exist on every backend; each device loads
// their module lazily, on the first launch.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vendor/builtin_kernels.hpp"
#include "vendor/driver.hpp"

namespace lifecore::runtime {

class Buffer;

class Kernel {
 public:
  Kernel(const vendor::BuiltinKernel& builtin, std::size_t index) : builtin_(&builtin), index_(index) {}

  // The built-in kernel of that name; InvalidArgumentError naming the known ones otherwise.
  static const Kernel& builtin(std::string_view name);
  static const std::vector<Kernel>& builtins();

  std::string_view name() const { return builtin_->name; }
  const std::vector<vendor::ArgKind>& params() const { return builtin_->params; }
  const std::vector<std::string_view>& param_names() const { return builtin_->param_names; }
  std::string_view summary() const { return builtin_->summary; }
  std::size_t index() const { return index_; }  // dense, for per-device function tables
  // "axpy_f32(n: u32, a: f32, x: ptr, y: ptr)"
  std::string signature() const;

 private:
  const vendor::BuiltinKernel* builtin_;
  std::size_t index_;
};

const char* arg_kind_name(vendor::ArgKind kind);

// One launch argument as the caller gave it, before it is checked against the signature.
struct LaunchArg {
  enum class Kind : std::uint8_t { buffer, integer, real, other };
  Kind kind = Kind::other;
  const Buffer* buffer = nullptr;
  std::int64_t integer = 0;    // the value; when above_int64, the bits of a uint64 above INT64_MAX
  bool above_int64 = false;
  double real = 0.0;
  std::string_view type_name;  // the caller's type, for messages about `other`
};

// Checks `values` (1 to 3 entries) as a grid or block shape; InvalidArgumentError otherwise.
vendor::Dim3 make_grid(std::span<const std::int64_t> values);
vendor::Dim3 make_block(std::span<const std::int64_t> values);

// Converts a scalar argument for a parameter of `kind`; LifecoreTypeError for the wrong kind,
// InvalidArgumentError for a value out of the parameter's range.
vendor::KernelArg convert_scalar(const Kernel& kernel, std::size_t param, const LaunchArg& arg);

}  // namespace lifecore::runtime
