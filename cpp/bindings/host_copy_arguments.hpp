// The arguments of Stream.write / read / read_into: the buffer (a Buffer, or a BufferView,
// which always covers a whole buffer) and the host memory copied from or into (a
// buffer-protocol object, or a host tensor that has __dlpack__ and no buffer protocol: a torch
// CPU tensor, in any dtype NumPy lacks too, such as bfloat16).
#pragma once

#include <cstddef>
#include <string>

#include <nanobind/ndarray.h>

#include "arguments.hpp"
#include "bindings.hpp"
#include "buffer_view.hpp"
#include "dlpack_guard.hpp"
#include "lifecore/error.hpp"
#include "lifecore/runtime/buffer.hpp"

namespace lifecore::bindings {

// The whole buffer `buf` names; LifecoreTypeError naming `call` for anything else.
inline runtime::Buffer& whole_buffer(nb::handle buf, const char* call) {
  if (nb::isinstance<runtime::Buffer>(buf)) return nb::cast<runtime::Buffer&>(buf);
  if (nb::isinstance<BufferView>(buf)) return *nb::cast<const BufferView&>(buf).buffer;
  raise(ErrorKind::TypeMismatch,
        argument_label(call, "buf") + " must be a Buffer or a BufferView, got " + type_name_of(buf));
}

// A host tensor's bytes, held (the producer's export kept) while this lives.
struct HostTensorBytes {
  nb::ndarray<nb::c_contig, nb::device::cpu> writable;
  nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> readable;
  void* data = nullptr;
  std::size_t nbytes = 0;
};

// Whether `h` is a host tensor read through DLPack (it has __dlpack__ and no buffer protocol):
// then `out` holds its bytes, checked C-contiguous, in host memory, and writable where the
// copy writes it (InvalidArgumentError naming `call` and `name` otherwise).
inline bool host_tensor_bytes(nb::handle h, const char* call, const char* name, bool written, HostTensorBytes* out) {
  if (PyObject_CheckBuffer(h.ptr()) || !nb::hasattr(h, "__dlpack__")) return false;
  const std::string label = argument_label(call, name);
  const nb::object given = checked_for_caster(h, label);
  if (written) {
    if (!nb::try_cast(given, out->writable, /*convert=*/false))
      raise(ErrorKind::InvalidArgument, label + " must be a C-contiguous, writable tensor in host memory (a device "
                                                "tensor is copied with copy())");
    out->data = out->writable.data();
    out->nbytes = out->writable.nbytes();
  } else {
    if (!nb::try_cast(given, out->readable, /*convert=*/false))
      raise(ErrorKind::InvalidArgument, label + " must be a C-contiguous tensor in host memory (a device tensor is "
                                                "copied with copy())");
    out->data = const_cast<void*>(out->readable.data());
    out->nbytes = out->readable.nbytes();
  }
  return true;
}

}  // namespace lifecore::bindings
