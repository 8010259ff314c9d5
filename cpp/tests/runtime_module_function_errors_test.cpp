// Module::function's lookup errors: only a not-found answer says the kernel is missing. A lookup
// the driver refuses for another reason (here an injected invalid-context failure, whose message
// does not name the kernel) keeps the driver's code and message, and claims no missing kernel;
// a not-found answer names the kernel. Run on the mock driver's built-in module.
#include <memory>
#include <optional>
#include <string>

#include "lifecore/error.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/kernel.hpp"
#include "lifecore/runtime/module.hpp"
#include "driver/mock/mock_driver.hpp"
#include "lifecore/driver/status.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::runtime;

namespace {

std::string message_of(Module& module, const std::string& name) {
  try {
    module.function(name, std::nullopt);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void only_a_not_found_lookup_says_the_kernel_is_missing() {
  auto device = Device::open(lifecore::test_support::emulated_backend(), 0, "hardware", "thread_local");
  auto* mock = driver::MockDriver::from(&device->vendor_driver());
  CHECK(mock != nullptr);
  if (mock == nullptr) return;
  auto module = std::make_shared<Module>(device, device->load_module(driver::ModuleImage{}), driver::ImageKind::builtin);
  CHECK(module->function("scale_f32", std::nullopt) != nullptr);

  mock->fault_injection()->inject(driver::Operation::module_get_function, driver::mock::mock_native(driver::Code::invalid_context), 0, 1);
  const std::string refused = message_of(*module, "scale_f32");
  CHECK(test_support::contains(refused, "injected fault"));
  CHECK(!test_support::contains(refused, "no kernel named"));
  CHECK(!test_support::contains(refused, "no built-in kernel named"));

  const std::string missing = message_of(*module, "no_such_kernel");
  CHECK(test_support::contains(missing, "no_such_kernel"));
  CHECK(module->function("scale_f32", std::nullopt) != nullptr);  // the fault was one call
  module->unload();
  device->close();
}

}  // namespace

int main() {
  only_a_not_found_lookup_says_the_kernel_is_missing();
  return test_support::finish("runtime_module_function_errors_test");
}
