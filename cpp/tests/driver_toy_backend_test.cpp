// A backend is one folder and one line: the toy backend (cpp/tests/toy_backend/, nothing of it
// in lifecore itself) is registered with one call, and then the registry lists it, the
// runtime opens a device on it by name, writes, reads, captures and replays on it, and its
// errors carry the toy's own numbers and names.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include "lifecore/driver/backends.hpp"
#include "lifecore/driver/registry.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/graph.hpp"
#include "lifecore/runtime/stream.hpp"
#include "test_support.hpp"
#include "toy_backend/toy_backend.hpp"

using namespace lifecore;
using namespace lifecore::test_support;
using driver::Code;

namespace {

std::vector<std::uint8_t> words(std::uint32_t value, std::size_t count) {
  std::vector<std::uint8_t> bytes(count * 4);
  for (std::size_t i = 0; i < count; ++i) std::memcpy(bytes.data() + 4 * i, &value, 4);
  return bytes;
}

template <class T>
T attribute(const Error& error, const std::string& name, T otherwise) {
  for (const auto& [key, value] : error.attributes())
    if (key == name && std::holds_alternative<T>(value)) return std::get<T>(value);
  return otherwise;
}

void the_registry_lists_the_toy() {
  const std::vector<std::string> names = driver::registered_backend_names();
  CHECK(!names.empty() && names.back() == "toy");
  CHECK(driver::find_backend("toy") == &toy::toy_descriptor());
  std::vector<driver::BackendInfo> infos = driver::list_backends();
  auto toy_info = std::find_if(infos.begin(), infos.end(), [](const auto& i) { return i.name == "toy"; });
  CHECK(toy_info != infos.end());
  if (toy_info == infos.end()) return;
  CHECK(toy_info->available && toy_info->device_count == toy::device_count);
  CHECK(toy_info->dlpack_device_type == driver::dlpack_device::cpu && !toy_info->cuda_array_interface);
  CHECK(toy_info->torch_device == "cpu");
  CHECK(toy_info->code_object_kinds == std::vector<std::string>{"builtin"});
  // An unknown name is refused with every registered name, the toy's too.
  try {
    driver::open_driver("nope", 0);
    CHECK(false);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::InvalidArgument && contains(e.what(), "'toy'"));
  }
  // Registering it again is refused and changes nothing.
  CHECK(error_of([] { driver::register_backend(toy::describe_toy()); }) == ErrorKind::InvalidArgument);
  CHECK(driver::registered_backend_names().size() == names.size());
  // "auto" still prefers the built-in backends (the toy's priority is the lowest).
  CHECK(driver::open_driver("auto", 0)->backend().name != "toy");
}

void a_device_on_the_toy_writes_reads_captures_and_replays() {
  auto device = runtime::Device::open("toy", 0, "hardware", "thread_local");
  CHECK(device->backend() == "toy" && device->name() == "toy device");
  auto stream = device->stream();
  constexpr std::size_t count = 16;
  auto buffer = stream->alloc(count * 4);
  const std::vector<std::uint8_t> data = words(0x01020304, count);
  stream->write(*buffer, data.data(), data.size());
  CHECK(stream->read(*buffer) == data);

  stream->graph_prepare(0);
  stream->fill(*buffer, 5);  // the warmup pass
  stream->begin_capture();
  stream->fill(*buffer, 9);  // the recorded pass
  auto graph = stream->end_capture(0);
  CHECK(graph != nullptr);
  if (graph == nullptr) return;
  stream->write(*buffer, data.data(), data.size());
  graph->replay(nullptr);
  stream->sync();
  CHECK(stream->read(*buffer) == words(9, count));
  graph->destroy();
  device->close();
}

void the_toys_errors_carry_its_own_naming() {
  auto d = toy::toy_descriptor().open(0);
  driver::Status refused = d->mem_free(0x42);
  CHECK(refused.code == Code::invalid_value);
  CHECK(refused.native_code == toy::toy_native(Code::invalid_value) && refused.name == "TOY_INVALID_VALUE");
  CHECK(contains(refused.call, "toy:"));

  // Through the runtime: an injected fault, given in the toy's numbers, surfaces with them.
  auto device = runtime::Device::open("toy", 0, "hardware", "thread_local");
  auto stream = device->stream();
  auto buffer = stream->alloc(64);
  device->driver().fault_injection()->inject(driver::Operation::memcpy_dtoh_async, toy::toy_native(Code::not_permitted), 0, 1);
  try {
    (void)stream->read(*buffer);
    CHECK(false);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Driver);
    CHECK(attribute<std::int64_t>(e, "code", 0) == toy::toy_native(Code::not_permitted));
    CHECK(attribute<std::string>(e, "status", "") == "TOY_NOT_PERMITTED");
    CHECK(attribute<std::string>(e, "lifecore_status", "") == "not_permitted");
  }
  // The toy's sticky code loses the device, as its naming says.
  device->driver().fault_injection()->inject(driver::Operation::memcpy_dtoh_async, toy::toy_native(Code::illegal_address), 0, 1);
  CHECK(error_of([&] { (void)stream->read(*buffer); }) == ErrorKind::DeviceLost);
  CHECK(device->lost());
  device->close();
}

}  // namespace

int main() {
  driver::register_backend(toy::describe_toy());  // the one line
  the_registry_lists_the_toy();
  a_device_on_the_toy_writes_reads_captures_and_replays();
  the_toys_errors_carry_its_own_naming();
  return finish("driver_toy_backend_test");
}
