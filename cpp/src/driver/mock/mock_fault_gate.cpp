#include "driver/mock/mock_fault_gate.hpp"
#include "driver/mock/mock_status.hpp"

#include <algorithm>
#include <cctype>

namespace lifecore::driver::mock {
namespace {

std::string camel_call_name(Operation op) {
  std::string out = "mock";
  bool upper = true;
  for (const char* c = operation_name(op); *c; ++c) {
    if (*c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(*c))) : *c;
    upper = false;
  }
  return out;
}

}  // namespace

const std::string& mock_call_name(Operation op) {
  static const auto names = [] {
    std::array<std::string, static_cast<std::size_t>(Operation::count_)> table;
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = camel_call_name(static_cast<Operation>(i));
    return table;
  }();
  static const std::string unknown = "mockUnknown";
  const auto index = static_cast<std::size_t>(op);
  return index < names.size() ? names[index] : unknown;
}

void FaultGate::inject(Operation op, int code, std::uint64_t after, std::uint64_t times) {
  const auto index = static_cast<std::size_t>(op);
  if (index >= operation_count || code == 0 || times == 0) return;
  std::lock_guard lock(mutex_);
  constexpr std::uint64_t never = ~std::uint64_t{0};
  // Saturating: after or times = UINT64_MAX mean "never" and "from then on" respectively.
  const std::uint64_t first = after > never - calls_[index] ? never : calls_[index] + after;
  const std::uint64_t end = times > never - first ? never : first + times;
  faults_.push_back({op, code, first, end});
}

void FaultGate::clear() {
  std::lock_guard lock(mutex_);
  faults_.clear();
}

std::uint64_t FaultGate::call_count(Operation op) const {
  const auto index = static_cast<std::size_t>(op);
  if (index >= operation_count) return 0;
  std::lock_guard lock(mutex_);
  return calls_[index];
}

Status FaultGate::pass(Operation op) {
  const auto index = static_cast<std::size_t>(op);
  std::lock_guard lock(mutex_);
  const std::uint64_t call = calls_[index]++;
  if (faults_.empty()) return {};
  auto due = std::find_if(faults_.begin(), faults_.end(), [&](const Fault& fault) {
    return fault.op == op && call >= fault.first && call < fault.end;
  });
  if (due == faults_.end()) return {};
  Status status = mock_native_status(due->code, mock_call_name(op), "injected fault");
  // A fault whose last call has passed is spent; drop it so the list stays short.
  faults_.erase(std::remove_if(faults_.begin(), faults_.end(),
                               [&](const Fault& fault) { return fault.op == op && fault.end <= call + 1; }),
                faults_.end());
  return status;
}

}  // namespace lifecore::driver::mock
