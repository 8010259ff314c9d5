// lifecore.sequence bindings for the KV arena: block ids of a snapshot as a read-only NumPy
// view, the batch block table (into a new array, a NumPy / buffer-protocol array, a host
// DLPack tensor, or a lifecore Buffer), and the arena's memory as Buffers. Translation only:
// the core builds the table (sequence/block_table.hpp) and lends the memory.
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "arguments.hpp"
#include "bindings.hpp"
#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/stream.hpp"
#include "lifecore/sequence/block_table.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/session.hpp"
#include "sequence/device_arena_memory.hpp"

namespace lifecore::bindings {
namespace {

using namespace nb::literals;
using namespace lifecore::sequence;

// The DLPack structures a host tensor is read through (dlpack.h 1.x layout).
struct DLDevice {
  std::int32_t device_type;
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
struct DLManagedTensorVersioned {
  std::uint32_t major, minor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};
constexpr std::uint64_t dlpack_read_only = 1;
constexpr std::int32_t dlpack_cpu = 1;

// domain None: `fallback` (a snapshot's first domain, or the coordinator's); else a name.
std::uint32_t domain_argument(const AdmissionCoordinator& c, nb::handle domain, const char* call, std::uint32_t fallback) {
  if (domain.is_none()) return fallback;
  const std::string name = str_argument(domain, call, "domain");
  const std::int64_t index = c.domain_index(name);
  if (index < 0) raise(ErrorKind::InvalidArgument, std::string(call) + ": unknown capacity domain '" + name + "'");
  return static_cast<std::uint32_t>(index);
}

nb::object ids_array(const BlockIds& ids) {
  static const std::int32_t none = 0;
  auto* owner = new BlockIds(ids);  // keeps the storage, never the capacity
  nb::capsule keep(owner, [](void* p) noexcept { delete static_cast<BlockIds*>(p); });
  const std::int32_t* data = ids.data ? ids.data.get() : &none;
  const std::size_t shape[1] = {ids.count};
  return nb::cast(nb::ndarray<nb::numpy, const std::int32_t, nb::ndim<1>>(data, 1, shape, keep));
}

nb::object snapshot_block_ids(const BackingSnapshot& s, nb::handle domain) {
  const std::uint32_t d = domain_argument(*s.coordinator(), domain, "block_ids", s.domains().at(0));
  return ids_array(s.block_ids(d));
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

[[noreturn]] void bad_out(const std::string& why) {
  raise(ErrorKind::InvalidArgument, "block_table: argument 'out' " + why + " (nothing was written)");
}

void check_shape(std::int64_t ndim, const std::int64_t* shape, std::size_t rows, std::size_t width) {
  if (ndim != 2 || shape[0] != static_cast<std::int64_t>(rows) || shape[1] != static_cast<std::int64_t>(width))
    bad_out("must have shape (" + std::to_string(rows) + ", " + std::to_string(width) + ")");
}

void open_buffer_protocol(nb::handle out, std::size_t rows, std::size_t width, Target& t) {
  if (PyObject_GetBuffer(out.ptr(), &t.view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_STRIDES) != 0) {
    PyErr_Clear();
    Py_buffer probe;
    if (PyObject_GetBuffer(out.ptr(), &probe, PyBUF_FORMAT | PyBUF_STRIDES) == 0) {
      PyBuffer_Release(&probe);
      bad_out("is read-only");
    }
    PyErr_Clear();
    bad_out("cannot be read as a strided buffer");
  }
  t.has_view = true;
  const std::string format = t.view.format ? t.view.format : "B";
  if (t.view.itemsize != 4 || (format != "i" && format != "<i" && format != "=i" && format != "@i"))
    bad_out("must hold int32 elements, got format '" + format + "'");
  std::int64_t shape[2] = {0, 0};
  for (int i = 0; i < t.view.ndim && i < 2; ++i) shape[i] = t.view.shape[i];
  check_shape(t.view.ndim, shape, rows, width);
  if (!PyBuffer_IsContiguous(&t.view, 'C')) bad_out("must be C-contiguous");
  t.data = static_cast<std::int32_t*>(t.view.buf);
}

void check_dl_tensor(const DLTensor& tensor, std::size_t rows, std::size_t width) {
  if (tensor.device.device_type != dlpack_cpu)
    bad_out("must live in host memory (DLPack device type " + std::to_string(tensor.device.device_type) +
            "); pass a lifecore Buffer for device memory");
  if (tensor.dtype.code != 0 || tensor.dtype.bits != 32 || tensor.dtype.lanes != 1) bad_out("must hold int32 elements");
  check_shape(tensor.ndim, tensor.shape, rows, width);
  if (tensor.strides && rows * width != 0) {
    const bool row_ok = rows <= 1 || tensor.strides[0] == static_cast<std::int64_t>(width);
    const bool col_ok = width <= 1 || tensor.strides[1] == 1;
    if (!row_ok || !col_ok) bad_out("must be C-contiguous");
  }
}

void open_dlpack(nb::handle out, std::size_t rows, std::size_t width, Target& t) {
  nb::object capsule;
  try {
    capsule = out.attr("__dlpack__")("max_version"_a = nb::make_tuple(1, 0));
  } catch (nb::python_error& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    capsule = out.attr("__dlpack__")();
  }
  if (PyCapsule_IsValid(capsule.ptr(), "dltensor_versioned")) {
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor_versioned"));
    PyCapsule_SetName(capsule.ptr(), "used_dltensor_versioned");
    t.versioned = m;
    if (m->flags & dlpack_read_only) bad_out("is read-only");
    check_dl_tensor(m->dl_tensor, rows, width);
    t.data = reinterpret_cast<std::int32_t*>(static_cast<char*>(m->dl_tensor.data) + m->dl_tensor.byte_offset);
  } else if (PyCapsule_IsValid(capsule.ptr(), "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
    PyCapsule_SetName(capsule.ptr(), "used_dltensor");
    t.legacy = m;
    check_dl_tensor(m->dl_tensor, rows, width);
    t.data = reinterpret_cast<std::int32_t*>(static_cast<char*>(m->dl_tensor.data) + m->dl_tensor.byte_offset);
  } else {
    bad_out("gave no DLPack capsule");
  }
  t.capsule = std::move(capsule);
}

// The C++ object of an instance of exactly T's Python type (the classes are final), or null:
// a type comparison, not a conversion attempt, on the per-row path.
template <class T>
T* exact_instance(nb::handle item) {
  static PyTypeObject* const type = reinterpret_cast<PyTypeObject*>(nb::type<T>().ptr());
  if (Py_TYPE(item.ptr()) != type || !nb::inst_ready(item)) return nullptr;
  return nb::inst_ptr<T>(item);
}

nb::object step_all_sessions(nb::handle sessions, nb::handle tokens) {
  constexpr const char* call = "step_all";
  if (!nb::isinstance<nb::list>(sessions) && !nb::isinstance<nb::tuple>(sessions))
    raise(ErrorKind::TypeMismatch, argument_label(call, "sessions") + " must be a list or tuple of SequenceSession, got " +
                                       type_name_of(sessions));
  std::vector<SequenceSession*> list;
  list.reserve(nb::len(sessions));
  for (nb::handle item : sessions) {
    auto* session = exact_instance<SequenceSession>(item);
    if (!session)
      raise(ErrorKind::TypeMismatch, argument_label(call, ("sessions[" + std::to_string(list.size()) + "]").c_str()) +
                                         " must be a SequenceSession, got " + type_name_of(item));
    list.push_back(session);
  }
  std::vector<std::int64_t> targets;
  nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> array;
  const std::int64_t* data = nullptr;
  if (nb::try_cast(tokens, array, /*convert=*/false)) {
    data = array.data();
    if (array.shape(0) != list.size())
      raise(ErrorKind::InvalidArgument, "step_all: argument 'tokens' holds " + std::to_string(array.shape(0)) +
                                            " values for " + std::to_string(list.size()) + " sessions");
  } else {
    if (!nb::isinstance<nb::list>(tokens) && !nb::isinstance<nb::tuple>(tokens))
      raise(ErrorKind::TypeMismatch, argument_label(call, "tokens") +
                                         " must be a C-contiguous int64 NumPy array or a list of ints, got " +
                                         type_name_of(tokens));
    for (nb::handle t : tokens) targets.push_back(int_argument(t, call, "tokens[i]"));
    if (targets.size() != list.size())
      raise(ErrorKind::InvalidArgument, "step_all: argument 'tokens' holds " + std::to_string(targets.size()) +
                                            " values for " + std::to_string(list.size()) + " sessions");
    data = targets.data();
  }
  auto* outcomes = new std::uint8_t[list.size() ? list.size() : 1];
  nb::capsule keep(outcomes, [](void* p) noexcept { delete[] static_cast<std::uint8_t*>(p); });
  static_assert(sizeof(BackingOutcome) == 1);
  step_all(list, data, reinterpret_cast<BackingOutcome*>(outcomes));
  const std::size_t shape[1] = {list.size()};
  return nb::cast(nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>(outcomes, 1, shape, keep));
}

nb::object block_table(const AdmissionCoordinator& c, nb::handle frames, nb::handle width_arg, nb::handle out,
                       nb::handle domain, nb::handle pad_arg) {
  constexpr const char* call = "block_table";
  if (!nb::isinstance<nb::list>(frames) && !nb::isinstance<nb::tuple>(frames))
    raise(ErrorKind::TypeMismatch, argument_label(call, "frames") + " must be a list or tuple of FrameHold or "
                                                                    "SequenceSession, got " + type_name_of(frames));
  const std::size_t width = static_cast<std::size_t>(uint_argument(width_arg, call, "width", 1u << 30));
  const auto pad = static_cast<std::int32_t>(int_argument(pad_arg, call, "pad", std::numeric_limits<std::int32_t>::min(),
                                                          std::numeric_limits<std::int32_t>::max()));
  const std::uint32_t d = domain_argument(c, domain, call, 0);
  std::vector<BlockTableRow> rows;
  rows.reserve(nb::len(frames));
  std::size_t i = 0;
  for (nb::handle item : frames) {
    BlockTableRow row;
    if (auto* session = exact_instance<SequenceSession>(item)) row.session = session;
    else if (auto* frame = exact_instance<FrameHold>(item)) row.frame = frame;
    else
      raise(ErrorKind::TypeMismatch, argument_label(call, ("frames[" + std::to_string(i) + "]").c_str()) +
                                         " must be a FrameHold or SequenceSession, got " + type_name_of(item));
    rows.push_back(row);
    ++i;
  }
  const std::size_t count = checked::mul_or_throw<std::uint64_t>(rows.size(), width, "block_table: rows * width");
  if (out.is_none()) {
    std::unique_ptr<std::int32_t[]> table(new std::int32_t[count ? count : 1]);
    build_block_table(c, rows, d, width, pad, table.get());
    std::int32_t* data = table.release();
    nb::capsule keep(data, [](void* p) noexcept { delete[] static_cast<std::int32_t*>(p); });
    const std::size_t shape[2] = {rows.size(), width};
    return nb::cast(nb::ndarray<nb::numpy, std::int32_t, nb::ndim<2>>(data, 2, shape, keep));
  }
  // A type check first: a failed conversion attempt costs more than the whole table.
  if (nb::isinstance<runtime::Buffer>(out)) {
    auto buffer = nb::cast<std::shared_ptr<runtime::Buffer>>(out);
    const std::size_t bytes = count * sizeof(std::int32_t);
    if (buffer->nbytes() < bytes)
      bad_out("(a Buffer of " + std::to_string(buffer->nbytes()) + " bytes) is smaller than the table's " +
              std::to_string(bytes) + " bytes");
    std::vector<std::int32_t> table(count);
    build_block_table(c, rows, d, width, pad, table.data());
    if (bytes != 0) buffer->stream()->write(*buffer, table.data(), bytes);  // one host-to-device copy
    return nb::borrow(out);
  }
  Target target;
  if (PyObject_CheckBuffer(out.ptr())) open_buffer_protocol(out, rows.size(), width, target);
  else if (nb::hasattr(out, "__dlpack__")) open_dlpack(out, rows.size(), width, target);
  else
    raise(ErrorKind::TypeMismatch, argument_label(call, "out") +
                                       " must be None, an int32 array (buffer protocol or host DLPack) or a lifecore "
                                       "Buffer, got " + type_name_of(out));
  build_block_table(c, rows, d, width, pad, target.data);
  return nb::borrow(out);
}

DeviceArenaMemory& device_memory(const AdmissionCoordinator& c, const char* call) {
  auto* memory = dynamic_cast<DeviceArenaMemory*>(c.memory().get());
  if (!memory)
    raise(ErrorKind::InvalidArgument, std::string(call) +
                                          ": this coordinator does host accounting (device=None): its blocks have no "
                                          "memory behind them; create it on a Device for an arena");
  return *memory;
}

std::shared_ptr<runtime::Buffer> arena(const AdmissionCoordinator& c, nb::handle domain) {
  const std::uint32_t d = domain_argument(c, domain, "arena", 0);
  DeviceArenaMemory& memory = device_memory(c, "arena");
  const ArenaState state = c.arena_state(d);
  if (state.chunks.empty())
    raise(ErrorKind::InvalidArgument, "arena: domain '" + c.domain_name(d) + "' has no blocks (capacity below one page)");
  if (state.chunks.size() > 1)
    raise(ErrorKind::InvalidArgument, "arena: domain '" + c.domain_name(d) + "' grew into " +
                                          std::to_string(state.chunks.size()) +
                                          " chunks; use arena_chunks(), or create the coordinator at its maximum "
                                          "capacity to get one tensor");
  return memory.lend(state.chunks.front().memory);
}

std::vector<std::tuple<std::int32_t, std::uint64_t, std::shared_ptr<runtime::Buffer>>> arena_chunks(
    const AdmissionCoordinator& c, nb::handle domain) {
  const std::uint32_t d = domain_argument(c, domain, "arena_chunks", 0);
  DeviceArenaMemory& memory = device_memory(c, "arena_chunks");
  std::vector<std::tuple<std::int32_t, std::uint64_t, std::shared_ptr<runtime::Buffer>>> out;
  for (const auto& chunk : c.arena_state(d).chunks) out.emplace_back(chunk.first_block, chunk.blocks, memory.lend(chunk.memory));
  return out;
}

}  // namespace

void init_sequence_arena(nb::module_& m) {
  m.def("step_all", &step_all_sessions, nb::arg("sessions").none(), nb::arg("tokens").none(),
        nb::sig("def step_all(sessions: collections.abc.Sequence[SequenceSession], tokens: object) -> "
                "numpy.typing.NDArray[numpy.uint8]"),
        "A decode iteration's bookkeeping in one call: sessions[i].step(tokens[i]) for every row (tokens: an\n"
        "int64 NumPy array or a list of ints); returns the BackingOutcome values (0 CURRENT, 1 EXTENDED,\n"
        "2 RETRY_REQUIRED, 3 BACKING_DEFERRED) as a uint8 array. Not all-or-nothing: the first row that raises\n"
        "stops the batch (its error names the row); the rows before it stepped.");
  nb::handle snapshot = nb::type<BackingSnapshot>();
  nb::cpp_function_def(&snapshot_block_ids, nb::scope(snapshot), nb::name("block_ids"), nb::is_method(),
                       nb::arg("domain").none() = nb::none(),
                       nb::sig("def block_ids(self, domain: str | None = None) -> numpy.typing.NDArray[numpy.int32]"),
                       "This snapshot's block ids in `domain` (None: its first domain) as a zero-copy, read-only int32\n"
                       "NumPy array of `pages` ids. It keeps the id storage alive, never the capacity: once the\n"
                       "sequence is released this raises SessionStateError, and an array taken before reads -1.");
  nb::handle frame = nb::type<FrameHold>();
  nb::cpp_function_def(
      [](const FrameHold& f, nb::handle domain) {
        if (!f.snapshot()) raise(ErrorKind::SessionState, "block_ids: the frame is finalized (its snapshot was let go)");
        return snapshot_block_ids(*f.snapshot(), domain);
      },
      nb::scope(frame), nb::name("block_ids"), nb::is_method(), nb::arg("domain").none() = nb::none(),
      nb::sig("def block_ids(self, domain: str | None = None) -> numpy.typing.NDArray[numpy.int32]"),
      "The block ids of the frame's snapshot (BackingSnapshot.block_ids); SessionStateError once finalized.");

  nb::handle coordinator = nb::type<AdmissionCoordinator>();
  nb::cpp_function_def(
      &block_table, nb::scope(coordinator), nb::name("block_table"), nb::is_method(), nb::arg("frames").none(),
      nb::arg("width").none(), nb::arg("out").none() = nb::none(), nb::kw_only(), nb::arg("domain").none() = nb::none(),
      nb::arg("pad").none() = 0,
      nb::sig("def block_table(self, frames: collections.abc.Sequence[FrameHold | SequenceSession], width: int, "
              "out: object | None = None, *, domain: str | None = None, pad: int = 0) -> object"),
      "The padded [len(frames), width] int32 block table of a batch, built in one pass. A row comes from a live\n"
      "FrameHold (its snapshot's ids) or an open SequenceSession (its current backing). out=None returns a new\n"
      "NumPy array; else `out` is filled in place and returned: a C-contiguous writable int32 array of that\n"
      "shape (NumPy or any buffer-protocol object, or a host DLPack tensor such as a torch CPU tensor), or a\n"
      "lifecore Buffer of at least that many bytes (one host-to-device copy on its stream). domain None: the\n"
      "coordinator's first domain. A finalized or foreign frame, a row wider than `width`, a domain the sequence\n"
      "is not in, or a wrong, read-only or non-contiguous `out` raises and writes nothing.");
  nb::cpp_function_def(
      &arena, nb::scope(coordinator), nb::name("arena"), nb::is_method(), nb::arg("domain").none() = nb::none(),
      nb::sig("def arena(self, domain: str | None = None) -> lifecore._core.runtime.Buffer"),
      "The domain's arena (num_blocks(domain) * page_bytes bytes; block id b at offset b * page_bytes) as a\n"
      "Buffer that exports __dlpack__ (and __cuda_array_interface__ on CUDA): shape it into the engine's KV\n"
      "cache, e.g. torch.from_dlpack(c.arena('kv')).view(torch.float16).view(num_blocks, block_size, heads,\n"
      "head_dim). The Buffer (and any view) keeps the memory alive; freeing it drops only its own hold. A grown\n"
      "domain has several chunks: this raises, use arena_chunks() (create the coordinator at its maximum to get\n"
      "one tensor). Host accounting (device=None) has no memory: this raises.");
  nb::cpp_function_def(
      &arena_chunks, nb::scope(coordinator), nb::name("arena_chunks"), nb::is_method(),
      nb::arg("domain").none() = nb::none(),
      nb::sig("def arena_chunks(self, domain: str | None = None) -> list[tuple[int, int, lifecore._core.runtime.Buffer]]"),
      "(first block id, blocks, Buffer) per chunk of the domain's arena: one at creation, one per growth.");
  nb::cpp_function_def(
      [](const AdmissionCoordinator& c, nb::handle domain) {
        return c.arena_state(domain_argument(c, domain, "num_blocks", 0)).blocks;
      },
      nb::scope(coordinator), nb::name("num_blocks"), nb::is_method(), nb::arg("domain").none() = nb::none(),
      nb::sig("def num_blocks(self, domain: str | None = None) -> int"),
      "Blocks in the domain now: floor(capacity_bytes / page_bytes); block ids are 0 .. num_blocks - 1.");
}

}  // namespace lifecore::bindings
