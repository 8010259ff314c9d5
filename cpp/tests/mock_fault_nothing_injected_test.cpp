// Injecting "success" or a fault for zero calls injects nothing: it neither fails a call nor
// shadows a real fault injected for the same call after it.
#include <cstdio>

#include "driver/mock/mock_driver.hpp"
#include "test_support.hpp"

using namespace lifecore::driver;
using namespace lifecore::test_support;

int main() {
  MockDriver d(0);
  FaultInjection* faults = d.fault_injection();
  CHECK(faults != nullptr);
  if (faults == nullptr) return finish("mock_fault_nothing_injected_test");
  faults->inject(Operation::mem_alloc, mock::mock_native(Code::success), 0, 1);
  faults->inject(Operation::mem_alloc, mock::mock_native(Code::out_of_memory), 0, 0);
  faults->inject(Operation::mem_alloc, mock::mock_native(Code::out_of_memory), 0, 1);  // the real one
  DevicePtr p = 0;
  Status first = d.mem_alloc(16, &p);
  CHECK(first.code == Code::out_of_memory && p == 0);
  CHECK_OK(d.mem_alloc(16, &p));  // spent after one call
  CHECK_OK(d.mem_free(p));
  // Nothing but the no-op injections: every call passes.
  faults->inject(Operation::mem_alloc, mock::mock_native(Code::success), 0, ~std::uint64_t{0});
  faults->inject(Operation::mem_alloc, mock::mock_native(Code::invalid_value), 0, 0);
  for (int i = 0; i < 3; ++i) {
    CHECK_OK(d.mem_alloc(16, &p));
    CHECK_OK(d.mem_free(p));
  }
  CHECK(faults->call_count(Operation::mem_alloc) == 5);
  return finish("mock_fault_nothing_injected_test");
}
