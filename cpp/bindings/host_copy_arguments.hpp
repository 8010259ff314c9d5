// The arguments of Stream.write / read / read_into: the buffer (a Buffer, or a BufferView,
// which always covers a whole buffer) and the host memory copied from or into (a
// buffer-protocol object, or a host tensor that has __dlpack__ and no buffer protocol: a torch
// CPU tensor, in any dtype NumPy lacks too, such as bfloat16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nanobind/ndarray.h>

#include "arguments.hpp"
#include "bindings.hpp"
#include "buffer_view.hpp"
#include "dlpack_guard.hpp"
#include "lifecore/checked.hpp"
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
  refuse_negative_view(h, label);
  // The device first, where the producer says it: exporting a device tensor orders streams (torch
  // makes the current stream wait), a side effect a refused call must not have.
  if (const int type = dlpack_device_of(h, label).first; type >= 0 && type != dlpack_device_cpu)
    raise(ErrorKind::InvalidArgument, label + " lives on DLPack device type " + std::to_string(type) +
                                          ", not in host memory (a device tensor is copied with copy())");
  // Exported here, by the producer itself: its own refusals (torch's of a conjugate view or a
  // tensor that requires grad) are this call's, where a caster's own import might read past them.
  nb::object given;
  try {
    given = dlpack_export(h.attr("__dlpack__"));
  } catch (nb::python_error& error) {
    if (!error.matches(PyExc_Exception)) throw;  // an interrupt stays one
    raise(ErrorKind::InvalidArgument, label + " could not be exported by its __dlpack__: " + python_error_summary(error));
  }
  const DLTensor* described = capsule_tensor(given).tensor;
  if (!described) raise(ErrorKind::InvalidArgument, label + " has a __dlpack__ that returned no DLPack capsule");
  check_dlpack_dimensions(label, described->ndim, described->shape);
  const std::uint64_t bytes = dlpack_bytes(*described, label);  // checked here, not by nanobind's nbytes()
  if (!dlpack_address(*described, bytes)) refuse_wrapped_address(label);
  refuse_null_address(label, reinterpret_cast<std::uintptr_t>(described->data), bytes);
  if (written) {
    if (!nb::try_cast(given, out->writable, /*convert=*/false))
      raise(ErrorKind::InvalidArgument, label + " must be a C-contiguous, writable tensor in host memory (a device "
                                                "tensor is copied with copy())");
    out->data = out->writable.data();
    out->nbytes = bytes;
  } else {
    if (!nb::try_cast(given, out->readable, /*convert=*/false))
      raise(ErrorKind::InvalidArgument, label + " must be a C-contiguous tensor in host memory (a device tensor is "
                                                "copied with copy())");
    out->data = const_cast<void*>(out->readable.data());
    out->nbytes = bytes;
  }
  return true;
}

}  // namespace lifecore::bindings
