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
#include "table_arguments.hpp"
#include "bindings.hpp"
#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/stream.hpp"
#include "lifecore/sequence/block_table.hpp"
#include "lifecore/sequence/lent_block_ids.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/session.hpp"
#include "lifecore/sequence/table_claims.hpp"
#include "sequence/device_arena_memory.hpp"

namespace lifecore::bindings {
namespace {

using namespace nb::literals;
using namespace lifecore::sequence;

using namespace table_out;

nb::object ids_array(const BlockIds& ids) {
  static const std::int32_t none = 0;
  const std::int32_t* data = ids.data ? ids.data.get() : &none;
  auto owner = std::make_unique<BlockIds>(ids);  // keeps the storage, never the capacity
  lent_block_ids::lend(data, ids.count);  // refused to lifecore's own host writes while the array lives
  nb::capsule keep;
  try {
    keep = nb::capsule(owner.get(), [](void* p) noexcept {
      auto* kept = static_cast<BlockIds*>(p);
      lent_block_ids::give_back(kept->data ? kept->data.get() : nullptr, kept->count);
      delete kept;
    });
  } catch (...) {
    lent_block_ids::give_back(data, ids.count);
    throw;
  }
  owner.release();  // the capsule's now
  const std::size_t shape[1] = {ids.count};
  return nb::cast(nb::ndarray<nb::numpy, const std::int32_t, nb::ndim<1>>(data, 1, shape, keep));
}

nb::object snapshot_block_ids(const BackingSnapshot& s, nb::handle domain) {
  const std::uint32_t d = domain_argument(s, domain, "block_ids", s.domains().at(0));
  return ids_array(s.block_ids(d));
}

nb::object step_all_sessions(nb::handle sessions, nb::handle tokens) {
  constexpr const char* call = "step_all";
  const auto held = session_list(sessions, call, /*none_ok=*/false);  // read_tokens may run Python code
  const std::vector<SequenceSession*>& list = held.objects;
  Tokens targets;
  read_tokens(tokens, list.size(), call, targets);
  BackingOutcome* outcomes = nullptr;
  nb::object array = enum_array(list.size(), outcomes);
  step_all(list, targets.data, outcomes);
  return array;
}

nb::object commit_all_frames(nb::handle frames) {
  const auto held = instance_list<FrameHold>(frames, "commit_frames", "frames", "FrameHold");
  const std::vector<FrameHold*>& list = held.objects;
  FrameDisposition* dispositions = nullptr;
  nb::object array = enum_array(list.size(), dispositions);
  commit_frames(list, dispositions);
  return array;
}

nb::object block_table(const AdmissionCoordinator& c, nb::handle frames, nb::handle width_arg, nb::handle out,
                       nb::handle domain, nb::handle pad_arg) {
  constexpr const char* call = "block_table";
  if (!is_item_sequence(frames))
    raise(ErrorKind::TypeMismatch, argument_label(call, "frames") + " must be a sequence (list, tuple, ...) of FrameHold "
                                                                    "or SequenceSession, got " + type_name_of(frames));
  const std::size_t width = static_cast<std::size_t>(uint_argument(width_arg, call, "width", 1u << 30));
  const auto pad = static_cast<std::int32_t>(int_argument(pad_arg, call, "pad", std::numeric_limits<std::int32_t>::min(),
                                                          std::numeric_limits<std::int32_t>::max()));
  const std::uint32_t d = domain_argument(c, domain, call, 0);
  const ListItems items(frames);
  std::vector<BlockTableRow> rows;
  rows.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    const nb::handle item = items[i];
    BlockTableRow row;
    if (auto* session = exact_instance<SequenceSession>(item)) row.session = session;
    else if (auto* frame = exact_instance<FrameHold>(item)) row.frame = frame;
    else
      raise(ErrorKind::TypeMismatch, argument_label(call, ("frames[" + std::to_string(i) + "]").c_str()) +
                                         " must be a FrameHold or SequenceSession, got " + type_name_of(item));
    rows.push_back(row);
  }
  const std::size_t count = checked::mul_or_throw<std::uint64_t>(rows.size(), width, "block_table: rows * width");
  if (out.is_none()) {
    std::unique_ptr<std::int32_t[]> table = table_storage(count, call);
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
      bad_out(call, "(a Buffer of " + std::to_string(buffer->nbytes()) + " bytes) is smaller than the table's " +
              std::to_string(bytes) + " bytes");
    refuse_the_arena(c, call, buffer.get(), nullptr, bytes);
    buffer->stream()->check_write_not_recorded(call, "the table");
    refuse_a_claimed_table(*buffer, bytes, call);
    std::unique_ptr<std::int32_t[]> table = table_storage(count, call);
    build_block_table(c, rows, d, width, pad, table.get());
    // One host-to-device copy, refused if a capture began on the stream since the check.
    if (bytes != 0) buffer->stream()->write_unrecorded(*buffer, table.get(), bytes, call, "the table");
    return nb::borrow(out);
  }
  Target target;
  if (PyObject_CheckBuffer(out.ptr())) open_buffer_protocol(out, rows.size(), width, target);
  else if (nb::hasattr(out, "__dlpack__")) open_dlpack(out, rows.size(), width, target);
  else
    raise(ErrorKind::TypeMismatch, argument_label(call, "out") +
                                       " must be None, an int32 array (buffer protocol or host DLPack) or a lifecore "
                                       "Buffer, got " + type_name_of(out));
  refuse_the_arena(c, call, nullptr, target.data, count * sizeof(std::int32_t));
  refuse_a_claimed_table(target.data, count * sizeof(std::int32_t), call);
  build_block_table(c, rows, d, width, pad, target.data, /*in_place=*/true);  // the caller's table
  note_torch_write(out);
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
  if (state.returned) raise(ErrorKind::Closed, "arena: the device is closed (its close took the arena back)");
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
  const ArenaState state = c.arena_state(d);
  if (state.returned) raise(ErrorKind::Closed, "arena_chunks: the device is closed (its close took the arena back)");
  for (const auto& chunk : state.chunks) out.emplace_back(chunk.first_block, chunk.blocks, memory.lend(chunk.memory));
  return out;
}

}  // namespace

void init_sequence_decode_table(nb::module_& m);  // init_sequence_decode_table.cpp

void init_sequence_arena(nb::module_& m) {
  m.def("step_all", &step_all_sessions, nb::arg("sessions").none(), nb::arg("tokens").none(),
        nb::sig("def step_all(sessions: collections.abc.Sequence[SequenceSession], "
                "tokens: collections.abc.Sequence[typing.SupportsIndex] | numpy.typing.NDArray[numpy.integer[typing.Any]] | lifecore._stub_types.SupportsDLPack) -> "
                "numpy.typing.NDArray[numpy.uint8]"),
        "A decode iteration's bookkeeping in one call: sessions[i].step(tokens[i]) for every row (tokens: an\n"
        "int64 NumPy array or host tensor, read in place; another one-dimensional integer array, NumPy's or a\n"
        "host tensor such as torch's, read from an int64 copy; or a list of ints); returns the BackingOutcome values (0 CURRENT, 1 EXTENDED, 2 RETRY_REQUIRED, 3 BACKING_DEFERRED)\n"
        "as a uint8 array. A token count below 1 or above its request's fit, a closed session (a preempted\n"
        "victim) or a session an earlier row named, in any row, is refused before any row steps (a repeat is\n"
        "found for certain while no other thread steps the same session in a batch of its own). Otherwise not\n"
        "all-or-nothing: the first row that raises (a finished or framed session, say) stops the batch (its\n"
        "error names the row); the rows before it stepped. Every such error carries `row` (the row refused)\n"
        "and `rows_stepped` (how many rows stepped before it: 0 for a refusal before any row steps).");
  m.def("commit_frames", &commit_all_frames, nb::arg("frames").none(),
        nb::sig("def commit_frames(frames: collections.abc.Sequence[FrameHold]) -> numpy.typing.NDArray[numpy.uint8]"),
        "The end of a batch's step in one call: frames[i].commit() for every row (the frames of\n"
        "acquire_frames, say); returns the FrameDisposition values (0 COMMITTED, 1 DISCARDED_CANCELLED) as a\n"
        "uint8 array. LifecoreTypeError for anything but a sequence of FrameHold, and InvalidArgumentError\n"
        "for two frames of one session, before any frame commits; otherwise not all-or-nothing: the first\n"
        "frame that raises stops the batch (its error names the row); the frames before it committed. Such\n"
        "an error carries `row` (the row refused) and `rows_stepped` (how many frames committed before it).");
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
      nb::sig("def block_table(self, frames: collections.abc.Sequence[FrameHold | SequenceSession], width: typing.SupportsIndex, "
              "out: object | None = None, *, domain: str | None = None, pad: typing.SupportsIndex = 0) -> typing.Any"),
      "The padded [len(frames), width] int32 block table of a batch, built in one pass. A row comes from a live\n"
      "FrameHold (its snapshot's ids) or an open SequenceSession (its current backing). out=None returns a new\n"
      "NumPy array; else `out` is filled in place and returned: a C-contiguous writable int32 array of that\n"
      "shape (NumPy or any buffer-protocol object, or a host DLPack tensor such as a torch CPU tensor), or a\n"
      "lifecore Buffer of at least that many bytes (one host-to-device copy on its stream). Entries past a row's\n"
      "ids are `pad` (default 0, itself a block id, as a kernel reads a row only up to its sequence's length;\n"
      "pad=-1 tells padding apart). domain None: the\n"
      "coordinator's first domain. A finalized or foreign frame, a row wider than `width`, a domain the sequence\n"
      "is not in, or a wrong, read-only or non-contiguous `out` raises and writes nothing; so does an `out` that is\n"
      "the coordinator's arena memory (arena(), or a view of it) or another coordinator's on the same device, the\n"
      "memory of a live DecodeTable (which writes only what changed), and a Buffer whose stream records a capture\n"
      "(CaptureStateError: write the table before each replay, outside the capture).");
  nb::cpp_function_def(
      &arena, nb::scope(coordinator), nb::name("arena"), nb::is_method(), nb::arg("domain").none() = nb::none(),
      nb::sig("def arena(self, domain: str | None = None) -> lifecore._core.runtime.Buffer"),
      "The domain's arena (num_blocks(domain) * page_bytes bytes; block id b at offset b * page_bytes) as a\n"
      "Buffer that exports __dlpack__ (and __cuda_array_interface__ on CUDA): shape it into the engine's KV\n"
      "cache, e.g. torch.from_dlpack(c.arena('k')).view(torch.float16).view(num_blocks, block_size, heads,\n"
      "head_dim) for a domain of keys alone (a page that holds both keys and values: (num_blocks, 2, block_size,\n"
      "heads, head_dim)); the view's bytes must come to page_bytes per block. The Buffer (and any view) keeps\n"
      "the memory alive; freeing it drops only its own hold. A grown domain has several chunks: this raises,\n"
      "use arena_chunks() (create the coordinator at its maximum to get one tensor). Host accounting (device=None) has no memory: this raises.");
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
      "Blocks in the domain now: floor(capacity_bytes / page_bytes), at most 2**31 (block ids are int32, and no\n"
      "memory is made for a block without one); block ids are 0 .. num_blocks - 1.");
  init_sequence_decode_table(m);
}

}  // namespace lifecore::bindings
