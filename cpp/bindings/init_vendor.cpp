#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "vendor/backends.hpp"
#include "vendor/driver.hpp"

namespace lifecore::bindings {

void init_vendor(nb::module_& m) {
  using vendor::BackendInfo;
  nb::class_<BackendInfo>(m, "BackendInfo", "What one backend can do on this machine.")
      .def_ro("name", &BackendInfo::name, "'mock', 'cuda' or 'hip'")
      .def_ro("available", &BackendInfo::available, "Whether Device(name) can open a device here")
      .def_ro("reason", &BackendInfo::reason, "Why not, when unavailable; notes otherwise")
      .def_ro("driver_version", &BackendInfo::driver_version, "Driver version (0 when unknown)")
      .def_ro("device_count", &BackendInfo::device_count, "Number of devices seen")
      .def_ro("device_name", &BackendInfo::device_name, "Name of device 0, when there is one")
      .def_ro("library", &BackendInfo::library, "The shared library loaded, when any")
      .def("__repr__", [](const BackendInfo& info) {
        return "BackendInfo(name='" + info.name + "', available=" + (info.available ? "True" : "False") +
               ", reason='" + info.reason + "')";
      });
  m.def("backends", &vendor::list_backends, nb::call_guard<nb::gil_scoped_release>(),
        "Every backend (mock, cuda, hip) with its availability and the reason.");
  m.def("driver_operations", &vendor::operation_names,
        "Names of the driver operations (the names Device.inject_fault accepts).");
}

}  // namespace lifecore::bindings
