// Device, Stream, Buffer, Graph and the built-in kernels. Translation only: Python values to
// core arguments (launch arguments are converted here, checked by the core), the GIL released
// around blocking calls, errors raised by the core.
#include <algorithm>
#include <chrono>
#include <deque>
#include <list>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "arguments.hpp"
#include "bindings.hpp"
#include "host_copy_arguments.hpp"
#include "interruptible_wait.hpp"
#include "recordings_end_with_thread.hpp"
#include "tensor_arguments.hpp"
#include "lifecore/deadline.hpp"
#include "lifecore/error.hpp"
#include "runtime/blocking_wait.hpp"
#include "runtime/hex_text.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/graph.hpp"
#include "lifecore/runtime/graph_capture.hpp"
#include "lifecore/runtime/kernel.hpp"
#include "lifecore/runtime/profile.hpp"
#include "lifecore/runtime/stream.hpp"
#include "driver/mock/mock_driver.hpp"

namespace lifecore::bindings {

void init_capture_state(nb::module_& m);
void init_runtime_modules(nb::module_& m);
void init_buffer_interop(nb::module_& m, nb::class_<runtime::Buffer>& buffer_class);
void init_stream_interop(nb::class_<runtime::Stream>& stream_class);
void init_pooled_allocator(nb::module_& m);  // pooled_allocator_abi.cpp

namespace {

using runtime::Buffer;
using runtime::Device;
using runtime::Graph;
using runtime::Kernel;
using runtime::LaunchArg;
using runtime::Profile;
using runtime::Stream;



// A Python int as int64 (or the bits of a uint64 above INT64_MAX); InvalidArgumentError beyond.
std::int64_t to_int64(nb::handle h, const char* what, bool* above_int64) {
  int overflow = 0;
  long long value = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
  *above_int64 = false;
  if (overflow == 0) {
    if (value == -1 && PyErr_Occurred()) throw nb::python_error();
    return value;
  }
  if (overflow > 0) {
    unsigned long long big = PyLong_AsUnsignedLongLong(h.ptr());
    if (!(big == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
      *above_int64 = true;
      return static_cast<std::int64_t>(big);
    }
    PyErr_Clear();
  }
  raise(ErrorKind::Overflow, std::string(what) + " does not fit in 64 bits");
}

// An array or a tensor (an object a kernel could read as memory), never a scalar argument.
bool array_like(nb::handle h) {
  return PyObject_HasAttrString(h.ptr(), "__dlpack__") || PyObject_HasAttrString(h.ptr(), "__cuda_array_interface__");
}

// The int an integer argument stands for, as the other counts take it (arguments.hpp): an int or
// a scalar with __index__ (a NumPy integer), never a bool, an array or a tensor (a 0-d one
// included); an invalid object when `h` is none of these.
nb::object as_integer(nb::handle h) {
  if (!PyLong_Check(h.ptr()) && PyIndex_Check(h.ptr()) && array_like(h)) return {};
  return index_of(h);
}

// A float argument: a float, or a scalar with __float__ that is no integer, bool, sequence,
// array or tensor (a NumPy float32, say); false when `h` is none of these.
bool as_real(nb::handle h, double* out) {
  if (PyFloat_Check(h.ptr())) {
    *out = PyFloat_AsDouble(h.ptr());
    return true;
  }
  // PyType_GetSlot reads a static type's slots too (Python 3.10+), and the limited API has it.
  if (PyBool_Check(h.ptr()) || PyLong_Check(h.ptr()) || PyIndex_Check(h.ptr()) ||
      PyType_GetSlot(Py_TYPE(h.ptr()), Py_nb_float) == nullptr || PySequence_Check(h.ptr()) || array_like(h))
    return false;
  if (is_numpy_bool(h)) return false;  // it has __float__ (and, before NumPy 2.3, __index__)
  const double value = PyFloat_AsDouble(h.ptr());
  if (value == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *out = value;
  return true;
}

// Dimension `index` of a grid or block: an int64, or refused as out of range whatever its size
// (one past 64 bits is no more wrong than 2**31, and is named the same way, with its value).
std::int64_t dimension(nb::handle integer, const char* what, std::size_t index) {
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(integer.ptr(), &overflow);
  if (overflow == 0) {
    if (value == -1 && PyErr_Occurred()) throw nb::python_error();
    return value;
  }
  raise(ErrorKind::InvalidArgument, std::string(what) + " dimension " + std::to_string(index) + " is " +
                                        nb::cast<std::string>(nb::str(integer)) +
                                        (overflow > 0 ? ", past any launch's limit" : ", below 1"));
}

// An int or a tuple / list of up to 3 ints, into `values`; returns how many.
std::size_t to_dims(nb::handle h, const char* what, std::int64_t (&values)[3]) {
  std::size_t count = 0;
  if (nb::object integer = as_integer(h); integer.is_valid()) {
    values[count] = dimension(integer, what, count);
    ++count;
  } else if (is_item_sequence(h)) {
    const nb::tuple items = sequence_snapshot(h, std::string(what));
    for (nb::handle item : items) {
      nb::object dim = as_integer(item);
      if (!dim.is_valid())
        raise(ErrorKind::TypeMismatch, std::string(what) + " must be an int or a tuple of ints, got a " +
                                           type_name_of(item) + " inside");
      if (count == 3)
        raise(ErrorKind::InvalidArgument, std::string(what) + " must have 1 to 3 dimensions, got " +
                                              std::to_string(items.size()));
      values[count] = dimension(dim, what, count);
      ++count;
    }
  } else {
    raise(ErrorKind::TypeMismatch,
          std::string(what) + " must be an int or a tuple of up to 3 ints, got " + type_name_of(h));
  }
  return count;
}

runtime::InfoWords to_info(nb::handle h) {
  runtime::InfoWords words;
  if (!nb::isinstance<nb::sequence>(h) || nb::isinstance<nb::str>(h) || nb::isinstance<nb::bytes>(h))
    raise(ErrorKind::TypeMismatch, "launch: info must be a sequence of ints, got " + type_name_of(h));
  for (nb::handle item : sequence_snapshot(h, "launch: argument 'info'")) {
    nb::object word = as_integer(item);
    if (!word.is_valid())
      raise(ErrorKind::TypeMismatch, "launch: info words must be ints, got " + type_name_of(item));
    bool big = false;
    std::int64_t value = to_int64(word, "launch: an info word", &big);
    if (big || value < INT32_MIN || value > static_cast<std::int64_t>(UINT32_MAX))
      raise(ErrorKind::Overflow, "launch: info word " + std::string(nb::str(item).c_str()) + " does not fit 32 bits");
    words.push_back(static_cast<std::uint32_t>(value));
  }
  return words;
}

// Whether argument `index` goes to a pointer parameter (only there is an object read as a tensor).
bool pointer_parameter(const Kernel& kernel, std::size_t index, std::size_t offset) {
  const auto& params = kernel.params();
  return index + offset < params.size() && params[index + offset] == driver::ArgKind::pointer;
}

// The kernel's name for argument `index` (after the info buffer, when given), for messages.
std::string parameter_name(const Kernel& kernel, std::size_t index, std::size_t offset) {
  const auto& names = kernel.param_names();
  return index + offset < names.size() ? names[index + offset] : "#" + std::to_string(index);
}

void launch(Stream& stream, const Kernel& kernel, nb::handle grid, nb::handle block, nb::handle args,
            nb::handle info) {
  driver::Dim3 grid_dims;
  driver::Dim3 block_dims;
  {
    std::int64_t g[3];
    std::int64_t b[3];
    const std::size_t gn = to_dims(grid, "launch: grid", g);
    const std::size_t bn = to_dims(block, "launch: block", b);
    grid_dims = runtime::make_grid(std::span<const std::int64_t>(g, gn));
    block_dims = runtime::make_block(std::span<const std::int64_t>(b, bn));
  }
  if (!is_item_sequence(args))
    raise(ErrorKind::TypeMismatch, "launch: args must be a sequence (list, tuple, ...), got " + type_name_of(args));
  ReleaseReferencesOnExit release_references;
  const std::size_t offset = info.is_none() ? 0 : 1;
  LaunchArg converted[16];
  std::vector<LaunchArg> spill;
  std::deque<std::string> names;  // keeps the type names of unsupported arguments alive
  std::list<MemoryArgument> tensors;  // tensors' descriptions, at stable addresses (empty: no allocation)
  // Converted arguments borrow the items (a Buffer's address): the snapshot keeps them alive
  // and fixes their count, whatever a conversion's Python code does to the caller's list.
  const nb::tuple items = sequence_snapshot(args, "launch: argument 'args'");
  const std::size_t count = items.size();
  LaunchArg* out = converted;
  if (count > 16) {
    spill.resize(count);
    out = spill.data();
  }
  std::size_t i = 0;
  for (nb::handle item : items) {
    LaunchArg& arg = out[i++];
    nb::object integer = as_integer(item);  // a bool is neither: refused below as what it is
    if (integer.is_valid()) {
      arg.kind = LaunchArg::Kind::integer;
      // The argument's name only on the rare refusal: built on the hot path, it would cost a string.
      try {
        arg.integer = to_int64(integer, "launch: an integer argument", &arg.above_int64);
      } catch (const Error&) {
        // An int past 64 bits is still a number a float parameter can take (2**64 is a float32).
        const std::size_t param = i - 1 + offset;
        const auto& params = kernel.params();
        const bool real_param = param < params.size() &&
                                (params[param] == driver::ArgKind::f32 || params[param] == driver::ArgKind::f64);
        if (real_param) {
          const double value = PyLong_AsDouble(integer.ptr());
          if (!(value == -1.0 && PyErr_Occurred())) {
            arg.kind = LaunchArg::Kind::real;
            arg.real = value;
            continue;
          }
          PyErr_Clear();
        }
        raise(ErrorKind::Overflow, "launch: " + kernel.signature() + ": argument '" + parameter_name(kernel, i - 1, offset) +
                                       "' = " + nb::str(item).c_str() + " does not fit in 64 bits");
      }
    } else if (as_real(item, &arg.real)) {
      arg.kind = LaunchArg::Kind::real;
    } else if (Buffer* buffer = nullptr; nb::try_cast<Buffer*>(item, buffer) && buffer != nullptr) {
      arg.kind = LaunchArg::Kind::buffer;
      arg.buffer = buffer;
    } else if (pointer_parameter(kernel, i - 1, offset) &&
               memory_argument(item, stream, "launch", parameter_name(kernel, i - 1, offset), &tensors.emplace_back())) {
      const MemoryArgument& memory = tensors.back();
      arg.kind = memory.ref.buffer ? LaunchArg::Kind::buffer : LaunchArg::Kind::foreign;
      arg.buffer = memory.ref.buffer;
      arg.foreign = memory.ref.foreign;
      arg.view_type = memory.view_type;
    } else {
      arg.kind = LaunchArg::Kind::other;
      names.push_back(type_name_of(item));
      arg.type_name = names.back();
    }
  }
  if (info.is_none()) {
    stream.launch(kernel, grid_dims, block_dims, out, count, nullptr);
  } else {
    runtime::InfoWords words = to_info(info);
    stream.launch(kernel, grid_dims, block_dims, out, count, &words);
  }
}

// A memory argument of fill / copy, or LifecoreTypeError naming it.
void convert_memory(nb::handle h, Stream& stream, const char* call, const char* name, MemoryArgument* out) {
  if (!memory_argument(h, stream, call, name, out))
    raise(ErrorKind::TypeMismatch, argument_label(call, name) +
                                       " must be a Buffer, a BufferView or a tensor (an object with __dlpack__ or "
                                       "__cuda_array_interface__), got " + type_name_of(h));
}

void fill(Stream& stream, nb::handle buf, nb::handle value_arg) {
  // A word's 32 bits, given unsigned (0xFFFFFFFF) or signed (-1, a block table's pad): the same bits.
  const auto value = static_cast<std::uint32_t>(
      int_argument(value_arg, "fill", "value", std::numeric_limits<std::int32_t>::min(),
                   std::numeric_limits<std::uint32_t>::max()));
  ReleaseReferencesOnExit release_references;
  MemoryArgument dst;
  convert_memory(buf, stream, "fill", "buf", &dst);
  // A driver fills 32-bit words at 4-byte aligned addresses only (a buffer always starts at one).
  if (dst.ref.foreign && dst.foreign.address % 4 != 0)
    raise(ErrorKind::InvalidArgument, "fill: argument 'buf' starts at " + runtime::hex_text(dst.foreign.address) +
                                          ", not 4-byte aligned: a driver fills 32-bit words at aligned addresses "
                                          "only; pass an aligned tensor");
  stream.fill(dst.ref, value);
  note_torch_write(buf);
}

void copy(Stream& stream, nb::handle dst, nb::handle src) {
  ReleaseReferencesOnExit release_references;
  MemoryArgument to;
  MemoryArgument from;
  convert_memory(dst, stream, "copy", "dst", &to);
  convert_memory(src, stream, "copy", "src", &from);
  stream.copy(to.ref, from.ref);
  note_torch_write(dst);
}

void write(Stream& stream, nb::handle buf, nb::handle data) {
  Buffer& buffer = whole_buffer(buf, "write");
  HostTensorBytes tensor;  // a host tensor without the buffer protocol (torch), held for the call
  if (host_tensor_bytes(data, "write", "data", /*written=*/false, &tensor)) {
    stream.write(buffer, tensor.data, tensor.nbytes);
    return;
  }
  if (is_numpy_masked_array(data))
    raise(ErrorKind::InvalidArgument, "write: argument 'data' is a NumPy masked array: its masked elements would be "
                                      "written too; pass its .data, or .filled(value)");
  Py_buffer view;
  // With its format, to refuse objects (a memoryview gives a format only with a shape); an
  // exporter that gives neither is read as plain bytes.
  if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_ND | PyBUF_FORMAT) != 0 &&
      (PyErr_Clear(), PyObject_GetBuffer(data.ptr(), &view, PyBUF_SIMPLE) != 0)) {
    PyErr_Clear();
    if (PyObject_CheckBuffer(data.ptr())) {
      // A Fortran-ordered array is contiguous, and np.copy keeps its order: say what would help.
      if (exports_buffer(data, PyBUF_ANY_CONTIGUOUS))
        raise(ErrorKind::InvalidArgument,
              "write: data must be C-contiguous; a Fortran-ordered array holds its bytes transposed (pass its "
              "transpose, or a C-ordered copy such as numpy.ascontiguousarray(data))");
      raise(ErrorKind::InvalidArgument, "write: data must be contiguous (copy a strided array first)");
    }
    raise(ErrorKind::TypeMismatch, "write: data must be a bytes-like object or a host tensor (__dlpack__), got " +
                                       type_name_of(data));
  }
  refuse_object_buffer(view, "write: data",
                       "its bytes are the objects' addresses, not their values; convert it to a numeric array first");
  try {
    stream.write(buffer, view.buf, static_cast<std::size_t>(view.len));
  } catch (...) {
    PyBuffer_Release(&view);
    throw;
  }
  PyBuffer_Release(&view);
}

// The note a failed capture() carries when its abort could not end the driver capture either:
// the first failure is what the caller gets, and the stream is still recording.
constexpr const char* still_recording_note =
    "capture: the abort after this failure could not end the driver capture either: the stream is still in "
    "CAPTURE (driver_capturing); call abort_capture() from this thread to end it";

// The lifecycle is the core's (capture_graph); fn(stream) is its pass, and a Python exception
// it raises propagates through the core's abort unchanged.
std::shared_ptr<Graph> capture(nb::handle self, nb::callable fn, std::int64_t warmup, CaptureOwner owner) {
  Stream& stream = nb::cast<Stream&>(self);
  end_recordings_with_this_thread();  // an abort that fails leaves the recording to this thread
  bool still_capturing = false;  // this call's capture, after its abort (not another's, nor one it never made)
  try {
    return runtime::capture_graph(stream, warmup, owner, [&] { fn(self); }, &still_capturing);
  } catch (nb::python_error& error) {  // fn's own exception, passed through unchanged but for the note
    if (still_capturing) error.value().attr("add_note")(still_recording_note);
    throw;
  } catch (const Error& error) {
    if (!still_capturing) throw;
    raise_python(error);  // the exception the translation would raise, set here to carry the note
    nb::python_error raised;
    raised.value().attr("add_note")(still_recording_note);
    throw raised;
  }
}

// The core's waits that may start with the interpreter lock held (a Graph's or a Device's
// last reference dropped) let go of it for the wait.
// Whether this thread holds the interpreter lock. A thread without a Python thread state (a
// driver or timer thread) holds nothing. The limited API has no PyGILState_Check: there, a
// Python thread holds the lock exactly when it has a current thread state, which a swap out
// and back reveals without changing anything.
bool holds_interpreter() {
  if (PyGILState_GetThisThreadState() == nullptr) return false;
#if defined(Py_LIMITED_API)
  PyThreadState* current = PyThreadState_Swap(nullptr);
  if (current != nullptr) PyThreadState_Swap(current);
  return current != nullptr;
#else
  return PyGILState_Check() != 0;
#endif
}

void* release_interpreter() { return holds_interpreter() ? static_cast<void*>(PyEval_SaveThread()) : nullptr; }
void reacquire_interpreter(void* token) { restore_interpreter(static_cast<PyThreadState*>(token)); }

// Mock only, for tests: holds every stream's queued work for `seconds` (a waiting call blocks
// until then), released by a thread of its own so no Python code has to run to end it.
void pause_mock_streams_for(std::shared_ptr<Device> device, double seconds) {
  auto* mock = driver::MockDriver::from(&device->vendor_driver());
  if (mock == nullptr) raise(ErrorKind::InvalidArgument, "_pause_streams_for: the device is not the mock");
  if (!(seconds >= 0.0 && seconds <= 60.0))
    raise(ErrorKind::InvalidArgument, "_pause_streams_for: seconds must be between 0 and 60");
  mock->pause_streams();
  // The thread keeps the driver (not the device) alive, so it never runs a device's close.
  std::thread([driver = device->shared_driver(), mock, seconds] {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    mock->resume_streams();
  }).detach();
}

// Stream.sync: the driver's blocking wait without a timeout; with one, slices of polling that
// yield to signals (interruptible_wait.hpp).
bool sync_stream(Stream& stream, nb::handle timeout) {
  if (timeout.is_none()) {
    GilRelease release;
    stream.sync();
    return true;
  }
  using clock = std::chrono::steady_clock;
  const Deadline deadline = deadline_after(timeout_argument(timeout, "sync"), "sync");
  return wait_in_slices([&]() -> std::optional<bool> {
    const clock::duration slice = signal_slice;
    const clock::duration wait =
        deadline ? std::clamp<clock::duration>(*deadline - clock::now(), clock::duration::zero(), slice) : slice;
    if (stream.sync_for(wait)) return true;
    if (deadline && clock::now() >= *deadline) return false;
    return std::nullopt;
  });
}

std::string device_repr(const Device& device) {
  return "Device(backend='" + device.backend() + "', ordinal=" + std::to_string(device.ordinal()) + ", graphs='" +
         device.graphs_name() + "', capture_mode='" + device.capture_mode_name() + "'" +
         (device.closed() ? ", closed" : "") + ")";
}

void bind_kernels(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<Kernel>(m, "Kernel",
                     "A kernel for Stream.launch: a built-in (every backend offers it under the same name and\n"
                     "parameters) or one of a user Module (Module.function).")
      .def_prop_ro("name", [](const Kernel& k) { return std::string(k.name()); }, "The kernel's name")
      .def_prop_ro("params",
                   [](const Kernel& k) {
                     std::vector<std::string> kinds;
                     for (auto kind : k.params()) kinds.emplace_back(runtime::arg_kind_name(kind));
                     return kinds;
                   },
                   "The parameter kinds: 'ptr', 'u32', 'f32', ...")
      .def_prop_ro("param_names",
                   [](const Kernel& k) {
                     std::vector<std::string> names;
                     for (auto name : k.param_names()) names.emplace_back(name);
                     return names;
                   },
                   "The parameter names")
      .def_prop_ro("read_only",
                   [](const Kernel& k) {
                     std::vector<std::string> names;
                     for (std::size_t i = 0; i < k.params().size(); ++i)
                       if (k.reads_only(i)) names.emplace_back(k.param_names()[i]);
                     return names;
                   },
                   "The pointer parameters the kernel only reads ('const ptr' in its signature): a read-only\n"
                   "tensor may be passed there, and only there")
      .def_prop_ro("summary", [](const Kernel& k) { return std::string(k.summary()); }, "What it computes")
      .def_prop_ro("signature", &Kernel::signature, "name(param: kind, ...), a pointer it only reads as 'const ptr'")
      .def_prop_ro("is_builtin", &Kernel::is_builtin, "True for lifecore.kernels, False for a Module's kernel")
      .def("__repr__", [](const Kernel& k) { return "Kernel(" + k.signature() + ")"; });
  m.def("builtin_kernel", &Kernel::builtin, "name"_a, nb::rv_policy::reference,
        "The built-in kernel of that name (lifecore.kernels holds them all).");
  m.def("builtin_kernel_names", [] {
    std::vector<std::string> names;
    for (const auto& k : Kernel::builtins()) names.emplace_back(k.name());
    return names;
  }, "The names of the built-in kernels, in a stable order (builtin_kernel(name) gives each).");
}

void bind_device(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<Device>(m, "Device",
                     "One device of one backend. Device(backend='auto', ordinal=0, *, graphs='auto',\n"
                     "capture_mode='thread_local'); a context manager that closes it.", nb::is_weak_referenceable())
      .def(nb::new_([](const std::string& backend, int ordinal, const std::string& graphs,
                       const std::string& capture_mode) { return Device::open(backend, ordinal, graphs, capture_mode); }),
           "backend"_a = "auto", "ordinal"_a = 0, nb::kw_only(), "graphs"_a = "auto",
           "capture_mode"_a = "thread_local")
      .def_prop_ro("backend", &Device::backend, "The backend's registered name (lifecore.backends())")
      .def_prop_ro("graphs", [](const Device& d) { return std::string(d.graphs_name()); },
                   "'hardware' (the driver captures) or 'software' (the runtime records and re-issues)")
      .def_prop_ro("capture_mode", &Device::capture_mode_name, "'thread_local', 'global' or 'relaxed'")
      .def_prop_ro("ordinal", &Device::ordinal, "The device's index within its backend (as passed to Device)")
      .def_prop_ro("name", &Device::name, "The device's name")
      .def_prop_ro("closed", &Device::closed, "True once close() (or leaving its with block) has run")
      .def_prop_ro("lost", &Device::lost,
                   "True once a sticky driver error left the device's context unusable: every later call raises\n"
                   "DeviceLostError.")
      .def_prop_ro("abandoned_captures", &Device::abandoned_captures,
                   "Driver captures close() left to the threads that began them (thread_local / global mode); each\n"
                   "ends at its thread's next call on its stream. A recording stream whose last reference went on another\n"
                   "thread is counted too, and ends at its thread's next call that the capture would forbid. One whose\n"
                   "thread is gone stays open: a leak.")
      .def("stream", &Device::stream, "A new stream on this device.")
      .def("memory_stats",
           [](const Device& d) {
             nb::dict out;
             for (const auto& [key, value] : d.memory_stats()) out[key.c_str()] = value;
             return out;
           },
           nb::sig("def memory_stats(self) -> dict[str, int]"),
           "Pool and cache accounting: pool_bytes, slices, slices_in_use, slices_retained, slices_free,\n"
           "slices_free_for_capture (of those free, the ones a capture window made: kept at their size (rounded to 256 bytes) for later\n"
           "windows, never taken by an allocation outside one), driver_allocations (every allocation since the device\n"
           "opened), graphs_alive, info_entries, info_pinned, windows_active (capture windows open; a window\n"
           "discarded by a failed end_capture while the driver still captures, its stream left in CAPTURE\n"
           "(driver_capturing), retains nothing and is not counted); and the KV arenas\n"
           "(AdmissionCoordinator chunks, outside the pool): arenas (live chunks) and arena_bytes.")
      .def("cleanup", &Device::cleanup, nb::call_guard<GilRelease>(),
           "Returns unpinned, unretained pool memory to the driver; skipped while a window is active.")
      .def("inject_fault", &Device::inject_fault, "call"_a, "status"_a, nb::kw_only(), "after"_a = 0, "times"_a = 1,
           "An emulated backend's (the mock's) only: the after-th next call of `call` fails with `status`, `times` "
           "times in a row.")
      .def("clear_faults", &Device::clear_faults, "An emulated backend's (the mock's) only: removes every injected fault.")
      .def("driver_calls", &Device::driver_calls, "call"_a,
           "An emulated backend's (the mock's) only: how many calls of the driver operation `call` this device's "
           "driver has made, failed ones included (so a test can tell whether an injected fault was reached).")
      .def("_pause_streams_for", &pause_mock_streams_for, "seconds"_a,
           "Mock only, for tests: holds every stream's queued work for `seconds` (waits block until then).")
      .def("close", &Device::close, nb::call_guard<GilRelease>(),
           "Aborts open windows, waits for every stream, destroys every graph, returns all memory. Another\n"
           "thread's driver capture (hardware graphs, thread_local / global mode) cannot be ended from here: its\n"
           "window is discarded, and the driver capture and stream are left to that thread's next call on the\n"
           "stream, counted in abandoned_captures until then.")
      .def("__enter__",
           [](std::shared_ptr<Device> d) {
             if (d->closed()) refuse_ended_enter("Device", "the device is closed");
             return d;
           })
      .def("__exit__",
           [](Device& d, nb::handle, nb::handle, nb::handle) {
             GilRelease release;
             d.close();
           },
           "exc_type"_a.none(), "exc"_a.none(), "tb"_a.none())
      .def("__repr__", &device_repr);
}

void bind_buffer_graph_profile(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<Buffer>(m, "Buffer", "A slice of device memory allocated by Stream.alloc.", nb::is_weak_referenceable())
      .def_prop_ro("nbytes", &Buffer::nbytes, "Its size in bytes")
      .def_prop_ro("ptr", [](const Buffer& b) { return b.ptr(); },
                   "The device address (ClosedError once freed). One allocated inside a driver capture (a memory "
                   "node) has memory only while that graph runs: lifecore refuses the buffer on other streams, but "
                   "cannot check an address handed to another library by hand")
      .def_prop_ro("device", &Buffer::device, "The Device whose pool the buffer was allocated from")
      .def_prop_ro("stream", &Buffer::stream,
                   "The Stream that allocated it (a buffer keeps it alive: a Stream dropped while it recorded is "
                   "reached here to end or abort that capture)")
      .def_prop_ro("alive", &Buffer::alive,
                   "False once freed, once its device closed, or once the capture window that allocated it "
                   "(memory the pool could not serve there: a memory node) ended without a graph")
      .def("free", &Buffer::free, nb::call_guard<GilRelease>(),
           "Returns the slice to the pool once the stream's queued work is done. A KV arena's Buffer "
           "(AdmissionCoordinator.arena) waits for its stream's queued work and lets its hold go at once. "
           "Taken once per buffer, also after its device closed or its capture window was discarded (which "
           "gave its memory back already); ClosedError when free() was already taken, LifecoreError while "
           "views of it live.")
      .def("__repr__", [](const Buffer& b) {
        // A buffer of a closed device is not freed (free() is still taken, its views still read).
        const char* state = b.alive() ? "" : b.freed() ? ", freed" : ", device closed";
        return "Buffer(nbytes=" + std::to_string(b.nbytes()) + state + ")";
      });

  nb::class_<Graph>(m, "Graph", "A sealed capture: replay it, destroy it (also on the last reference).",
                    nb::is_weak_referenceable())
      .def("replay", [](Graph& g, Stream* stream) { g.replay(stream); }, "stream"_a = nb::none(),
           "Re-executes exactly the recorded work on `stream` (default: the stream that captured it). ClosedError "
           "once destroyed; CaptureStateError, nothing changed, while `stream` records a capture (the graph would "
           "be recorded inside the new one).")
      .def("destroy", &Graph::destroy, nb::call_guard<GilRelease>(),
           "Waits for the graph's work, then releases its retained slices, cache pins and staging.")
      .def_prop_ro("alive", &Graph::alive, "False once destroyed (destroy(), leaving its with block, or its device closing)")
      .def_prop_ro("is_hardware", &Graph::is_hardware, "True for a driver graph, False for a software one")
      .def_prop_ro("node_count", &Graph::node_count, "Nodes (hardware) or recorded operations (software)")
      .def("__enter__",
           [](std::shared_ptr<Graph> g) {
             if (!g->alive()) refuse_ended_enter("Graph", "the graph is destroyed");
             return g;
           })
      .def("__exit__",
           [](Graph& g, nb::handle, nb::handle, nb::handle) {
             GilRelease release;
             g.destroy();
           },
           "exc_type"_a.none(), "exc"_a.none(), "tb"_a.none())
      .def("__repr__", [](const Graph& g) {
        return std::string("Graph(") + (g.is_hardware() ? "hardware" : "software") +
               ", node_count=" + std::to_string(g.node_count()) + (g.alive() ? "" : ", destroyed") + ")";
      });

  nb::class_<Profile>(m, "Profile",
                      "Device time of a stream's work, measured with driver events (Stream.profile()). Use it\n"
                      "as a context manager (`with stream.profile() as p: ...`, then p.elapsed_ms) or call stop().")
      .def("stop", &Profile::stop, nb::call_guard<GilRelease>(),
           "Records the end event, waits for it and returns the milliseconds since the start.\n"
           "ClosedError when already stopped; a DriverError releases the profile's events. CaptureStateError\n"
           "while its stream records, or (outside relaxed mode) this thread records on another stream: the\n"
           "wait is forbidden there; nothing changed, so stop it again once that recording has ended.")
      .def_prop_ro("elapsed_ms", &Profile::elapsed_ms, "The measured milliseconds; None until stop() succeeded")
      .def_prop_ro("stopped", &Profile::stopped, "True once stopped (or abandoned, or failed)")
      .def("__enter__",
           [](std::shared_ptr<Profile> p) {
             if (p->stopped()) refuse_ended_enter("Profile", "the profile is stopped");
             return p;
           })
      .def("__exit__",
           [](Profile& p, nb::handle exc_type, nb::handle, nb::handle) {
             GilRelease release;
             if (!exc_type.is_none()) {
               p.abandon();  // the profiled work raised: report that, not a measurement
             } else if (!p.stopped()) {
               (void)p.stop();
             }
           },
           "exc_type"_a.none(), "exc"_a.none(), "tb"_a.none())
      .def("__repr__", [](const Profile& p) {
        auto elapsed = p.elapsed_ms();
        return elapsed ? "Profile(elapsed_ms=" + std::to_string(*elapsed) + ")"
                       : std::string(p.stopped() ? "Profile(failed)" : "Profile(running)");
      });
}

void bind_stream(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<Stream>(m, "Stream", "A device stream and its graph-capture lifecycle.", nb::is_weak_referenceable())
      .def_prop_ro("device", &Stream::device, "The Device the stream was created on")
      .def_prop_ro("handle", [](Stream& s) { return s.native_handle(); }, "The native stream pointer, as an int")
      // Without the interpreter's lock: an allocation the driver refuses for want of memory waits
      // for the stream's work (Stream::reclaim_for_allocation) under the stream's lock.
      .def("alloc", &Stream::alloc, "nbytes"_a, nb::call_guard<GilRelease>(),
           nb::sig("def alloc(self, nbytes: typing.SupportsIndex) -> Buffer"),
           "A Buffer of nbytes (> 0, at most the device's memory). An allocation the driver refuses for want of "
           "memory first waits for this stream's work, hands the pool's free slices back and asks once more.")
      .def("write", &write, "buf"_a, "data"_a,
           nb::sig("def write(self, buf: Buffer | BufferView, data: lifecore._stub_types.HostBuffer | "
                   "numpy.typing.NDArray[typing.Any] | lifecore._stub_types.SupportsDLPack) -> None"),
           "Asynchronous host-to-device copy of `data`, any C-contiguous buffer-protocol object (bytes,\n"
           "bytearray, memoryview, a numpy array) or host tensor (__dlpack__: a torch CPU tensor, bfloat16\n"
           "included) of 1 to buf.nbytes bytes, to the buffer's start (data is staged first). buf may be a\n"
           "BufferView (its buffer).")
      .def("read",
           [](Stream& s, nb::handle buf) {
             const Buffer& b = whole_buffer(buf, "read");
             std::vector<std::uint8_t> bytes;
             {
               GilRelease release;
               bytes = s.read(b);
             }
             return nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
           },
           "buf"_a, nb::sig("def read(self, buf: Buffer | BufferView) -> bytes"),
           "Synchronizes the stream and returns the buffer's bytes (a BufferView: its buffer's), copied on this\n"
           "stream: work queued on other streams is not waited for (sync the stream that wrote the buffer\n"
           "first). Refused like sync() while another stream records.")
      .def("fill", &fill, "buf"_a.none(), "value"_a,
           nb::sig("def fill(self, buf: Buffer | BufferView | lifecore._stub_types.DeviceArray, value: int) -> None"),
           "Sets every 32-bit word of the buffer to value, an int from -2**31 to 2**32 - 1 (a negative one is\n"
           "its two's-complement bits: -1 and 0xFFFFFFFF fill alike). The buffer's size must be a multiple of\n"
           "4 bytes (InvalidArgumentError otherwise). buf may be a BufferView or a tensor (see launch).")
      .def("copy", &copy, "dst"_a.none(), "src"_a.none(),
           nb::sig("def copy(self, dst: Buffer | BufferView | lifecore._stub_types.DeviceArray, src: Buffer | BufferView | lifecore._stub_types.DeviceArray) -> None"),
           "Device-to-device copy of same-size buffers; either may be a BufferView or a tensor (see launch).\n"
           "Ranges that share a byte are refused (InvalidArgumentError): a driver's copy between them is\n"
           "undefined, so the emulated device refuses them too.")
      .def("launch", &launch,
           nb::sig("def launch(self, kernel: Kernel, grid: typing.SupportsIndex | collections.abc.Sequence[typing.SupportsIndex], "
                   "block: typing.SupportsIndex | collections.abc.Sequence[typing.SupportsIndex], "
                   "args: collections.abc.Sequence[Buffer | BufferView | lifecore._stub_types.DeviceArray | typing.SupportsIndex | float], *, "
                   "info: collections.abc.Sequence[typing.SupportsIndex] | numpy.typing.NDArray[numpy.integer[typing.Any]] | None = None) -> None"),
           "kernel"_a, "grid"_a.none(), "block"_a.none(), "args"_a.none(), nb::kw_only(), "info"_a.none() = nb::none(),
           "Launches a kernel: a Buffer for a pointer, int for integers, float (or int) for floats; a NumPy\n"
           "integer scalar counts as an int (in grid, block and info too), a NumPy float scalar as a float,\n"
           "and a bool or a tensor as neither (LifecoreTypeError). With info=[words],\n"
           "the words go to the info cache and the cached buffer is passed as the first parameter; a\n"
           "built-in that reads a metadata buffer (axpy_info_f32) takes it only that way, and a pointer of\n"
           "the caller's in its place is InvalidArgumentError.\n"
           "A pointer may also be a BufferView or a tensor: any C-contiguous object with __dlpack__ or\n"
           "__cuda_array_interface__ on the stream's device (torch, CuPy; NumPy on a device whose memory is\n"
           "host memory, the mock, which maps it for the call). A view of one of the device's buffers is that\n"
           "buffer; other tensors are held until the work is done, or for the graph's life when recorded.\n"
           "A read-only tensor is refused except at a 'const ptr' (a parameter the kernel only reads: see\n"
           "Kernel.read_only); a kernel may write through any other pointer. A built-in kernel's pointers\n"
           "must hold its min(n, grid.x * block.x) float32 elements: a smaller Buffer or tensor, or a tensor\n"
           "or BufferView of another element type (a float64 array would be read as float32), is\n"
           "InvalidArgumentError before anything is issued; a Buffer is bytes and names no type. A built-in kernel\n"
           "is one-dimensional, indexed in 32 bits: a grid or block with y or z other than 1, or more than 2**32\n"
           "threads (grid.x * block.x), is InvalidArgumentError too. A CUDA-array-interface\n"
           "tensor's device is checked with the driver (skipped where the driver cannot tell), and the work\n"
           "waits on the device for its stream, unless that is this stream or this stream is recording.")
      .def("sync", &sync_stream, "timeout"_a.none() = nb::none(),
           nb::sig("def sync(self, timeout: float | None = None) -> bool"),
           "Waits for the stream; reports the first queued asynchronous failure. Without a timeout the driver\n"
           "blocks until the device is done (Ctrl-C waits for it too, as torch.cuda.synchronize does). With a\n"
           "timeout in seconds (inf: no deadline) it polls the driver, yields to Ctrl-C (KeyboardInterrupt, on\n"
           "the main thread) within about 0.05 s, and returns False once the timeout passes with work still queued or another\n"
           "thread still in a call on this stream, a blocking sync say (nothing changed; sync again later).\n"
           "True once the stream is idle. NaN or a negative timeout is InvalidArgumentError. Outside relaxed\n"
           "capture mode it is refused (CaptureStateError, nothing changed) while another stream records on\n"
           "this thread, or any thread's global capture records: the driver forbids the wait there and would\n"
           "invalidate it.")
      .def("profile", [](std::shared_ptr<Stream> s) { return Profile::start(std::move(s)); },
           "Starts measuring the device time of the work issued from now on (a start event is recorded).\n"
           "`with stream.profile() as p: ...` then p.elapsed_ms. A profile measures outside a recording only:\n"
           "while this stream records (software or hardware graphs) it raises CaptureStateError and changes\n"
           "nothing, the recording going on; so does stop() of a profile started before the recording (stop\n"
           "it again once the recording has ended). Refused like sync() while another stream records.")
      .def("graph_prepare", [](Stream& s, CaptureOwner owner) { (void)s.graph_prepare(owner); }, "owner"_a = 0,
           "NO_CAPTURE -> PREPARE: arms the pools for the warmup run.")
      .def("begin_capture",
           [](Stream& stream) {
             {
               GilRelease release;
               stream.begin_capture();
             }
             end_recordings_with_this_thread();
           },
           "PREPARE -> CAPTURE: flushes warmup, ends priming, opens the capture. Outside relaxed capture mode a\n"
           "thread records on one stream at a time: while another stream records on this thread (or any\n"
           "thread's global capture records) it raises CaptureStateError naming that stream and changes nothing.\n"
           "A threading thread that exits with its recording still open aborts it as it goes (before its join\n"
           "returns); a thread Python did not start must end or abort it itself before it exits.")
      .def("end_capture", [](Stream& s, CaptureOwner caller) { return s.end_capture(caller); }, "caller"_a = 0,
           "CAPTURE -> NO_CAPTURE: seals the recording into a Graph or raises CaptureRefusedError. A refusal\n"
           "whose driver still captures (cause driver_still_capturing) leaves the stream in CAPTURE: end or\n"
           "abort it again. In thread_local / global mode only the thread that began the recording may end it\n"
           "(CaptureStateError otherwise, nothing changed).")
      .def("abort_capture", [](Stream& s) { s.abort_capture(); },
           "Back to NO_CAPTURE from anywhere, undoing the window. In thread_local / global mode only the thread\n"
           "that began the recording may abort it (CaptureStateError otherwise, nothing changed); a DriverError\n"
           "when the driver still captures afterwards (the stream stays in CAPTURE: call it again).")
      .def("capture", &capture, "fn"_a, nb::kw_only(), "warmup"_a = 1, "owner"_a = 0,
           nb::sig("def capture(self, fn: collections.abc.Callable[[Stream], object], *, warmup: int = 1, "
                   "owner: int = 0) -> Graph"),
           "Captures fn(stream) into a Graph: graph_prepare, fn run eagerly `warmup` times (priming the\n"
           "pool so the recorded pass allocates nothing), then one more call of fn recorded between\n"
           "begin_capture and end_capture. The recorded pass does not execute: replay the graph to run it.\n"
           "On any failure the window is aborted, so the stream is left out of capture and re-capturable, and\n"
           "the first failure is raised; should the abort not end the driver capture either, that exception\n"
           "carries a note saying so and the stream stays in CAPTURE until abort_capture() from this thread.\n"
           "Should another thread abort this capture while fn runs (any thread may abort a prepared one, and\n"
           "in relaxed mode a recording one), capture() raises CaptureStateError at its next step (or fn's own\n"
           "exception) and never begins, seals or aborts a capture that thread put in its place.")
      .def_prop_ro("capture_state", &Stream::capture_state, "A copy of the stream's StreamCaptureState")
      .def_prop_ro("driver_capturing", &Stream::driver_capturing,
                   "True while the driver holds a capture on this stream (hardware graphs); the state is then CAPTURE.")
      .def_prop_ro("capture_thread", &Stream::capture_thread,
                   "The thread that began the recording (as threading.get_ident() on Linux), '' outside CAPTURE.")
      .def("__repr__", [](const Stream& s) { return "Stream(" + s.capture_state().repr() + ")"; });
}

}  // namespace

void init_runtime(nb::module_& m) {
  runtime::set_blocking_wait_hooks({&release_interpreter, &reacquire_interpreter});
  init_capture_state(m);
  bind_kernels(m);
  bind_device(m);
  bind_buffer_graph_profile(m);
  bind_stream(m);
  init_runtime_modules(m);  // after Device and Kernel, which its signatures name
  auto buffer_class = nb::borrow<nb::class_<Buffer>>(m.attr("Buffer"));
  init_buffer_interop(m, buffer_class);
  auto stream_class = nb::borrow<nb::class_<Stream>>(m.attr("Stream"));
  init_stream_interop(stream_class);
  init_pooled_allocator(m);
}

}  // namespace lifecore::bindings
