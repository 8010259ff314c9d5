// lifecore.Module: user kernels from PTX text or a binary image. Translation only; the checks
// live in runtime/module.cpp.
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "lifecore/error.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/runtime/module.hpp"

namespace lifecore::bindings {

void init_runtime_modules(nb::module_& m) {
  using namespace nb::literals;
  using runtime::Device;
  using runtime::Module;

  nb::class_<Module>(m, "Module",
                     "User kernels loaded on one device: Module.from_ptx(device, text) or\n"
                     "Module.from_image(device, data). module.function(name, params) gives a Kernel for\n"
                     "Stream.launch. A context manager that unloads it; also unloaded on the last reference\n"
                     "(of the module and its kernels) and when the device closes.")
      .def_static("from_ptx",
                  [](std::shared_ptr<Device> device, const std::string& text) {
                    GilRelease release;  // the driver's JIT can take a while
                    return Module::from_ptx(device, text);
                  },
                  "device"_a, "text"_a,
                  "Loads PTX text (JIT-compiled by the driver). A PTX that does not compile raises DriverError\n"
                  "naming the call, with the JIT's log in the message.")
      .def_static("from_image",
                  [](std::shared_ptr<Device> device, nb::bytes data) {
                    std::string bytes(static_cast<const char*>(data.data()), data.size());
                    GilRelease release;
                    return Module::from_image(device, std::move(bytes));
                  },
                  "device"_a, "data"_a,
                  "Loads a cubin, a fat binary or a HIP code object (the kind comes from the backend and\n"
                  "the magic bytes).")
      .def("function", &Module::function, "name"_a, "params"_a = nb::none(),
           nb::sig("def function(self, name: str, params: collections.abc.Sequence[str] | None = None) -> Kernel"),
           "The kernel `name`. params: its parameter kinds ('u32', 'f32', 'ptr', ..., or 'name: kind'; 'const ptr'\n"
           "for a pointer the kernel only reads, where a read-only tensor may then be passed);\n"
           "checked against the driver's parameter sizes where it can tell them, inferred from them\n"
           "(8 bytes: ptr, 4 bytes: u32) when omitted, and required where the driver cannot tell.")
      .def("unload", &Module::unload, nb::call_guard<GilRelease>(),
           "Unloads the module: later launches of its kernels raise ClosedError (idempotent).")
      .def_prop_ro("alive", &Module::alive, "False once unloaded or once its device closed")
      .def_prop_ro("device", &Module::device, "The Device the module was loaded on")
      .def_prop_ro("kind", [](const Module& mod) { return std::string(mod.kind_name()); },
                   "'ptx', 'cubin', 'fatbin' or 'code_object'")
      .def("__enter__",
           [](std::shared_ptr<Module> mod) {
             if (!mod->alive()) refuse_ended_enter("Module", "the module is unloaded");
             return mod;
           })
      .def("__exit__",
           [](Module& mod, nb::handle, nb::handle, nb::handle) {
             GilRelease release;
             mod.unload();
           },
           "exc_type"_a.none(), "exc"_a.none(), "tb"_a.none())
      .def("__repr__", [](const Module& mod) {
        return std::string("Module(kind='") + mod.kind_name() + "'" + (mod.alive() ? "" : ", unloaded") + ")";
      });
}

}  // namespace lifecore::bindings
