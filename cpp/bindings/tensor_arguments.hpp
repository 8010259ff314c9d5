// Pointer arguments of Stream.launch / copy / fill: a Buffer, a BufferView (its buffer), or
// another library's tensor (an object with __dlpack__ or __cuda_array_interface__: torch,
// CuPy, NumPy), described to the core as a runtime::ForeignRange. The core checks the
// device, recognises views of its own buffers and holds the memory; this side reads the
// producer's description (C-contiguous, its bytes, read-only) and keeps a reference to the
// producer, released under the interpreter lock whatever thread lets go of it.
#pragma once

#include <string>
#include <string_view>

#include "bindings.hpp"
#include "lifecore/runtime/foreign_memory.hpp"
#include "lifecore/runtime/stream.hpp"

namespace lifecore::bindings {

// One argument, converted in place (ref.foreign points into it: do not move it).
struct MemoryArgument {
  runtime::MemoryRef ref;
  runtime::ForeignRange foreign;
  std::string_view view_type;  // a BufferView's element type (a static name); empty otherwise
  MemoryArgument() = default;
  MemoryArgument(const MemoryArgument&) = delete;
  MemoryArgument& operator=(const MemoryArgument&) = delete;
};

// Buffer or BufferView: true with out->ref.buffer set. A tensor: true with out->ref.foreign
// set (its device checked against the stream's; LifecoreError naming `call` and `name` when
// it cannot be used). Anything else: false.
bool memory_argument(nb::handle h, runtime::Stream& stream, const char* call, const std::string& name,
                     MemoryArgument* out);

// Drops the producer references let go of on threads without the interpreter lock (or under
// a core lock); cheap when there are none. Called on every entry that takes tensors.
void release_deferred_references();

// Declared before a call's MemoryArguments, it drops their references (and any others
// waiting) when the call returns or raises: a view passed in lets go of its buffer at once.
struct ReleaseReferencesOnExit {
  ReleaseReferencesOnExit() { release_deferred_references(); }
  ~ReleaseReferencesOnExit() { release_deferred_references(); }
  ReleaseReferencesOnExit(const ReleaseReferencesOnExit&) = delete;
  ReleaseReferencesOnExit& operator=(const ReleaseReferencesOnExit&) = delete;
};

}  // namespace lifecore::bindings
