// What the runtime bindings share about tensors: DLPack's ABI, element types, and the
// BufferView class (Buffer.view), which init_buffer_interop.cpp exports and the stream's
// launch / copy / fill take back as its buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lifecore/runtime/buffer.hpp"

namespace lifecore::bindings {

// DLPack's ABI (dlpack.h, version 1.x), declared here: the layout is the standard.
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
constexpr std::uint64_t dlpack_flag_is_copied = 1u << 1;

// An element type: DLPack's code and bits, and the array-interface type string ("" when it
// has none, as bfloat16).
struct ElementType {
  const char* name;
  std::uint8_t code;  // kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6
  std::uint8_t bits;
  const char* typestr;
};

// A typed, shaped, zero-copy view of a whole buffer; it takes its lease at export.
struct BufferView {
  std::shared_ptr<runtime::Buffer> buffer;
  const ElementType* type = nullptr;
  std::vector<std::int64_t> shape;
};

}  // namespace lifecore::bindings
