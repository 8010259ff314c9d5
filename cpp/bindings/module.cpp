// lifecore._core: one submodule per lifecycle (runtime, sequence, capture) and one for the
// driver floor beneath them; errors and the call guard are shared, at the top.
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "bindings.hpp"

namespace lifecore::bindings {
void init_call_guard(nb::module_& m);  // call_guard.cpp: used by the package at import
void init_interrupt_guard(nb::module_& m);  // interrupt_guard.cpp: lifecore.torch's cleanup

namespace {

// The names these areas had at the top before they got submodules (lifecore._core.Device,
// lifecore._core._open_driver, ...) stay there: the same objects under both names.
void keep_flat_names(nb::module_& top, nb::module_& area) {
  for (auto [key, value] : nb::borrow<nb::dict>(area.attr("__dict__"))) {
    std::string name = nb::cast<std::string>(key);
    if (name.starts_with("__") || nb::hasattr(top, name.c_str())) continue;
    top.attr(name.c_str()) = value;
  }
}

void init_module(nb::module_& m) {
  m.doc() = "lifecore's C++ core (use the lifecore package, not this module)";
  // At interpreter exit, objects another library still holds (a torch tensor keeps the
  // buffer it was imported from, and garbage in cycles is never collected) would be reported
  // as leaks; the report is for lifecore's developers, who ask for it.
  const char* leaks = std::getenv("LIFECORE_LEAK_WARNINGS");
  nb::set_leak_warnings(leaks != nullptr && leaks[0] != '\0' && leaks[0] != '0');
  init_errors(m);
  nb::module_ driver = m.def_submodule("driver", "The driver floor: backends, driver operations, diagnostics");
  init_driver(driver);
  nb::module_ runtime = m.def_submodule("runtime", "Graph capture on a stream: devices, streams, buffers, graphs");
  init_runtime(runtime);
  nb::module_ sequence = m.def_submodule("sequence", "Sequence sessions, their KV backing and capacity admission");
  init_sequence(sequence);
  nb::module_ capture = m.def_submodule("capture", "Bounded activation capture, interventions and MoE routing");
  init_capture(capture);
  for (nb::module_* area : {&driver, &runtime, &sequence}) keep_flat_names(m, *area);
  init_interrupt_guard(m);
  init_call_guard(m);
}

}  // namespace
}  // namespace lifecore::bindings

NB_MODULE(_core, m) { lifecore::bindings::init_module(m); }
