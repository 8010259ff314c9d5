// The gate every mock driver operation passes first: it counts the call and, when a fault
// was injected for that call, fails it before the operation does anything else.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "lifecore/driver/driver.hpp"

namespace lifecore::driver::mock {

// The mock's Status::call for an operation: "mock" + the operation's name in CamelCase,
// after CUDA's cuStreamSynchronize style: stream_synchronize -> "mockStreamSynchronize",
// memcpy_htod_async -> "mockMemcpyHtodAsync".
const std::string& mock_call_name(Operation op);

class FaultGate final : public FaultInjection {
 public:
  // Calls [after, after + times) from now of `op` fail with `code` (times = UINT64_MAX: every
  // call from then on). code 0 or times 0: nothing is injected.
  void inject(Operation op, int code, std::uint64_t after, std::uint64_t times) override;
  void clear() override;
  std::uint64_t call_count(Operation op) const override;

  // Counts the call; returns the injected failure when one is due, else success.
  Status pass(Operation op);

 private:
  struct Fault {
    Operation op;
    int code;
    std::uint64_t first;  // call index (0-based, per operation) of the first failing call
    std::uint64_t end;    // one past the last failing call index
  };
  static constexpr std::size_t operation_count = static_cast<std::size_t>(Operation::count_);

  mutable std::mutex mutex_;
  std::array<std::uint64_t, operation_count> calls_{};
  std::vector<Fault> faults_;
};

}  // namespace lifecore::driver::mock
