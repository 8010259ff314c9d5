// The backend registry over the built-in backends: every entry is complete, an unknown name
// is refused with the list of names, a second registration under a taken name (or "auto",
// or an incomplete descriptor) is refused and registers nothing, and each backend's status
// naming maps every lifecore code to a native one and back. The emulated role is held by a
// backend that is always available and whose driver offers fault injection.
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "lifecore/driver/backends.hpp"
#include "lifecore/driver/registry.hpp"
#include "test_support.hpp"

using namespace lifecore;
using namespace lifecore::driver;
using namespace lifecore::test_support;

namespace {

void every_entry_is_complete() {
  const auto backends = registered_backends();
  CHECK(backends.size() >= 3);
  std::set<std::string> names;
  for (const auto* d : backends) {
    names.insert(d->name);
    CHECK(!d->name.empty() && d->probe && d->open);
    CHECK(!d->code_object_kinds.empty() && !d->torch_device.empty() && d->dlpack_device_type > 0);
    CHECK(find_backend(d->name) == d && &backend_descriptor(d->name) == d);
  }
  CHECK(names.size() == backends.size());
  CHECK(registered_backend_names().size() == backends.size());
  const auto infos = list_backends();
  CHECK(infos.size() == backends.size());
  for (std::size_t i = 0; i < infos.size() && i < backends.size(); ++i) {
    CHECK(infos[i].name == backends[i]->name);
    CHECK(infos[i].torch_device == backends[i]->torch_device);
    CHECK(infos[i].code_object_kinds.size() == backends[i]->code_object_kinds.size());
  }
}

void an_unknown_name_is_refused_with_the_names() {
  try {
    open_driver("vulkan", 0);
    CHECK(false);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::InvalidArgument);
    CHECK(contains(e.what(), "'vulkan'") && contains(e.what(), "'auto'"));
    for (const auto& name : registered_backend_names()) CHECK(contains(e.what(), "'" + name + "'"));
  }
  CHECK(find_backend("vulkan") == nullptr);
  CHECK(error_of([] { (void)backend_descriptor(""); }) == ErrorKind::InvalidArgument);
  CHECK(error_of([] { open_driver(registered_backend_names().front(), -1); }) == ErrorKind::InvalidArgument);
}

void bad_registrations_are_refused_and_change_nothing() {
  const std::size_t before = registered_backends().size();
  const BackendDescriptor& first = *registered_backends().front();
  BackendDescriptor copy = first;  // complete, but under a taken name
  CHECK(error_of([&] { register_backend(copy); }) == ErrorKind::InvalidArgument);
  copy.name = "auto";
  CHECK(error_of([&] { register_backend(copy); }) == ErrorKind::InvalidArgument);
  copy.name = "";
  CHECK(error_of([&] { register_backend(copy); }) == ErrorKind::InvalidArgument);
  copy.name = "incomplete";
  copy.naming.sticky = nullptr;
  CHECK(error_of([&] { register_backend(copy); }) == ErrorKind::InvalidArgument);
  copy = first;
  copy.name = "incomplete";
  copy.open = nullptr;
  CHECK(error_of([&] { register_backend(copy); }) == ErrorKind::InvalidArgument);
  // Names the tooling cannot address ("a,b" lists, "name/hardware" targets, environment
  // variables), the reserved "host", and a descriptor that loads nothing.
  for (const char* name : {"v,gpu", "v/hardware", " v", "AUTO", "host", "9v", "v-1"}) {
    copy = first;
    copy.name = name;
    CHECK(error_of([&] { register_backend(copy); }) == ErrorKind::InvalidArgument);
  }
  copy = first;
  copy.name = "nothing_to_load";
  copy.code_object_kinds.clear();
  CHECK(error_of([&] { register_backend(copy); }) == ErrorKind::InvalidArgument);
  CHECK(registered_backends().size() == before);
  CHECK(find_backend("incomplete") == nullptr);
}

// A probe that throws breaks its promise; it makes its backend unavailable, with why, and leaves
// every other backend listed (it made list_backends() throw for every caller).
void a_probe_that_throws_is_its_backend_unavailable() {
  BackendDescriptor copy = *registered_backends().front();
  copy.name = "exploding_probe";
  copy.emulated = false;
  copy.auto_priority = -1000;  // never auto's choice
  copy.probe = []() -> BackendInfo { throw std::runtime_error("probe exploded"); };
  register_backend(copy);
  const auto infos = list_backends();
  CHECK(infos.size() == registered_backends().size());
  bool seen = false;
  for (const auto& info : infos) {
    if (info.name != "exploding_probe") continue;
    seen = true;
    CHECK(!info.available && contains(info.reason, "probe exploded"));
    CHECK(info.code_object_kinds.size() == copy.code_object_kinds.size());
  }
  CHECK(seen);
}

// Each backend's naming: every lifecore code has a native number that maps back to it, under
// a distinct name; success is native 0; an unknown native number is Code::unknown, still named.
// HIP has no not_permitted (800 is no hipError_t): it is reported as HIP's unknown.
void status_mapping_round_trips_per_backend() {
  for (const auto* d : registered_backends()) {
    const StatusNaming& n = d->naming;
    std::set<int> natives;
    std::set<std::string> names;
    std::size_t lacking = 0;
    for (Code code : all_codes()) {
      const int native = n.native(code);
      if (d->name == "hip" && code == Code::not_permitted) {
        CHECK(native == n.native(Code::unknown) && n.code(native) == Code::unknown);
        ++lacking;
        continue;
      }
      natives.insert(native);
      names.insert(n.name(native));
      if (n.code(native) != code) std::fprintf(stderr, "  %s: %s\n", d->name.c_str(), code_name(code));
      CHECK(n.code(native) == code);
      Status s = local_status(n, code, "call");
      CHECK(s.code == code && s.native_code == native && s.name == n.name(native) && s.ok() == (code == Code::success));
      CHECK(native_status(n, native, "call").code == code);
    }
    CHECK(natives.size() + lacking == all_codes().size() && names.size() + lacking == all_codes().size());
    CHECK(n.native(Code::success) == 0);
    CHECK(n.code(123456) == Code::unknown && !n.name(123456).empty());
    CHECK(native_status(n, 123456, "call").code == Code::unknown && !native_status(n, 123456, "call").ok());
    CHECK(n.sticky(n.native(Code::illegal_address)) && !n.sticky(n.native(Code::invalid_value)));
  }
}

void code_names_round_trip() {
  for (Code code : all_codes()) {
    Code back{};
    CHECK(code_from_name(code_name(code), &back) && back == code);
    CHECK(!code_description(code).empty());
  }
  Code unused{};
  CHECK(!code_from_name("no_such_code", &unused));
  CHECK(std::string(code_name(Code::capture_invalidated)) == "capture_invalidated");
}

void auto_opens_the_available_backend_of_highest_priority() {
  const BackendDescriptor* best = nullptr;
  for (const auto* d : registered_backends())
    if ((best == nullptr || d->auto_priority > best->auto_priority) && d->probe().available) best = d;
  CHECK(best != nullptr);
  if (best == nullptr) return;
  CHECK(&open_driver("auto", 0)->backend() == best);
}

void image_kinds_by_name() {
  for (ImageKind kind : {ImageKind::builtin, ImageKind::ptx, ImageKind::cubin, ImageKind::fatbin, ImageKind::code_object}) {
    ImageKind back{};
    CHECK(image_kind_from_name(image_kind_name(kind), &back) && back == kind);
  }
  ImageKind unused{};
  CHECK(!image_kind_from_name("elf", &unused));
}

void the_emulated_backend_offers_the_test_hooks() {
  const std::string name = emulated_backend();
  const BackendDescriptor& emulated = backend_descriptor(name);
  CHECK(emulated.emulated);
  CHECK(emulated.probe().available);
  CHECK(open_driver(name, 0)->fault_injection() != nullptr);
  // The first emulated backend in the registry's order, and no other is chosen.
  for (const auto* d : registered_backends()) {
    if (!d->emulated) continue;
    CHECK(d == &emulated);
    break;
  }
}

}  // namespace

int main() {
  every_entry_is_complete();
  an_unknown_name_is_refused_with_the_names();
  bad_registrations_are_refused_and_change_nothing();
  status_mapping_round_trips_per_backend();
  code_names_round_trip();
  auto_opens_the_available_backend_of_highest_priority();
  image_kinds_by_name();
  the_emulated_backend_offers_the_test_hooks();
  a_probe_that_throws_is_its_backend_unavailable();  // last: it registers a backend for good
  return finish("driver_registry_test");
}
