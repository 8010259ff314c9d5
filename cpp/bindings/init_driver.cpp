#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <bit>
#include <limits>
#include <cstring>
#include <tuple>

#include "arguments.hpp"
#include "bindings.hpp"
#include "report_states.hpp"
#include "driver/backend_introspection.hpp"
#include "lifecore/checked.hpp"
#include "lifecore/driver/backends.hpp"
#include "lifecore/driver/driver.hpp"
#include "lifecore/driver/registry.hpp"

namespace lifecore::bindings {
namespace {

// A driver opened directly, below the runtime: the backend tests use it to exercise each
// vendor operation (and its error mapping) on its own. Every failure raises DriverError.
class VendorDriverHandle {
 public:
  explicit VendorDriverHandle(std::shared_ptr<driver::Driver> driver) : driver_(std::move(driver)) {}

  driver::Driver& get() {
    if (!driver_) raise(ErrorKind::Closed, "this driver was closed");
    return *driver_;
  }
  void close() { driver_.reset(); }

 private:
  std::shared_ptr<driver::Driver> driver_;
};

driver::ImageKind image_kind(const std::string& name) {
  driver::ImageKind kind{};
  if (driver::image_kind_from_name(name, &kind)) return kind;
  raise(ErrorKind::InvalidArgument, "unknown image kind '" + name + "'");
}

driver::CaptureMode capture_mode(const std::string& name) {
  driver::CaptureMode mode{};
  if (driver::capture_mode_from_name(name, &mode)) return mode;
  raise(ErrorKind::InvalidArgument, "unknown capture mode '" + name + "'");
}

driver::KernelArg kernel_arg(const std::string& kind, nb::handle value) {
  driver::KernelArg arg;
  if (!driver::arg_kind_from_name(kind, &arg.kind))
    raise(ErrorKind::InvalidArgument, "unknown argument kind '" + kind + "'");
  // Each value within its kind's range, or refused: a truncated u32 (2**32 + 2 read as 2), a
  // negative pointer or a finite double past float's range (inf, and undefined to convert)
  // would reach the kernel as another value.
  constexpr const char* call = "_Driver.launch";
  switch (arg.kind) {
    case driver::ArgKind::f32: {
      const double v = nb::cast<double>(value);
      const auto narrowed = checked::narrow_float(v);
      if (!narrowed) checked::float32_overflow(std::string(call) + ": argument 'args (f32)'", v);
      arg.bits = std::bit_cast<std::uint32_t>(*narrowed);
      break;
    }
    case driver::ArgKind::f64: arg.bits = std::bit_cast<std::uint64_t>(nb::cast<double>(value)); break;
    case driver::ArgKind::i32:
      arg.bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(
          int_argument(value, call, "args (i32)", std::numeric_limits<std::int32_t>::min(),
                       std::numeric_limits<std::int32_t>::max())));
      break;
    case driver::ArgKind::i64: arg.bits = static_cast<std::uint64_t>(int_argument(value, call, "args (i64)")); break;
    case driver::ArgKind::u32:
      arg.bits = uint_argument(value, call, "args (u32)", std::numeric_limits<std::uint32_t>::max());
      break;
    case driver::ArgKind::u64:
    case driver::ArgKind::pointer: arg.bits = uint_argument(value, call, "args (u64 or ptr)"); break;
  }
  return arg;
}

using Triple = std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>;
driver::Dim3 dim3(const Triple& t) { return {std::get<0>(t), std::get<1>(t), std::get<2>(t)}; }

void init_driver_diagnostics(nb::module_& m) {
  using driver::check;
  using H = VendorDriverHandle;
  using G = GilRelease;
  m.def("_driver_operations", &driver::operation_names,
        "Every driver operation's neutral name, in the driver interface's order (inject_fault's names).");
  m.def("_probe_symbols", [](const std::string& backend) {
        nb::dict out;
        for (const auto& [name, resolved] : driver::backend_symbols(backend)) out[name.c_str()] = resolved;
        return out;
      }, nb::sig("def _probe_symbols(backend: str, /) -> dict[str, bool]"),
      "Each entry of a backend's symbol table (a backend that loads a library) and whether it resolved.");
  m.def("_open_driver_probe", [](const std::string& backend, int ordinal) {
        std::shared_ptr<driver::Driver> driver;
        {
          GilRelease release;
          driver = driver::open_driver(backend, ordinal);
        }
        nb::dict out;
        out["backend"] = driver->backend().name;
        out["ordinal"] = driver->ordinal();
        out["hardware_graphs"] = driver->hardware_graphs();
        std::string reason;
        out["builtin_kernels"] = driver->builtin_kernels_available(&reason);
        out["builtin_kernels_reason"] = reason;
        return out;
      }, nb::arg("backend"), nb::arg("ordinal") = 0,
      nb::sig("def _open_driver_probe(backend: str, ordinal: int = 0) -> dict[str, typing.Any]"),
      "Opens one device of a backend the way Device(...) does, describes it and closes it "
      "(BackendUnavailableError when the backend cannot start).");

  nb::class_<H>(m, "_Driver", "A driver opened below the runtime (tests and diagnostics).")
      .def("close", &H::close)
      .def_prop_ro("backend", [](H& h) { return h.get().backend().name; })
      .def_prop_ro("hardware_graphs", [](H& h) { return h.get().hardware_graphs(); })
      .def("builtin_kernels_available", [](H& h) {
        std::string reason;
        bool available = h.get().builtin_kernels_available(&reason);
        return std::make_pair(available, reason);
      })
      .def("device_name", [](H& h) { std::string s; check(h.get().device_name(&s)); return s; }, nb::call_guard<G>())
      .def("driver_version", [](H& h) { int v = 0; check(h.get().driver_version(&v)); return v; }, nb::call_guard<G>())
      .def("mem_info", [](H& h) {
        std::size_t free_bytes = 0, total = 0;
        check(h.get().mem_info(&free_bytes, &total));
        return std::make_pair(free_bytes, total);
      }, nb::call_guard<G>())
      .def("stream_create", [](H& h) { driver::StreamHandle s{}; check(h.get().stream_create(&s)); return static_cast<std::uintptr_t>(s); }, nb::call_guard<G>())
      .def("stream_destroy", [](H& h, std::uintptr_t s) { check(h.get().stream_destroy(driver::StreamHandle{s})); }, nb::call_guard<G>())
      .def("stream_synchronize", [](H& h, std::uintptr_t s) { check(h.get().stream_synchronize(driver::StreamHandle{s})); }, nb::call_guard<G>())
      .def("stream_query", [](H& h, std::uintptr_t s) {
        driver::Status status = h.get().stream_query(driver::StreamHandle{s});
        if (status.code == driver::Code::not_ready) return false;
        check(status);
        return true;
      }, nb::call_guard<G>())
      .def("stream_native_handle", [](H& h, std::uintptr_t s) { return h.get().stream_native_handle(driver::StreamHandle{s}); })
      .def("event_create", [](H& h, bool timing) {
             driver::EventHandle e{};
             check(h.get().event_create(&e, timing ? driver::EventTiming::enabled : driver::EventTiming::disabled));
             return static_cast<std::uintptr_t>(e);
           }, nb::arg("timing") = true, nb::call_guard<G>())
      .def("event_record", [](H& h, std::uintptr_t e, std::uintptr_t s) { check(h.get().event_record(driver::EventHandle{e}, driver::StreamHandle{s})); }, nb::call_guard<G>())
      .def("event_synchronize", [](H& h, std::uintptr_t e) { check(h.get().event_synchronize(driver::EventHandle{e})); }, nb::call_guard<G>())
      .def("event_elapsed", [](H& h, std::uintptr_t a, std::uintptr_t b) {
        float ms = 0;
        check(h.get().event_elapsed(driver::EventHandle{a}, driver::EventHandle{b}, &ms));
        return ms;
      }, nb::call_guard<G>())
      .def("event_destroy", [](H& h, std::uintptr_t e) { check(h.get().event_destroy(driver::EventHandle{e})); }, nb::call_guard<G>())
      .def("event_record_native", [](H& h, std::uintptr_t e, std::uintptr_t native_stream) {
        check(h.get().event_record_native(driver::EventHandle{e}, native_stream));
      }, nb::call_guard<G>())
      .def("stream_capture_status_native", [](H& h, std::uintptr_t native_stream) {
        driver::CaptureStatus status{};
        check(h.get().stream_capture_status_native(native_stream, &status));
        return static_cast<int>(status);
      }, nb::call_guard<G>())
      .def("stream_wait_event", [](H& h, std::uintptr_t native_stream, std::uintptr_t e) {
        check(h.get().stream_wait_event(native_stream, driver::EventHandle{e}));
      }, nb::call_guard<G>())
      .def("pointer_device", [](H& h, driver::DevicePtr p) { int ordinal = -1; check(h.get().pointer_device(p, &ordinal)); return ordinal; }, nb::call_guard<G>())
      .def("mem_alloc", [](H& h, std::size_t n) { driver::DevicePtr p = 0; check(h.get().mem_alloc(n, &p)); return p; }, nb::call_guard<G>())
      .def("mem_free", [](H& h, driver::DevicePtr p) { check(h.get().mem_free(p)); }, nb::call_guard<G>())
      .def("mem_alloc_async", [](H& h, std::size_t n, std::uintptr_t s) {
        driver::DevicePtr p = 0;
        check(h.get().mem_alloc_async(n, driver::StreamHandle{s}, &p));
        return p;
      }, nb::call_guard<G>())
      .def("mem_free_async", [](H& h, driver::DevicePtr p, std::uintptr_t s) { check(h.get().mem_free_async(p, driver::StreamHandle{s})); }, nb::call_guard<G>())
      .def("memcpy_htod", [](H& h, driver::DevicePtr dst, nb::bytes data) {
        std::string copy(data.c_str(), data.size());
        GilRelease release;
        check(h.get().memcpy_htod(dst, copy.data(), copy.size()));
      })
      .def("memcpy_dtoh", [](H& h, driver::DevicePtr src, std::size_t n) {
        if (n > static_cast<std::size_t>(PY_SSIZE_T_MAX))
          raise(ErrorKind::Overflow, "_Driver.memcpy_dtoh: " + std::to_string(n) + " bytes are more than a bytes object holds");
        std::string out(n, '\0');
        {
          GilRelease release;
          check(h.get().memcpy_dtoh(out.data(), src, n));
        }
        return nb::bytes(out.data(), out.size());
      })
      .def("memcpy_dtod", [](H& h, driver::DevicePtr dst, driver::DevicePtr src, std::size_t n) { check(h.get().memcpy_dtod(dst, src, n)); }, nb::call_guard<G>())
      .def("memset_d32", [](H& h, driver::DevicePtr dst, std::uint32_t value, std::size_t count) { check(h.get().memset_d32(dst, value, count)); }, nb::call_guard<G>())
      .def("memset_d32_async", [](H& h, driver::DevicePtr dst, std::uint32_t value, std::size_t count, std::uintptr_t s) {
        check(h.get().memset_d32_async(dst, value, count, driver::StreamHandle{s}));
      }, nb::call_guard<G>())
      .def("module_load", [](H& h, const std::string& kind, nb::bytes image) {
        driver::ModuleImage module_image{image_kind(kind), std::string(image.c_str(), image.size())};
        driver::ModuleHandle module{};
        GilRelease release;
        check(h.get().module_load(module_image, &module));
        return static_cast<std::uintptr_t>(module);
      }, nb::arg("kind"), nb::arg("image") = nb::bytes(""))
      .def("module_unload", [](H& h, std::uintptr_t mod) { check(h.get().module_unload(driver::ModuleHandle{mod})); }, nb::call_guard<G>())
      .def("module_get_function", [](H& h, std::uintptr_t mod, const std::string& name) {
        driver::FunctionHandle f{};
        check(h.get().module_get_function(driver::ModuleHandle{mod}, name, &f));
        return static_cast<std::uintptr_t>(f);
      }, nb::call_guard<G>())
      .def("function_param_sizes", [](H& h, std::uintptr_t f) {
        std::vector<std::size_t> sizes;
        check(h.get().function_param_sizes(driver::FunctionHandle{f}, &sizes));
        return sizes;
      }, nb::call_guard<G>())
      .def("launch", [](H& h, std::uintptr_t f, Triple grid, Triple block, std::uintptr_t stream, nb::list args,
                        std::uint32_t shared_bytes) {
        std::vector<driver::KernelArg> kernel_args;
        // A snapshot: converting a value may run Python code that changes the list.
        for (nb::handle item : sequence_snapshot(args, "launch: argument 'args'")) {
          auto pair = nb::cast<nb::tuple>(item);
          kernel_args.push_back(kernel_arg(nb::cast<std::string>(pair[0]), pair[1]));
        }
        GilRelease release;
        check(h.get().launch_kernel(driver::FunctionHandle{f}, dim3(grid), dim3(block), shared_bytes,
                                    driver::StreamHandle{stream}, kernel_args));
      }, nb::arg("function"), nb::arg("grid"), nb::arg("block"), nb::arg("stream"), nb::arg("args"), nb::arg("shared_bytes") = 0,
      nb::sig("def launch(self, function: int, grid: tuple[int, int, int], block: tuple[int, int, int], stream: int, "
              "args: list[tuple[str, typing.Any]], shared_bytes: int = 0) -> None"))
      .def("begin_capture", [](H& h, std::uintptr_t s, const std::string& mode) {
        auto native_mode = capture_mode(mode);
        GilRelease release;
        check(h.get().stream_begin_capture(driver::StreamHandle{s}, native_mode));
      }, nb::arg("stream"), nb::arg("mode") = "global")
      .def("end_capture", [](H& h, std::uintptr_t s) {
        driver::GraphHandle g{};
        check(h.get().stream_end_capture(driver::StreamHandle{s}, &g));
        return static_cast<std::uintptr_t>(g);
      }, nb::call_guard<G>())
      .def("capture_info", [](H& h, std::uintptr_t s) {
        driver::CaptureStatus status{};
        std::uint64_t id = 0;
        check(h.get().stream_capture_info(driver::StreamHandle{s}, &status, &id));
        return std::make_pair(static_cast<int>(status), id);
      }, nb::call_guard<G>())
      .def("exchange_capture_mode", [](H& h, const std::string& mode) {
        driver::CaptureMode native_mode = capture_mode(mode);
        check(h.get().thread_exchange_capture_mode(&native_mode));
        return static_cast<int>(native_mode);
      })
      .def("graph_node_counts", [](H& h, std::uintptr_t g) {
        driver::GraphNodeCounts counts;
        check(h.get().graph_node_counts(driver::GraphHandle{g}, &counts));
        return std::make_tuple(counts.total, counts.mem_alloc, counts.mem_free);
      }, nb::call_guard<G>())
      .def("graph_instantiate", [](H& h, std::uintptr_t g) {
        driver::GraphExecHandle e{};
        check(h.get().graph_instantiate(driver::GraphHandle{g}, &e));
        return static_cast<std::uintptr_t>(e);
      }, nb::call_guard<G>())
      .def("graph_upload", [](H& h, std::uintptr_t e, std::uintptr_t s) { check(h.get().graph_upload(driver::GraphExecHandle{e}, driver::StreamHandle{s})); }, nb::call_guard<G>())
      .def("graph_launch", [](H& h, std::uintptr_t e, std::uintptr_t s) { check(h.get().graph_launch(driver::GraphExecHandle{e}, driver::StreamHandle{s})); }, nb::call_guard<G>())
      .def("graph_exec_update", [](H& h, std::uintptr_t e, std::uintptr_t g) {
        driver::GraphUpdateResult result{};
        check(h.get().graph_exec_update(driver::GraphExecHandle{e}, driver::GraphHandle{g}, &result));
        return static_cast<int>(result);
      }, nb::call_guard<G>())
      .def("graph_destroy", [](H& h, std::uintptr_t g) { check(h.get().graph_destroy(driver::GraphHandle{g})); }, nb::call_guard<G>())
      .def("graph_exec_destroy", [](H& h, std::uintptr_t e) { check(h.get().graph_exec_destroy(driver::GraphExecHandle{e})); }, nb::call_guard<G>());
  m.def("_open_driver", [](const std::string& backend, int ordinal) {
        GilRelease release;
        return std::make_shared<H>(driver::open_driver(backend, ordinal));
      }, nb::arg("backend"), nb::arg("ordinal") = 0,
      "Opens one device of a backend below the runtime (tests and diagnostics only).");
  // The names before the driver floor was called by its name; kept so older scripts still run.
  m.attr("_open_vendor_driver") = m.attr("_open_driver");
  m.attr("_VendorDriver") = m.attr("_Driver");
}

}  // namespace

void init_driver(nb::module_& m) {
  using driver::BackendInfo;
  nb::class_<BackendInfo>(m, "BackendInfo", "What one backend can do on this machine.")
      .def_ro("name", &BackendInfo::name, "The backend's registered name")
      .def_ro("available", &BackendInfo::available, "Whether Device(name) can open a device here")
      .def_ro("reason", &BackendInfo::reason, "Why not, when unavailable; notes otherwise")
      .def_ro("driver_version", &BackendInfo::driver_version, "Driver version (0 when unknown)")
      .def_ro("device_count", &BackendInfo::device_count, "Number of devices seen")
      .def_ro("device_name", &BackendInfo::device_name, "Name of device 0, when there is one")
      .def_ro("library", &BackendInfo::library, "The shared library loaded, when any")
      .def_ro("dlpack_device_type", &BackendInfo::dlpack_device_type,
              "DLPack's device type for the backend's memory (kDLCPU=1, kDLCUDA=2, kDLROCM=10)")
      .def_ro("cuda_array_interface", &BackendInfo::cuda_array_interface,
              "Whether the backend's buffers can offer __cuda_array_interface__")
      .def_ro("torch_device", &BackendInfo::torch_device, "torch's device string for the backend's memory")
      .def_ro("code_object_kinds", &BackendInfo::code_object_kinds,
              "The module image kinds the backend loads ('builtin', 'ptx', 'cubin', 'fatbin', 'code_object')")
      .def_ro("emulated", &BackendInfo::emulated,
              "Whether the backend is an emulated device on host memory that offers fault injection and the test hooks")
      .def("__getstate__", &get_report_state<BackendInfo>, nb::sig(report_getstate_sig), report_getstate_doc)
      .def("__setstate__", &set_report_state<BackendInfo>, nb::arg("state"), report_setstate_doc)
      .def("__repr__", [](const BackendInfo& info) {
        return "BackendInfo(name='" + info.name + "', available=" + (info.available ? "True" : "False") +
               ", reason='" + info.reason + "')";
      });
  m.def("backends", &driver::list_backends, nb::call_guard<GilRelease>(),
        "Every registered backend, in the registry's order, with its availability and the reason.");
  m.def("registered_backends", &driver::registered_backend_names,
        "The registered backends' names, in the registry's order (without probing them).");
  m.def("status_codes", [] {
        std::vector<std::string> names;
        for (driver::Code code : driver::all_codes()) names.emplace_back(driver::code_name(code));
        return names;
      }, "lifecore's own status codes (DriverError.lifecore_status), in order.");
  m.def("driver_operations", &driver::operation_names,
        "Names of the driver operations (the names Device.inject_fault accepts).");
  init_driver_diagnostics(m);
}

}  // namespace lifecore::bindings
