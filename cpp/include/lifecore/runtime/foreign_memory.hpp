// Memory passed where a Buffer goes (launch's pointer arguments, copy, fill) that arrives as
// another library's tensor: a DLPack or CUDA-array-interface object, described by the binding
// as a ForeignRange. On a stream's device it resolves to one of two things:
//  - a view of one of the device's own buffers (found by address among the live leases,
//    runtime/buffer_lease.hpp, or, where device addresses are the tensor's addresses, among
//    the pool's slices): it is then that buffer, touched and retained by a capture window
//    exactly as the Buffer would be; a range in the slice of a freed buffer is refused;
//  - foreign memory: used by its device address, or, on a device whose memory is host memory
//    (the mock), mapped into the device's address space (driver map_host). Its hold (the
//    producer's reference and the mapping) lives as long as work that may touch it: until the
//    stream's next fence for eager work, for the graph's life for recorded work.
// Recording foreign memory inside a capture window is allowed, not refused: a captured step's
// inputs and outputs are often another library's tensors (an engine's activations, its KV
// cache), and holding them for the graph's life costs one reference, where a refusal would
// force a copy into a Buffer at every replay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "lifecore/driver/driver.hpp"
#include "lifecore/runtime/memory_manager.hpp"

namespace lifecore::runtime {

class Buffer;
class Device;
class Stream;

// A tensor's bytes as its producer describes them (checked C-contiguous by the binding).
struct ForeignRange {
  int device_type = 0;         // DLPack's DLDeviceType
  int device_id = -1;          // -1: the producer does not say (the CUDA array interface)
  std::uintptr_t address = 0;  // the first byte (DLPack's data + byte_offset)
  std::size_t nbytes = 0;
  bool read_only = false;
  // Its element type as DLPack names it ("float32", "int64", "uint8x4"), or for an array
  // interface type DLPack has no name for, its typestr ("<M8[s]"); empty: not known.
  std::string element_type;
  std::shared_ptr<void> owner;  // keeps the producer's memory alive; may be released on any thread
  // The native stream whose queued work the tensor's bytes wait for (the CUDA array
  // interface's `stream`; CUDA's 1 and 2 are its legacy and per-thread default streams):
  // the operation's stream waits for it on the device first. Unset: the producer named none.
  std::optional<std::uintptr_t> producer_stream;
};

// One memory argument: exactly one of the two is set.
struct MemoryRef {
  const Buffer* buffer = nullptr;
  const ForeignRange* foreign = nullptr;
};

// A memory argument resolved on a device.
struct ResolvedMemory {
  driver::DevicePtr ptr = 0;
  std::size_t nbytes = 0;
  bool pooled = false;   // lifecore memory: `slice` is what a window touches
  SliceId slice = 0;
  const Stream* owner = nullptr;  // pooled: the stream that allocated it (null: not known)
  std::shared_ptr<void> hold;  // foreign memory: what must outlive the work that uses it
};

// Resolves `ref` for operation `op` on stream `on`; errors about it name `argument`
// ("copy: argument 'dst'"). `written`: the operation may write it (a read-only tensor is
// refused). Foreign device memory whose producer names no device (the CUDA array interface)
// is checked with the driver (pointer_device): another device's memory, or an address the
// driver does not know as device memory, is refused; a driver that cannot tell (its entry
// point missing) leaves the check out. Errors: InvalidArgumentError (another device,
// read-only, empty, unknown memory), ClosedError (a freed buffer, or a view of one),
// CaptureStateError (a memory node of another stream's recording: Buffer::use), a
// DriverError from map_host or pointer_device; nothing is left behind on failure.
ResolvedMemory resolve_memory(const Stream& on, const MemoryRef& ref, const char* op, const std::string& argument,
                              bool written);

// InvalidArgumentError naming `label` unless DLPack device (type, id) is the memory `device`
// addresses (id -1: not said, only the type is checked).
void check_foreign_device(Device& device, int type, int id, const std::string& label);

// "cpu", "cuda", "rocm", ... for a DLPack device type, for messages.
std::string dlpack_device_name(int device_type);

}  // namespace lifecore::runtime
