// DLPack's ABI (dlpack.h, version 1.x), declared here once for every binding that exports or
// reads tensors: the layout is the standard's, so no header of another project is needed.
#pragma once

#include <cstdint>

namespace lifecore::bindings {

struct DLDevice {
  std::int32_t device_type;
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
struct DLPackVersion {
  std::uint32_t major;
  std::uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};
// DLPack's flag bits (DLManagedTensorVersioned::flags).
constexpr std::uint64_t dlpack_flag_read_only = 1u << 0;
constexpr std::int32_t dlpack_device_cpu = 1;  // kDLCPU

}  // namespace lifecore::bindings
