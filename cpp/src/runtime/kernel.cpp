#include "lifecore/runtime/kernel.hpp"

#include <bit>
#include <limits>
#include <utility>

#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"

namespace lifecore::runtime {

Kernel::Kernel(const driver::BuiltinKernel& builtin, std::size_t index)
    : name_(builtin.name), params_(builtin.params), summary_(builtin.summary), index_(index),
      count_param_(builtin.count_param), element_bytes_(builtin.element_bytes), element_type_(builtin.element_type),
      info_words_(builtin.info_words) {
  for (auto name : builtin.param_names) param_names_.emplace_back(name);
  for (std::size_t i = 0; i < params_.size(); ++i) read_only_.push_back(i < 32 && ((builtin.read_only >> i) & 1u) != 0);
}

Kernel::Kernel(std::shared_ptr<Module> module, driver::FunctionHandle function, std::string name,
               std::vector<driver::ArgKind> params, std::vector<std::string> param_names, std::string summary,
               std::vector<bool> read_only)
    : name_(std::move(name)),
      params_(std::move(params)),
      param_names_(std::move(param_names)),
      read_only_(std::move(read_only)),
      summary_(std::move(summary)),
      module_(std::move(module)),
      function_(function) {}

const std::vector<Kernel>& Kernel::builtins() {
  static const std::vector<Kernel> kernels = [] {
    std::vector<Kernel> made;
    const auto& builtins = driver::builtin_kernels();
    for (std::size_t i = 0; i < builtins.size(); ++i) made.emplace_back(builtins[i], i);
    return made;
  }();
  return kernels;
}

const Kernel& Kernel::builtin(std::string_view name) {
  for (const auto& kernel : builtins())
    if (kernel.name() == name) return kernel;
  std::string known;
  for (const auto& kernel : builtins()) known += (known.empty() ? "" : ", ") + std::string(kernel.name());
  raise(ErrorKind::InvalidArgument, "unknown built-in kernel '" + std::string(name) + "': expected one of " + known);
}

std::string Kernel::signature() const {
  std::string text = std::string(name()) + "(";
  for (std::size_t i = 0; i < params().size(); ++i) {
    if (i) text += ", ";
    text += std::string(param_names()[i]) + ": " + (reads_only(i) ? "const " : "") + arg_kind_name(params()[i]);
  }
  return text + ")";
}

namespace {

driver::Dim3 make_dims(const char* what, std::span<const std::int64_t> values, std::int64_t max_x,
                       std::int64_t max_yz, std::int64_t max_product) {
  if (values.empty() || values.size() > 3)
    raise(ErrorKind::InvalidArgument, std::string("launch: ") + what + " must have 1 to 3 dimensions, got " +
                                          std::to_string(values.size()));
  std::int64_t dims[3] = {1, 1, 1};
  std::int64_t product = 1;
  for (std::size_t i = 0; i < values.size(); ++i) {
    // CUDA's limits: block z is at most 64, every other y / z at most max_yz.
    const std::int64_t limit = i == 0 ? max_x : (i == 2 && max_product > 0 ? 64 : max_yz);
    if (values[i] < 1 || values[i] > limit)
      raise(ErrorKind::InvalidArgument, std::string("launch: ") + what + " dimension " + std::to_string(i) +
                                            " must be between 1 and " + std::to_string(limit) + ", got " +
                                            std::to_string(values[i]));
    dims[i] = values[i];
    product *= values[i];
  }
  if (max_product > 0 && product > max_product)
    raise(ErrorKind::InvalidArgument, std::string("launch: ") + what + " has " + std::to_string(product) +
                                          " threads, more than the " + std::to_string(max_product) + " allowed");
  return driver::Dim3{static_cast<std::uint32_t>(dims[0]), static_cast<std::uint32_t>(dims[1]),
                      static_cast<std::uint32_t>(dims[2])};
}

[[noreturn]] void wrong_kind(const Kernel& kernel, std::size_t param, const char* expected, const LaunchArg& arg) {
  std::string got;
  switch (arg.kind) {
    case LaunchArg::Kind::buffer: got = "Buffer"; break;
    case LaunchArg::Kind::foreign: got = "a tensor"; break;
    case LaunchArg::Kind::integer: got = "int"; break;
    case LaunchArg::Kind::real: got = "float"; break;
    case LaunchArg::Kind::other: got = std::string(arg.type_name); break;
  }
  raise(ErrorKind::TypeMismatch, "launch: " + kernel.signature() + ": argument '" +
                                     std::string(kernel.param_names()[param]) + "' must be " + expected + ", got " +
                                     got);
}

// A value outside the type the kernel reads it as, either way: an overflow, as the value past
// 64 bits is (and as Python's own fixed-width containers call it).
[[noreturn]] void out_of_range(const Kernel& kernel, std::size_t param, const LaunchArg& arg) {
  std::string value = arg.above_int64 ? std::to_string(static_cast<std::uint64_t>(arg.integer))
                                      : std::to_string(arg.integer);
  raise(ErrorKind::Overflow, "launch: " + kernel.signature() + ": argument '" +
                                        std::string(kernel.param_names()[param]) + "' = " + value +
                                        " does not fit " + arg_kind_name(kernel.params()[param]));
}

}  // namespace

driver::Dim3 make_grid(std::span<const std::int64_t> values) {
  return make_dims("grid", values, 2147483647, 65535, 0);
}

driver::Dim3 make_block(std::span<const std::int64_t> values) { return make_dims("block", values, 1024, 1024, 1024); }

driver::KernelArg convert_scalar(const Kernel& kernel, std::size_t param, const LaunchArg& arg) {
  const driver::ArgKind kind = kernel.params()[param];
  driver::KernelArg out;
  out.kind = kind;
  switch (kind) {
    case driver::ArgKind::pointer:
      wrong_kind(kernel, param, "a Buffer", arg);  // buffers are converted by the stream
    case driver::ArgKind::i32:
    case driver::ArgKind::u32:
    case driver::ArgKind::i64:
    case driver::ArgKind::u64: {
      if (arg.kind != LaunchArg::Kind::integer) wrong_kind(kernel, param, "an int", arg);
      const std::int64_t v = arg.integer;
      bool fits = false;
      if (kind == driver::ArgKind::i32) fits = !arg.above_int64 && v >= INT32_MIN && v <= INT32_MAX;
      if (kind == driver::ArgKind::u32) fits = !arg.above_int64 && v >= 0 && v <= static_cast<std::int64_t>(UINT32_MAX);
      if (kind == driver::ArgKind::i64) fits = !arg.above_int64;
      if (kind == driver::ArgKind::u64) fits = arg.above_int64 || v >= 0;
      if (!fits) out_of_range(kernel, param, arg);
      out.bits = kind == driver::ArgKind::i32 ? static_cast<std::uint32_t>(static_cast<std::int32_t>(v))
                                              : static_cast<std::uint64_t>(v);
      return out;
    }
    case driver::ArgKind::f32:
    case driver::ArgKind::f64: {
      double value = 0;
      if (arg.kind == LaunchArg::Kind::real) value = arg.real;
      else if (arg.kind == LaunchArg::Kind::integer)
        value = arg.above_int64 ? static_cast<double>(static_cast<std::uint64_t>(arg.integer))
                                : static_cast<double>(arg.integer);
      else wrong_kind(kernel, param, "a float", arg);
      if (kind == driver::ArgKind::f32) {
        // A finite value past the float32 range would reach the kernel as an infinity (as
        // float_bits refuses it too); an infinity or NaN given as such passes as itself.
        const auto narrowed = checked::narrow_float(value);
        if (!narrowed)
          checked::float32_overflow("launch: " + kernel.signature() + ": argument '" +
                                        std::string(kernel.param_names()[param]) + "'",
                                    value);
        out.bits = std::bit_cast<std::uint32_t>(*narrowed);
      } else {
        out.bits = std::bit_cast<std::uint64_t>(value);
      }
      return out;
    }
  }
  wrong_kind(kernel, param, "a supported value", arg);
}

}  // namespace lifecore::runtime
