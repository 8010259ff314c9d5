// A kernel as the runtime sees it: a name and the kinds of its parameters, and the checks a
// launch must pass before anything reaches the driver (argument count and kinds, value
// ranges, grid and block shapes). Built-in kernels exist on every backend; each device loads
// their module lazily, on the first launch. A user kernel comes from a Module the caller
// loaded (PTX, cubin, fatbin, code object) and keeps that module alive.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lifecore/driver/builtin_kernels.hpp"
#include "lifecore/driver/driver.hpp"

namespace lifecore::runtime {

class Buffer;
class Module;
struct ForeignRange;

class Kernel {
 public:
  Kernel(const driver::BuiltinKernel& builtin, std::size_t index);
  // A kernel of a user module: its function handle and the parameter kinds it was given.
  // `read_only`: per parameter, whether it is a pointer the kernel only reads (empty: none).
  Kernel(std::shared_ptr<Module> module, driver::FunctionHandle function, std::string name,
         std::vector<driver::ArgKind> params, std::vector<std::string> param_names, std::string summary,
         std::vector<bool> read_only = {});

  // The built-in kernel of that name; InvalidArgumentError naming the known ones otherwise.
  static const Kernel& builtin(std::string_view name);
  static const std::vector<Kernel>& builtins();

  std::string_view name() const { return name_; }
  const std::vector<driver::ArgKind>& params() const { return params_; }
  const std::vector<std::string>& param_names() const { return param_names_; }
  std::string_view summary() const { return summary_; }
  // Whether parameter `param` is a pointer the kernel only reads ("const ptr"): a read-only
  // tensor may be passed there.
  bool reads_only(std::size_t param) const noexcept { return param < read_only_.size() && read_only_[param]; }
  std::size_t index() const { return index_; }  // built-ins: dense, for per-device function tables
  bool is_builtin() const noexcept { return module_ == nullptr; }
  // The user module and function (null / 0 for a built-in).
  const std::shared_ptr<Module>& module() const noexcept { return module_; }
  driver::FunctionHandle user_function() const noexcept { return function_; }
  // "axpy_f32(n: u32, a: f32, x: const ptr, y: ptr)"
  std::string signature() const;
  // A built-in's element count rule (driver::BuiltinKernel): the parameter holding n, -1 when
  // n is the first info word, and the bytes of one element. A user kernel has none (its
  // pointers' extents are its own).
  bool has_extents() const noexcept { return element_bytes_ != 0; }
  int count_param() const noexcept { return count_param_; }
  std::uint32_t element_bytes() const noexcept { return element_bytes_; }
  // A built-in's element type as DLPack names it ("float32"); empty for a user kernel.
  std::string_view element_type() const noexcept { return element_type_; }
  // The info words a built-in reads (0: none, or a user kernel, whose info is its own).
  std::uint32_t info_words() const noexcept { return info_words_; }

 private:
  std::string name_;
  std::vector<driver::ArgKind> params_;
  std::vector<std::string> param_names_;
  std::vector<bool> read_only_;
  std::string summary_;
  std::size_t index_ = 0;
  int count_param_ = 0;
  std::uint32_t element_bytes_ = 0;  // 0: no element count rule (a user kernel)
  std::string_view element_type_;  // a built-in's, from its static table
  std::uint32_t info_words_ = 0;
  std::shared_ptr<Module> module_;
  driver::FunctionHandle function_{};
};

// The driver floor's one name table: "ptr" (or "pointer"), "i32", "u32", "i64", "u64", "f32", "f64".
using driver::arg_kind_from_name;
using driver::arg_kind_name;

// One launch argument as the caller gave it, before it is checked against the signature.
struct LaunchArg {
  enum class Kind : std::uint8_t { buffer, foreign, integer, real, other };
  Kind kind = Kind::other;
  const Buffer* buffer = nullptr;
  const ForeignRange* foreign = nullptr;  // another library's tensor (runtime/foreign_memory.hpp); set with kind foreign
  std::string_view view_type;  // buffer: the element type of the typed view it came as; empty: bytes
  std::int64_t integer = 0;    // the value; when above_int64, the bits of a uint64 above INT64_MAX
  bool above_int64 = false;
  double real = 0.0;
  std::string_view type_name;  // the caller's type, for messages about `other`
};

// Checks `values` (1 to 3 entries) as a grid or block shape; InvalidArgumentError otherwise.
driver::Dim3 make_grid(std::span<const std::int64_t> values);
driver::Dim3 make_block(std::span<const std::int64_t> values);

// Converts a scalar argument for a parameter of `kind`; LifecoreTypeError for the wrong kind,
// InvalidArgumentError for a value out of the parameter's range.
driver::KernelArg convert_scalar(const Kernel& kernel, std::size_t param, const LaunchArg& arg);

}  // namespace lifecore::runtime
