// The arguments shared by the block-table bindings: a writable host int32 table given as
// `out` (buffer protocol, or a host DLPack tensor, read through the DLPack 1.x structures),
// checked and held open while it is written, and an exact-type instance test for per-row
// lists, session lists, token counts and domain names. Translation only.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>

#include "arguments.hpp"
#include "bindings.hpp"
#include "buffer_view.hpp"
#include "dlpack_abi.hpp"
#include "dlpack_guard.hpp"
#include "element_types.hpp"
#include "lifecore/driver/registry.hpp"
#include "lifecore/error.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/buffer_lease.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/sequence/lent_block_ids.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/session.hpp"
#include "sequence/device_arena_memory.hpp"

namespace lifecore::bindings::table_out {

using namespace nb::literals;

// The host's physical memory in bytes (0 where it cannot be read), read once: a table made per
// decode step must not pay the system call each time.
inline std::uint64_t host_memory_bytes() noexcept {
  static const std::uint64_t bytes = [] {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
#endif
    return std::uint64_t{0};
  }();
  return bytes;
}

// Host memory for a table of `count` int32 entries (at least one). A size past the host's
// memory, which rows and width each within their bounds can still ask for, is the call's
// refusal before anything is allocated (an allocator may abort, or overcommit and fill it).
inline std::unique_ptr<std::int32_t[]> table_storage(std::size_t count, const char* call) {
  const std::uint64_t host = host_memory_bytes();
  const bool too_large = count > std::numeric_limits<std::uint64_t>::max() / sizeof(std::int32_t) ||
                         (host != 0 && count * sizeof(std::int32_t) > host);
  auto refuse = [&] {
    raise(ErrorKind::Overflow, std::string(call) + ": a table of " + std::to_string(count) +
                                   " int32 entries (rows x width) is more than the host's memory; nothing was changed");
  };
  if (too_large) refuse();
  try {
    return std::unique_ptr<std::int32_t[]>(new std::int32_t[count ? count : 1]);
  } catch (const std::bad_alloc&) {
    refuse();
  }
  return nullptr;  // not reached: refuse raises
}

// A host tensor's memory, checked: C-contiguous, writable, int32, [rows, width].
struct Target {
  std::int32_t* data = nullptr;
  Py_buffer view{};
  bool has_view = false;
  nb::object capsule;  // a consumed DLPack capsule, finished after the write
  DLManagedTensor* legacy = nullptr;
  DLManagedTensorVersioned* versioned = nullptr;
  ~Target() {
    if (has_view) PyBuffer_Release(&view);
    if (legacy && legacy->deleter) legacy->deleter(legacy);
    if (versioned && versioned->deleter) versioned->deleter(versioned);
  }
};

[[noreturn]] inline void bad_out(const char* call, const std::string& why) {
  raise(ErrorKind::InvalidArgument, std::string(call) + ": argument 'out' " + why + " (nothing was written)");
}

inline void check_shape(const char* call, std::int64_t ndim, const std::int64_t* shape, std::size_t rows, std::size_t width) {
  if (ndim != 2 || shape[0] != static_cast<std::int64_t>(rows) || shape[1] != static_cast<std::int64_t>(width))
    bad_out(call, "must have shape (" + std::to_string(rows) + ", " + std::to_string(width) + ")");
}

inline void open_buffer_protocol(nb::handle out, std::size_t rows, std::size_t width, Target& t,
                                 const char* call = "block_table") {
  if (is_numpy_masked_array(out))
    bad_out(call, "is a NumPy masked array, whose mask the table would not follow (it writes the data beneath); "
                  "pass its .data");
  if (PyObject_GetBuffer(out.ptr(), &t.view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_STRIDES) != 0) {
    PyErr_Clear();
    if (exports_buffer(out, PyBUF_FORMAT | PyBUF_STRIDES)) bad_out(call, "is read-only");
    bad_out(call, "cannot be read as a strided buffer");
  }
  t.has_view = true;
  const std::string format = t.view.format ? t.view.format : "B";
  if (t.view.itemsize != 4 || (format != "i" && format != "<i" && format != "=i" && format != "@i"))
    bad_out(call, "must hold int32 elements, got format '" + format + "'");
  std::int64_t shape[2] = {0, 0};
  for (int i = 0; i < t.view.ndim && i < 2; ++i) shape[i] = t.view.shape[i];
  check_shape(call, t.view.ndim, shape, rows, width);
  if (!PyBuffer_IsContiguous(&t.view, 'C')) bad_out(call, "must be C-contiguous");
  t.data = static_cast<std::int32_t*>(t.view.buf);
}

// Refuses a table `out` that is a coordinator's arena memory: the table would be written over
// blocks of keys and values. `buffer`: a Buffer given as `out`, looked up among the arenas of
// its own device (this coordinator's, named by domain, or any other's). Else `host`, an array's
// memory, which on this coordinator's device, when its memory is host memory (the mock), may be
// a view an arena lent: the leases that lent its first and its last byte are looked up, so a
// view that runs past either end of a chunk is found too. A coordinator doing host accounting
// has no device whose leases could have lent it.
inline void refuse_the_arena(const sequence::AdmissionCoordinator& c, const char* call, const runtime::Buffer* buffer,
                             const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  const auto* memory = dynamic_cast<const sequence::DeviceArenaMemory*>(c.memory().get());
  auto refuse_if_arena = [&](runtime::Device& device, std::uint64_t address, std::uint64_t length) {
    const bool this_device = memory && memory->device().get() == &device;
    if (this_device)
      if (const auto d = c.arena_domain_sharing(address, length))
        bad_out(call, "is the arena memory of domain '" + c.domain_name(*d) + "': the table would be written over "
                      "its blocks");
    if (device.memory().shares_an_arena(address, length))
      bad_out(call, std::string("is the KV arena memory of ") +
                        (this_device ? "another coordinator on this device"
                         : memory    ? "a coordinator on another device"
                                     : "a coordinator") +
                        ": the table would be written over its blocks");
  };
  if (buffer) {
    if (buffer->alive()) refuse_if_arena(*buffer->device(), buffer->ptr(call), bytes);  // a freed one: the write refuses it
    return;
  }
  // Nor is it a sequence's own block ids, made writable.
  sequence::lent_block_ids::refuse(host, bytes, call, "out");
  // A host array is a view of an arena when a device whose memory is host memory (the mock) lent
  // it: this coordinator's, or any other's, whatever this coordinator's own memory is.
  const auto first = reinterpret_cast<std::uintptr_t>(host);
  for (const std::uintptr_t byte : {first, first + (bytes - 1)}) {  // the caller's array: no wrap
    std::size_t offset = 0;
    const std::shared_ptr<runtime::Buffer> lent = runtime::LeaseTable::find_anywhere(byte, 1, &offset);
    if (lent && lent->alive()) refuse_if_arena(*lent->device(), lent->ptr(call) + offset, 1);
  }
}

inline void check_dl_tensor(const char* call, const DLTensor& tensor, std::size_t rows, std::size_t width) {
  if (tensor.device.device_type != dlpack_device_cpu)
    bad_out(call, "must live in host memory (DLPack device type " + std::to_string(tensor.device.device_type) +
            "); pass a lifecore Buffer for device memory");
  if (tensor.dtype.code != 0 || tensor.dtype.bits != 32 || tensor.dtype.lanes != 1)
    bad_out(call, "must hold int32 elements, got " + dl_dtype_name(tensor.dtype));
  // A producer's description is not trusted: dimensions without a shape are refused, not read.
  if (tensor.ndim > 0 && tensor.shape == nullptr)
    bad_out(call, "was exported with " + std::to_string(tensor.ndim) + " dimension(s) but no shape");
  check_shape(call, tensor.ndim, tensor.shape, rows, width);
  if (tensor.strides && rows * width != 0) {
    const bool row_ok = rows <= 1 || tensor.strides[0] == static_cast<std::int64_t>(width);
    const bool col_ok = width <= 1 || tensor.strides[1] == 1;
    if (!row_ok || !col_ok) bad_out(call, "must be C-contiguous");
  }
}

// Where a table's first element is (dlpack_address, refused where it or its last entry wraps;
// entries x 4 fits: rows x width was checked).
inline std::int32_t* dl_data(const char* call, const DLTensor& tensor, std::size_t entries) {
  const auto address = dlpack_address(tensor, std::uint64_t{entries} * sizeof(std::int32_t));
  if (!address) refuse_wrapped_address(argument_label(call, "out"));
  if (tensor.data == nullptr && entries != 0)
    refuse_null_address(argument_label(call, "out"), 0, entries * sizeof(std::int32_t));
  return reinterpret_cast<std::int32_t*>(*address);
}

inline void open_dlpack(nb::handle out, std::size_t rows, std::size_t width, Target& t, const char* call = "block_table") {
  // The device first, where the producer says it: exporting a GPU tensor orders streams (torch
  // makes the current stream wait), a side effect a table that is refused anyway must not have.
  // A producer's own error (torch's for a meta tensor, say) is this call's refusal; an
  // interrupt stays one.
  auto refused = [&](nb::python_error& e, const char* method) {
    if (!e.matches(PyExc_Exception)) throw;
    bad_out(call, std::string("could not be exported (its ") + method + " raised " + python_error_summary(e) + ")");
  };
  // torch's negative bit: DLPack exports the memory without the sign its reads apply, so ids
  // written there would read back as -id.
  refuse_negative_view(out, argument_label(call, "out"));
  if (nb::hasattr(out, "__dlpack_device__")) {
    std::pair<int, int> device;
    nb::object answer;
    try {
      answer = out.attr("__dlpack_device__")();
    } catch (nb::python_error& e) {
      refused(e, "__dlpack_device__");
    }
    if (nb::try_cast(answer, device) && device.first != dlpack_device_cpu)
      bad_out(call, "must live in host memory (DLPack device type " + std::to_string(device.first) +
                        "); pass a lifecore Buffer for device memory");
  }
  nb::object capsule;
  try {
    capsule = dlpack_export(out.attr("__dlpack__"));
  } catch (nb::python_error& e) {
    refused(e, "__dlpack__");
  }
  if (PyCapsule_IsValid(capsule.ptr(), "dltensor_versioned")) {
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor_versioned"));
    PyCapsule_SetName(capsule.ptr(), "used_dltensor_versioned");
    t.versioned = m;
    if (m->flags & dlpack_flag_read_only) bad_out(call, "is read-only");
    check_dl_tensor(call, m->dl_tensor, rows, width);
    t.data = dl_data(call, m->dl_tensor, rows * width);
  } else if (PyCapsule_IsValid(capsule.ptr(), "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
    PyCapsule_SetName(capsule.ptr(), "used_dltensor");
    t.legacy = m;
    check_dl_tensor(call, m->dl_tensor, rows, width);
    t.data = dl_data(call, m->dl_tensor, rows * width);
  } else {
    bad_out(call, "gave no DLPack capsule");
  }
  t.capsule = std::move(capsule);
}

// The items of a sequence the caller has checked (is_item_sequence), read by index from a snapshot this
// object holds: a per-row loop makes no iterator object, and what a row borrows from an item
// (its C++ object) stays valid while this lives, whatever Python code later does to the
// caller's list (a `tokens` or `out` conversion, another thread while the lock is let go).
class ListItems {
 public:
  explicit ListItems(nb::handle sequence)
      : items_(sequence_snapshot(sequence, "a list")), size_(items_.size()) {}
  std::size_t size() const noexcept { return size_; }
  nb::handle operator[](std::size_t i) const noexcept {
    const auto at = static_cast<Py_ssize_t>(i);
#ifdef Py_LIMITED_API
    return PyTuple_GetItem(items_.ptr(), at);
#else
    return PyTuple_GET_ITEM(items_.ptr(), at);
#endif
  }

 private:
  nb::tuple items_;
  std::size_t size_;
};

// The C++ object of an instance of exactly T's Python type (the classes are final), or null:
// a type comparison, not a conversion attempt, on the per-row path.
template <class T>
inline T* exact_instance(nb::handle item) {
  static PyTypeObject* const type = reinterpret_cast<PyTypeObject*>(nb::type<T>().ptr());
  if (Py_TYPE(item.ptr()) != type || !nb::inst_ready(item)) return nullptr;
  return nb::inst_ptr<T>(item);
}

// domain None: `fallback` (a snapshot's first domain, or the coordinator's); else a name.
// `names` is a coordinator, or a snapshot that names its coordinator's domains.
template <class Names>
std::uint32_t domain_argument(const Names& c, nb::handle domain, const char* call, std::uint32_t fallback) {
  if (domain.is_none()) return fallback;
  const std::string name = str_argument(domain, call, "domain");
  const std::int64_t index = c.domain_index(name);
  if (index < 0) sequence::raise_unknown_domain(call, name, c.domain_names());
  return static_cast<std::uint32_t>(index);
}

// The objects of a sequence argument, with the snapshot that keeps them alive: keep the
// whole value for as long as the pointers are used.
template <class T>
struct InstanceList {
  ListItems held;
  std::vector<T*> objects;
};

// The objects of a sequence argument `name` that are exactly T's Python type (called
// `type` in errors), in order; with `none_ok` a None entry gives null. LifecoreTypeError naming
// the argument, or the entry, for anything else.
template <class T>
InstanceList<T> instance_list(nb::handle items_arg, const char* call, const char* name, const char* type,
                              bool none_ok = false) {
  // Built only for an error: a decode batch's call builds no string.
  const auto expected = [&] { return std::string(type) + (none_ok ? " or None" : ""); };
  if (!is_item_sequence(items_arg))
    raise(ErrorKind::TypeMismatch, argument_label(call, name) + " must be a sequence (list, tuple, ...) of " + expected() +
                                       ", got " + type_name_of(items_arg));
  InstanceList<T> list{ListItems(items_arg), {}};
  const ListItems& items = list.held;
  list.objects.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    const nb::handle item = items[i];
    T* object = exact_instance<T>(item);
    if (!object && !(none_ok && item.is_none()))
      raise(ErrorKind::TypeMismatch, argument_label(call, (std::string(name) + "[" + std::to_string(i) + "]").c_str()) +
                                         " must be a " + expected() + ", got " + type_name_of(item));
    list.objects.push_back(object);
  }
  return list;
}

// A sequence of SequenceSession (argument `sessions`), in order; with `none_ok` a None
// entry gives null.
inline InstanceList<sequence::SequenceSession> session_list(nb::handle sessions, const char* call, bool none_ok) {
  return instance_list<sequence::SequenceSession>(sessions, call, "sessions", "SequenceSession", none_ok);
}

// One token count per session: a C-contiguous int64 NumPy array or host tensor (read in
// place), another one-dimensional array of integers, NumPy's or a host tensor another library
// exports by DLPack (an engine's int32 positions: read from an int64 copy), or a sequence of
// ints.
struct Tokens {
  nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> array;
  nb::object copy;  // the int64 copy of an array of another integer type
  std::vector<std::int64_t> values;
  const std::int64_t* data = nullptr;
};

inline void read_tokens(nb::handle tokens, std::size_t count, const char* call, Tokens& out) {
  std::size_t held = 0;
  // Device memory is never host token counts: refused before the array cast, whose DLPack
  // export of a buffer would run (and collect its stream's finished work) only to be refused.
  if (nb::isinstance<runtime::Buffer>(tokens) || nb::isinstance<BufferView>(tokens))
    raise(ErrorKind::TypeMismatch, argument_label(call, "tokens") +
                                       " must be host token counts (a one-dimensional NumPy array of integers, or a sequence of ints), "
                                       "got a lifecore " + type_name_of(tokens) + " (device memory)");
  // Read as an array, a masked one gives the values beneath its mask: a masked row would step.
  if (is_numpy_masked_array(tokens))
    raise(ErrorKind::InvalidArgument, argument_label(call, "tokens") +
                                          " is a NumPy masked array, whose mask a step would not follow (it reads the "
                                          "values beneath); pass its .data, or the rows to step");
  bool read = nb::try_cast(checked_for_caster(tokens, argument_label(call, "tokens")), out.array, /*convert=*/false);
  nb::object source = nb::borrow(tokens);
  if (!read && !nb::hasattr(source, "astype") && nb::hasattr(source, "__dlpack__")) {
    // Another library's host tensor the cast did not take (a torch int32 or strided one):
    // read through NumPy's view of it, as a NumPy array of that type would be.
    PyObject* viewed = PyObject_CallFunctionObjArgs(nb::module_::import_("numpy").attr("from_dlpack").ptr(), source.ptr(), nullptr);
    if (!viewed) {
      nb::python_error error;
      if (!error.matches(PyExc_TypeError) && !error.matches(PyExc_ValueError) && !error.matches(PyExc_BufferError) &&
          !error.matches(PyExc_RuntimeError))
        throw error;  // Ctrl-C, or what the producer's own code raised
      raise(ErrorKind::TypeMismatch, argument_label(call, "tokens") +
                                         " must be host token counts, and NumPy could not read this " +
                                         type_name_of(tokens) + " (" + python_error_summary(error) + ")");
    }
    source = nb::steal(viewed);
  }
  if (!read && nb::hasattr(source, "dtype") && nb::hasattr(source, "astype") && nb::hasattr(source, "ndim")) {
    const nb::object dtype = source.attr("dtype");
    const std::string kind = nb::cast<std::string>(nb::str(dtype.attr("kind")));
    if (kind != "i" && kind != "u")
      raise(ErrorKind::TypeMismatch, argument_label(call, "tokens") + " must hold integers, got an array of " +
                                         nb::cast<std::string>(nb::str(dtype)));
    if (nb::cast<long>(source.attr("ndim")) != 1)
      raise(ErrorKind::InvalidArgument, argument_label(call, "tokens") + " must be one-dimensional, got " +
                                            std::to_string(nb::cast<long>(source.attr("ndim"))) + " dimensions");
    if (kind == "u" && nb::cast<long>(dtype.attr("itemsize")) >= 8) {
      // Read from the int64 copy once every count fits it (a count past int64 is past any fit).
      const nb::object past = nb::module_::import_("numpy").attr("flatnonzero")(
          source.attr("__gt__")(nb::int_(std::numeric_limits<std::int64_t>::max())));
      if (nb::len(past) != 0) {
        const nb::object row = past[0];
        const nb::object value = source[row];
        // Printed through handles: nb::str of an item lookup would cast the item to a str (and
        // fail for a number), where str(handle) prints it.
        raise(ErrorKind::Overflow, argument_label(call, "tokens") + " holds " +
                                       nb::cast<std::string>(nb::str(nb::handle(value))) + " at row " +
                                       nb::cast<std::string>(nb::str(nb::handle(row))) +
                                       ", past any 64-bit signed count");
      }
    }
    out.copy = source.attr("astype")("int64");
    read = nb::try_cast(out.copy, out.array, /*convert=*/false);
  }
  if (read) {
    out.data = out.array.data();
    held = out.array.shape(0);
  } else {
    if (!is_item_sequence(tokens))
      raise(ErrorKind::TypeMismatch, argument_label(call, "tokens") +
                                         " must be a one-dimensional NumPy array of integers, or a sequence of ints, got " +
                                         type_name_of(tokens));
    const ListItems items(tokens);
    out.values.reserve(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string label = "tokens[" + std::to_string(i) + "]";
      out.values.push_back(int_argument(items[i], call, label.c_str()));
    }
    out.data = out.values.data();
    held = out.values.size();
  }
  if (held != count)
    raise(ErrorKind::InvalidArgument, std::string(call) + ": argument 'tokens' holds " + std::to_string(held) +
                                          " values for " + std::to_string(count) + " sessions");
}

// A uint8 NumPy array of `count` BackingOutcome values, and where to write them.
// A new uint8 NumPy array of `count` one-byte enum values (BackingOutcome, FrameDisposition)
// for the core to fill through `data`.
template <typename Enum>
inline nb::object enum_array(std::size_t count, Enum*& data) {
  static_assert(sizeof(Enum) == 1);
  auto* values = new std::uint8_t[count ? count : 1];
  nb::capsule keep(values, [](void* p) noexcept { delete[] static_cast<std::uint8_t*>(p); });
  data = reinterpret_cast<Enum*>(values);
  const std::size_t shape[1] = {count};
  return nb::cast(nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>(values, 1, shape, keep));
}

}  // namespace lifecore::bindings::table_out
