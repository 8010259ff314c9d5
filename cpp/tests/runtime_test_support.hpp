// What the runtime test programs share on the emulated device: opening one, its mock driver's
// test hooks, and a read-back check of a buffer's words.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "driver/mock/mock_driver.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/stream.hpp"
#include "test_support.hpp"

namespace lifecore::test_support {

// The emulated device with hardware graphs, in `capture_mode`.
inline std::shared_ptr<runtime::Device> open_mock(const char* capture_mode = "thread_local") {
  return runtime::Device::open(emulated_backend(), 0, "hardware", capture_mode);
}

inline driver::MockDriver& mock_of(runtime::Device& device) { return *driver::MockDriver::from(&device.vendor_driver()); }

// Every 32-bit word of the buffer holds `value` (read() syncs first).
inline bool holds(runtime::Stream& stream, const runtime::Buffer& buffer, std::uint32_t value) {
  const std::vector<std::uint8_t> bytes = stream.read(buffer);
  for (std::size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    std::uint32_t word;
    std::memcpy(&word, bytes.data() + i, 4);
    if (word != value) return false;
  }
  return true;
}

}  // namespace lifecore::test_support
