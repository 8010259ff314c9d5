// The arrays nanobind's caster may read, checked first. The caster reads a DLPack tensor's
// shape without looking at it, so an export with dimensions but no shape would crash it: any
// producer but NumPy's and torch's own types, whose exports are well formed, is exported here
// and the caster given that one checked capsule. NumPy and torch are recognised only once
// imported (before that nothing of theirs can be passed). Also what every reader of a producer
// asks before exporting it: its device, and torch's negative bit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>

#include "arguments.hpp"
#include "dlpack_abi.hpp"
#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"

namespace lifecore::bindings {

namespace nb = nanobind;

inline PyTypeObject* numpy_array_type() {
  static PyTypeObject* type = nullptr;
  return loaded_type("numpy", "ndarray", type);
}

inline bool is_exactly(nb::handle object, PyTypeObject* type) { return type && Py_TYPE(object.ptr()) == type; }

// Instances of the type or a subclass.
inline bool is_numpy_array(nb::handle array) {
  PyTypeObject* type = numpy_array_type();
  return type && PyObject_TypeCheck(array.ptr(), type);
}

inline bool is_torch_tensor(nb::handle array) {
  PyTypeObject* type = torch_tensor_type();
  return type && PyObject_TypeCheck(array.ptr(), type);
}

// The tensor an unconsumed DLPack capsule holds, with its versioned header (null for a capsule
// of DLPack before 1.0); no tensor for anything else.
struct CapsuleTensor {
  const DLTensor* tensor = nullptr;
  const DLManagedTensorVersioned* versioned = nullptr;
};

inline CapsuleTensor capsule_tensor(nb::handle capsule) {
  if (PyCapsule_IsValid(capsule.ptr(), "dltensor_versioned")) {
    auto* managed = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor_versioned"));
    return {&managed->dl_tensor, managed};
  }
  if (PyCapsule_IsValid(capsule.ptr(), "dltensor"))
    return {&static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"))->dl_tensor, nullptr};
  return {};
}

// Refuses (InvalidArgumentError naming `label`) a tensor description with a negative number of
// dimensions, dimensions but no shape, or a negative extent: a producer's description is not
// trusted.
inline void check_dlpack_dimensions(const std::string& label, std::int32_t ndim, const std::int64_t* shape) {
  if (ndim < 0)
    raise(ErrorKind::InvalidArgument, label + " has a negative number of dimensions (" + std::to_string(ndim) + ")");
  if (ndim > 0 && shape == nullptr)
    raise(ErrorKind::InvalidArgument, label + " has " + std::to_string(ndim) + " dimension(s) but no shape");
  // nanobind multiplies the extents as int64 (a missing strides array, filled in C order): their
  // product, the empty ones left out, must fit, or it overflows there, whatever order they come in.
  std::uint64_t product = 1;
  for (std::int32_t i = 0; i < ndim; ++i) {
    if (shape[i] < 0)
      raise(ErrorKind::InvalidArgument, label + " has a negative extent (" + std::to_string(shape[i]) + ") at axis " +
                                            std::to_string(i));
    if (shape[i] == 0) continue;
    const auto next = checked::mul(product, static_cast<std::uint64_t>(shape[i]));
    if (!next || *next > static_cast<std::uint64_t>(INT64_MAX))
      checked::overflow(label + ": the product of its extents (the empty ones left out) passes 2**63 - 1");
    product = *next;
  }
}

// A tensor description's first byte, data + byte_offset; nullopt where that sum, or the end of
// its `bytes` after it, would wrap past the top of the address space (a small address taken for
// it, and a copy run there), which refuse_wrapped_address refuses naming the argument (its label
// built only then: a table's out= is a hot path).
inline std::optional<std::uintptr_t> dlpack_address(const DLTensor& tensor, std::uint64_t bytes) noexcept {
  const auto first = checked::add<std::uint64_t>(reinterpret_cast<std::uintptr_t>(tensor.data), tensor.byte_offset);
  if (!first || !checked::add<std::uint64_t>(*first, bytes)) return std::nullopt;
  return first;
}
[[noreturn]] inline void refuse_wrapped_address(const std::string& label) {
  checked::overflow(label + ": its data + byte_offset + its bytes");
}

// A producer that describes bytes at a null data pointer (DLPack's `data`, whatever its
// byte_offset adds; the array interfaces' address): refused before a copy reads or writes
// there. Only an empty tensor may have no memory.
inline void refuse_null_address(const std::string& label, std::uintptr_t address, std::uint64_t bytes) {
  if (address == 0 && bytes != 0)
    raise(ErrorKind::InvalidArgument, label + " describes " + std::to_string(bytes) + " bytes at a null data pointer");
}

// What nanobind's caster should read for `object`: the object itself where no export is made
// here (a list or tuple, an exact NumPy array or torch tensor, an object without __dlpack__, or
// one whose export raised an Exception: the caster then refuses it as it does), else the one
// DLPack capsule exported here, checked: a negative number of dimensions, or dimensions but no
// shape, is refused (InvalidArgumentError naming `label`). The caster takes the capsule as it
// is, so the tensor checked is the one read, and a producer is exported once, as before. A
// KeyboardInterrupt or SystemExit raised by the export passes as it is.
inline void refuse_negative_view(nb::handle h, const std::string& label);  // below

// A described tensor's bytes, checked (its dimensions checked first): nanobind's nbytes()
// multiplies the shape without a check, and a shape whose bytes pass 2**64 (2**62 + 4 rows of
// 4) would wrap to a few bytes; refused as an overflow naming `label`. The bits of every
// element (its lanes too) are rounded up to a byte once: 4-bit elements are packed two to a byte.
inline std::uint64_t dlpack_bytes(const DLTensor& tensor, const std::string& label) {
  // check_dlpack_dimensions bounds the non-empty extents' product: an empty extent, wherever it
  // comes, makes this product 0 before any step of it could overflow.
  std::uint64_t elements = 1;
  for (std::int32_t i = 0; i < tensor.ndim; ++i) {
    const auto next = checked::mul(elements, static_cast<std::uint64_t>(tensor.shape[i]));
    if (!next) checked::overflow(label + ": the bytes of its shape");
    elements = *next;
  }
  const auto bits = checked::mul(elements, std::uint64_t{tensor.dtype.bits} * tensor.dtype.lanes);
  if (!bits) checked::overflow(label + ": the bytes of its shape");
  return *bits / 8 + (*bits % 8 != 0);
}

inline nb::object checked_for_caster(nb::handle object, const std::string& label) {
  // The usual arguments first, each a type check: a decode step's list of token counts pays no
  // failed attribute lookup. A subclass may override __dlpack__: it is exported here.
  if (PyList_CheckExact(object.ptr()) || PyTuple_CheckExact(object.ptr())) return nb::borrow(object);
  if (is_exactly(object, numpy_array_type())) return nb::borrow(object);
  // torch's negative bit: its DLPack export is the memory without the sign its reads apply.
  if (is_torch_tensor(object)) refuse_negative_view(object, label);
  if (is_exactly(object, torch_tensor_type())) return nb::borrow(object);
  if (!nb::hasattr(object, "__dlpack__")) {
    // The caster reads a buffer's strides without looking: an exporter that leaves them out
    // (ctypes arrays do, asked for them or not) is read through a memoryview, which fills them in.
    if (!PyObject_CheckBuffer(object.ptr())) return nb::borrow(object);
    PyObject* view = PyMemoryView_FromObject(object.ptr());
    if (view) return nb::steal(view);
    nb::python_error error;
    if (!error.matches(PyExc_Exception)) throw error;
    return nb::borrow(object);  // an export that fails: the caster refuses the object, as before
  }
  nb::object capsule;
  try {
    capsule = object.attr("__dlpack__")();
  } catch (nb::python_error& error) {
    if (!error.matches(PyExc_Exception)) throw;
    return nb::borrow(object);
  }
  const DLTensor* tensor = capsule_tensor(capsule).tensor;
  if (!tensor) return nb::borrow(object);  // not a DLPack capsule: the caster refuses the object
  check_dlpack_dimensions(label, tensor->ndim, tensor->shape);
  if (tensor->data == nullptr) refuse_null_address(label, 0, dlpack_bytes(*tensor, label));
  return capsule;
}

// Where a producer says its memory is: DLPack's (device type, id), or (-1, -1) for a producer
// without __dlpack_device__. One that raises, or answers no pair of ints, is refused
// (InvalidArgumentError naming `label` and what it raised); an interrupt stays one.
inline std::pair<int, int> dlpack_device_of(nb::handle h, const std::string& label) {
  if (!nb::hasattr(h, "__dlpack_device__")) return {-1, -1};
  nb::object device;
  try {
    device = h.attr("__dlpack_device__")();
  } catch (nb::python_error& error) {
    if (!error.matches(PyExc_Exception)) throw;
    raise(ErrorKind::InvalidArgument,
          label + " could not name its device (its __dlpack_device__ raised " + python_error_summary(error) + ")");
  }
  std::pair<int, int> out;
  if (!nb::try_cast(device, out)) {
    // ascii(): a cut never splits a character.
    std::string got = "a " + type_name_of(device) + " whose repr raised";
    if (nb::object text = nb::steal(PyObject_ASCII(device.ptr()))) got = nb::cast<std::string>(text);
    else if (PyErr_ExceptionMatches(PyExc_Exception)) PyErr_Clear();
    else throw nb::python_error();  // an interrupt stays one
    if (got.size() > 80) got = got.substr(0, 77) + "...";
    raise(ErrorKind::InvalidArgument, label + " has a __dlpack_device__ that is not a pair of 32-bit ints "
                                              "(device type, device id): it answered " + got);
  }
  return out;
}

// Refuses (InvalidArgumentError naming `label`) a torch tensor whose negative bit is set (a lazy
// negation, as `.conj().imag` makes): its DLPack export gives the memory without the sign, so a
// copy would read or write the negation of what the tensor holds. torch's own export refuses
// the conjugate bit and a tensor that requires grad; the negative bit only NumPy refuses.
inline void refuse_negative_view(nb::handle h, const std::string& label) {
  if (!nb::hasattr(h, "is_neg")) return;
  nb::object negative;
  try {
    negative = h.attr("is_neg")();
  } catch (nb::python_error& error) {
    if (!error.matches(PyExc_Exception)) throw;
    return;  // not torch's is_neg: nothing to say about it
  }
  if (PyObject_IsTrue(negative.ptr()) == 1)
    raise(ErrorKind::InvalidArgument, label + " is a torch tensor with its negative bit set (a lazy negation): its "
                                              "memory holds the values without their sign; pass .resolve_neg()");
}

// A producer's DLPack export through its `export_fn` (its __dlpack__), asked for a versioned
// capsule (DLPack 1.0: its read-only flag is read), and for a legacy one from a producer whose
// __dlpack__ takes no max_version (a TypeError: one before DLPack 1.0). `stream`, when given,
// goes to both calls. What the export raises otherwise propagates (nb::python_error).
inline nb::object dlpack_export(nb::handle export_fn, const nb::object* stream = nullptr) {
  try {
    return stream ? export_fn(nb::arg("stream") = *stream, nb::arg("max_version") = nb::make_tuple(1, 0))
                  : export_fn(nb::arg("max_version") = nb::make_tuple(1, 0));
  } catch (nb::python_error& error) {
    if (!error.matches(PyExc_TypeError)) throw;
  }
  return stream ? export_fn(nb::arg("stream") = *stream) : export_fn();
}

// Tells torch's autograd that lifecore wrote into `h`, when `h` is a torch tensor, by bumping
// its version counter as torch's own in-place operations do: a tensor an earlier operation
// saved for its backward pass then fails that backward loudly instead of giving gradients of
// the values written since. Called once the write is done; the write stands whatever happens
// here (an Exception from torch is dropped; an interrupt stays one).
inline void note_torch_write(nb::handle h) {
  if (!is_torch_tensor(h)) return;
  static PyObject* increment = nullptr;  // torch.autograd.graph.increment_version (torch >= 2.1), kept
  try {
    if (!increment) {
      nb::object found = nb::module_::import_("torch.autograd.graph").attr("increment_version");
      increment = found.release().ptr();
    }
    const nb::handle bump{increment};
    bump(h);
  } catch (nb::python_error& error) {
    if (!error.matches(PyExc_Exception)) throw;
  }
}

}  // namespace lifecore::bindings
