// The arrays nanobind's caster may read, checked first. The caster reads a DLPack tensor's
// shape without looking at it, so an export with dimensions but no shape would crash it: any
// producer but NumPy and torch, whose exports are well formed, is exported once here and such
// a tensor refused. NumPy and torch are recognised only once imported (before that nothing of
// theirs can be passed).
#pragma once

#include <string>

#include <nanobind/nanobind.h>

#include "arguments.hpp"
#include "dlpack_abi.hpp"
#include "lifecore/error.hpp"

namespace lifecore::bindings {

namespace nb = nanobind;

inline bool is_numpy_array(nb::handle array) {
  static PyTypeObject* type = nullptr;
  return loaded_type("numpy", "ndarray", type) && PyObject_TypeCheck(array.ptr(), type);
}

inline bool is_torch_tensor(nb::handle array) {
  static PyTypeObject* type = nullptr;
  return loaded_type("torch", "Tensor", type) && PyObject_TypeCheck(array.ptr(), type);
}

// Refuses (InvalidArgumentError naming `label`) an object whose DLPack export has a negative
// number of dimensions, or dimensions but no shape. Anything else passes untouched: an export
// that fails, or no __dlpack__ at all, is left to the caster to refuse as it does.
inline void refuse_shapeless_dlpack(nb::handle object, const std::string& label) {
  if (is_numpy_array(object) || is_torch_tensor(object)) return;
  if (!nb::hasattr(object, "__dlpack__")) return;
  nb::object capsule;
  try {
    capsule = object.attr("__dlpack__")();
  } catch (nb::python_error&) {
    return;
  }
  const DLTensor* tensor = nullptr;
  if (PyCapsule_IsValid(capsule.ptr(), "dltensor_versioned"))
    tensor = &static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor_versioned"))->dl_tensor;
  else if (PyCapsule_IsValid(capsule.ptr(), "dltensor"))
    tensor = &static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"))->dl_tensor;
  if (!tensor) return;
  if (tensor->ndim < 0)
    raise(ErrorKind::InvalidArgument, label + " has a negative number of dimensions (" + std::to_string(tensor->ndim) +
                                          ") in its DLPack export");
  if (tensor->ndim > 0 && tensor->shape == nullptr)
    raise(ErrorKind::InvalidArgument,
          label + " has " + std::to_string(tensor->ndim) + " dimension(s) but no shape in its DLPack export");
}

}  // namespace lifecore::bindings
