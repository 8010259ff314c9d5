#include "report_states.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nanobind/stl/string.h>

#include "arguments.hpp"
#include "bindings.hpp"
#include "lifecore/error.hpp"

namespace lifecore::bindings {
namespace {

using namespace lifecore::sequence;

constexpr std::uint64_t max_u32 = std::numeric_limits<std::uint32_t>::max();
constexpr std::int64_t max_int = std::numeric_limits<int>::max();

// Reads the fields of one report's state, each named as __getstate__ returns it, so an error
// says which field is wrong: "CapacitySnapshot.__setstate__: argument 'state[1]
// (active_sequences)' ...".
class StateReader {
 public:
  StateReader(nb::handle state, const char* report, std::initializer_list<const char*> names)
      : StateReader(state, std::string(report) + ".__setstate__", std::string(), names) {}

  std::uint64_t count(std::size_t i, std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) const {
    return uint_argument(state_[i], call_.c_str(), label(i).c_str(), max);
  }
  std::optional<std::uint64_t> optional_count(std::size_t i) const {
    if (state_[i].is_none()) return std::nullopt;
    return count(i);
  }
  int small_int(std::size_t i) const {
    return static_cast<int>(int_argument(state_[i], call_.c_str(), label(i).c_str(), 0, max_int));
  }
  bool flag(std::size_t i) const { return bool_argument(state_[i], call_.c_str(), label(i).c_str()); }
  std::string text(std::size_t i) const { return str_argument(state_[i], call_.c_str(), label(i).c_str()); }
  // An instance of bound class T, as a value.
  template <class T>
  T value(std::size_t i, const char* expected) const {
    return object_argument<T>(state_[i], call_.c_str(), label(i).c_str(), expected);
  }
  // A member of bound enum T (its int value is not one).
  template <class T>
  T member(std::size_t i, const char* expected) const {
    T out{};
    if (!nb::try_cast<T>(state_[i], out, /*convert=*/false))
      raise(ErrorKind::TypeMismatch, field(i) + " must be " + expected + ", got " + type_name_of(state_[i]));
    return out;
  }
  // A tuple or list, as its items (held: an item's __index__ could change a list as it is read).
  std::vector<nb::object> items(std::size_t i) const {
    const nb::handle h = state_[i];
    if (!PyTuple_Check(h.ptr()) && !PyList_Check(h.ptr()))
      raise(ErrorKind::TypeMismatch, field(i) + " must be a tuple, got " + type_name_of(h));
    std::vector<nb::object> out;
    for (nb::handle item : h) out.push_back(nb::borrow(item));
    return out;
  }
  // The reader of item `k` of field `i`, itself a tuple of `names`.
  StateReader item(std::size_t i, std::size_t k, nb::handle h, std::initializer_list<const char*> names) const {
    return StateReader(h, call_, item_label(i, k), names);
  }
  template <class T>
  T item_value(std::size_t i, std::size_t k, nb::handle h, const char* expected) const {
    return object_argument<T>(h, call_.c_str(), item_label(i, k).c_str(), expected);
  }
  std::string item_text(std::size_t i, std::size_t k, nb::handle h) const {
    return str_argument(h, call_.c_str(), item_label(i, k).c_str());
  }
  [[noreturn]] void refuse(const std::string& why) const {
    raise(ErrorKind::InvalidArgument, call_ + ": " + why + " (not a report lifecore could have made)");
  }

 private:
  StateReader(nb::handle state, const std::string& call, const std::string& prefix,
              std::initializer_list<const char*> names)
      : call_(call), prefix_(prefix), names_(names) {
    if (!PyTuple_Check(state.ptr()) || static_cast<std::size_t>(PyTuple_Size(state.ptr())) != names_.size())
      raise(ErrorKind::TypeMismatch, argument_label(call_.c_str(), base().c_str()) + " must be a tuple of " +
                                         std::to_string(names_.size()) + " fields" +
                                         (prefix_.empty() ? ", as __getstate__() returns" : "") + ", got " +
                                         describe(state));
    state_ = nb::borrow<nb::tuple>(state);
  }
  static std::string describe(nb::handle h) {
    if (PyTuple_Check(h.ptr())) return "a tuple of " + std::to_string(PyTuple_Size(h.ptr()));
    return type_name_of(h);
  }
  // The state itself, or the item of an enclosing state this reader reads (its label already
  // starts with "state").
  std::string base() const { return prefix_.empty() ? "state" : prefix_; }
  std::string label(std::size_t i) const { return base() + "[" + std::to_string(i) + "] (" + names_[i] + ")"; }
  std::string item_label(std::size_t i, std::size_t k) const { return label(i) + "[" + std::to_string(k) + "]"; }
  std::string field(std::size_t i) const { return argument_label(call_.c_str(), label(i).c_str()); }

  std::string call_;
  std::string prefix_;
  std::vector<const char*> names_;
  nb::tuple state_;
};

nb::tuple tuple_of(const std::vector<nb::object>& items) {
  nb::tuple out = nb::steal<nb::tuple>(PyTuple_New(static_cast<Py_ssize_t>(items.size())));
  if (!out.is_valid()) throw nb::python_error();
  for (std::size_t i = 0; i < items.size(); ++i)
    if (PyTuple_SetItem(out.ptr(), static_cast<Py_ssize_t>(i), nb::object(items[i]).release().ptr()) != 0)
      throw nb::python_error();
  return out;
}

template <class T, class F>
nb::tuple tuple_map(const std::vector<T>& values, F&& f) {
  std::vector<nb::object> items;
  items.reserve(values.size());
  for (const T& v : values) items.push_back(f(v));
  return tuple_of(items);
}

}  // namespace

// ---- DomainUsage ---------------------------------------------------------------------------

nb::tuple report_state(const DomainUsage& u) {
  return nb::make_tuple(u.name, u.used_bytes, u.total_bytes, u.maximum_bytes, u.epoch);
}

template <>
DomainUsage report_from_state<DomainUsage>(nb::handle state) {
  const StateReader r(state, "DomainUsage", {"name", "used_bytes", "total_bytes", "maximum_bytes", "epoch"});
  DomainUsage u{r.text(0), r.count(1), r.count(2), r.count(3), r.count(4)};
  // What a coordinator refuses to be made with: a domain without a name, or one that can never
  // hold a page (a page is at least a byte).
  if (u.name.empty()) r.refuse("a domain needs a name");
  if (u.maximum_bytes == 0) r.refuse("maximum_bytes is 0: the domain could never hold a page");
  if (u.used_bytes > u.total_bytes)
    r.refuse("used_bytes (" + std::to_string(u.used_bytes) + ") exceeds total_bytes (" + std::to_string(u.total_bytes) + ")");
  if (u.total_bytes > u.maximum_bytes)
    r.refuse("total_bytes (" + std::to_string(u.total_bytes) + ") exceeds maximum_bytes (" +
             std::to_string(u.maximum_bytes) + ")");
  if (u.epoch == 0) r.refuse("epoch is 0 (a coordinator's epochs start at 1)");
  return u;
}

// ---- CapacitySnapshot ----------------------------------------------------------------------

nb::tuple report_state(const CapacitySnapshot& s) {
  nb::tuple domains = tuple_map(s.domains, [](const DomainUsage& u) { return nb::cast(u, nb::rv_policy::copy); });
  return nb::make_tuple(domains, s.active_sequences, s.max_active_sequences, s.slots_epoch, s.release_epoch,
                        s.physical_epoch);
}

template <>
CapacitySnapshot report_from_state<CapacitySnapshot>(nb::handle state) {
  const StateReader r(state, "CapacitySnapshot", {"domains", "active_sequences", "max_active_sequences", "slots_epoch",
                                                  "release_epoch", "physical_epoch"});
  CapacitySnapshot s;
  std::set<std::string> names;
  const std::vector<nb::object> domains = r.items(0);
  for (std::size_t k = 0; k < domains.size(); ++k) {
    s.domains.push_back(r.item_value<DomainUsage>(0, k, domains[k], "a DomainUsage"));
    if (!names.insert(s.domains.back().name).second) r.refuse("domain '" + s.domains.back().name + "' appears twice");
  }
  s.active_sequences = static_cast<std::uint32_t>(r.count(1, max_u32));
  s.max_active_sequences = static_cast<std::uint32_t>(r.count(2, max_u32));
  if (s.active_sequences > s.max_active_sequences)
    r.refuse("active_sequences (" + std::to_string(s.active_sequences) + ") exceeds max_active_sequences (" +
             std::to_string(s.max_active_sequences) + ")");
  s.slots_epoch = r.count(3);
  s.release_epoch = r.count(4);
  s.physical_epoch = r.count(5);
  if (s.slots_epoch == 0 || s.release_epoch == 0 || s.physical_epoch == 0)
    r.refuse("an epoch is 0 (a coordinator's epochs start at 1)");
  if (s.domains.empty()) r.refuse("it has no domains (a coordinator has at least one)");
  if (s.max_active_sequences == 0) r.refuse("max_active_sequences is 0 (a coordinator admits at least one)");
  return s;
}

// ---- CapacityDemand ------------------------------------------------------------------------

nb::tuple report_state(const CapacityDemand& d) {
  nb::tuple domains = tuple_map(d.domains, [](const DomainDemand& dd) {
    return nb::object(nb::make_tuple(dd.domain_index, dd.domain_name, dd.bytes));
  });
  return nb::make_tuple(d.sequences, d.tokens, d.pages, domains);
}

template <>
CapacityDemand report_from_state<CapacityDemand>(nb::handle state) {
  const StateReader r(state, "CapacityDemand", {"sequences", "tokens", "pages", "domains"});
  CapacityDemand d;
  d.sequences = static_cast<std::uint32_t>(r.count(0, 1));  // 1 for an admission, 0 for an extension
  d.tokens = r.count(1, static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));  // as every token count
  d.pages = r.count(2);
  std::set<std::string> names;
  std::set<std::uint32_t> indices;
  const std::vector<nb::object> domains = r.items(3);
  for (std::size_t k = 0; k < domains.size(); ++k) {
    const StateReader item = r.item(3, k, domains[k], {"domain_index", "domain_name", "bytes"});
    d.domains.push_back({static_cast<std::uint32_t>(item.count(0, max_u32)), item.text(1), item.count(2)});
    if (!names.insert(d.domains.back().domain_name).second)
      r.refuse("domain '" + d.domains.back().domain_name + "' appears twice");
    if (d.domains.back().domain_name.empty()) r.refuse("a domain has no name (a coordinator's domains have names)");
    if (!indices.insert(d.domains.back().domain_index).second)
      r.refuse("domain index " + std::to_string(d.domains.back().domain_index) + " appears twice");
  }
  // What a coordinator's demand always is: tokens to cover and pages to take (a demand exists
  // because pages are short), in every domain the same pages * page_bytes (one page size per
  // coordinator). An admission's pages are those its tokens need; an extension's may pass
  // its tokens (it may ask for more pages than they need).
  if (d.tokens == 0) r.refuse("tokens is 0 (a demand covers at least one token)");
  if (d.pages == 0) r.refuse("pages is 0 (a demand asks for at least one page)");
  if (d.sequences == 1 && d.pages > d.tokens)
    r.refuse(std::to_string(d.pages) + " pages for an admission of " + std::to_string(d.tokens) +
             " tokens (an admission asks for the pages its tokens need, each holding one token or more)");
  if (d.domains.empty()) r.refuse("it names no domain (a demand is in at least one)");
  for (const DomainDemand& dd : d.domains) {
    if (dd.bytes != d.domains.front().bytes)
      r.refuse("domain '" + dd.domain_name + "' needs " + std::to_string(dd.bytes) + " bytes and domain '" +
               d.domains.front().domain_name + "' " + std::to_string(d.domains.front().bytes) +
               " (each domain needs the same pages of one page size)");
    if (dd.bytes == 0 || dd.bytes % d.pages != 0)
      r.refuse(std::to_string(dd.bytes) + " bytes in domain '" + dd.domain_name + "' are not " + std::to_string(d.pages) +
               " whole pages");
  }
  return d;
}

// ---- CapacityBlocker -----------------------------------------------------------------------

nb::tuple report_state(const CapacityBlocker& b) {
  return nb::make_tuple(b.kind, nb::cast(b.source, nb::rv_policy::copy));
}

template <>
CapacityBlocker report_from_state<CapacityBlocker>(nb::handle state) {
  const StateReader r(state, "CapacityBlocker", {"kind", "source"});
  const CapacityBlocker b{r.member<BlockerKind>(0, "a BlockerKind"), r.value<CapacitySource>(1, "a CapacitySource")};
  // Each kind has its source: the slots' ceiling, the device's memory, or a domain.
  const SourceKind expected = b.kind == BlockerKind::active_sequence_ceiling       ? SourceKind::active_sequence_slots
                              : b.kind == BlockerKind::physical_memory_unavailable ? SourceKind::physical_memory
                                                                                   : SourceKind::domain;
  if (b.source.kind != expected)
    r.refuse("a " + std::string(nb::str(nb::cast(b.kind)).c_str()) + " blocker names the source " +
             nb::str(nb::cast(b.source, nb::rv_policy::copy)).c_str());
  return b;
}

// ---- AdmissionRejected ---------------------------------------------------------------------

nb::tuple report_state(const AdmissionRejected& a) {
  nb::tuple blockers = tuple_map(a.blockers, [](const CapacityBlocker& b) { return nb::cast(b, nb::rv_policy::copy); });
  return nb::make_tuple(a.request_id, a.reason, blockers);
}

template <>
AdmissionRejected report_from_state<AdmissionRejected>(nb::handle state) {
  const StateReader r(state, "AdmissionRejected", {"request_id", "reason", "blockers"});
  AdmissionRejected a;  // coordinator_id 0: the coordinator that rejected it lives in one process
  a.request_id = r.text(0);
  a.reason = r.text(1);
  const std::vector<nb::object> blockers = r.items(2);
  for (std::size_t k = 0; k < blockers.size(); ++k)
    a.blockers.push_back(r.item_value<CapacityBlocker>(2, k, blockers[k], "a CapacityBlocker"));
  // A coordinator rejects only a fit past a domain's maximum: it says why, and names each such
  // domain once.
  if (a.reason.empty()) r.refuse("its reason is empty (a rejection says why)");
  if (a.blockers.empty()) r.refuse("it has no blockers (a rejection names the domains that refuse it)");
  std::set<std::string> domains;
  for (const CapacityBlocker& b : a.blockers) {
    if (b.kind != BlockerKind::permanent_domain_maximum)
      r.refuse("a " + std::string(nb::str(nb::cast(b.kind)).c_str()) +
               " blocker (a rejection's blockers are PERMANENT_DOMAIN_MAXIMUM: anything else defers)");
    if (!domains.insert(b.source.domain_name).second)
      r.refuse("domain '" + b.source.domain_name + "' is named twice");
  }
  return a;
}

// ---- CancelSnapshot ------------------------------------------------------------------------

nb::tuple report_state(const CancelSnapshot& c) {
  nb::tuple flights = tuple_map(c.flights, [](const std::pair<std::uint64_t, FlightPhase>& f) {
    return nb::object(nb::make_tuple(f.first, f.second));
  });
  nb::object frame = c.active_frame ? nb::object(nb::int_(*c.active_frame)) : nb::none();
  return nb::make_tuple(c.phase, frame, flights, c.retired_frames);
}

template <>
CancelSnapshot report_from_state<CancelSnapshot>(nb::handle state) {
  const StateReader r(state, "CancelSnapshot", {"phase", "active_frame", "flights", "retired_frames"});
  CancelSnapshot c;
  c.phase = r.member<SessionPhase>(0, "a SessionPhase");
  c.active_frame = r.optional_count(1);
  const std::vector<nb::object> flights = r.items(2);
  for (std::size_t k = 0; k < flights.size(); ++k) {
    const StateReader item = r.item(2, k, flights[k], {"key", "phase"});
    c.flights.emplace_back(item.count(0), item.member<FlightPhase>(1, "a FlightPhase"));
    if (k != 0 && c.flights[k - 1].first >= c.flights[k].first)
      r.refuse("flights must be sorted by key, each key once (key " + std::to_string(c.flights[k].first) + " follows " +
               std::to_string(c.flights[k - 1].first) + ")");
  }
  c.retired_frames = r.count(3);
  // request_cancel() reports the phase it moves to; a flight lives in a frame.
  if (c.phase != SessionPhase::cancel_requested)
    r.refuse(std::string("its phase is ") + phase_name(c.phase) + " (request_cancel() reports CANCEL_REQUESTED)");
  if (!c.flights.empty() && !c.active_frame) r.refuse("it has flights and no active frame (a flight is a frame's)");
  return c;
}

// ---- BackendInfo ---------------------------------------------------------------------------

nb::tuple report_state(const driver::BackendInfo& i) {
  nb::tuple kinds = tuple_map(i.code_object_kinds, [](const std::string& k) { return nb::object(nb::str(k.c_str())); });
  return nb::make_tuple(i.name, i.available, i.reason, i.driver_version, i.device_count, i.device_name, i.library,
                        i.dlpack_device_type, i.cuda_array_interface, i.torch_device, kinds, i.emulated);
}

template <>
driver::BackendInfo report_from_state<driver::BackendInfo>(nb::handle state) {
  const StateReader r(state, "BackendInfo", {"name", "available", "reason", "driver_version", "device_count",
                                             "device_name", "library", "dlpack_device_type", "cuda_array_interface",
                                             "torch_device", "code_object_kinds", "emulated"});
  driver::BackendInfo i;
  i.name = r.text(0);
  i.available = r.flag(1);
  i.reason = r.text(2);
  i.driver_version = r.small_int(3);
  i.device_count = r.small_int(4);
  i.device_name = r.text(5);
  i.library = r.text(6);
  i.dlpack_device_type = r.small_int(7);
  i.cuda_array_interface = r.flag(8);
  i.torch_device = r.text(9);
  const std::vector<nb::object> kinds = r.items(10);
  for (std::size_t k = 0; k < kinds.size(); ++k) i.code_object_kinds.push_back(r.item_text(10, k, kinds[k]));
  i.emulated = r.flag(11);
  // What no registry reports (a backend's name is its key; a report says what it can load).
  if (i.name.empty()) r.refuse("a backend needs a name");
  if (i.available && i.device_count < 1) r.refuse("an available backend sees at least one device");
  if (!i.available && i.reason.empty()) r.refuse("an unavailable backend says why (reason is empty)");
  // DLPack's device types (dlpack.h): CPU 1, CUDA 2, CUDA host 3, OpenCL 4, Vulkan 7 ... MAIA 17.
  constexpr int dlpack_types[] = {1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
  if (std::find(std::begin(dlpack_types), std::end(dlpack_types), i.dlpack_device_type) == std::end(dlpack_types))
    r.refuse("dlpack_device_type " + std::to_string(i.dlpack_device_type) + " is no DLPack device type");
  if (i.torch_device.empty()) r.refuse("torch_device is empty");
  if (i.code_object_kinds.empty()) r.refuse("a backend loads at least one code object kind");
  for (const auto& kind : i.code_object_kinds) {
    driver::ImageKind parsed{};
    if (!driver::image_kind_from_name(kind, &parsed)) r.refuse("'" + kind + "' is no code object kind");
    if (std::count(i.code_object_kinds.begin(), i.code_object_kinds.end(), kind) > 1)
      r.refuse("code object kind '" + kind + "' appears twice");
  }
  return i;
}

}  // namespace lifecore::bindings
