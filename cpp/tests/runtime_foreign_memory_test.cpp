// Foreign memory on the emulated device: host memory another owner holds is mapped for a fill,
// a copy or a launch, written in place, and held (its owner and its mapping) until the stream's
// next fence, or by the graph that recorded it until the graph is destroyed. A range inside a
// live lease is its buffer: no mapping is made for it.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "lifecore/error.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/buffer_lease.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/foreign_memory.hpp"
#include "lifecore/runtime/graph.hpp"
#include "lifecore/runtime/kernel.hpp"
#include "lifecore/runtime/stream.hpp"
#include "driver/mock/mock_driver.hpp"
#include "test_support.hpp"

using namespace lifecore::runtime;
using lifecore::driver::Operation;

namespace {

constexpr std::size_t n = 64;
constexpr std::uint32_t seven = 0x40E00000;

// A host array and the owner reference a binding would hand over.
struct Host {
  std::vector<std::uint32_t> words = std::vector<std::uint32_t>(n, 0);
  std::shared_ptr<int> owner = std::make_shared<int>(0);
  ForeignRange range() {
    ForeignRange r;
    r.device_type = 1;  // DLPack's CPU
    r.device_id = 0;
    r.address = reinterpret_cast<std::uintptr_t>(words.data());
    r.nbytes = words.size() * sizeof(std::uint32_t);
    r.owner = owner;
    return r;
  }
};

std::shared_ptr<Device> open_device(const char* graphs) {
  return Device::open(lifecore::test_support::emulated_backend(), 0, graphs, "thread_local");
}

std::uint64_t calls(Device& device, Operation op) { return device.driver().fault_injection()->call_count(op); }

void eager_work_writes_in_place_and_holds_until_the_fence() {
  auto device = open_device("hardware");
  auto stream = device->stream();
  Host host;
  std::weak_ptr<int> owner = host.owner;
  {
    ForeignRange range = host.range();
    host.owner.reset();  // only the range holds it now
    stream->fill(MemoryRef{nullptr, &range}, seven);
  }
  CHECK(!owner.expired());  // queued work may still write it
  stream->sync();
  CHECK(owner.expired());
  CHECK(host.words[0] == seven && host.words[n - 1] == seven);
  CHECK(calls(*device, Operation::map_host) == 1 && calls(*device, Operation::unmap_host) == 1);
}

void refusals_change_nothing() {
  auto device = open_device("hardware");
  auto stream = device->stream();
  Host host;
  ForeignRange range = host.range();
  ForeignRange odd = range;
  odd.nbytes = 6;
  bool refused = false;
  try {
    stream->fill(MemoryRef{nullptr, &odd}, seven);
  } catch (const lifecore::Error&) {
    refused = true;
  }
  CHECK(refused);
  ForeignRange read_only = range;
  read_only.read_only = true;
  refused = false;
  try {
    stream->fill(MemoryRef{nullptr, &read_only}, seven);
  } catch (const lifecore::Error& error) {
    refused = lifecore::test_support::contains(error.what(), "read-only");
  }
  CHECK(refused);
  ForeignRange cuda = range;
  cuda.device_type = 2;
  refused = false;
  try {
    stream->fill(MemoryRef{nullptr, &cuda}, seven);
  } catch (const lifecore::Error& error) {
    refused = lifecore::test_support::contains(error.what(), "lives on cuda:0");
  }
  CHECK(refused);
  stream->sync();
  CHECK(host.words[0] == 0);
  CHECK(calls(*device, Operation::map_host) == calls(*device, Operation::unmap_host));
  CHECK(host.owner.use_count() == 5);  // `host` and the four ranges: no refusal kept it
}

void a_graph_holds_what_it_recorded(const char* graphs) {
  auto device = open_device(graphs);
  auto stream = device->stream();
  Host host;
  std::weak_ptr<int> owner = host.owner;
  stream->graph_prepare(0);
  stream->begin_capture();
  {
    ForeignRange range = host.range();
    stream->fill(MemoryRef{nullptr, &range}, seven);
  }
  auto graph = stream->end_capture(0);
  host.owner.reset();
  stream->sync();
  CHECK(!owner.expired());
  CHECK(host.words[0] == 0);  // recorded, not run
  graph->replay(nullptr);
  stream->sync();
  CHECK(host.words[0] == seven);
  graph->destroy();
  CHECK(owner.expired());
  CHECK(calls(*device, Operation::map_host) == calls(*device, Operation::unmap_host));
}

void a_range_inside_a_lease_is_its_buffer() {
  auto device = open_device("hardware");
  auto stream = device->stream();
  auto buffer = stream->alloc(4 * n);
  auto lease = BufferLease::take(buffer, nullptr);
  ForeignRange range;
  range.device_type = 1;
  range.device_id = 0;
  range.address = reinterpret_cast<std::uintptr_t>(lease->data()) + 16;
  range.nbytes = 16;
  stream->fill(MemoryRef{nullptr, &range}, seven);
  std::vector<std::uint8_t> bytes = stream->read(*buffer);
  std::uint32_t words[8];
  std::memcpy(words, bytes.data(), sizeof words);
  CHECK(words[3] == 0 && words[4] == seven && words[7] == seven);
  CHECK(calls(*device, Operation::map_host) == 0);
  ResolvedMemory resolved = resolve_memory(*stream, MemoryRef{nullptr, &range}, "fill", "buf", true);
  CHECK(resolved.pooled && resolved.slice == buffer->slice() && resolved.ptr == buffer->ptr() + 16);
  std::size_t offset = 0;
  CHECK(device->leases().find(range.address, 4 * n - 16, &offset) == buffer && offset == 16);
  CHECK(device->leases().find(range.address, 4 * n - 12, &offset) == nullptr);  // past the lent bytes
  lease.reset();
  CHECK(device->leases().find(range.address, 4, &offset) == nullptr);  // no lease, no buffer
}

// A built-in kernel reads float32: a tensor that names another element type is refused before
// anything is mapped or issued, whichever argument it is; a range that names none is taken.
void a_builtin_kernel_refuses_another_element_type() {
  auto device = open_device("hardware");
  auto stream = device->stream();
  const Kernel& scale = Kernel::builtin("scale_f32");
  Host x, out;
  for (std::size_t i = 0; i < n; ++i) x.words[i] = 0x3F800000;  // 1.0f
  ForeignRange x_range = x.range(), out_range = out.range();
  auto launch = [&](const char* x_type, const char* out_type) {
    x_range.element_type = x_type;
    out_range.element_type = out_type;
    // Exactly four arguments on the heap: a read past the last is a sanitizer's error.
    std::vector<LaunchArg> args(4);
    args[0].kind = LaunchArg::Kind::integer;
    args[0].integer = n;
    args[1].kind = LaunchArg::Kind::real;
    args[1].real = 2.0;
    args[2].kind = args[3].kind = LaunchArg::Kind::foreign;
    args[2].foreign = &x_range;
    args[3].foreign = &out_range;
    try {
      stream->launch(scale, {1, 1, 1}, {n, 1, 1}, args.data(), args.size(), nullptr);
    } catch (const lifecore::Error& error) {
      return std::string(error.what());
    }
    stream->sync();
    return std::string("accepted");
  };
  const std::string wide = launch("float64", "float32");
  CHECK(lifecore::test_support::contains(wide, "argument 'x' holds float64 elements, but the kernel reads float32"));
  CHECK(lifecore::test_support::contains(wide, "(nothing was issued)"));
  CHECK(lifecore::test_support::contains(launch("float32", "int32"), "argument 'out' holds int32 elements"));
  CHECK(out.words[0] == 0 && calls(*device, Operation::map_host) == 0);
  CHECK(launch("float32", "float32") == "accepted");
  CHECK(out.words[0] == 0x40000000 && out.words[n - 1] == 0x40000000);  // 2.0f
  CHECK(launch("", "") == "accepted");  // a caller that names no type
  CHECK(calls(*device, Operation::map_host) == calls(*device, Operation::unmap_host));
}

}  // namespace

int main() {
  eager_work_writes_in_place_and_holds_until_the_fence();
  refusals_change_nothing();
  a_graph_holds_what_it_recorded("hardware");
  a_graph_holds_what_it_recorded("software");
  a_range_inside_a_lease_is_its_buffer();
  a_builtin_kernel_refuses_another_element_type();
  return lifecore::test_support::finish("runtime_foreign_memory_test");
}
