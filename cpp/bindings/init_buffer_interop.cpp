// Buffers as tensors: DLPack capsules (legacy and versioned), __dlpack_device__, the CUDA
// array interface, typed views and the buffer-protocol copies Stream.read_into / write.
// Translation only: the core lends the memory (runtime::BufferLease); this file builds the
// structures the consumers read.
#include <algorithm>
#include <limits>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arguments.hpp"
#include "bindings.hpp"
#include "buffer_view.hpp"
#include "element_types.hpp"
#include "host_copy_arguments.hpp"
#include "lifecore/error.hpp"
#include "lifecore/driver/registry.hpp"
#include "lifecore/sequence/lent_block_ids.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/buffer_lease.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/stream.hpp"

namespace lifecore::bindings {
namespace {

using namespace nb::literals;

using runtime::Buffer;
using runtime::BufferLease;
using runtime::Stream;

constexpr DLPackVersion dlpack_version{1, 0};

// "float32", numpy.float32, numpy.dtype("float32") and torch.float32 all name float32.
const TensorElementType& element_type(nb::handle dtype) {
  std::string name;
  if (nb::isinstance<nb::str>(dtype)) {
    name = nb::cast<std::string>(dtype);
    // An array-interface typestr ("<f4", "|u1", "=i8") or NumPy's code for one ("f4").
    if (!find_element_type(name) && name.size() >= 2 && name.size() <= 5) {
      const std::string typestr = std::string("<>|=").find(name[0]) == std::string::npos ? "=" + name : name;
      if (const std::optional<DLDataType> code = typestr_dtype(typestr))
        if (const TensorElementType* type = find_element_type(*code)) return *type;
      std::string swapped = typestr;
      swapped[0] = swapped[0] == '<' ? '>' : swapped[0] == '>' ? '<' : swapped[0];
      if (swapped != typestr && typestr_dtype(swapped))
        raise(ErrorKind::InvalidArgument, "view: dtype " + name + " is not in the host's byte order (a view exports "
                                          "native types only); byte-swap the data or pass the native dtype");
    }
  } else if (nb::hasattr(dtype, "name") && nb::isinstance<nb::str>(dtype.attr("name"))) {
    name = nb::cast<std::string>(dtype.attr("name"));  // numpy.dtype
    // numpy names a byte-swapped dtype ('>f4' here) as the native one: DLPack and the array
    // interface have native order only, so the values would read back swapped.
    if (nb::hasattr(dtype, "isnative") && dtype.attr("isnative").is(nb::handle(Py_False)))
      raise(ErrorKind::InvalidArgument, "view: dtype " + std::string(nb::str(dtype).c_str()) +
                                            " is not in the host's byte order (a view exports native " + name +
                                            " only); byte-swap the data or pass the native dtype");
  } else if (nb::isinstance<nb::type_object>(dtype) && nb::hasattr(dtype, "__name__")) {
    name = nb::cast<std::string>(dtype.attr("__name__"));  // numpy.float32
  } else {
    name = nb::cast<std::string>(nb::str(dtype));  // torch.float32
  }
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  if (name == "bool_") name = "bool";
  if (const TensorElementType* type = find_element_type(name)) return *type;
  // NumPy's code 'a' (bytes, never a view's type) warns that it is deprecated in favour of
  // 'S', advice this refusal would contradict: it is refused without asking NumPy.
  const std::size_t code = name.find_first_not_of("<>|=");
  const bool bytes_code = code != std::string::npos && name[code] == 'a';
  // NumPy's other spellings of a type ("f", "?", "i", "double", Python's float), once NumPy is
  // loaded: its own reading, checked as a dtype is. Not text with control characters, which
  // NumPy reads as some type ("\0" as bool) where no one spelled one.
  const bool control = std::any_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
  const bool spelled = (nb::isinstance<nb::str>(dtype) && !control) || nb::isinstance<nb::type_object>(dtype);
  static PyObject* numpy_dtype = nullptr;
  if (!bytes_code && spelled && loaded_attribute("numpy", "dtype", numpy_dtype)) {
    if (PyObject* parsed = PyObject_CallFunctionObjArgs(numpy_dtype, dtype.ptr(), nullptr)) {  // the limited API's call
      const nb::object numpy_type = nb::steal(parsed);
      const nb::object parsed_name = attribute_or_null(numpy_type, "name");
      if (parsed_name.is_valid() && nb::isinstance<nb::str>(parsed_name) &&
          find_element_type(nb::cast<std::string>(parsed_name)))
        return element_type(numpy_type);  // its byte order checked there
    } else {
      if (!PyErr_ExceptionMatches(PyExc_Exception)) throw nb::python_error();  // an interrupt stays one
      PyErr_Clear();
    }
  }
  raise(ErrorKind::InvalidArgument, "view: unsupported dtype " + name + " (supported: " + element_type_names() + ")");
}

BufferView make_view(std::shared_ptr<Buffer> buffer, nb::handle dtype, nb::handle shape) {
  BufferView view{buffer, &element_type(dtype), {}};
  const std::size_t item = view.type->bits / 8;
  if (buffer->nbytes() % item != 0)
    raise(ErrorKind::InvalidArgument, "view: " + std::to_string(buffer->nbytes()) + " bytes are not a whole number of " +
                                          view.type->name() + " elements");
  if (shape.is_none()) {
    view.shape.push_back(static_cast<std::int64_t>(buffer->nbytes() / item));
    return view;
  }
  if (!PySequence_Check(shape.ptr()) || nb::isinstance<nb::str>(shape) || nb::isinstance<nb::bytes>(shape))
    raise(ErrorKind::TypeMismatch, "view: shape must be a sequence of ints or None, got " +
                                       type_name_of(shape));
  std::uint64_t count = 1;
  const auto dims = sequence_snapshot(shape, "view: argument 'shape'");
  // What every NumPy the package supports can view (NPY_MAXDIMS: 32 before NumPy 2, 64 since):
  // a longer shape would export, then fail in the consumer.
  constexpr std::size_t most_dims = 32;
  if (dims.size() > most_dims)
    raise(ErrorKind::InvalidArgument, "view: a shape of " + std::to_string(dims.size()) + " dimensions; at most " +
                                          std::to_string(most_dims) + " (what NumPy 1.x views)");
  for (nb::handle item : dims) {
    const nb::object dim = index_of(item);  // as the other counts take it (a NumPy integer too)
    if (!dim.is_valid())
      raise(ErrorKind::TypeMismatch, "view: a shape holds ints, got " + type_name_of(item));
    long long n = PyLong_AsLongLong(dim.ptr());
    if (n == -1 && PyErr_Occurred()) {  // past 64 bits: negative, or past what a dimension holds
      PyErr_Clear();
      if (PyObject_RichCompareBool(dim.ptr(), nb::int_(0).ptr(), Py_LT) != 1)
        raise(ErrorKind::Overflow, "view: argument 'shape' holds a dimension past 2**63 - 1: " +
                                       nb::cast<std::string>(nb::str(dim)));
      n = std::numeric_limits<long long>::min();  // refused as negative below
    }
    if (n < 0) raise(ErrorKind::InvalidArgument, "view: a dimension is negative: " + nb::cast<std::string>(nb::str(dim)));
    view.shape.push_back(n);
  }
  // A zero anywhere makes the shape empty, however large the others (so it says 0 bytes below).
  if (std::find(view.shape.begin(), view.shape.end(), 0) != view.shape.end()) count = 0;
  for (const std::int64_t n : view.shape) {
    if (count == 0) break;
    if (count > buffer->nbytes() / static_cast<std::uint64_t>(n))  // the product would pass the bytes
      raise(ErrorKind::InvalidArgument, "view: the shape holds more than the buffer's bytes");
    count *= static_cast<std::uint64_t>(n);
  }
  if (count * item != buffer->nbytes())
    raise(ErrorKind::InvalidArgument, "view: the shape covers " + std::to_string(count * item) +
                                          " bytes, the buffer holds " + std::to_string(buffer->nbytes()));
  return view;
}

// The capsule's owner: the lease and the shape and strides the tensor points at.
struct Exported {
  std::shared_ptr<BufferLease> lease;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  DLManagedTensor legacy{};
  DLManagedTensorVersioned versioned{};
};

void fill_tensor(DLTensor* tensor, Exported* owner, const BufferView& view) {
  owner->shape = view.shape;
  owner->strides.assign(view.shape.size(), 1);
  for (std::size_t i = view.shape.size(); i-- > 1;) owner->strides[i - 1] = owner->strides[i] * view.shape[i];
  tensor->data = owner->lease->data();
  tensor->device = {owner->lease->device_type(), owner->lease->device_id()};
  tensor->ndim = static_cast<std::int32_t>(view.shape.size());
  tensor->dtype = {view.type->code, view.type->bits, 1};
  tensor->shape = owner->shape.data();
  tensor->strides = owner->strides.data();
  tensor->byte_offset = 0;
}

// May run on any thread, without the GIL: it touches C++ objects only.
void delete_legacy(DLManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); }
void delete_versioned(DLManagedTensorVersioned* self) { delete static_cast<Exported*>(self->manager_ctx); }

// An unconsumed capsule deletes its tensor; a consumer renames it "used_..." and owns it.
template <class Tensor>
void capsule_destructor(PyObject* capsule, const char* name) {
  if (!PyCapsule_IsValid(capsule, name)) return;
  auto* tensor = static_cast<Tensor*>(PyCapsule_GetPointer(capsule, name));
  if (tensor != nullptr && tensor->deleter != nullptr) tensor->deleter(tensor);
}
void legacy_capsule_destructor(PyObject* capsule) { capsule_destructor<DLManagedTensor>(capsule, "dltensor"); }
void versioned_capsule_destructor(PyObject* capsule) {
  capsule_destructor<DLManagedTensorVersioned>(capsule, "dltensor_versioned");
}

std::pair<int, int> dlpack_device(const Buffer& buffer, const char* op = "__dlpack_device__") {
  (void)buffer.ptr(op);  // ClosedError once freed or its device closed
  const driver::Driver& driver = buffer.device()->driver();
  const int type = driver.backend().dlpack_device_type;
  return {type, type == driver::dlpack_device::cpu ? 0 : driver.ordinal()};
}

// DLPack's (a, b) pairs: max_version and dl_device, a tuple or any other sequence of two.
std::pair<int, int> int_pair(nb::handle value, const char* what) {
  auto not_a_pair = [&]() -> std::pair<int, int> {
    raise(ErrorKind::TypeMismatch, std::string("__dlpack__: ") + what + " must be a pair of ints or None, got " +
                                       type_name_of(value));
  };
  const bool text = PyUnicode_Check(value.ptr()) || PyBytes_Check(value.ptr()) || PyByteArray_Check(value.ptr());
  if (text || !PySequence_Check(value.ptr())) return not_a_pair();
  const Py_ssize_t size = PySequence_Size(value.ptr());
  if (size != 2) {
    if (size < 0) PyErr_Clear();
    return not_a_pair();
  }
  // Owned items: an __index__ below runs Python code, which could empty a list it came from.
  nb::object items[2];
  for (Py_ssize_t i = 0; i < 2; ++i) {
    PyObject* item = PySequence_GetItem(value.ptr(), i);
    if (!item) {
      PyErr_Clear();
      return not_a_pair();
    }
    items[i] = nb::steal(item);
  }
  int out[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    // An int as the counts read it: a bool, NumPy's or torch's too, is no version or device number.
    const nb::object index = index_of(items[i]);
    if (!index.is_valid()) return not_a_pair();
    const long long number = PyLong_AsLongLong(index.ptr());
    const bool wide = number == -1 && PyErr_Occurred();
    if (wide) PyErr_Clear();
    // A pair of integers (Python's or NumPy's) that does not fit: an overflow, as elsewhere.
    if (wide || number < std::numeric_limits<int>::min() || number > std::numeric_limits<int>::max())
      raise(ErrorKind::Overflow, std::string("__dlpack__: ") + what +
                                     " must be a pair of ints from -2**31 to 2**31 - 1, got " + nb::repr(value).c_str());
    out[i] = static_cast<int>(number);
  }
  return {out[0], out[1]};
}

// What DLPack's `stream` asks for: the consumer stream to order on (nullopt: a host wait), and
// whether the consumer asked for no ordering at all (-1).
struct ConsumerStream {
  std::optional<std::uintptr_t> stream;
  bool no_order = false;
};

ConsumerStream consumer_stream(int device_type, nb::handle stream) {
  // Its __index__ called once; an int beyond 64 bits is refused below, never left with Python's
  // OverflowError pending.
  const nb::object number = stream.is_none() ? nb::object() : index_of(stream);
  const std::optional<std::int64_t> value = int64_of(number);
  if (device_type == driver::dlpack_device::cpu) {
    if (!stream.is_none() && value != -1)
      throw nb::buffer_error("__dlpack__: this device's memory is exported as CPU memory; stream must be None or -1");
    // -1: the consumer orders its own work; nothing waits.
    return {std::nullopt, value == -1};
  }
  if (stream.is_none()) {
    // The array API: None is CUDA's legacy default stream (1) and ROCm's default stream (0).
    return {device_type == driver::dlpack_device::cuda ? 1u : 0u, false};
  }
  if (!number.is_valid()) throw nb::buffer_error("__dlpack__: stream must be an int or None");
  if (!value) throw nb::buffer_error("__dlpack__: stream is out of range");
  if (*value == -1) return {std::nullopt, true};  // the producer must not synchronize: nothing waits
  if (*value == 0 && device_type == driver::dlpack_device::cuda)
    throw nb::buffer_error("__dlpack__: stream 0 is ambiguous on CUDA; pass 1 (legacy default) or 2 (per-thread)");
  // The array API defines 1 and 2 (CUDA's legacy and per-thread default streams) for CUDA only.
  if ((*value == 1 || *value == 2) && device_type == driver::dlpack_device::rocm)
    throw nb::buffer_error("__dlpack__: streams 1 and 2 are CUDA's default streams and are not defined on ROCm; "
                           "pass 0 (the default stream), a stream pointer, -1 or None");
  if (*value < -1) throw nb::buffer_error("__dlpack__: stream must be -1, 0 or a stream pointer");
  return {static_cast<std::uintptr_t>(*value), false};
}

nb::object export_dlpack(const BufferView& view, nb::handle stream, nb::handle max_version, nb::handle dl_device,
                         nb::handle copy) {
  const auto [type, id] = dlpack_device(*view.buffer, "__dlpack__");
  if (!copy.is_none()) {
    // The protocol's copy is True, False or None; NumPy's bool is read as the bool it is.
    if (!PyBool_Check(copy.ptr()) && !is_numpy_bool(copy))
      throw nb::buffer_error(("__dlpack__: copy must be True, False or None, got " + type_name_of(copy)).c_str());
    if (PyObject_IsTrue(copy.ptr()) == 1)
      throw nb::buffer_error("__dlpack__: a buffer is exported without a copy only (copy=True is not offered)");
  }
  if (!dl_device.is_none()) {
    auto wanted = int_pair(dl_device, "dl_device");
    if (wanted.first != type || wanted.second != id)
      throw nb::buffer_error(("__dlpack__: the buffer lives on DLPack device (" + std::to_string(type) + ", " +
                              std::to_string(id) + "); a copy to another device is not offered")
                                 .c_str());
  }
  bool versioned = false;
  if (!max_version.is_none()) versioned = int_pair(max_version, "max_version").first >= 1;
  const ConsumerStream consumer = consumer_stream(type, stream);

  auto owner = std::make_unique<Exported>();
  {
    GilRelease release;  // the lease may wait for the buffer's stream
    owner->lease = BufferLease::take(view.buffer, consumer.stream ? &*consumer.stream : nullptr, consumer.no_order,
                                     "__dlpack__");
  }
  PyObject* capsule = nullptr;
  if (versioned) {
    DLManagedTensorVersioned* tensor = &owner->versioned;
    tensor->version = dlpack_version;
    tensor->manager_ctx = owner.get();
    tensor->deleter = &delete_versioned;
    tensor->flags = 0;
    fill_tensor(&tensor->dl_tensor, owner.get(), view);
    capsule = PyCapsule_New(tensor, "dltensor_versioned", &versioned_capsule_destructor);
  } else {
    DLManagedTensor* tensor = &owner->legacy;
    tensor->manager_ctx = owner.get();
    tensor->deleter = &delete_legacy;
    fill_tensor(&tensor->dl_tensor, owner.get(), view);
    capsule = PyCapsule_New(tensor, "dltensor", &legacy_capsule_destructor);
  }
  if (capsule == nullptr) throw nb::python_error();
  owner.release();  // the capsule (or its consumer) deletes it
  return nb::steal(capsule);
}

nb::dict cuda_array_interface(const BufferView& view) {
  const Buffer& buffer = *view.buffer;
  const driver::BackendDescriptor& backend = buffer.device()->driver().backend();
  if (!backend.cuda_array_interface)
    throw nb::attribute_error(("__cuda_array_interface__: the " + backend.name +
                               " backend's memory is not offered through the CUDA array interface")
                                  .c_str());
  if (view.type->typestr[0] == '\0')
    throw nb::attribute_error((std::string("__cuda_array_interface__: ") + view.type->name() + " has no type string").c_str());
  // DLPack's rule (Stream::lend), without its wait: the consumer orders on the stream given.
  buffer.stream()->check_lendable(buffer, "__cuda_array_interface__");
  nb::list shape;
  for (std::int64_t n : view.shape) shape.append(n);
  nb::dict out;
  out["shape"] = nb::tuple(shape);
  out["typestr"] = view.type->typestr;
  out["data"] = nb::make_tuple(static_cast<std::uint64_t>(buffer.ptr("__cuda_array_interface__")), false);
  out["strides"] = nb::none();
  out["version"] = 3;
  // The consumer synchronizes with the buffer's stream (version 3's "stream").
  out["stream"] = static_cast<std::uint64_t>(buffer.stream()->native_handle());
  return out;
}

void read_into(Stream& stream, nb::handle buf, nb::handle out) {
  const Buffer& buffer = whole_buffer(buf, "read_into");
  HostTensorBytes tensor;  // a host tensor without the buffer protocol (torch), held for the call
  if (host_tensor_bytes(out, "read_into", "out", /*written=*/true, &tensor)) {
    sequence::lent_block_ids::refuse(tensor.data, tensor.nbytes, "read_into", "out");
    bool pending = false;
    try {
      GilRelease release;
      stream.read_into(buffer, tensor.data, tensor.nbytes, &pending);
    } catch (...) {
      // The device may still write the tensor: it is kept for good, never given back.
      if (pending) (void)new HostTensorBytes(std::move(tensor));
      throw;
    }
    note_torch_write(out);
    return;
  }
  if (is_numpy_masked_array(out))
    raise(ErrorKind::InvalidArgument, "read_into: argument 'out' is a NumPy masked array: its masked elements would be "
                                      "overwritten too; read into its .data");
  if (!PyObject_CheckBuffer(out.ptr()))
    raise(ErrorKind::TypeMismatch, "read_into: the target must support the buffer protocol or be a host tensor "
                                   "(__dlpack__), got " + type_name_of(out));
  // C order only, as write() takes: the bytes land in the buffer's order, which a Fortran-ordered
  // array would read back transposed.
  Py_buffer view;
  if (PyObject_GetBuffer(out.ptr(), &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
    PyErr_Clear();
    if (exports_buffer(out, PyBUF_C_CONTIGUOUS)) raise(ErrorKind::InvalidArgument, "read_into: the target is read-only");
    if (exports_buffer(out, PyBUF_ANY_CONTIGUOUS))
      raise(ErrorKind::InvalidArgument,
            "read_into: the target must be C-contiguous; a Fortran-ordered one would hold the bytes transposed "
            "(pass its transpose, or a C-ordered array)");
    raise(ErrorKind::InvalidArgument, "read_into: the target must be contiguous");
  }
  refuse_object_buffer(view, "read_into: the target",
                       "bytes written over them would be taken for objects' addresses; read into a numeric array");
  bool pending = false;
  try {
    sequence::lent_block_ids::refuse(view.buf, static_cast<std::size_t>(view.len), "read_into", "out");
    GilRelease release;
    stream.read_into(buffer, view.buf, static_cast<std::size_t>(view.len), &pending);
  } catch (...) {
    // The device may still write the target: its export (and so its memory) is kept for good.
    if (!pending) PyBuffer_Release(&view);
    throw;
  }
  PyBuffer_Release(&view);
}

nb::tuple shape_tuple(const BufferView& view) {
  nb::list shape;
  for (std::int64_t n : view.shape) shape.append(n);
  return nb::tuple(shape);
}

BufferView bytes_view(std::shared_ptr<Buffer> buffer) {
  return BufferView{std::move(buffer), &byte_type, {}};
}
BufferView whole(std::shared_ptr<Buffer> buffer) {
  BufferView view = bytes_view(buffer);
  view.shape.push_back(static_cast<std::int64_t>(view.buffer->nbytes()));
  return view;
}

}  // namespace

void init_buffer_interop(nb::module_& m, nb::class_<Buffer>& buffer_class) {
  const char* dlpack_doc =
      "DLPack export (the array API's signature): a zero-copy view of the memory. A versioned capsule\n"
      "when max_version >= (1, 0). On CUDA / HIP the consumer's `stream` waits on an event recorded on\n"
      "the buffer's stream; a device whose memory is host memory (the mock) exports CPU memory after a\n"
      "host wait. stream=-1: the consumer orders its own work (sync() the buffer's stream first, where an\n"
      "error queued on it surfaces) and nothing waits. copy=True and another dl_device raise BufferError.";
  nb::class_<BufferView>(m, "BufferView",
                         "A typed, shaped, zero-copy view of a whole Buffer (Buffer.view), for DLPack consumers\n"
                         "and the CUDA array interface. It keeps its buffer alive.")
      .def_prop_ro("buffer", [](const BufferView& v) { return v.buffer; }, "The Buffer viewed (kept alive by the view)")
      .def_prop_ro("dtype", [](const BufferView& v) { return std::string(v.type->name()); },
                   "The element type's name: 'uint8', 'float32', 'bfloat16', 'bool', ...")
      .def_prop_ro("shape", &shape_tuple, nb::for_getter(nb::sig("def shape(self, /) -> tuple[int, ...]")),
                   "The view's extents, as a tuple of ints")
      .def("__dlpack__", &export_dlpack, nb::kw_only(), "stream"_a.none() = nb::none(),
           "max_version"_a.none() = nb::none(), "dl_device"_a.none() = nb::none(), "copy"_a.none() = nb::none(),
           nb::sig("def __dlpack__(self, *, stream: object | None = None, max_version: object | None = None, "
                   "dl_device: object | None = None, copy: object | None = None) -> typing_extensions.CapsuleType"),
           dlpack_doc)
      .def("__dlpack_device__", [](const BufferView& v) { return dlpack_device(*v.buffer); })
      .def_prop_ro("__cuda_array_interface__", &cuda_array_interface,
                   nb::for_getter(nb::sig("def __cuda_array_interface__(self, /) -> dict[str, typing.Any]")))
      .def("__repr__", [](const BufferView& v) {
        std::string shape;
        for (std::int64_t n : v.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(n);
        return "BufferView(dtype=" + std::string(v.type->name()) + ", shape=(" + shape + (v.shape.size() == 1 ? ",))" : "))");
      });

  buffer_class
      .def(
          "view",
          [](std::shared_ptr<Buffer> b, nb::handle dtype, nb::handle shape) {
            (void)b->ptr("view");  // ClosedError once freed, as every other use of the buffer
            BufferView view = make_view(b, dtype, shape);
            // Again: reading the dtype or the shape runs the caller's code (__index__), which may
            // have freed it.
            (void)b->ptr("view");
            return view;
          },
          "dtype"_a = "uint8", "shape"_a.none() = nb::none(),
          nb::sig("def view(self, dtype: object = 'uint8', shape: collections.abc.Sequence[typing.SupportsIndex] | numpy.typing.NDArray[numpy.integer[typing.Any]] | None = None) -> BufferView"),
          "A typed view of the whole buffer (dtype: a name or another spelling NumPy reads, a numpy or torch\n"
          "dtype, or Python's float, int or bool as NumPy takes them; shape: its elements exactly; default: one\n"
          "dimension). Export it with DLPack or the CUDA array interface.")
      .def(
          "__dlpack__",
          [](std::shared_ptr<Buffer> b, nb::handle stream, nb::handle max_version, nb::handle dl_device, nb::handle copy) {
            return export_dlpack(whole(std::move(b)), stream, max_version, dl_device, copy);
          },
          nb::kw_only(), "stream"_a.none() = nb::none(), "max_version"_a.none() = nb::none(),
          "dl_device"_a.none() = nb::none(), "copy"_a.none() = nb::none(),
          nb::sig("def __dlpack__(self, *, stream: object | None = None, max_version: object | None = None, "
                  "dl_device: object | None = None, copy: object | None = None) -> typing_extensions.CapsuleType"),
          dlpack_doc)
      .def("__dlpack_device__", [](const Buffer& b) { return dlpack_device(b); },
           "(DLPack device type, device id): the registry's type for the backend (CPU for the mock)")
      .def_prop_ro("__cuda_array_interface__",
                   [](std::shared_ptr<Buffer> b) { return cuda_array_interface(whole(std::move(b))); },
                   nb::for_getter(nb::sig("def __cuda_array_interface__(self, /) -> dict[str, typing.Any]")),
                   "Version 3 of the CUDA array interface (uint8, one dimension); only where the backend offers it")
      .def_prop_ro("views", &Buffer::views,
                   "How many exported zero-copy views of it are alive: DLPack capsules and the tensors made\n"
                   "from them (free() is refused meanwhile). A BufferView is a description until exported\n"
                   "(numpy.from_dlpack, torch.from_dlpack) and counts from then on. __cuda_array_interface__\n"
                   "lends nothing and is not counted: its consumer keeps the exporting object, not a view.");
}

void init_stream_interop(nb::class_<Stream>& stream_class) {
  stream_class.def("read_into", &read_into, "buf"_a, "out"_a,
                   nb::sig("def read_into(self, buf: Buffer | BufferView, out: lifecore._stub_types.HostBuffer | "
                           "numpy.typing.NDArray[typing.Any] | lifecore._stub_types.SupportsDLPack) -> None"),
                   "Synchronizes the stream and copies the buffer into `out`, a writable C-contiguous buffer-protocol\n"
                   "object (numpy array, bytearray, memoryview) or host tensor (__dlpack__: a torch CPU tensor) of\n"
                   "exactly buf.nbytes bytes, without an intermediate copy. buf may be a BufferView (its buffer). As\n"
                   "read(), it waits for this stream's work only (sync a stream that wrote the buffer first). Should\n"
                   "the wait fail once the copy is queued (a DriverError), `out` is kept exported for good, since the\n"
                   "device may still write it: a NumPy array's or bytearray's memory stays (a bytearray can no longer\n"
                   "be resized); a torch tensor's storage stays only until the tensor is resized.");
}

}  // namespace lifecore::bindings
