// Another library's tensors as pointer arguments (tensor_arguments.hpp): DLPack capsules and
// the CUDA array interface read into a runtime::ForeignRange.
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "arguments.hpp"
#include "buffer_view.hpp"
#include "dlpack_guard.hpp"
#include "element_types.hpp"
#include "lifecore/sequence/lent_block_ids.hpp"
#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"
#include "lifecore/driver/registry.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/stream_capture_state.hpp"
#include "runtime/hex_text.hpp"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include "tensor_arguments.hpp"

namespace lifecore::bindings {
namespace {

using runtime::Buffer;
using runtime::ForeignRange;

// Producer references let go of without the interpreter lock, or under a stream's lock where
// a deallocation running Python code could call back into that stream: dropped later, under
// the interpreter lock and no core lock (a pending call, or the next entry that takes tensors).
std::mutex deferred_mutex;
std::vector<PyObject*> deferred;
std::atomic<bool> deferred_any{false};
bool deferred_scheduled = false;

int drain_deferred(void*) {
  release_deferred_references();
  return 0;
}

void release_later(PyObject* object) {
  if (object == nullptr || !Py_IsInitialized()) return;  // at exit the interpreter takes everything
  std::lock_guard lock(deferred_mutex);
  deferred.push_back(object);
  deferred_any.store(true, std::memory_order_release);
  if (!deferred_scheduled) deferred_scheduled = Py_AddPendingCall(&drain_deferred, nullptr) == 0;
}

// The references that keep a tensor's memory alive: the producer object and its capsule.
struct ProducerReferences {
  PyObject* object = nullptr;
  PyObject* capsule = nullptr;
  ~ProducerReferences() {
    release_later(capsule);  // the capsule first: its deleter may still read the object
    release_later(object);
  }
};

std::shared_ptr<void> hold_producer(nb::handle object, nb::handle capsule) {
  auto refs = std::make_shared<ProducerReferences>();
  refs->object = nb::borrow(object).release().ptr();
  if (capsule.is_valid()) refs->capsule = nb::borrow(capsule).release().ptr();
  return refs;
}

[[noreturn]] void refuse(const std::string& label, const std::string& why) {
  raise(ErrorKind::InvalidArgument, label + " " + why);
}

// Bytes of a C-contiguous tensor; refuses a strided one. The producer's description is not
// trusted: a negative ndim, a missing shape, a negative extent (check_dlpack_dimensions) or a
// size beyond 64 bits is refused, never wrapped into a small size that would pass for the
// memory it really has.
std::size_t contiguous_bytes(const std::string& label, std::int32_t ndim, const std::int64_t* shape,
                             const std::int64_t* strides, std::size_t item_bytes) {
  check_dlpack_dimensions(label, ndim, shape);
  bool empty = false;
  for (std::int32_t i = 0; i < ndim; ++i) empty = empty || shape[i] == 0;
  if (empty) return 0;  // no bytes, whatever the other dimensions say
  const std::string what = label + ": its size (the shape's product times the element's bytes)";
  std::int64_t count = 1;
  for (std::int32_t i = 0; i < ndim; ++i) count = checked::mul_or_throw(count, shape[i], what);
  const std::uint64_t bytes = checked::mul_or_throw<std::uint64_t>(static_cast<std::uint64_t>(count), item_bytes, what);
  if (strides != nullptr && count > 1) {
    std::int64_t expected = 1;  // in elements; a product of trailing dimensions, at most count
    for (std::int32_t i = ndim; i-- > 0;) {
      if (shape[i] != 1 && strides[i] != expected)
        refuse(label, "is not C-contiguous (strides in elements: given " + [&] {
          std::string text;
          for (std::int32_t k = 0; k < ndim; ++k) text += (k ? ", " : "") + std::to_string(strides[k]);
          return "(" + text + ")";
        }() + "); pass a contiguous copy");
      expected *= shape[i];
    }
  }
  return static_cast<std::size_t>(bytes);
}

// The stream DLPack's consumer passes: its own native stream on a GPU, None for host memory.
// While the stream records, -1 (no ordering): the recorded work runs at replay, not now, and a
// wait on the producer's event would itself be captured, joining another stream's work to the
// graph.
nb::object consumer_stream(runtime::Stream& stream, const char* call) {
  const int type = stream.device()->driver().backend().dlpack_device_type;
  if (type == driver::dlpack_device::cpu) return nb::none();
  if (stream.capture_state().is_recording()) return nb::int_(-1);
  return nb::int_(stream.native_handle(call));  // refused naming the call, not the handle
}

// Whether `h` is a torch tensor while torch captures a CUDA graph on its current stream.
// torch's __dlpack__(stream=) makes the handed stream wait on its current stream, which inside
// torch.cuda.graph joins that stream to torch's capture and leaves the capture unable to end:
// asked before the export, the call is refused with torch's capture left whole. Only a torch
// already imported is asked.
bool torch_is_capturing(nb::handle h) {
  PyObject* module = PyImport_GetModule(nb::str("torch").ptr());  // a new reference, or null
  if (module == nullptr) {
    if (PyErr_Occurred()) throw nb::python_error();
    return false;
  }
  const nb::object torch = nb::steal(module);
  if (!nb::hasattr(torch, "Tensor") || !nb::isinstance(h, torch.attr("Tensor"))) return false;
  try {
    return nb::cast<bool>(torch.attr("cuda").attr("is_current_stream_capturing")());
  } catch (nb::python_error&) {
    return false;  // a torch built without CUDA raises here: it captures nothing
  }
}

// CuPy's current stream (its native handle) when `h` is a CuPy array: CuPy's
// __dlpack__(stream=) records an event there and makes the handed stream wait for it, which
// inside a CuPy graph capture joins that stream to the capture. Only a CuPy already imported
// is asked; one that cannot answer (no device) has nothing captured to join.
std::optional<std::uintptr_t> cupy_current_stream(nb::handle h) {
  PyObject* module = PyImport_GetModule(nb::str("cupy").ptr());  // a new reference, or null
  if (module == nullptr) {
    if (PyErr_Occurred()) throw nb::python_error();
    return std::nullopt;
  }
  const nb::object cupy = nb::steal(module);
  if (!nb::hasattr(cupy, "ndarray") || !nb::isinstance(h, cupy.attr("ndarray"))) return std::nullopt;
  try {
    return nb::cast<std::uintptr_t>(cupy.attr("cuda").attr("get_current_stream")().attr("ptr"));
  } catch (nb::python_error&) {
    return std::nullopt;
  } catch (nb::cast_error&) {
    return std::nullopt;
  }
}

// Whether `h` says through the buffer protocol that it may not be written (a JAX array, a
// read-only NumPy array): a capsule before DLPack 1.0 carries no read-only flag, so a producer
// that ignores max_version would otherwise have its immutable memory written.
bool refuses_writers(nb::handle h) {
  if (!PyObject_CheckBuffer(h.ptr())) return false;  // no other way to ask it: taken as writable
  Py_buffer view;
  if (PyObject_GetBuffer(h.ptr(), &view, PyBUF_WRITABLE) == 0) {
    PyBuffer_Release(&view);
    return false;
  }
  PyErr_Clear();  // the refusal is the answer
  return true;
}

// NumPy before 2.1 cannot export a read-only array (a capsule before DLPack 1.0 has no
// read-only flag): its __dlpack__ raises BufferError, and the array is read another way. Only
// one NumPy would export were it writable (a writable empty array of its dtype is asked, so
// NumPy's own dtype rules apply): being read-only makes no other difference.
bool numpy_refused_read_only(nb::handle h, nb::python_error& error) {
  if (!error.matches(PyExc_BufferError) || !is_numpy_array(h) || nb::cast<bool>(h.attr("flags").attr("writeable")))
    return false;
  try {
    nb::module_::import_("numpy").attr("empty")(0, nb::arg("dtype") = h.attr("dtype")).attr("__dlpack__")();
  } catch (nb::python_error& refused) {
    if (!refused.matches(PyExc_Exception)) throw;  // an interrupt stays one
    return false;
  }
  return true;
}

// A tensor whose data does not start at a multiple of its element size (NumPy's frombuffer of an
// offset slice, say): a kernel's loads there are undefined, and a GPU faults on them (a fault that
// loses the context), so it is refused for every operation. Sizes that are no power of two (a
// 3-byte structured element) have no alignment to keep.
void check_aligned(const std::string& label, std::uintptr_t address, std::size_t item) {
  if (item < 2 || item > 16 || (item & (item - 1)) != 0 || address % item == 0) return;
  refuse(label, "starts at " + runtime::hex_text(address) + ", not aligned to its " + std::to_string(item) +
                    "-byte elements: a kernel's access there is undefined (a GPU faults on it); pass an aligned copy");
}

// Such an array through NumPy's array interface: host memory, read-only, held by the array
// (its memory lives as long as it does).
void read_numpy_array_interface(nb::handle h, const std::string& label, ForeignRange* out) {
  nb::dict interface = nb::borrow<nb::dict>(h.attr("__array_interface__"));
  const auto data = nb::cast<std::pair<std::uintptr_t, bool>>(interface["data"]);
  const auto shape = numbers_of<std::int64_t>(interface["shape"]);
  const auto item = nb::cast<std::int64_t>(h.attr("itemsize"));
  if (item <= 0) refuse(label, "has elements of 0 bits, not whole bytes");
  std::vector<std::int64_t> strides;  // in elements, as DLPack gives them
  if (!interface["strides"].is_none()) {
    for (std::int64_t s : numbers_of<std::int64_t>(interface["strides"])) {
      if (s % item != 0) refuse(label, "is not C-contiguous (a stride is not a whole number of elements)");
      strides.push_back(s / item);
    }
    if (strides.size() != shape.size())  // read beside the shape, one per axis
      refuse(label, "has " + std::to_string(strides.size()) + " strides for " + std::to_string(shape.size()) +
                        " axes in its __array_interface__");
  }
  out->device_type = driver::dlpack_device::cpu;
  out->device_id = 0;
  out->element_type = typestr_element_type(nb::cast<std::string>(interface["typestr"]));
  out->nbytes = contiguous_bytes(label, static_cast<std::int32_t>(shape.size()), shape.data(),
                                 strides.empty() ? nullptr : strides.data(), static_cast<std::size_t>(item));
  out->address = static_cast<std::uintptr_t>(data.first);
  refuse_null_address(label, out->address, out->nbytes);
  check_aligned(label, out->address, static_cast<std::size_t>(item));
  out->read_only = true;
  out->owner = hold_producer(h, nb::handle());
}

void read_dlpack(nb::handle h, runtime::Stream& stream, const char* call, const std::string& name,
                 const std::string& label, ForeignRange* out) {
  refuse_negative_view(h, label);
  auto [type, id] = dlpack_device_of(h, label);
  if (type >= 0) runtime::check_foreign_device(*stream.device(), type, id, label);  // before any export
  nb::object export_fn = h.attr("__dlpack__");
  nb::object stream_arg = consumer_stream(stream, call);
  // The stream itself handed over: the producer orders it, inside its own capture by joining it.
  const bool handed = !stream_arg.is_none() && PyLong_AsLongLong(stream_arg.ptr()) != -1;
  if (handed) {
    if (const auto current = cupy_current_stream(h))
      stream.check_producer_stream_before_export(*current, call, name, "CuPy");
  }
  if (handed && torch_is_capturing(h))
    raise(ErrorKind::CaptureState,
          label + " is a torch tensor, and torch is capturing a CUDA graph on its current stream: torch's export "
                  "would make this stream wait there and join that capture. Nothing was issued and torch's capture "
                  "is left whole; call lifecore outside torch.cuda.graph (or record with Stream.capture)");
  nb::object capsule;
  std::optional<std::string> export_failure;
  bool numpy_read_only = false;
  try {
    capsule = dlpack_export(export_fn, &stream_arg);
  } catch (nb::python_error& error) {
    if (!error.matches(PyExc_Exception)) throw;  // an interrupt stays one
    export_failure = nb::str(error.value()).c_str();
    numpy_read_only = numpy_refused_read_only(h, error);
  }
  // Checked here, before anything else can refuse the tensor (or the call's next argument):
  // a stream the producer joined to its capture refuses every call until that capture ends.
  if (handed) stream.check_not_joined_by_producer(call);
  if (numpy_read_only) return read_numpy_array_interface(h, label, out);
  if (export_failure) refuse(label, "could not be exported by its __dlpack__: " + *export_failure);
  const auto [tensor, versioned] = capsule_tensor(capsule);
  if (!tensor) refuse(label, "has a __dlpack__ that returned no DLPack capsule");
  std::uint64_t flags = 0;
  if (versioned) {
    if (versioned->version.major != 1)
      refuse(label, "was exported in DLPack " + std::to_string(versioned->version.major) + ".x, not 1.x");
    flags = versioned->flags;
  }
  if (flags & dlpack_flag_is_copied)
    refuse(label, "was exported as a copy by its producer, so the operation would not reach its memory");
  const std::size_t bits = std::size_t{tensor->dtype.bits} * tensor->dtype.lanes;
  if (bits == 0 || bits % 8 != 0) refuse(label, "has elements of " + std::to_string(bits) + " bits, not whole bytes");
  out->device_type = tensor->device.device_type;
  out->device_id = tensor->device.device_id;
  out->element_type = dl_dtype_name(tensor->dtype);
  out->nbytes = contiguous_bytes(label, tensor->ndim, tensor->shape, tensor->strides, bits / 8);
  const auto address = dlpack_address(*tensor, out->nbytes);
  if (!address) refuse_wrapped_address(label);
  out->address = *address;
  refuse_null_address(label, reinterpret_cast<std::uintptr_t>(tensor->data), out->nbytes);
  check_aligned(label, out->address, bits / 8);
  out->read_only = (flags & dlpack_flag_read_only) != 0 || (versioned == nullptr && refuses_writers(h));
  // The capsule stays unconsumed and referenced: its destructor returns the tensor to its
  // producer once the last hold lets go.
  out->owner = hold_producer(h, capsule);
}

// An int that is not a bool (which Python counts as an int).
bool is_int(nb::handle value) { return PyLong_Check(value.ptr()) && !PyBool_Check(value.ptr()); }

// Version 3's `stream`: absent or None, no ordering; 0 is disallowed (it cannot tell the
// legacy default stream from the per-thread one); 1 and 2 are those two, as CUDA numbers
// their handles; anything else is a native stream.
static_assert(sizeof(std::uintptr_t) == sizeof(std::uint64_t), "a stream handle is read as 64 bits");
std::optional<std::uintptr_t> cai_stream(nb::dict dict, const std::string& label) {
  if (!dict.contains("stream") || dict["stream"].is_none()) return std::nullopt;
  nb::object value = dict["stream"];
  std::uint64_t handle = 0;
  if (!is_int(value) || !nb::try_cast(value, handle))
    refuse(label, "has a __cuda_array_interface__ stream that is not None or a stream handle (a non-negative int): " +
                      std::string(nb::repr(value).c_str()));
  if (handle == 0)
    refuse(label, "has a __cuda_array_interface__ stream of 0, which the interface disallows (it could mean the "
                  "legacy or the per-thread default stream): give 1, 2, a stream handle or None");
  return static_cast<std::uintptr_t>(handle);
}

void read_cuda_array_interface(nb::handle h, runtime::Stream& stream, const std::string& label, ForeignRange* out) {
  // The interface names no device: the memory's kind is checked here, its ordinal by the core
  // with the driver (resolve_memory).
  runtime::check_foreign_device(*stream.device(), driver::dlpack_device::cuda, -1, label);
  nb::object cai = h.attr("__cuda_array_interface__");
  if (!nb::isinstance<nb::dict>(cai)) refuse(label, "has a __cuda_array_interface__ that is not a dict");
  nb::dict dict = nb::borrow<nb::dict>(cai);
  if (!dict.contains("version") || !is_int(dict["version"]))
    refuse(label, "has a __cuda_array_interface__ without an int version");
  if (dict.contains("mask") && !dict["mask"].is_none())
    refuse(label, "has a __cuda_array_interface__ mask: masked arrays are not supported");
  std::string typestr;
  std::vector<std::int64_t> shape;
  std::pair<std::uint64_t, bool> data;
  if (!dict.contains("typestr") || !nb::try_cast(dict["typestr"], typestr) || typestr.size() < 3 ||
      !dict.contains("shape") || !try_numbers_of(dict["shape"], shape) || !dict.contains("data") ||
      !nb::try_cast(dict["data"], data))
    refuse(label, "has a __cuda_array_interface__ without a valid typestr, shape and data");
  errno = 0;
  const long item = std::strtol(typestr.c_str() + 2, nullptr, 10);
  if (item <= 0 || errno == ERANGE) refuse(label, "has an unknown typestr " + typestr);  // not clamped to LONG_MAX
  std::vector<std::int64_t> strides;
  const std::int64_t* stride_ptr = nullptr;
  if (dict.contains("strides") && !dict["strides"].is_none()) {
    std::vector<std::int64_t> bytes_strides;
    if (!try_numbers_of(dict["strides"], bytes_strides) || bytes_strides.size() != shape.size())
      refuse(label, "has __cuda_array_interface__ strides that do not match its shape");
    for (std::int64_t s : bytes_strides) {
      if (s % item != 0) refuse(label, "is not C-contiguous (a stride is not a whole number of elements)");
      strides.push_back(s / item);
    }
    stride_ptr = strides.data();
  }
  out->device_type = driver::dlpack_device::cuda;
  out->device_id = -1;
  out->element_type = typestr_element_type(typestr);
  out->nbytes = contiguous_bytes(label, static_cast<std::int32_t>(shape.size()), shape.data(), stride_ptr,
                                 static_cast<std::size_t>(item));
  out->address = static_cast<std::uintptr_t>(data.first);
  refuse_null_address(label, out->address, out->nbytes);
  check_aligned(label, out->address, static_cast<std::size_t>(item));
  out->read_only = data.second;
  out->producer_stream = cai_stream(dict, label);
  out->owner = hold_producer(h, nb::handle());
}

}  // namespace

void release_deferred_references() {
  if (!deferred_any.load(std::memory_order_acquire)) return;
  std::vector<PyObject*> objects;
  {
    std::lock_guard lock(deferred_mutex);
    objects.swap(deferred);
    deferred_any.store(false, std::memory_order_release);
    deferred_scheduled = false;
  }
  for (PyObject* object : objects) Py_DECREF(object);
}

bool memory_argument(nb::handle h, runtime::Stream& stream, const char* call, const std::string& name,
                     MemoryArgument* out) {
  if (Buffer* buffer = nullptr; nb::try_cast<Buffer*>(h, buffer) && buffer != nullptr) {
    out->ref.buffer = buffer;
    return true;
  }
  if (BufferView* view = nullptr; nb::try_cast<BufferView*>(h, view) && view != nullptr) {
    out->ref.buffer = view->buffer.get();
    out->view_type = view->type->name();
    return true;
  }
  const std::string label = std::string(call) + ": argument '" + name + "'";
  if (is_numpy_masked_array(h))
    refuse(label, "is a NumPy masked array: the operation would read and write its masked elements too; pass its "
                  ".data, or .filled(value)");
  if (nb::hasattr(h, "__dlpack__")) {
    read_dlpack(h, stream, call, name, label, &out->foreign);
  } else if (nb::hasattr(h, "__cuda_array_interface__")) {
    read_cuda_array_interface(h, stream, label, &out->foreign);
  } else {
    return false;
  }
  // A sequence's block ids are lent read-only, whatever the view made of them says (torch's
  // from_dlpack makes a writable one): no operation writes them.
  if (sequence::lent_block_ids::overlaps(reinterpret_cast<const void*>(out->foreign.address), out->foreign.nbytes))
    out->foreign.read_only = true;
  out->ref.foreign = &out->foreign;
  return true;
}

}  // namespace lifecore::bindings
