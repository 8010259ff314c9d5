// What the runtime bindings share about tensors: DLPack's ABI, element types, and the
// BufferView class (Buffer.view), which init_buffer_interop.cpp exports and the stream's
// launch / copy / fill take back as its buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dlpack_abi.hpp"
#include "element_types.hpp"
#include "lifecore/runtime/buffer.hpp"

namespace lifecore::bindings {

constexpr std::uint64_t dlpack_flag_is_copied = 1u << 1;

// A typed, shaped, zero-copy view of a whole buffer; it takes its lease at export.
struct BufferView {
  std::shared_ptr<runtime::Buffer> buffer;
  const TensorElementType* type = nullptr;
  std::vector<std::int64_t> shape;
};

}  // namespace lifecore::bindings
