// CapturePayload: what a transform produced. A tensor payload keeps the backend's own array
// (NumPy or torch, in the source dtype) in a storage the core holds opaquely and reads through
// a host view; small results come back as NumPy arrays named for what they hold.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "capture/capture_geometry.hpp"
#include "capture_bindings.hpp"
#include "dlpack_guard.hpp"
#include "element_types.hpp"
#include "lifecore/capture/types.hpp"
#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"

namespace lifecore::bindings {

using namespace lifecore::capture;

namespace {

using HostView = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

// One of a summary's statistics, or None for a payload of another kind.
template <typename T>
std::optional<T> summary_field(const CapturePayload& p, T value) {
  if (p.kind != PayloadKind::summary) return std::nullopt;
  return value;
}

// Keeps the Python array a payload was built from, and the host view the core reads.
struct PythonArrayStorage final : PayloadStorage {
  nb::object original;
  mutable HostView view;
  nb::dlpack::dtype dtype;
  std::vector<std::uint64_t> shape;

  // The array is viewed again on every read, and must still have the type and shape it was
  // built with: its owner may have moved its values meanwhile (a torch tensor resized, a NumPy
  // array resized with refcheck=False, which a view does not stop).
  const void* current_data(const PayloadArray&) const override {
    nb::gil_scoped_acquire gil;
    HostView now;
    bool same = nb::try_cast(checked_for_caster(original, "a tensor payload's array"), now, /*convert=*/false) &&
                now.dtype() == dtype && now.ndim() == shape.size();
    for (std::size_t i = 0; same && i < shape.size(); ++i) same = static_cast<std::uint64_t>(now.shape(i)) == shape[i];
    if (!same)
      raise(ErrorKind::CaptureSession,
            "a tensor payload's array (" + type_name_of(original) +
                ") changed its shape, dtype or place since it was captured; its values can no longer be read");
    view = std::move(now);  // keeps what the reader reads alive until the next read
    return view.data();
  }

  ~PythonArrayStorage() override {
    if (!Py_IsInitialized()) return;  // the interpreter is gone, and the references with it
    nb::gil_scoped_acquire gil;
    view = HostView();
    original.reset();
  }
};

// Whether `array` keeps alive more memory than its own `bytes`: a NumPy view of a larger array
// or bytes object (or of other memory NumPy does not own, whose size it cannot tell), or a
// torch tensor on a larger storage. The charge is the array's own bytes, so such an array is
// kept as a copy.
bool holds_more_than(nb::handle array, std::uint64_t bytes) {
  if (is_numpy_array(array)) {
    nb::object root = nb::borrow(array);
    // NumPy keeps a chain of bases short; a subclass's base property may loop (its own self):
    // past a few links, the array is taken to hold more, and copied.
    int links = 0;
    for (nb::object base = root.attr("base"); !base.is_none(); base = root.attr("base")) {
      if (++links > 16 || base.is(root)) return true;
      if (PyBytes_CheckExact(base.ptr())) return static_cast<std::uint64_t>(PyBytes_Size(base.ptr())) > bytes;
      if (!is_numpy_array(base)) return true;
      root = base;
    }
    return nb::cast<std::uint64_t>(root.attr("nbytes")) > bytes;
  }
  if (is_torch_tensor(array)) return nb::cast<std::uint64_t>(array.attr("untyped_storage")().attr("nbytes")()) > bytes;
  return false;  // another kind of array: kept as given
}

// A copy of `array` in its own memory, of the same kind. A read-only NumPy array's copy lies
// over immutable bytes, which NumPy refuses to make writeable again (an array owning its
// memory would let anyone turn writing back on).
nb::object own_copy(nb::handle array) {
  if (!is_numpy_array(array)) return array.attr("clone")();  // a torch tensor: dense, so the layout is kept
  if (nb::cast<bool>(array.attr("flags").attr("writeable"))) return array.attr("copy")();
  nb::object frombuffer = nb::module_::import_("numpy").attr("frombuffer");
  return frombuffer(array.attr("tobytes")(), array.attr("dtype")).attr("reshape")(array.attr("shape"));
}

CapturePayload payload_from_array(nb::handle given) {
  const char* call = "CapturePayload.from_array";
  if (is_numpy_masked_array(given))
    raise(ErrorKind::InvalidArgument, argument_label(call, "array") + " is a NumPy masked array: a payload would "
                                          "keep the values beneath its mask as if they were not masked; pass its "
                                          ".data, or .filled(value)");
  HostView view;
  const auto unkept_type = [&](const std::string& name) {
    raise(ErrorKind::InvalidArgument, argument_label(call, "array") + " holds " + name +
                                          " elements, which a payload cannot keep (it keeps " + element_type_names() + ")");
  };
  if (!nb::try_cast(checked_for_caster(given, argument_label(call, "array")), view, /*convert=*/false)) {
    // A contiguous NumPy array of a type DLPack cannot describe (longdouble, object, strings,
    // datetimes) is refused for its type, not as if it were no array.
    if (is_numpy_array(given) && nb::cast<bool>(given.attr("flags").attr("c_contiguous"))) {
      const nb::object dtype = given.attr("dtype");
      const std::string name = nb::cast<std::string>(nb::str(nb::handle(dtype)));
      if (!nb::cast<bool>(dtype.attr("isnative")))
        raise(ErrorKind::InvalidArgument,
              argument_label(call, "array") + " holds " + name +
                  " elements, in the byte order this machine does not use; pass them in its own (astype with the "
                  "native dtype)");
      unkept_type(name);
    }
    raise(ErrorKind::TypeMismatch, argument_label(call, "array") +
                                       " must be a contiguous host array (NumPy, or anything with __dlpack__), got " +
                                       type_name_of(given));
  }
  const nb::dlpack::dtype given_type = view.dtype();
  const DLDataType dtype{given_type.code, given_type.bits, given_type.lanes};
  const TensorElementType* type = find_element_type(dtype);
  if (!type) unkept_type(dl_dtype_name(dtype));
  CapturePayload p;
  p.kind = PayloadKind::tensor;
  std::optional<std::uint64_t> size = 1;
  bool empty = false;  // an empty extent empties the array, whatever the others' product would be
  for (std::size_t i = 0; i < view.ndim(); ++i) {
    if (view.shape(i) < 0)  // a producer's description is not trusted
      raise(ErrorKind::InvalidArgument, argument_label(call, "array") + " has a negative extent (" +
                                            std::to_string(view.shape(i)) + ") at axis " + std::to_string(i));
    p.shape.push_back(static_cast<std::uint64_t>(view.shape(i)));
    size = checked::mul(size, static_cast<std::uint64_t>(view.shape(i)));
    empty = empty || view.shape(i) == 0;
  }
  if (empty) size = 0;
  auto bytes = checked::mul(size, itemsize(type->core));
  if (!bytes) raise(ErrorKind::InvalidArgument, argument_label(call, "array") + " has more bytes than a uint64 holds");
  nb::object array = nb::borrow(given);
  if (holds_more_than(array, *bytes)) {
    array = own_copy(array);
    if (!nb::try_cast(array, view, /*convert=*/false))
      raise(ErrorKind::CaptureSession, std::string(call) + ": the copy of a view is not a contiguous host array");
  }
  auto storage = std::make_shared<PythonArrayStorage>();
  storage->dtype = view.dtype();
  storage->shape = p.shape;
  storage->original = std::move(array);
  storage->view = view;
  p.array.type = type->core;
  p.array.size = *size;
  p.array.data = view.data();
  p.array.storage = std::move(storage);
  return p;
}

// A fresh NumPy array holding a copy of `values` (the caller may keep it past the record).
template <class T, class Source>
nb::object numpy_copy(const std::vector<Source>& values, std::vector<std::size_t> shape = {}) {
  auto* data = new std::vector<T>(values.begin(), values.end());
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  if (shape.empty()) shape.push_back(data->size());
  nb::object array = nb::cast(nb::ndarray<nb::numpy, T>(data->data(), shape.size(), shape.data(), owner));
  if constexpr (std::is_same_v<T, std::int64_t>) {
    // The array comes typed 'long long', which NumPy prints as int64 but whose scalars are no
    // numpy.int64 where that is 'long' (Linux): viewed as NumPy's own int64, as the stubs say.
    static const nb::handle int64 = nb::object(nb::module_::import_("numpy").attr("int64")).release();
    array = array.attr("view")(int64);
  }
  return array;
}

// Counts and ids are read back as int64 arrays: one past 2**63 - 1 would come back negative.
void require_int64(const std::vector<std::uint64_t>& values, const char* call, const char* argument) {
  for (std::size_t i = 0; i < values.size(); ++i)
    if (values[i] > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      raise(ErrorKind::Overflow, std::string(call) + ": argument '" + argument + "' holds " + std::to_string(values[i]) +
                                     " at " + std::to_string(i) + ", past 2**63 - 1 (they are read back as int64)");
}

void deprecated(const char* message) {
  if (PyErr_WarnEx(PyExc_DeprecationWarning, message, 1) < 0) throw nb::python_error();
}

// An array's values, where they are now, as float64.
std::vector<double> array_numbers(const PayloadArray& kept) {
  const PayloadArray array = kept.current();
  std::vector<double> numbers(array.size);
  for (std::uint64_t i = 0; i < array.size; ++i) numbers[i] = array.number(i);
  return numbers;
}

nb::object tensor_value(const CapturePayload& p) {
  if (p.kind != PayloadKind::tensor) return nb::none();
  // The array itself (a Python object, read safely whatever its owner did to it since).
  if (auto* storage = dynamic_cast<const PythonArrayStorage*>(p.array.storage.get())) return storage->original;
  std::vector<std::size_t> shape(p.shape.begin(), p.shape.end());
  if (p.array.present())  // an array the core was given by other means: its numbers, as float64
    return numpy_copy<double>(array_numbers(p.array), shape);
  return numpy_copy<double>(p.values, p.values.size() == 0 && shape.empty() ? std::vector<std::size_t>{0} : shape);
}

// What `values` held before payloads were arrays: a tensor's numbers, a histogram's edges or
// candidates' scores, as a list of floats.
std::vector<double> legacy_values(const CapturePayload& p) {
  if (p.kind == PayloadKind::tensor && p.array.present()) return array_numbers(p.array);
  return p.values;
}

}  // namespace

void init_capture_payloads(nb::module_& m) {
  nb::class_<CapturePayload>(
      m, "CapturePayload",
      "What a transform produced (built by backends). On a payload, tensor / summary / histogram / candidates "
      "are its value (None for another kind); on the class they are the constructors backends have always used.")
      .def_static("from_array", &payload_from_array, nb::arg("array").none(),
                  nb::sig("def from_array(array: typing.Any) -> CapturePayload"),
                  "A tensor payload keeping `array` (a contiguous host NumPy array or torch tensor) in its own dtype "
                  "and shape; charged at its real bytes. It is kept, not copied: a later write to `array` shows in "
                  "the payload (pass a copy to keep its values as they are now, as the backends do). A view of a "
                  "larger buffer is kept as a copy of its own bytes. An array resized in place (a torch tensor's resize_, "
                  "NumPy's resize with refcheck=False) is read where its values are when read; once its shape or "
                  "dtype changed, reading its values (values, a record's to_json) raises CaptureSessionError, and "
                  "`tensor` gives the array as it is now.")
      .def_static("tensor",
                  [](nb::handle shape, nb::handle values) {
                    CapturePayload p;
                    p.kind = PayloadKind::tensor;
                    p.shape = argument<std::vector<std::uint64_t>>(shape, "CapturePayload.tensor", "shape");
                    p.values = argument<std::vector<double>>(values, "CapturePayload.tensor", "values");
                    // The values are read as an array of that shape: it must hold exactly them (an
                    // empty shape reads them flat).
                    if (const std::uint64_t elements = element_count(p.shape);
                        !p.shape.empty() && elements != p.values.size())
                      raise(ErrorKind::InvalidArgument,
                            "CapturePayload.tensor: argument 'shape' holds " +
                                (elements == std::numeric_limits<std::uint64_t>::max() ? std::string("2**64 - 1 or more")
                                                                                       : std::to_string(elements)) +
                                " elements, argument 'values' " + std::to_string(p.values.size()));
                    return p;
                  },
                  nb::arg("shape").none(), nb::arg("values").none(),
                  nb::sig("def tensor(shape: collections.abc.Sequence[int], values: collections.abc.Sequence[float]) "
                          "-> CapturePayload"),
                  "A float64 tensor payload from numbers (from_array keeps an array's own dtype).")
      .def_static("summary",
                  [](nb::handle count, nb::handle nonfinite, nb::handle min, nb::handle max, nb::handle mean,
                     nb::handle std) {
                    const char* call = "CapturePayload.summary";
                    CapturePayload p;
                    p.kind = PayloadKind::summary;
                    p.count = argument<std::uint64_t>(count, call, "count");
                    p.nonfinite = argument<std::uint64_t>(nonfinite, call, "nonfinite");
                    p.min = argument<double>(min, call, "min");
                    p.max = argument<double>(max, call, "max");
                    p.mean = argument<double>(mean, call, "mean");
                    p.std = argument<double>(std, call, "std");
                    return p;
                  },
                  nb::arg("count").none(), nb::arg("nonfinite").none(), nb::arg("min").none(), nb::arg("max").none(),
                  nb::arg("mean").none(), nb::arg("std").none(),
                  nb::sig("def summary(count: int, nonfinite: int, min: float, max: float, mean: float, std: float) "
                          "-> CapturePayload"))
      .def_static("histogram",
                  [](nb::handle edges, nb::handle counts) {
                    CapturePayload p;
                    p.kind = PayloadKind::histogram;
                    p.values = argument<std::vector<double>>(edges, "CapturePayload.histogram", "edges");
                    p.counts = argument<std::vector<std::uint64_t>>(counts, "CapturePayload.histogram", "counts");
                    require_int64(p.counts, "CapturePayload.histogram", "counts");
                    return p;
                  },
                  nb::arg("edges").none(), nb::arg("counts").none(),
                  nb::sig("def histogram(edges: collections.abc.Sequence[float], counts: collections.abc.Sequence[int]) "
                          "-> CapturePayload"))
      .def_static("candidates",
                  [](nb::handle ids, nb::handle scores) {
                    CapturePayload p;
                    p.kind = PayloadKind::candidates;
                    p.counts = argument<std::vector<std::uint64_t>>(ids, "CapturePayload.candidates", "ids");
                    require_int64(p.counts, "CapturePayload.candidates", "ids");
                    p.values = argument<std::vector<double>>(scores, "CapturePayload.candidates", "scores");
                    return p;
                  },
                  nb::arg("ids").none(), nb::arg("scores").none(),
                  nb::sig("def candidates(ids: collections.abc.Sequence[int], scores: collections.abc.Sequence[float]) "
                          "-> CapturePayload"))
      .def_prop_ro("kind", [](const CapturePayload& p) -> nb::object {
        if (p.kind == PayloadKind::none) return nb::none();
        return nb::str(to_string(p.kind));
      }, nb::for_getter(nb::sig("def kind(self, /) -> str | None")), "'tensor', 'summary', 'histogram' or 'candidates'; None for an empty payload.")
      .def_ro("shape", &CapturePayload::shape, "A tensor payload's shape as a list of ints (empty for other kinds).")
      .def_prop_ro("dtype", [](const CapturePayload& p) -> nb::object {
        if (p.kind != PayloadKind::tensor) return nb::none();
        return nb::str(p.array.present() ? to_string(p.array.type) : "float64");
      }, nb::for_getter(nb::sig("def dtype(self, /) -> str | None")),
         "A tensor payload's element type ('float16', 'int64', ...), else None.")
      .def_prop_ro("nbytes", &CapturePayload::retained_bytes,
                   "Bytes the payload's values occupy (a tensor payload's real bytes; 8 per number otherwise).")
      .def_prop_ro("_tensor", &tensor_value, nb::for_getter(nb::sig("def _tensor(self, /) -> typing.Any")))
      .def_prop_ro("bin_edges", [](const CapturePayload& p) -> nb::object {
        return p.kind == PayloadKind::histogram ? numpy_copy<double>(p.values) : nb::none();
      }, nb::for_getter(nb::sig("def bin_edges(self, /) -> numpy.typing.NDArray[numpy.float64] | None")),
         "A histogram's bin edges (float64), else None.")
      .def_prop_ro("candidate_ids", [](const CapturePayload& p) -> nb::object {
        return p.kind == PayloadKind::candidates ? numpy_copy<std::int64_t>(p.counts) : nb::none();
      }, nb::for_getter(nb::sig("def candidate_ids(self, /) -> numpy.typing.NDArray[numpy.int64] | None")),
         "Top candidates' ids (int64), best first, else None.")
      .def_prop_ro("scores", [](const CapturePayload& p) -> nb::object {
        return p.kind == PayloadKind::candidates ? numpy_copy<double>(p.values) : nb::none();
      }, nb::for_getter(nb::sig("def scores(self, /) -> numpy.typing.NDArray[numpy.float64] | None")),
         "Top candidates' scores (float64), best first, else None.")
      .def_prop_ro("stats", [](const CapturePayload& p) -> nb::object {
        if (p.kind != PayloadKind::summary) return nb::none();
        return numpy_copy<double>(std::vector<double>{p.min, p.max, p.mean, p.std});
      }, nb::for_getter(nb::sig("def stats(self, /) -> numpy.typing.NDArray[numpy.float64] | None")),
         "A summary's [min, max, mean, std] of its finite values (float64), else None.")
      .def_prop_ro("counts", [](const CapturePayload& p) -> nb::object {
        if (p.kind == PayloadKind::histogram) return numpy_copy<std::int64_t>(p.counts);
        deprecated("CapturePayload.counts holds histogram counts only; use candidate_ids for candidates");
        return nb::cast(p.counts);
      }, nb::for_getter(nb::sig("def counts(self, /) -> typing.Any")),
         "A histogram's counts per bin (int64). Deprecated elsewhere: on candidates it is their ids as a list.")
      .def_prop_ro("values", [](const CapturePayload& p) {
        deprecated("CapturePayload.values is deprecated: use tensor, bin_edges or scores");
        return legacy_values(p);
      }, "Deprecated: a tensor's numbers, a histogram's edges or candidates' scores, as a list of floats.")
      // A summary's statistics; None for other kinds, whose payload has none (a 0 would read as one).
      .def_prop_ro("count", [](const CapturePayload& p) { return summary_field(p, p.count); },
           "A summary's element count, finite or not (None for other kinds).")
      .def_prop_ro("nonfinite", [](const CapturePayload& p) { return summary_field(p, p.nonfinite); },
           "A summary's count of NaN and infinite elements (None for other kinds).")
      .def_prop_ro("min", [](const CapturePayload& p) { return summary_field(p, p.min); },
           "A summary's least finite value (None for other kinds).")
      .def_prop_ro("max", [](const CapturePayload& p) { return summary_field(p, p.max); },
           "A summary's greatest finite value (None for other kinds).")
      .def_prop_ro("mean", [](const CapturePayload& p) { return summary_field(p, p.mean); },
           "A summary's mean of the finite values (None for other kinds).")
      .def_prop_ro("std", [](const CapturePayload& p) { return summary_field(p, p.std); },
           "A summary's population standard deviation of the finite values (None for other kinds).")
      .def("__repr__", [](const CapturePayload& p) {
        std::string shape;
        for (auto extent : p.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(extent);
        switch (p.kind) {
          case PayloadKind::tensor:
            return "CapturePayload(tensor, dtype=" + std::string(p.array.present() ? to_string(p.array.type) : "float64") +
                   ", shape=[" + shape + "])";
          case PayloadKind::summary: return std::string("CapturePayload(summary, count=") + std::to_string(p.count) + ")";
          case PayloadKind::histogram: return "CapturePayload(histogram, bins=" + std::to_string(p.counts.size()) + ")";
          case PayloadKind::candidates: return "CapturePayload(candidates, count=" + std::to_string(p.counts.size()) + ")";
          case PayloadKind::none: break;
        }
        return std::string("CapturePayload(none)");
      });
}

}  // namespace lifecore::bindings
