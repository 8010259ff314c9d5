// lifecore.sequence bindings for the decode table (sequence/decode_table.hpp): a persistent
// [rows, width] int32 block table held open over a NumPy array of its own, a given host
// array (buffer protocol or host DLPack), or a lifecore Buffer (through a host mirror, one
// host-to-device copy per call that changed it, or that follows an error queued on the
// Buffer's stream). Translation only.
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "arguments.hpp"
#include "bindings.hpp"
#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"
#include "lifecore/runtime/buffer.hpp"
#include "lifecore/runtime/stream.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/decode_table.hpp"
#include "lifecore/sequence/session.hpp"
#include "lifecore/sequence/table_claims.hpp"
#include "table_arguments.hpp"

namespace lifecore::bindings {
namespace {

using namespace nb::literals;
using namespace lifecore::sequence;
using namespace table_out;

// What a tensor that says where its data is (torch's data_ptr) showed when the table was made:
// its dtype object and strides. Both can change in place (t.t_(), set_, t.data = a view of
// another dtype) with the same data_ptr and shape, and the table would then write row-major
// int32 into memory the tensor reads another way.
struct DataPtrLayout {
  nb::object dtype;
  nb::object strides;
  bool has_is_neg = false;  // torch's negative bit, which `.data = t._neg_view()` can set in place
};

// Where a given host array shows its memory now, checked to be a [rows, width] int32 table
// still (what the check raises, it raises). A DLPack table (a torch CPU tensor) can be resized,
// and its memory freed, behind its export, and a buffer-protocol one too (NumPy's resize with
// refcheck=False). A tensor that says where its data is (torch's data_ptr, decided at
// creation: `layout`) is asked, its dtype and strides compared with creation's; another gives a
// fresh export.
void* memory_now(nb::handle table, std::size_t rows, std::size_t width, bool dlpack, const DataPtrLayout* layout,
                 const char* call) {
  Target now;
  if (!dlpack) {
    open_buffer_protocol(table, rows, width, now, call);
    return now.data;
  }
  if (layout) {
    const auto dims = numbers_of<std::int64_t>(table.attr("shape"));
    check_shape(call, static_cast<std::int64_t>(dims.size()), dims.data(), rows, width);
    if (!table.attr("dtype").is(layout->dtype) || !table.attr("stride")().equal(layout->strides) ||
        (layout->has_is_neg && nb::bool_(table.attr("is_neg")())))
      raise(ErrorKind::InvalidArgument,
            std::string(call) + ": the table's dtype, strides or negative bit changed since decode_table (a "
                                "transpose or set_ in place, or .data replaced); nothing was written: make a new "
                                "decode_table over it");
    return reinterpret_cast<void*>(nb::cast<std::uintptr_t>(table.attr("data_ptr")()));
  }
  open_dlpack(table, rows, width, now, call);
  return now.data;
}

// The table and what keeps its memory: `table` is what Python sees.
struct DecodeTableHandle {
  nb::object table;
  std::unique_ptr<Target> target;                // a given host array, held open while this lives
  std::unique_ptr<std::int32_t[]> mirror;        // a Buffer's host copy
  std::shared_ptr<runtime::Buffer> buffer;
  std::unique_ptr<DecodeTable> core;
  std::unique_ptr<TableClaim> claim;  // the table's memory, refused to any other writer
  std::string domain;

  std::uint64_t errors_at_copy = 0;  // the stream's queued errors just before the last copy
  bool copy_owed = false;            // the last copy raised: the device table is behind

  // A Buffer receives the rows the call changed, first to last in one copy; the whole mirror
  // when the stream queued an error since the last copy (that copy may be the one that failed,
  // reported later) or a copy was owed: that copy makes the device table right again.
  void sync(const char* call) {
    if (core->last_written() != 0) note_torch_write(table);  // a torch table's version counts the write
    if (!buffer) return;
    const auto& stream = buffer->stream();
    const bool whole = copy_owed || stream->errors_queued() != errors_at_copy;
    if (core->last_written() == 0 && !whole) return;
    const std::size_t row_bytes = core->width() * sizeof(std::int32_t);
    const std::size_t first = whole ? 0 : core->first_row_written();
    const std::size_t end = whole ? core->rows() : core->end_row_written();
    const std::size_t bytes = (end - first) * row_bytes;  // within the table's own size
    if (bytes == 0) return;
    copy_owed = true;
    const std::uint64_t before = stream->errors_queued();  // an error the copy itself queues counts
    try {
      // Refused if another thread began a capture on the stream since require_writable: a
      // recorded copy would write these ids again at every replay.
      stream->write_unrecorded(*buffer, mirror.get() + first * core->width(), bytes, call, "the table",
                               first * row_bytes);
    } catch (const Error& e) {
      // Only a recording begun since require_writable gets these words; another refusal (the
      // stream joined to a producer's capture) keeps its own.
      if (e.kind() != ErrorKind::CaptureState || !stream->capture_state().is_recording()) throw;
      raise(ErrorKind::CaptureState,
            std::string(call) + ": the table's Buffer's stream began recording a capture during the call, so the "
                                "table was not copied to the Buffer (the call's steps and host table stand; the next "
                                "call outside the capture copies the whole table)");
    }
    copy_owed = false;
    errors_at_copy = before;
  }

  // A given table that says where its data is (torch's data_ptr): before each call
  // (require_unmoved) it is asked rather than exported again (memory_now). Null otherwise.
  std::shared_ptr<const DataPtrLayout> layout;
  // Before a call changes anything: its table can take the write (runtime/stream.hpp).
  void require_writable(const char* call) const {
    if (buffer) {
      if (!buffer->alive())
        raise(ErrorKind::Closed, std::string(call) + ": the table's Buffer was freed (or its device closed); "
                                                     "nothing was changed");
      buffer->stream()->check_write_not_recorded(call, "the table");
    }
    require_unmoved(call);
  }
  void require_unmoved(const char* call) const {
    if (!target) return;
    if (memory_now(table, core->rows(), core->width(), bool(target->capsule), layout.get(), call) != target->data)
      raise_moved(call);
  }
  [[noreturn]] static void raise_moved(const char* call) {
    raise(ErrorKind::InvalidArgument, std::string(call) +
                                          ": the table's memory moved since decode_table (was `out` resized?); "
                                          "nothing was written: make a new decode_table over it");
  }
};

// What a given array's claim asks when another writer meets it: whether the array still shows
// the memory the table writes (an array resized behind its export lets that memory go, and
// it may come back as anyone's). It holds the array, not the table, so the question is safe
// if the table goes meanwhile; it runs with the interpreter lock, as every table writer does.
std::shared_ptr<const TableClaim::StillThere> still_there(nb::handle array, std::size_t rows, std::size_t width,
                                                          const Target& target,
                                                          std::shared_ptr<const DataPtrLayout> layout) {
  auto ask = [array = nb::borrow(array), rows, width, data = target.data, dlpack = bool(target.capsule),
              layout = std::move(layout)]() -> bool {
    try {
      return memory_now(array, rows, width, dlpack, layout.get(), "decode_table") == data;
    } catch (nb::python_error& e) {
      if (!e.matches(PyExc_Exception)) throw;  // an interrupt stays one
      return false;
    } catch (const Error&) {  // no longer a table of that shape: not that memory any more
      return false;
    }
  };
  return std::make_shared<const TableClaim::StillThere>(std::move(ask));
}

std::unique_ptr<DecodeTableHandle> make_decode_table(AdmissionCoordinator& c, nb::handle rows_arg, nb::handle width_arg,
                                                     nb::handle out, nb::handle domain, nb::handle pad_arg) {
  constexpr const char* call = "decode_table";
  const auto rows = static_cast<std::size_t>(uint_argument(rows_arg, call, "rows", 1u << 30));
  const auto width = static_cast<std::size_t>(uint_argument(width_arg, call, "width", 1u << 30));
  const auto pad = static_cast<std::int32_t>(int_argument(pad_arg, call, "pad", std::numeric_limits<std::int32_t>::min(),
                                                          std::numeric_limits<std::int32_t>::max()));
  const std::uint32_t d = domain_argument(c, domain, call, 0);
  const std::size_t count = checked::mul_or_throw<std::uint64_t>(rows, width, "decode_table: rows * width");
  // The table's per-row records count too: 2**30 rows of width 0 asked for no entries and
  // ~100 GiB of records (rows <= 2**30, so the product cannot wrap).
  const std::uint64_t records = static_cast<std::uint64_t>(rows) * DecodeTable::bookkeeping_bytes_per_row();
  if (const std::uint64_t host = host_memory_bytes(); host != 0 && count * 4 <= host && records > host - count * 4)
    raise(ErrorKind::Overflow, std::string(call) + ": a table of " + std::to_string(rows) + " rows keeps " +
                                   std::to_string(records) + " bytes of row records beside its entries, more than the "
                                   "host's memory; nothing was changed");
  auto handle = std::make_unique<DecodeTableHandle>();
  handle->domain = c.domain_name(d);
  std::int32_t* data = nullptr;
  if (out.is_none()) {
    auto* owned = table_storage(count, call).release();
    nb::capsule keep(owned, [](void* p) noexcept { delete[] static_cast<std::int32_t*>(p); });
    const std::size_t shape[2] = {rows, width};
    handle->table = nb::cast(nb::ndarray<nb::numpy, std::int32_t, nb::ndim<2>>(owned, 2, shape, keep));
    data = owned;
    handle->claim = std::make_unique<TableClaim>(data, count * sizeof(std::int32_t), call, nullptr);  // its own
  } else if (nb::isinstance<runtime::Buffer>(out)) {
    auto buffer = nb::cast<std::shared_ptr<runtime::Buffer>>(out);
    const std::size_t bytes = count * sizeof(std::int32_t);
    if (buffer->nbytes() < bytes)
      bad_out(call, "(a Buffer of " + std::to_string(buffer->nbytes()) + " bytes) is smaller than the table's " +
                        std::to_string(bytes) + " bytes");
    refuse_the_arena(c, call, buffer.get(), nullptr, bytes);
    buffer->stream()->check_write_not_recorded(call, "the table");
    handle->claim = std::make_unique<TableClaim>(buffer, bytes, call);
    handle->mirror = table_storage(count, call);
    handle->buffer = std::move(buffer);
    handle->table = nb::borrow(out);
    data = handle->mirror.get();
  } else {
    handle->target = std::make_unique<Target>();
    if (PyObject_CheckBuffer(out.ptr())) open_buffer_protocol(out, rows, width, *handle->target, call);
    else if (nb::hasattr(out, "__dlpack__")) {
      open_dlpack(out, rows, width, *handle->target, call);
      if (nb::hasattr(out, "data_ptr") && nb::hasattr(out, "shape") && nb::hasattr(out, "dtype") &&
          nb::hasattr(out, "stride")) {
        // open_dlpack refused a negative view; the bit is compared again at every call.
        const bool has_is_neg = nb::hasattr(out, "is_neg");
        handle->layout =
            std::make_shared<const DataPtrLayout>(DataPtrLayout{out.attr("dtype"), out.attr("stride")(), has_is_neg});
      }
    }
    else
      raise(ErrorKind::TypeMismatch, argument_label(call, "out") +
                                         " must be None, an int32 array (buffer protocol or host DLPack) or a lifecore "
                                         "Buffer, got " + type_name_of(out));
    refuse_the_arena(c, call, nullptr, handle->target->data, count * sizeof(std::int32_t));
    handle->claim = std::make_unique<TableClaim>(
        handle->target->data, count * sizeof(std::int32_t), call,
        still_there(out, rows, width, *handle->target, handle->layout));
    handle->table = nb::borrow(out);
    data = handle->target->data;
  }
  handle->core = std::make_unique<DecodeTable>(c.shared_from_this(), d, rows, width, pad, data);
  if (handle->buffer && count != 0) {
    handle->errors_at_copy = handle->buffer->stream()->errors_queued();
    handle->buffer->stream()->write_unrecorded(*handle->buffer, data, count * sizeof(std::int32_t), call,
                                               "the table");  // all pad
  }
  return handle;
}

std::size_t row_argument(nb::handle row, const char* call, std::size_t rows) {
  const nb::object index = integer_argument(row, call, "row");
  const std::optional<std::int64_t> r = int64_of(index);
  // A negative row, or one past any table, is out of this table's range, as one just past it
  // is (the core's words; the core checks the rest).
  if (!r || *r < 0 || *r > std::int64_t{std::numeric_limits<std::uint32_t>::max()})
    raise(ErrorKind::InvalidArgument, std::string(call) + ": row " + nb::str(index).c_str() + " is out of range for " +
                                          std::to_string(rows) + " rows");
  return static_cast<std::size_t>(*r);
}

}  // namespace

void init_sequence_decode_table(nb::module_& m) {
  nb::class_<DecodeTableHandle>(
      m, "DecodeTable",
      "A persistent [rows, width] int32 block table for a decode loop (AdmissionCoordinator.decode_table).\n"
      "Row r shows the block ids, in the table's domain, of the sequence last given for row r, padded with\n"
      "`pad`. An update writes only what changed since: the new ids of a sequence that grew, a whole row when\n"
      "its sequence changed, pad over a row that shows no sequence now. So a decode iteration costs\n"
      "O(rows + new blocks) where block_table costs O(total blocks). A row keeps which sequence it shows,\n"
      "never its capacity. The table is written only by this object: do not write into it. A table on a\n"
      "Buffer is never written into a capture: a call is refused (CaptureStateError, nothing changed) while\n"
      "the Buffer's stream records; if another thread begins a capture on that stream during the call, its\n"
      "steps stand, the copy is not made and CaptureStateError says so, and the next call outside the\n"
      "capture copies the whole table. The copy to a Buffer is queued on its stream, as any write: a call\n"
      "returns before it lands, and a copy that fails on the device is reported by the stream's next sync\n"
      "(work queued behind it, a graph replay say, may have read the old ids; the next call copies the whole\n"
      "table again).")
      .def_prop_ro("table", [](const DecodeTableHandle& t) { return t.table; },
                   nb::for_getter(nb::sig("def table(self, /) -> typing.Any")),
                   "The table: its own int32 NumPy array, or the `out` given to decode_table (a Buffer gets the\n"
                   "rows a call changed, first to last in one copy, and the whole table after any call that\n"
                   "follows an error queued on its stream).")
      .def("__repr__", [](const DecodeTableHandle& t) {
        return "DecodeTable(rows=" + std::to_string(t.core->rows()) + ", width=" + std::to_string(t.core->width()) +
               ", pad=" + std::to_string(t.core->pad()) + ", domain=" + nb::cast<std::string>(nb::repr(nb::str(t.domain.data(), t.domain.size()))) +
               (t.buffer ? ", on a Buffer" : "") + ")";
      })
      .def_prop_ro("rows", [](const DecodeTableHandle& t) { return t.core->rows(); }, "Rows of the table.")
      .def_prop_ro("width", [](const DecodeTableHandle& t) { return t.core->width(); }, "Ids per row.")
      .def_prop_ro("pad", [](const DecodeTableHandle& t) { return t.core->pad(); }, "The value past a row's ids.")
      .def_prop_ro("domain", [](const DecodeTableHandle& t) { return t.domain; },
                   "The capacity domain whose block ids the table holds.")
      .def_prop_ro("last_written", [](const DecodeTableHandle& t) { return t.core->last_written(); },
                   "How many int32 values (ids and pad) the last update, step, assign or clear wrote (0 after one\n"
                   "that was refused before it wrote anything).")
      .def(
          "update",
          [](DecodeTableHandle& t, nb::handle sessions) {
            t.core->begin_call();  // a call refused anywhere wrote nothing: last_written says 0
            const auto held = session_list(sessions, "DecodeTable.update", /*none_ok=*/true);
            t.require_writable("DecodeTable.update");
            t.core->update(held.objects.data(), held.objects.size());
            t.sync("DecodeTable.update");
          },
          nb::arg("sessions").none(),
          nb::sig("def update(self, sessions: collections.abc.Sequence[SequenceSession | None]) -> None"),
          "Row r now shows sessions[r] (None: pad); rows past len(sessions) show pad. Each session must be open\n"
          "(its handle, not necessarily its phase), of this coordinator, in the table's domain, with at most\n"
          "`width` blocks; any error names the row and writes nothing. The same ids block_table would write.")
      .def(
          "step",
          [](DecodeTableHandle& t, nb::handle sessions, nb::handle tokens) {
            constexpr const char* call = "DecodeTable.step";
            t.core->begin_call();
            // None: an empty row (as update takes it). read_tokens may run Python code: held.
            const auto held = session_list(sessions, call, /*none_ok=*/true);
            const auto& list = held.objects;
            Tokens targets;
            read_tokens(tokens, list.size(), call, targets);
            BackingOutcome* outcomes = nullptr;
            nb::object array = enum_array(list.size(), outcomes);
            t.require_writable(call);
            try {
              t.core->step(list, targets.data, outcomes);
            } catch (const Error&) {
              // The rows that stepped before the refused one were written: a Buffer gets them
              // too. A copy that fails here is owed (copy_owed), made by the next call.
              if (t.core->last_written() != 0) {
                try {
                  t.sync(call);
                } catch (const Error&) {
                }
              }
              throw;
            }
            t.sync(call);
            return array;
          },
          nb::arg("sessions").none(), nb::arg("tokens").none(),
          nb::sig("def step(self, sessions: collections.abc.Sequence[SequenceSession | None], "
                  "tokens: collections.abc.Sequence[typing.SupportsIndex] | numpy.typing.NDArray[numpy.integer[typing.Any]] | lifecore._stub_types.SupportsDLPack) -> "
                  "numpy.typing.NDArray[numpy.uint8]"),
          "A decode iteration's bookkeeping and its table in one call: step_all(sessions, tokens), then\n"
          "update(sessions). Returns the BackingOutcome values as a uint8 array. A None row (a slot left empty)\n"
          "steps nothing, whatever its token count (an int64 still: the tokens are read as one array), reads\n"
          "CURRENT and is cleared, as update clears it. A token\n"
          "count below 1 or above\n"
          "its request's fit, another coordinator's session, a closed one (a preempted victim), one an earlier\n"
          "row named (as step_all finds it), one with no pages in the table's domain or one whose blocks, once\n"
          "stepped, would not fit the table's width, in any row, is refused before any row steps; a step that\n"
          "raises after that (another thread's extension meanwhile, say) stops the batch (the rows before it\n"
          "stepped, as step_all) and the table shows what the rows that stepped hold now (the other rows are\n"
          "left as they were). Every such error carries `row` (the row refused) and `rows_stepped` (how many\n"
          "rows stepped: 0 for a refusal before any row steps).")
      .def(
          "assign",
          [](DecodeTableHandle& t, nb::handle row, nb::handle session) {
            constexpr const char* call = "DecodeTable.assign";
            t.core->begin_call();
            const std::size_t r = row_argument(row, call, t.core->rows());
            auto* s = exact_instance<SequenceSession>(session);
            if (!s)
              raise(ErrorKind::TypeMismatch, argument_label(call, "session") + " must be a SequenceSession, got " +
                                                 type_name_of(session));
            t.require_writable(call);
            t.core->assign(r, *s);
            t.sync(call);
          },
          nb::arg("row").none(), nb::arg("session").none(),
          nb::sig("def assign(self, row: int, session: SequenceSession) -> None"),
          "Row `row` now shows `session` (the checks of update); the other rows are left as they are.")
      .def(
          "clear",
          [](DecodeTableHandle& t, nb::handle row) {
            t.core->begin_call();
            // The row first: its conversion may run Python code (an int subclass's __lt__),
            // which must not run between the table's check and the write.
            const std::optional<std::size_t> r =
                row.is_none() ? std::nullopt
                              : std::optional<std::size_t>(row_argument(row, "DecodeTable.clear", t.core->rows()));
            t.require_writable("DecodeTable.clear");
            if (!r) t.core->clear_all();
            else t.core->clear(*r);
            t.sync("DecodeTable.clear");
          },
          nb::arg("row").none() = nb::none(), nb::sig("def clear(self, row: int | None = None) -> None"),
          "Row `row` (None: every row) back to pad: it shows no sequence. Clear a row before its sequence is\n"
          "released if the table may be read before the next update.");

  nb::handle coordinator = nb::type<AdmissionCoordinator>();
  nb::cpp_function_def(
      &make_decode_table, nb::scope(coordinator), nb::name("decode_table"), nb::is_method(), nb::arg("rows").none(),
      nb::arg("width").none(), nb::arg("out").none() = nb::none(), nb::kw_only(), nb::arg("domain").none() = nb::none(),
      nb::arg("pad").none() = 0,
      nb::sig("def decode_table(self, rows: typing.SupportsIndex, width: typing.SupportsIndex, out: lifecore._stub_types.SupportsDLPack | lifecore._stub_types.HostBuffer | None = None, *, "
              "domain: str | None = None, pad: typing.SupportsIndex = 0) -> DecodeTable"),
      "A persistent [rows, width] int32 block table for a decode loop (DecodeTable), filled with `pad` now.\n"
      "out=None: the table is a NumPy array of its own; else `out` is held for the table's life: a C-contiguous\n"
      "writable int32 array of that shape (NumPy or any buffer-protocol object, or a host DLPack tensor such as\n"
      "a torch CPU tensor, checked before each call to show the same memory), or a lifecore Buffer of at least\n"
      "that many bytes (written from a host copy after each call that changed it or follows an error on its\n"
      "stream; while that stream records a capture, creation and every call raise CaptureStateError and change\n"
      "nothing; the table holds the Buffer object, not its memory: a Buffer freed with free() makes every later\n"
      "call raise ClosedError). domain None: the coordinator's first domain. A wrong `out` raises, as does one that is the\n"
      "coordinator's arena memory (arena(), or a view of it) or another coordinator's on the same device, or\n"
      "shares memory with a live DecodeTable's table: while a table lives, its memory is refused to any other\n"
      "table writer. The table does not hold the coordinator: once nothing else does, a call that reads a\n"
      "session raises ClosedError.");
}

}  // namespace lifecore::bindings
