// lifecore.sequence bindings: conversion only. Blocking calls (a coordinator's arena
// allocation and growth, which reach the driver; waiting) release the GIL; admission and
// extension take block ids from the arena and make no driver call. The arena goes back to
// the device with the coordinator: without the GIL when a session's or resources' close lets
// go of the last reference, with it when Python drops the coordinator object last. Holds that Python owns (resources,
// frames, flights, sessions) get close() and context managers so release is explicit.
#include <chrono>
#include <limits>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "arguments.hpp"
#include "bindings.hpp"
#include "interruptible_wait.hpp"
#include "report_states.hpp"
#include "table_arguments.hpp"
#include "lifecore/runtime/device.hpp"
#include "lifecore/checked.hpp"
#include "lifecore/error.hpp"
#include "lifecore/sequence/benchmark.hpp"
#include "lifecore/sequence/coordinator.hpp"
#include "lifecore/sequence/pause_points.hpp"
#include "lifecore/sequence/resources.hpp"
#include "lifecore/sequence/session.hpp"
#include "lifecore/sequence/waiter.hpp"
#include "sequence/device_arena_memory.hpp"

// The objects an admission makes (Admitted, its resources, the session) are dropped at the
// rate sequences come and go: where nanobind can (3.1 on), a dead one is kept and revived for
// the next (no allocation, no registry update either way). Up to 4,096 of each type, so a
// burst as large as a big engine's whole batch skips nanobind's instance registry too, whose
// update is a cache miss per object once many are live (at most 48 bytes an object: about
// 0.5 MB kept).
#if NB_VERSION_MAJOR > 3 || (NB_VERSION_MAJOR == 3 && NB_VERSION_MINOR >= 1)
#define LIFECORE_RECYCLED , nb::pooled(4096)
#else
#define LIFECORE_RECYCLED
#endif

namespace lifecore::bindings {

void init_sequence_arena(nb::module_& m);       // init_sequence_arena.cpp
void init_sequence_preemption(nb::module_& m);  // init_sequence_preemption.cpp
void init_sequence_step(nb::module_& m);        // init_sequence_step.cpp

namespace {

using namespace lifecore::sequence;
using SnapshotPtr = std::shared_ptr<BackingSnapshot>;

SnapshotPtr mutable_snapshot(const std::shared_ptr<const BackingSnapshot>& s) {
  return std::const_pointer_cast<BackingSnapshot>(s);
}

// A descriptor a wake hook owns: closed when the last copy of the hook goes.
struct WakeDescriptor {
  int fd;
  explicit WakeDescriptor(int fd) : fd(fd) {}
  WakeDescriptor(const WakeDescriptor&) = delete;
  WakeDescriptor& operator=(const WakeDescriptor&) = delete;
  ~WakeDescriptor() { ::close(fd); }
};

// wait_async's wake channel: a non-blocking pipe whose write end a hook on the registration
// owns (a byte whenever it is signalled, cancelled or its coordinator closes) and whose read
// end the event loop watches. Made in one call, and closed by its destructor too: a Ctrl-C that
// lands as it is made, or before wait_async closes it, leaves no descriptor and no hook.
class WakeChannel {
 public:
  // The channel, or null with *error the errno a pipe could not be made with (the process's
  // limit: EMFILE), which the caller raises as os.pipe would.
  static std::unique_ptr<WakeChannel> open(nb::object owner, CapacityWaitRegistration& registration, int* error) {
    std::unique_ptr<WakeChannel> channel(new WakeChannel());  // first: nothing to close should it fail
    int fds[2];
    if (::pipe(fds) != 0) {
      *error = errno;
      return nullptr;
    }
    channel->read_fd_ = fds[0];  // closed by the channel from here, whatever fails
    std::shared_ptr<WakeDescriptor> wake;
    try {
      wake = std::make_shared<WakeDescriptor>(fds[1]);  // closed by the hook's copy from here
    } catch (...) {
      ::close(fds[1]);
      throw;
    }
    for (int fd : fds)
      if (::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 || ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
        *error = errno;
        return nullptr;
      }
    channel->key_ = registration.add_notify([wake]() noexcept {
      // A byte on a non-blocking descriptor: no GIL, no lock, safe while the interpreter
      // shuts down. A full pipe already holds a pending wake.
      const char byte = 1;
      while (::write(wake->fd, &byte, 1) < 0 && errno == EINTR) {}
    });
    channel->registration_ = &registration;
    channel->owner_ = std::move(owner);  // keeps the registration the hook is on
    return channel;
  }
  WakeChannel(const WakeChannel&) = delete;
  WakeChannel& operator=(const WakeChannel&) = delete;
  ~WakeChannel() { close(); }

  int fileno() const {
    if (read_fd_ < 0) raise(ErrorKind::Closed, "wait_async: the wake channel is closed");
    return read_fd_;
  }
  // Reads whatever wakes are pending (each a byte), without blocking.
  void drain() const noexcept {
    char bytes[256];
    while (read_fd_ >= 0) {
      const ssize_t n = ::read(read_fd_, bytes, sizeof bytes);
      if (n <= 0 && !(n < 0 && errno == EINTR)) break;  // none left (EAGAIN), or the end
    }
  }
  // The hook off the registration (never called after this returns), the pipe closed; again: nothing.
  void close() noexcept {
    if (registration_) std::exchange(registration_, nullptr)->remove_notify(key_);
    if (read_fd_ >= 0) ::close(std::exchange(read_fd_, -1));
  }

 private:
  WakeChannel() = default;

  int read_fd_ = -1;
  std::uint64_t key_ = 0;
  CapacityWaitRegistration* registration_ = nullptr;
  nb::object owner_;
};

// Python's hold on admitted resources; close() lets go before the object is collected. Once
// the session they opened has closed, they are spent: the handle holds nothing and reads as
// closed.
struct ResourcesHandle {
  std::shared_ptr<AdmittedSequenceResources> resources;
  const AdmittedSequenceResources& get(const char* what) const {
    if (!resources) raise(ErrorKind::Closed, std::string(what) + ": the admitted resources handle is closed");
    if (resources->spent())
      raise(ErrorKind::Closed, std::string(what) + ": the admitted resources are spent (the session they opened "
                                                   "has closed; they hold nothing since)");
    return *resources;
  }
  bool closed() const noexcept { return !resources || resources->spent(); }
};

// Holds its resources handle as the Python object itself (made with the decision, held by
// value), so reading .resources is a reference count and not a new wrapper.
struct AdmittedDecision {
  nb::object resources;
  const ResourcesHandle& handle() const { return nb::cast<const ResourcesHandle&>(resources); }
};

// Lets go of a hold on admitted resources. Returning capacity moves block ids within the
// arena (no device call), which is not worth a GIL round trip; only when the coordinator may
// go too (its arena's memory goes back to the device) does the drop happen without the GIL.
// The resources hold one reference to it (their backing's; a snapshot holds none). (Should
// other holders let go meanwhile, that rare last drop runs with the GIL held, as an
// admission's claim does: slower for other threads, never a deadlock, since the core never
// waits for the GIL.)
void let_go(std::shared_ptr<SequenceBacking>&& backing) {
  auto dropping = std::move(backing);  // taken with the GIL: the holder is Python's
  if (!dropping || dropping.use_count() > 1 || dropping->coordinator().use_count() > 1) return;
  GilRelease release;
  dropping.reset();
}

void let_go(std::shared_ptr<AdmittedSequenceResources>&& resources) {
  auto dropping = std::move(resources);
  // Opened resources are held by their session until its close spends them: the last
  // reference to opened ones holds nothing (no lock taken to see it).
  if (!dropping || dropping.use_count() > 1 || dropping->opened()) return;
  // The last reference to resources never opened may hold the last reference to their
  // backing: that is dropped as above.
  if (auto backing = dropping->backing()) {
    dropping.reset();
    let_go(std::move(backing));
  }
}

void close_session(SequenceSession& s) {
  auto holds = s.close_handing_over();
  holds.current.reset();  // a snapshot observes: no capacity
  holds.resources.reset();  // spent: holds nothing
  let_go(std::move(holds.backing));
}

// A repr names an enum member as Python does (its bound name), never by its number.
template <class Enum>
std::string member_name(Enum value) {
  return nb::cast<std::string>(nb::cast(value).attr("name"));
}

// A name as Python writes a str ('kv'), whatever it holds.
std::string quoted(const std::string& name) {
  return nb::cast<std::string>(nb::repr(nb::str(name.c_str(), name.size())));
}

std::string source_repr(const CapacitySource& s) {
  switch (s.kind) {
    case SourceKind::domain: return "Domain(" + quoted(s.domain_name) + ")";
    case SourceKind::physical_memory: return "PhysicalMemory";
    case SourceKind::active_sequence_slots: break;
  }
  return "ActiveSequenceSlots";
}

// Sources compare by what they name; a source bound to one coordinator never equals one
// bound to another (an unbound source, named by hand, equals either).
bool same_source(const CapacitySource& a, const CapacitySource& b) {
  if (a.kind != b.kind || a.domain_name != b.domain_name) return false;
  return a.coordinator_id == 0 || b.coordinator_id == 0 || a.coordinator_id == b.coordinator_id;
}

constexpr std::int64_t max_count = std::numeric_limits<std::int64_t>::max();
constexpr std::uint64_t max_u32 = std::numeric_limits<std::uint32_t>::max();

// A sequence (is_item_sequence: never a str, which would iterate its characters) of items, as
// a snapshot that holds them (a list subclass's __iter__ may yield objects nothing else keeps).
nb::tuple sequence_argument(nb::handle h, const char* call, const char* name, const char* expected) {
  if (!is_item_sequence(h))
    raise(ErrorKind::TypeMismatch, argument_label(call, name) + " must be " + expected + ", got " + type_name_of(h));
  return sequence_snapshot(h, argument_label(call, name));
}

nb::dict demand_bytes(const CapacityDemand& d) {
  nb::dict out;
  for (const auto& dd : d.domains) out[nb::str(dd.domain_name.data(), dd.domain_name.size())] = dd.bytes;
  return out;
}

// None: host accounting. A Device: the arena from its memory manager. A registered backend's
// name (or "auto"), kept for compatibility: a runtime Device of the coordinator's own, opened
// as Device(name) opens one and kept alive by the arena's memory.
std::shared_ptr<PageMemory> memory_for_device(nb::handle device) {
  if (device.is_none()) return nullptr;
  if (nb::isinstance<nb::str>(device)) {
    std::shared_ptr<runtime::Device> own =
        runtime::Device::open(str_argument(device, "AdmissionCoordinator", "device"), 0, "auto", "thread_local");
    return std::make_shared<DeviceArenaMemory>(std::move(own));
  }
  runtime::Device* runtime_device = nullptr;
  if (!nb::try_cast<runtime::Device*>(device, runtime_device) || runtime_device == nullptr)
    raise(ErrorKind::TypeMismatch, "AdmissionCoordinator: device must be None, a backend name or a lifecore.Device");
  runtime_device->check_open("AdmissionCoordinator");
  // Kept open while the coordinator lives, as a Stream keeps its Device: an engine that holds
  // only the coordinator must not find it closed when the Device object goes. An explicit
  // close still closes it: the coordinator then refuses with ClosedError (the close returned
  // the arena).
  return std::make_shared<DeviceArenaMemory>(runtime_device->shared_from_this());
}

std::vector<DomainConfig> parse_domains(nb::handle domains) {
  constexpr const char* call = "AdmissionCoordinator";
  // A dict, or another mapping (anything with keys() that is no sequence, read once into a dict).
  const bool mapping = nb::isinstance<nb::dict>(domains) || (!is_item_sequence(domains) && nb::hasattr(domains, "keys"));
  if (!mapping)
    raise(ErrorKind::TypeMismatch, "AdmissionCoordinator: argument 'domains' must be a mapping {name: capacity_bytes or "
                                   "(capacity_bytes, maximum_bytes)}, got " + type_name_of(domains));
  nb::dict read;
  if (PyDict_Merge(read.ptr(), domains.ptr(), 1) != 0) throw nb::python_error();
  std::vector<DomainConfig> out;
  for (auto [key, value] : read) {
    DomainConfig d;
    d.name = str_argument(key, call, "domains (a domain name)");
    const std::string label = "domains['" + d.name + "']";
    if (nb::isinstance<nb::tuple>(value)) {
      auto t = nb::borrow<nb::tuple>(value);
      if (t.size() != 2)
        raise(ErrorKind::InvalidArgument, argument_label(call, label.c_str()) + " as a tuple is (capacity_bytes, maximum_bytes)");
      d.capacity_bytes = uint_argument(t[0], call, (label + " capacity_bytes").c_str());
      d.maximum_bytes = uint_argument(t[1], call, (label + " maximum_bytes").c_str(), std::numeric_limits<std::uint64_t>::max(), 1);
    } else {
      d.capacity_bytes = d.maximum_bytes =
          uint_argument(value, call, label.c_str(), std::numeric_limits<std::uint64_t>::max(), 1);
    }
    out.push_back(std::move(d));
  }
  return out;
}

// A bound aggregate's object made in place (the type looked up once: bound for the module's
// life).
template <class T, class... Args>
nb::object make_in_place(Args&&... args) {
  static const nb::handle type = nb::type<T>();
  nb::object o = nb::inst_alloc(type);
  new (nb::inst_ptr<T>(o)) T{std::forward<Args>(args)...};
  nb::inst_mark_ready(o);
  return o;
}

nb::object admission_to_python(AdmissionDecision&& decision) {
  if (auto* a = std::get_if<Admitted>(&decision))
    return make_in_place<AdmittedDecision>(make_in_place<ResourcesHandle>(std::move(a->resources)));
  if (auto* d = std::get_if<AdmissionDeferred>(&decision))
    return nb::cast(std::make_shared<AdmissionDeferred>(std::move(*d)));
  return nb::cast(std::get<AdmissionRejected>(std::move(decision)));
}

// Leaving a frame's `with` block ends the frame whatever happens: a clean exit commits, and a
// refused commit (the session ended inside the block, a flight still live) drops the hold
// (close()) before raising why; an exception aborts, and a refused abort drops it without a
// word, so the exception leaving the block is the one the caller sees (a KeyboardInterrupt
// stays one). A hold left live would keep the sequence's blocks until the variable went.
void frame_exit(FrameHold& f, nb::handle exc_type) {
  if (f.finalized()) return;
  if (exc_type.is_none()) {
    try {
      f.commit();
    } catch (...) {
      f.drop();
      throw;
    }
    return;
  }
  try {
    f.abort();
  } catch (const Error&) {
    f.drop();
  }
}

void bind_enums(nb::module_& m) {
  nb::enum_<SessionPhase>(m, "SessionPhase", "Where a SequenceSession is in its lifecycle (SequenceSession.phase).")
      .value("OPEN", SessionPhase::open, "Frames may be acquired and the backing extended.")
      .value("CANCEL_REQUESTED", SessionPhase::cancel_requested,
             "request_cancel() was called: a live frame commits as DISCARDED_CANCELLED; try_abort() ends it.")
      .value("POISONED", SessionPhase::poisoned,
             "A frame was aborted or dropped unfinalized, or a flight dropped in flight: only try_abort() ends it.")
      .value("COMPLETED", SessionPhase::completed, "Terminal: try_complete() succeeded.")
      .value("ABORTED", SessionPhase::aborted, "Terminal: try_abort() or try_abort_if_quiescent() succeeded.")
      .value("FAIL_CLOSED", SessionPhase::fail_closed,
             "Terminal: the session was closed or dropped while still active, or a stale flight was dropped.");
  nb::enum_<TerminalOutcome>(m, "TerminalOutcome", "How a session ended (TerminalReceipt.outcome).")
      .value("COMPLETED", TerminalOutcome::completed, "Ended by try_complete().")
      .value("ABORTED", TerminalOutcome::aborted, "Ended by try_abort() or try_abort_if_quiescent().");
  nb::enum_<FrameDisposition>(m, "FrameDisposition",
                              "How a frame was finalized. FrameHold.commit() answers COMMITTED or DISCARDED_CANCELLED; "
                              "the other members name what abort(), rollback_unsubmitted() and close() do. An int "
                              "enum: commit_frames answers its values, which compare equal to the members.",
                              nb::is_arithmetic())
      .value("COMMITTED", FrameDisposition::committed, "Committed in an open session: the step counts.")
      .value("DISCARDED_CANCELLED", FrameDisposition::discarded_cancelled,
             "Committed after request_cancel(): retired, counted as discarded.")
      .value("ABORTED", FrameDisposition::aborted, "Ended by abort(): the session is poisoned.")
      .value("ROLLED_BACK", FrameDisposition::rolled_back,
             "Ended by rollback_unsubmitted(): never submitted, its frame id is reused.")
      .value("DROPPED", FrameDisposition::dropped, "Let go unfinalized (close() or collection): the session is poisoned.");
  nb::enum_<FlightPhase>(m, "FlightPhase", "Where a participant flight is (FlightHold.phase).")
      .value("PREPARED", FlightPhase::prepared, "Prepared, not submitted: release() lets it go.")
      .value("IN_FLIGHT", FlightPhase::in_flight, "Dispatched to the device: finish() or not_submitted().");
  nb::enum_<BackingOutcome>(m, "BackingOutcome",
                            "The answer of SequenceSession.step() and try_ensure_backing_covers() (BackingDecision.outcome). "
                            "An int enum: step_all and DecodeTable.step answer its values, which compare equal to the "
                            "members.",
                            nb::is_arithmetic())
      .value("CURRENT", BackingOutcome::current, "The backing already covers the target.")
      .value("EXTENDED", BackingOutcome::extended,
             "The backing was extended: a new generation covers the target. Its tokens grew to the target at "
             "least: step() to the end of the target's last page or to the request's fit, whichever comes first; "
             "try_ensure_backing_covers() to the target. A block was added only where its pages grew "
             "(backing.pages), so a step inside the prompt's last page answers EXTENDED with no new block.")
      .value("RETRY_REQUIRED", BackingOutcome::retry_required,
             "Nothing changed: a frame or flight was live, or the backing moved meanwhile; retry between frames.")
      .value("BACKING_DEFERRED", BackingOutcome::backing_deferred,
             "Nothing changed: capacity is short; the deferral says what to wait on or preempt for.");
  nb::enum_<BlockerKind>(m, "BlockerKind", "Why a decision deferred or rejected (CapacityBlocker.kind).")
      .value("IMMEDIATE_AVAILABILITY", BlockerKind::immediate_availability,
             "The immediate demand does not fit what the source has free now.")
      .value("FIT_AVAILABILITY", BlockerKind::fit_availability,
             "The fit demand does not fit what is free now (reported beside the blockers that defer).")
      .value("BACKING_GROWTH_REQUIRED", BlockerKind::backing_growth_required,
             "The fit demand exceeds the domain's current total, but not its maximum: growth can help.")
      .value("ACTIVE_SEQUENCE_CEILING", BlockerKind::active_sequence_ceiling, "Every active-sequence slot is taken.")
      .value("PERMANENT_DOMAIN_MAXIMUM", BlockerKind::permanent_domain_maximum,
             "The fit demand exceeds the domain's maximum: the request can never fit (a rejection).")
      .value("PHYSICAL_MEMORY_UNAVAILABLE", BlockerKind::physical_memory_unavailable,
             "The pages could not be taken now (the physical-memory source).");
  nb::enum_<DeferralAction>(m, "DeferralAction", "What a deferral suggests doing (AdmissionDeferred.action).")
      .value("WAIT_FOR_RELEASE", DeferralAction::wait_for_release,
             "Wait (register a waiter) until a release advances one of the wait condition's sources.")
      .value("AWAIT_BACKING_GROWTH", DeferralAction::await_backing_growth,
             "Only growth helps: the demand exceeds a domain's current total (grow_domain advances it).")
      .value("PREEMPT_AND_RECOMPUTE", DeferralAction::preempt_and_recompute,
             "A live sequence's extension is short: free capacity by preempting others (preempt_for), or wait.");
  nb::enum_<SourceKind>(m, "SourceKind", "The kind of a CapacitySource.")
      .value("ACTIVE_SEQUENCE_SLOTS", SourceKind::active_sequence_slots,
             "The active-sequence slots: advanced when a sequence is released.")
      .value("DOMAIN", SourceKind::domain, "A capacity domain: advanced when its pages are released or it grows.")
      .value("PHYSICAL_MEMORY", SourceKind::physical_memory,
             "The memory behind the pages: advanced on every physical page release.");
}

void bind_capacity_facts(nb::module_& m) {
  nb::class_<CapacitySource>(m, "CapacitySource",
                             "A scheduler-visible availability source. Sources a coordinator issues name it "
                             "(coordinator_id); one named by hand (Domain('kv')) names none.")
      .def_static("of_domain", [](nb::handle name) {
        std::string n = str_argument(name, "Domain", "name");
        if (n.empty()) raise(ErrorKind::InvalidArgument, "Domain: argument 'name' must not be empty");
        return CapacitySource::domain(std::numeric_limits<std::uint32_t>::max(), std::move(n));
      }, nb::arg("name").none(), nb::sig("def of_domain(name: str) -> CapacitySource"), "The source of capacity domain `name`.")
      .def_static("active_sequence_slots", [] { return CapacitySource::slots(); }, "The active-sequence slots source.")
      .def_static("physical_memory", [] { return CapacitySource::physical(); },
                  "The device memory behind the pages: advanced on every physical page release.")
      .def_ro("kind", &CapacitySource::kind, "What it counts: the slots, a domain, or physical memory (a SourceKind).")
      .def_prop_ro("domain", [](const CapacitySource& s) -> std::optional<std::string> {
        if (s.kind == SourceKind::domain) return s.domain_name;
        return std::nullopt;
      }, "The domain's name for a DOMAIN source; None for the others.")
      .def_prop_ro("coordinator_id", [](const CapacitySource& s) -> std::optional<std::uint64_t> {
        if (s.coordinator_id == 0) return std::nullopt;
        return s.coordinator_id;
      }, "The coordinator that issued this source; None for a source named by hand.")
      .def("__eq__", [](const CapacitySource& a, nb::handle other) {
        if (!nb::isinstance<CapacitySource>(other)) return false;
        return same_source(a, nb::cast<const CapacitySource&>(other));
      }, nb::sig("def __eq__(self, other: object) -> bool"))
      .def("__lt__", [](const CapacitySource& a, nb::handle other) -> nb::object {
        if (!nb::isinstance<CapacitySource>(other)) return nb::borrow(Py_NotImplemented);
        const auto& b = nb::cast<const CapacitySource&>(other);
        return nb::bool_(std::make_tuple(int(a.kind), a.domain_name, a.coordinator_id) <
                         std::make_tuple(int(b.kind), b.domain_name, b.coordinator_id));
      }, nb::sig("def __lt__(self, other: CapacitySource) -> bool"))
      .def("__hash__", [](const CapacitySource& s) { return nb::hash(nb::make_tuple(int(s.kind), s.domain_name)); })
      .def("__repr__", &source_repr);

  nb::class_<Authority>(m, "Authority",
                        "(sparse id, generation) of one coordinator: ids are reused, generations never, and an "
                        "authority of another coordinator never matches.")
      .def_ro("sparse_id", &Authority::sparse_id, "The id: reused once its holder is released.")
      .def_ro("generation", &Authority::generation,
              "The generation: never reused, so a released holder's authority never matches its successor's.")
      .def_ro("coordinator_id", &Authority::coordinator_id, "The coordinator that issued this authority.")
      .def("__eq__", [](const Authority& a, nb::handle o) { return nb::isinstance<Authority>(o) && a == nb::cast<const Authority&>(o); },
           nb::sig("def __eq__(self, other: object) -> bool"))
      .def("__hash__", [](const Authority& a) { return nb::hash(nb::make_tuple(a.sparse_id, a.generation, a.coordinator_id)); })
      .def("__repr__", [](const Authority& a) {
        return "Authority(sparse_id=" + std::to_string(a.sparse_id) + ", generation=" + std::to_string(a.generation) +
               ", coordinator_id=" + std::to_string(a.coordinator_id) + ")";
      });

  nb::class_<CapacityDemand>(m, "CapacityDemand",
                             "What a request needs (AdmissionDeferred.immediate, .fit): active-sequence slots, tokens, "
                             "pages in each of its domains, and the bytes those pages take.")
      .def_ro("sequences", &CapacityDemand::sequences,
              "Active-sequence slots needed: 1 for an admission, 0 for extending a live sequence.")
      .def_ro("tokens", &CapacityDemand::tokens, "Tokens to cover.")
      .def_ro("pages", &CapacityDemand::pages, "Pages needed in each of the request's domains.")
      .def_prop_ro("bytes", &demand_bytes, nb::for_getter(nb::sig("def bytes(self, /) -> dict[str, int]")),
                   "Bytes per domain name.")
      .def("__getstate__", &get_report_state<CapacityDemand>, nb::sig(report_getstate_sig), report_getstate_doc)
      .def("__setstate__", &set_report_state<CapacityDemand>, nb::arg("state"), report_setstate_doc)
      .def("__repr__", [](const CapacityDemand& d) {
        return "CapacityDemand(sequences=" + std::to_string(d.sequences) + ", tokens=" + std::to_string(d.tokens) +
               ", pages=" + std::to_string(d.pages) + ")";
      });
  nb::class_<CapacityBlocker>(m, "CapacityBlocker", "One reason a decision deferred or rejected: its kind and the source it concerns.")
      .def_ro("kind", &CapacityBlocker::kind, "Why (a BlockerKind).")
      .def_ro("source", &CapacityBlocker::source, "The CapacitySource that is short.")
      .def("__getstate__", &get_report_state<CapacityBlocker>, nb::sig(report_getstate_sig), report_getstate_doc)
      .def("__setstate__", &set_report_state<CapacityBlocker>, nb::arg("state"), report_setstate_doc)
      .def("__repr__", [](const CapacityBlocker& b) {
        return "CapacityBlocker(" + member_name(b.kind) + ", " + source_repr(b.source) + ")";
      });
  nb::class_<WaitCondition>(m, "WaitCondition", "The exact sources of a deferral and the epochs observed.")
      .def_ro("sources", &WaitCondition::sources, "The CapacitySources the deferral depends on, sorted and unique.")
      .def_ro("epochs", &WaitCondition::epochs, "The epoch of each source when the decision was taken (parallel to sources).")
      .def("items", [](const WaitCondition& w) {
        std::vector<std::pair<CapacitySource, std::uint64_t>> out;
        for (std::size_t i = 0; i < w.sources.size(); ++i) out.emplace_back(w.sources[i], w.epochs[i]);
        return out;
      }, "A list of (source, epoch) pairs.")
      .def("__repr__", [](const WaitCondition& w) {
        std::string s = "WaitCondition(";
        for (std::size_t i = 0; i < w.sources.size(); ++i)
          s += (i ? ", " : "") + source_repr(w.sources[i]) + "@" + std::to_string(w.epochs[i]);
        return s + ")";
      });
  nb::class_<DomainUsage>(m, "DomainUsage", "One capacity domain's accounting in a CapacitySnapshot.")
      .def_ro("name", &DomainUsage::name, "The domain's name.")
      .def_ro("used_bytes", &DomainUsage::used_bytes, "Bytes claimed by live sequences.")
      .def_ro("total_bytes", &DomainUsage::total_bytes, "Bytes available now (grow_domain raises it): the capacity, or the bytes of 2**31 pages (the int32 block ids) when that is less.")
      .def_ro("maximum_bytes", &DomainUsage::maximum_bytes, "Bytes it may grow to.")
      .def_ro("epoch", &DomainUsage::epoch, "The domain source's epoch.")
      .def("__getstate__", &get_report_state<DomainUsage>, nb::sig(report_getstate_sig), report_getstate_doc)
      .def("__setstate__", &set_report_state<DomainUsage>, nb::arg("state"), report_setstate_doc)
      .def("__repr__", [](const DomainUsage& d) {
        return "DomainUsage(" + quoted(d.name) + ", used_bytes=" + std::to_string(d.used_bytes) +
               ", total_bytes=" + std::to_string(d.total_bytes) + ", maximum_bytes=" + std::to_string(d.maximum_bytes) +
               ", epoch=" + std::to_string(d.epoch) + ")";
      });
  nb::class_<CapacitySnapshot>(m, "CapacitySnapshot",
                               "A coordinator's accounting at one moment (AdmissionCoordinator.capacity(), "
                               "AdmissionDeferred.capacity): each domain's usage, the active sequences, the epochs.")
      .def_ro("domains", &CapacitySnapshot::domains,
              "A DomainUsage (name, used_bytes, total_bytes, maximum_bytes, epoch) per domain, in the order configured.")
      .def_ro("active_sequences", &CapacitySnapshot::active_sequences, "Sequences holding an active slot.")
      .def_ro("max_active_sequences", &CapacitySnapshot::max_active_sequences, "The ceiling on active sequences.")
      .def_ro("slots_epoch", &CapacitySnapshot::slots_epoch,
              "Epoch of the active-sequence slots source: advanced when a sequence is released.")
      .def_ro("release_epoch", &CapacitySnapshot::release_epoch,
              "Advanced whenever claimed capacity comes back: a sequence released, or a claim rolled back.")
      .def_ro("physical_epoch", &CapacitySnapshot::physical_epoch, "Epoch of the physical-memory source.")
      .def_prop_ro("used_bytes", [](const CapacitySnapshot& s) {
        nb::dict out;
        for (const auto& d : s.domains) out[nb::str(d.name.data(), d.name.size())] = d.used_bytes;
        return out;
      }, nb::for_getter(nb::sig("def used_bytes(self, /) -> dict[str, int]")), "A dict: bytes claimed in each domain, by name.")
      .def("__getstate__", &get_report_state<CapacitySnapshot>, nb::sig(report_getstate_sig), report_getstate_doc)
      .def("__setstate__", &set_report_state<CapacitySnapshot>, nb::arg("state"), report_setstate_doc)
      .def("__repr__", [](const CapacitySnapshot& s) {
        std::string out = "CapacitySnapshot(domains={";
        for (std::size_t i = 0; i < s.domains.size(); ++i)
          out += (i ? ", " : "") + quoted(s.domains[i].name) + ": " + std::to_string(s.domains[i].used_bytes) + "/" +
                 std::to_string(s.domains[i].total_bytes);
        return out + "}, active_sequences=" + std::to_string(s.active_sequences) + "/" +
               std::to_string(s.max_active_sequences) + ", slots_epoch=" + std::to_string(s.slots_epoch) +
               ", release_epoch=" + std::to_string(s.release_epoch) + ", physical_epoch=" +
               std::to_string(s.physical_epoch) + ")";
      });
}

void bind_admission_answers(nb::module_& m) {
  nb::class_<AdmissionDeferred>(m, "AdmissionDeferred",
                                "Admission deferred: capacity pressure, as a decision. Also what a backing extension "
                                "that is short answers (BackingDecision.deferred, SequenceSession.step_deferral).")
      .def_ro("request_id", &AdmissionDeferred::request_id, "The request id the decision was taken for.")
      .def_ro("immediate", &AdmissionDeferred::immediate,
              "The CapacityDemand that must fit now: the prompt for an admission, the added pages for an extension.")
      .def_ro("fit", &AdmissionDeferred::fit,
              "For an admission, the CapacityDemand at the request's fit_tokens (what must fit in each domain's "
              "total, free or not); for an extension, the added pages again, as immediate (the pages it "
              "already holds are its own).")
      .def_ro("blockers", &AdmissionDeferred::blockers, "The CapacityBlockers: every reason it did not fit.")
      .def_ro("action", &AdmissionDeferred::action, "What to do about it (a DeferralAction).")
      .def_ro("wait_condition", &AdmissionDeferred::wait_condition,
              "The exact sources to wait on and their epochs at the decision (a WaitCondition).")
      .def_ro("capacity", &AdmissionDeferred::capacity, "The coordinator's CapacitySnapshot when the decision was taken.")
      .def_ro("coordinator_id", &AdmissionDeferred::coordinator_id, "The coordinator that took this decision.")
      .def_prop_ro("is_backing_deferral", [](const AdmissionDeferred& d) { return d.backing.has_value(); },
                   "True when it came from extending a live sequence's backing, False for an admission.")
      .def_prop_ro("sequence_authority", [](const AdmissionDeferred& d) -> std::optional<Authority> {
        if (d.backing) return d.backing->sequence_authority;
        return std::nullopt;
      }, "For a backing deferral: the sequence that asked to grow.")
      .def_prop_ro("expected_generation", [](const AdmissionDeferred& d) -> std::optional<std::uint64_t> {
        if (d.backing) return d.backing->expected_generation;
        return std::nullopt;
      }, "For a backing deferral: the backing generation it was taken on (a waiter registered after the backing "
         "moved on is refused); None for an admission.")
      .def("__repr__", [](const AdmissionDeferred& d) {
        std::string s = "AdmissionDeferred(request_id=" + quoted(d.request_id) + ", action=" + member_name(d.action) + ", sources=[";
        for (std::size_t i = 0; i < d.wait_condition.sources.size(); ++i)
          s += (i ? ", " : "") + source_repr(d.wait_condition.sources[i]);
        return s + "])";
      });
  nb::class_<AdmissionRejected>(m, "AdmissionRejected", "Admission rejected: the request can never fit.")
      .def_ro("request_id", &AdmissionRejected::request_id, "The request id the decision was taken for.")
      .def_ro("reason", &AdmissionRejected::reason, "Why, in words: the fit demand and the domain maximum it exceeds.")
      .def_ro("blockers", &AdmissionRejected::blockers,
              "The permanent CapacityBlockers: PERMANENT_DOMAIN_MAXIMUM for each domain too small.")
      .def("__getstate__", &get_report_state<AdmissionRejected>, nb::sig(report_getstate_sig), report_getstate_doc)
      .def("__setstate__", &set_report_state<AdmissionRejected>, nb::arg("state"), report_setstate_doc)
      .def("__repr__", [](const AdmissionRejected& r) { return "AdmissionRejected(" + quoted(r.request_id) + ": " + r.reason + ")"; });
}

void bind_backing(nb::module_& m) {
  nb::class_<BackingSnapshot>(m, "BackingSnapshot",
                              "An immutable backing generation: the tokens and pages it covers. It observes its sequence's "
                              "pages without owning them.")
      .def_prop_ro("generation", &BackingSnapshot::generation,
                   "The generation: 1 at admission, one more for each extension of the sequence's backing.")
      .def_prop_ro("tokens", &BackingSnapshot::tokens, "The tokens this generation covers.")
      .def_prop_ro("pages", &BackingSnapshot::pages, "The pages this generation covers in each of its domains.")
      .def_prop_ro("extents", [](const BackingSnapshot& s) {
        // (domain, first_page, pages, address, bytes) per run of consecutive block ids in one
        // arena chunk, domain by domain; block_ids() is the data plane
        std::vector<std::tuple<std::string, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t>> out;
        for (const auto& e : s.extents())
          out.emplace_back(s.domain_name(e.domain_index), e.first_page, e.pages, e.memory.address, e.memory.bytes);
        return out;
      }, "A list of (domain, first_page, pages, address, bytes), one per run of consecutive block ids in one arena "
         "chunk, domain by domain; first_page is the run's first page within the sequence (0 for its first block), "
         "not a block id (block_ids() gives those). The address is 0 on host accounting and once the device's close "
         "took the arena back. SessionStateError once released.")
      .def_prop_ro("domains", [](const BackingSnapshot& s) {
        std::vector<std::string> out;
        for (auto d : s.domains()) out.push_back(s.domain_name(d));
        return out;
      }, "The names of the domains its pages live in, in the coordinator's order.")
      .def_prop_ro("released", &BackingSnapshot::released,
                   "True once every holder of its sequence let go: a stale snapshot owns no pages.")
      .def("__repr__", [](const BackingSnapshot& s) {
        return "BackingSnapshot(generation=" + std::to_string(s.generation()) + ", tokens=" + std::to_string(s.tokens()) +
               ", pages=" + std::to_string(s.pages()) + (s.released() ? ", released" : "") + ")";
      });

  nb::class_<BackingDecision>(m, "BackingDecision",
                              "The answer of SequenceSession.try_ensure_backing_covers(): an outcome, and the snapshot, "
                              "the deferral or the reason that goes with it. It owns no capacity.")
      .def_ro("outcome", &BackingDecision::outcome, "CURRENT, EXTENDED, RETRY_REQUIRED or BACKING_DEFERRED (a BackingOutcome).")
      .def_prop_ro("snapshot", [](const BackingDecision& d) { return mutable_snapshot(d.snapshot); },
                   nb::for_getter(nb::sig("def snapshot(self, /) -> BackingSnapshot | None")),
                   "CURRENT or EXTENDED: the BackingSnapshot that covers the target; None otherwise.")
      .def_prop_ro("deferred", [](const BackingDecision& d) -> std::shared_ptr<AdmissionDeferred> {
        if (!d.deferred) return nullptr;
        return std::make_shared<AdmissionDeferred>(*d.deferred);
      }, nb::for_getter(nb::sig("def deferred(self, /) -> AdmissionDeferred | None")), "BACKING_DEFERRED: the AdmissionDeferred to wait on or preempt for; None otherwise.")
      .def_ro("reason", &BackingDecision::reason,
              "Why, in words, for RETRY_REQUIRED and BACKING_DEFERRED (or a CURRENT found after the backing moved); "
              "empty otherwise.")
      .def_ro("expected_generation", &BackingDecision::expected_generation,
              "The backing generation the decision was taken on; verify_backing_deferral() checks it.")
      .def_ro("target_tokens", &BackingDecision::target_tokens, "The tokens asked for.")
      .def_ro("target_pages", &BackingDecision::target_pages, "The pages asked for (those the tokens need, by default).")
      .def("__repr__", [](const BackingDecision& d) {
        return "BackingDecision(outcome=" + member_name(d.outcome) + ", expected_generation=" +
               std::to_string(d.expected_generation) + ", reason='" + d.reason + "')";
      });
}

void bind_terminal_facts(nb::module_& m) {
  nb::class_<CancelSnapshot>(m, "CancelSnapshot", "What was still live when cancel was requested (request_cancel()).")
      .def_ro("phase", &CancelSnapshot::phase, "The session's phase after the request: CANCEL_REQUESTED.")
      .def_ro("active_frame", &CancelSnapshot::active_frame, "The id of the frame still active, or None.")
      .def_ro("flights", &CancelSnapshot::flights, "A list of (key, FlightPhase) per live participant flight, sorted by key.")
      .def_ro("retired_frames", &CancelSnapshot::retired_frames, "Frames retired before the request.")
      .def("__getstate__", &get_report_state<CancelSnapshot>, nb::sig(report_getstate_sig), report_getstate_doc)
      .def("__setstate__", &set_report_state<CancelSnapshot>, nb::arg("state"), report_setstate_doc)
      .def("__repr__", [](const CancelSnapshot& c) {
        std::string s = "CancelSnapshot(phase=" + member_name(c.phase) + ", active_frame=" +
                        (c.active_frame ? std::to_string(*c.active_frame) : std::string("None")) + ", flights=[";
        for (std::size_t i = 0; i < c.flights.size(); ++i)
          s += (i ? ", " : "") + std::string("(") + std::to_string(c.flights[i].first) + ", " +
               member_name(c.flights[i].second) + ")";
        return s + "], retired_frames=" + std::to_string(c.retired_frames) + ")";
      });
  nb::class_<TerminalReceipt>(m, "TerminalReceipt",
                              "What a terminal transition recorded (try_complete(), try_abort(), "
                              "try_abort_if_quiescent(); SequenceSession.receipt).")
      .def_ro("outcome", &TerminalReceipt::outcome, "COMPLETED or ABORTED (a TerminalOutcome).")
      .def_ro("sequence_authority", &TerminalReceipt::sequence_authority, "The ended sequence's Authority.")
      .def_ro("request_authority", &TerminalReceipt::request_authority, "The ended sequence's request Authority.")
      .def_ro("epoch", &TerminalReceipt::epoch, "The session's epoch (SequenceSession.epoch).")
      .def_prop_ro("fingerprint", &TerminalReceipt::fingerprint,
                   "The session's fingerprint (SequenceSession.fingerprint), hashed on first read.")
      .def_ro("retired_frames", &TerminalReceipt::retired_frames, "Frames retired: committed plus discarded.")
      .def_ro("committed_frames", &TerminalReceipt::committed_frames, "Frames committed while the session was open.")
      .def_ro("discarded_frames", &TerminalReceipt::discarded_frames, "Frames committed after request_cancel() (discarded).")
      .def_ro("backing_generation", &TerminalReceipt::backing_generation, "The backing generation at the end.")
      .def("__repr__", [](const TerminalReceipt& r) {
        return "TerminalReceipt(" + member_name(r.outcome) + ", retired_frames=" + std::to_string(r.retired_frames) + ")";
      });
}

void bind_waiters(nb::module_& m) {
  nb::class_<WakeChannel>(m, "_WakeChannel", "wait_async's wake channel (private).")
      .def("fileno", &WakeChannel::fileno, "The pipe's read end, for the event loop to watch.")
      .def("drain", &WakeChannel::drain, "Reads the pending wakes, without blocking.")
      .def("close", &WakeChannel::close, "Removes the hook and closes the pipe; again: nothing.");
  nb::class_<CapacityWaitRegistration>(m, "CapacityWaitRegistration",
                                       "A subscription to the exact sources of a deferral.")
      .def("should_retry", [](const CapacityWaitRegistration& r) { return r.should_retry(); },
           "True once a source's epoch moved since the decision or since registration: admission (or the "
           "extension) is worth retrying. CapacityError if an epoch went backwards.")
      .def("recheck", [](const CapacityWaitRegistration& r) {
        auto c = r.recheck();
        return std::make_pair(c.changed_since_observation, c.changed_since_registration);
      }, "(changed since observation, changed since registration)")
      .def("wait", [](CapacityWaitRegistration& r, nb::handle timeout) {
             const std::optional<double> seconds = timeout_argument(timeout, "wait");
             const auto deadline = CapacityWaitRegistration::deadline_after(seconds);
             using Slice = CapacityWaitRegistration::SliceResult;
             return wait_in_slices([&]() -> std::optional<bool> {
               const Slice result = r.wait_slice(deadline, signal_slice);
               if (result == Slice::pending) return std::nullopt;
               return result == Slice::retry;
             });
           },
           nb::arg("timeout").none() = nb::none(), nb::sig("def wait(self, timeout: float | None = None) -> bool"),
           "Block until should_retry() (True) or the timeout in seconds (False); None, inf or a timeout too "
           "large for the clock wait without a deadline. NaN or a negative timeout is InvalidArgumentError. "
           "Yields to Ctrl-C (KeyboardInterrupt, on the main thread) within about 0.05 s; a wait on another "
           "thread ends at coordinator.close() or its timeout. ClosedError if the coordinator, or its "
           "device, is closed, or once nothing holds the coordinator (a registration does not keep it).")
      .def("_check", [](CapacityWaitRegistration& r) {
             return r.wait_slice(std::nullopt, std::chrono::nanoseconds(0), "wait_async") ==
                    CapacityWaitRegistration::SliceResult::retry;
           },
           "Without blocking: True once should_retry(); ClosedError if the coordinator, or its device, is closed.")
      .def("_wake_channel",
           [](nb::handle self) -> nb::object {
             int error = 0;
             std::unique_ptr<WakeChannel> channel =
                 WakeChannel::open(nb::borrow(self), nb::cast<CapacityWaitRegistration&>(self), &error);
             if (!channel) return nb::int_(-error);  // raised by wait_async as os.pipe would
             nb::object made = nb::cast(channel.get(), nb::rv_policy::take_ownership);
             (void)channel.release();  // Python's now
             return made;
           },
           "wait_async's wake channel: a pipe the registration writes a byte to whenever it is signalled, "
           "cancelled or its coordinator (or its device) closes. fileno() is the end to watch, drain() reads "
           "the pending wakes, close() removes the hook and closes the pipe (so does the object's end). "
           "-errno when no pipe could be made (the process's limit).")
      .def("__repr__", [](const CapacityWaitRegistration& r) {
        const char* state = r.closed() ? "closed" : r.cancelled() ? "cancelled" : "registered";
        return "CapacityWaitRegistration(" + std::string(state) + ", sources=" + std::to_string(r.registered_epochs().size()) +
               ", wake_count=" + std::to_string(r.wake_count()) + ")";
      })
      .def_prop_ro("wake_count", &CapacityWaitRegistration::wake_count,
                   "Whether a release or growth of one of its sources signalled it: 0, then 1. It is signalled "
                   "once; its wait condition has changed then, so every wait on it returns at once.")
      .def_prop_ro("cancelled", &CapacityWaitRegistration::cancelled,
                   "True once cancel() ran (or the registration was collected): nothing signals it any more.")
      .def_prop_ro("closed", &CapacityWaitRegistration::closed,
                   "True once its coordinator was closed, or went with its last holder (wait() raises ClosedError).")
      .def_prop_ro("observed", &CapacityWaitRegistration::observed,
                   "The deferral's WaitCondition: the sources and their epochs at the decision.")
      .def_prop_ro("registered_epochs", &CapacityWaitRegistration::registered_epochs,
                   "The sources' epochs read at registration (parallel to observed.sources).")
      .def("cancel", &CapacityWaitRegistration::cancel,
           "Unsubscribe now (collection does it too); an awaiting event loop is woken to recheck. Never raises.");
}

void bind_frames_and_flights(nb::module_& m) {
  nb::class_<FrameHold>(m, "FrameHold", "A frame of one step; holds the exact backing snapshot it captured.")
      .def_prop_ro("frame_id", &FrameHold::frame_id, "The frame's id within its session (from 1).")
      .def_prop_ro("snapshot", [](const FrameHold& f) { return mutable_snapshot(f.snapshot()); },
                   nb::for_getter(nb::sig("def snapshot(self, /) -> BackingSnapshot | None")),
                   "The BackingSnapshot captured at acquisition; None once finalized.")
      .def_prop_ro("finalized", &FrameHold::finalized, "True once committed, aborted, rolled back or closed.")
      .def("commit", &FrameHold::commit,
           "Retire the frame: COMMITTED, or DISCARDED_CANCELLED after request_cancel() (a FrameDisposition). "
           "SessionStateError if already finalized, the session is poisoned or terminal, or a flight of it is live; "
           "StaleAuthorityError if it is no longer the session's active frame.")
      .def("abort", &FrameHold::abort,
           "Finalize the frame and poison the session (the step's outcome is unknown). SessionStateError if "
           "already finalized or the session is terminal; StaleAuthorityError for a stale frame.")
      .def("rollback_unsubmitted", &FrameHold::rollback_unsubmitted,
           "Finalize a frame that was never submitted: the next frame reuses its id. SessionStateError unless the "
           "session is open and no flight of it is live; StaleAuthorityError for a stale frame.")
      .def("close", &FrameHold::drop, "Drop the hold now (poisons the session if unfinalized).")
      .def("__repr__", [](const FrameHold& f) {
        return "FrameHold(frame_id=" + std::to_string(f.frame_id()) + (f.finalized() ? ", finalized)" : ")");
      })
      .def("__enter__",
           [](nb::handle self) {
             if (nb::cast<FrameHold&>(self).finalized()) refuse_ended_enter("FrameHold", "the frame is finalized");
             return nb::borrow(self);
           },
           nb::sig("def __enter__(self) -> FrameHold"))
      .def("__exit__", [](FrameHold& f, nb::handle t, nb::handle, nb::handle) { frame_exit(f, t); },
           nb::arg("exc_type").none(), nb::arg("exc").none(), nb::arg("tb").none(),
           "Commit on a clean exit, abort (poison) on an exception, unless already finalized. The frame is "
           "finalized either way: a refused commit drops it (as close()) and raises why; a refused abort drops "
           "it and the exception leaving the block propagates.");

  nb::class_<FlightHold>(m, "FlightHold", "A participant flight: prepared -> in flight -> released.")
      .def_prop_ro("key", &FlightHold::key, "The participant's key (prepare_flight's argument).")
      .def_prop_ro("frame_id", &FlightHold::frame_id, "The id of the frame it belongs to.")
      .def_prop_ro("phase", &FlightHold::phase, "PREPARED or IN_FLIGHT (a FlightPhase).")
      .def_prop_ro("released", &FlightHold::released, "True once finished, released or closed.")
      .def("dispatch", &FlightHold::dispatch,
           "PREPARED -> IN_FLIGHT, before its work is submitted. SessionStateError if released, already in flight, "
           "or the session is not open.")
      .def("not_submitted", &FlightHold::not_submitted,
           "IN_FLIGHT -> PREPARED: the work never reached the device. SessionStateError if released, not in flight, "
           "or the session is terminal.")
      .def("finish", &FlightHold::finish,
           "IN_FLIGHT -> released: its work completed. SessionStateError if released or not in flight (use release).")
      .def("release", &FlightHold::release,
           "PREPARED -> released, never submitted. SessionStateError if released or in flight (use finish).")
      .def("close", &FlightHold::drop, "Drop the hold now (poisons the session if it was in flight).")
      .def("__repr__", [](const FlightHold& f) {
        return "FlightHold(key=" + std::to_string(f.key()) + ", frame_id=" + std::to_string(f.frame_id()) +
               (f.released() ? std::string(", released)") : ", phase=" + member_name(f.phase()) + ")");
      });
}

void bind_session(nb::module_& m) {
  nb::class_<SequenceSession>(m, "SequenceSession", "The lifecycle of one generated sequence." LIFECORE_RECYCLED)
      .def_prop_ro("resources", [](const SequenceSession& s) {
        return ResourcesHandle{s.resources()};
      }, "A new AdmittedSequenceResources hold on this session's admission (closing it leaves the session "
         "open). ClosedError once the session is closed.")
      .def("write_release_capacity_sources", [](const SequenceSession& s, nb::handle out) {
        constexpr const char* call = "write_release_capacity_sources";
        if (!nb::isinstance<nb::list>(out))
          raise(ErrorKind::TypeMismatch, argument_label(call, "sources") + " must be a list of CapacitySource, got " + type_name_of(out));
        // Every item is checked before the list changes: a refusal leaves it as it was.
        std::vector<CapacitySource> sources;
        std::size_t i = 0;
        for (nb::handle item : out) {
          const std::string label = "sources[" + std::to_string(i++) + "]";
          sources.push_back(object_argument<CapacitySource>(item, call, label.c_str(), "a CapacitySource"));
        }
        s.write_release_capacity_sources(sources);
        nb::list written;
        for (auto& src : sources) written.append(nb::cast(src));
        nb::list target = nb::borrow<nb::list>(out);
        target.clear();
        for (nb::handle src : written) target.append(src);
      }, nb::arg("sources").none(), nb::sig("def write_release_capacity_sources(self, sources: list[CapacitySource]) -> None"),
         "Add to `sources` the exact sources releasing this sequence advances (sorted, deduplicated); a source of "
         "another coordinator is refused (StaleAuthorityError), a non-source item with LifecoreTypeError.")
      .def_prop_ro("epoch", &SequenceSession::epoch,
                   "The session's epoch (a logical sequence has one incarnation); with fingerprint, what verify() checks.")
      .def_prop_ro("fingerprint", &SequenceSession::fingerprint,
                   "A hex SHA-256 of the session's identity (coordinator, authorities, request id, epoch, initial "
                   "backing), hashed on first read; stable for the session's life.")
      .def_prop_ro("sequence_authority", &SequenceSession::sequence_authority,
                   "The sequence's Authority (verify_sequence_authority checks it while the sequence is live).")
      .def_prop_ro("request_authority", &SequenceSession::request_authority, "The request's Authority.")
      .def("verify", [](const SequenceSession& s, nb::handle epoch, nb::handle fingerprint) {
             s.verify(uint_argument(epoch, "verify", "epoch"), str_argument(fingerprint, "verify", "fingerprint"));
           }, nb::arg("epoch").none(), nb::arg("fingerprint").none(), nb::sig("def verify(self, epoch: int, fingerprint: str) -> None"),
           "StaleAuthorityError unless (epoch, fingerprint) names this live session.")
      .def("register_admission_waiter", [](const SequenceSession& s, nb::handle deferred) {
             return s.register_admission_waiter(
                 object_argument<AdmissionDeferred>(deferred, "register_admission_waiter", "deferred", "an AdmissionDeferred"));
           }, nb::arg("deferred").none(), nb::sig("def register_admission_waiter(self, deferred: AdmissionDeferred) -> CapacityWaitRegistration"),
           "A CapacityWaitRegistration on the deferral's sources. StaleAuthorityError for a deferral of another "
           "coordinator, or a backing deferral of another sequence or an older generation; SessionStateError once "
           "the session is terminal; ClosedError once it or the coordinator is closed.")
      .def("try_ensure_backing_covers", [](SequenceSession& s, nb::handle tokens, nb::handle pages) {
             const std::int64_t t = positive_count_argument(tokens, "try_ensure_backing_covers", "tokens");
             const std::optional<std::int64_t> p =
                 pages.is_none() ? std::nullopt
                                 : std::optional<std::int64_t>(positive_count_argument(pages, "try_ensure_backing_covers", "pages"));
             // Ids come from the arena (no driver call): the GIL is let go only for a test's pause point.
             if (!pause_points::armed()) return s.try_ensure_backing_covers(t, p);
             GilRelease release;
             return s.try_ensure_backing_covers(t, p);
           }, nb::arg("tokens").none(), nb::arg("pages").none() = nb::none(),
           nb::sig("def try_ensure_backing_covers(self, tokens: typing.SupportsIndex, pages: typing.SupportsIndex | None = None) -> BackingDecision"),
           "Extend the backing to cover `tokens` (and `pages`; None: those the tokens need), between frames. Returns a "
           "BackingDecision: CURRENT, EXTENDED, RETRY_REQUIRED (a frame or flight is live, or the backing moved) or "
           "BACKING_DEFERRED. "
           "InvalidArgumentError for a bad target, CapacityError above the fit, SessionStateError unless open, "
           "ClosedError once closed.")
      .def("verify_backing_deferral", [](const SequenceSession& s, nb::handle decision) {
             s.verify_backing_deferral(object_argument<BackingDecision>(decision, "verify_backing_deferral", "decision", "a BackingDecision"));
           }, nb::arg("decision").none(), nb::sig("def verify_backing_deferral(self, decision: BackingDecision) -> None"),
           "StaleAuthorityError when the backing moved past the decision's expected_generation (retry instead of "
           "waiting); SessionStateError unless open; ClosedError once closed. Returns None.")
      .def("request_cancel", &SequenceSession::request_cancel,
           "OPEN -> CANCEL_REQUESTED: a live frame's commit is discarded, try_abort() ends the session. Returns a "
           "CancelSnapshot of what is live. SessionStateError if poisoned or terminal; ClosedError once closed.")
      .def("try_complete", &SequenceSession::try_complete,
           "OPEN -> COMPLETED; returns the TerminalReceipt. SessionStateError unless open, no frame or flight is "
           "live and a frame has retired; ClosedError once closed.")
      .def("try_abort", &SequenceSession::try_abort,
           "CANCEL_REQUESTED or POISONED -> ABORTED; returns the TerminalReceipt. SessionStateError when open (use "
           "try_abort_if_quiescent), terminal, or a frame or flight is live; ClosedError once closed.")
      .def("try_abort_if_quiescent", &SequenceSession::try_abort_if_quiescent,
           "OPEN or CANCEL_REQUESTED -> ABORTED when no frame or flight is live; returns the TerminalReceipt. "
           "Otherwise SessionStateError and nothing changes (poisoned: use try_abort); ClosedError once closed.")
      .def("acquire_frame", &SequenceSession::acquire_frame,
           "A FrameHold for the next frame id, holding the current backing snapshot. SessionStateError unless open "
           "or while a frame is active; ClosedError once closed.")
      .def("prepare_flight", [](SequenceSession& s, nb::handle key) {
             return s.prepare_flight(uint_argument(key, "prepare_flight", "key"));
           }, nb::arg("key").none(), nb::sig("def prepare_flight(self, key: int) -> FlightHold"),
           "A PREPARED FlightHold for participant `key` of the active frame. SessionStateError unless open, without "
           "an active frame, or when `key` is already prepared; ClosedError once closed.")
      .def_prop_ro("step_deferral", [](const SequenceSession& s) -> std::shared_ptr<AdmissionDeferred> {
             auto deferred = s.step_deferral();
             if (!deferred) return nullptr;
             return std::make_shared<AdmissionDeferred>(std::move(*deferred));
           }, nb::for_getter(nb::sig("def step_deferral(self, /) -> AdmissionDeferred | None")),
           "The deferral behind the last step() that answered BACKING_DEFERRED (to wait on or preempt for); "
              "None after any other answer.")
      .def_prop_ro("phase", &SequenceSession::phase, "The session's SessionPhase now (readable after close).")
      .def_prop_ro("backing", [](const SequenceSession& s) { return mutable_snapshot(s.backing()); },
                   "The current BackingSnapshot (the frontier). ClosedError once closed.")
      .def_prop_ro("next_frame_id", &SequenceSession::next_frame_id, "The id the next frame gets.")
      .def_prop_ro("active_frame", &SequenceSession::active_frame, "The id of the active frame, or None.")
      .def_prop_ro("flight_count", &SequenceSession::flight_count, "How many participant flights are live.")
      .def_prop_ro("retired_frames", &SequenceSession::retired_frames,
                   "Frames retired so far (committed or discarded), step() included.")
      .def_prop_ro("receipt", &SequenceSession::receipt, "The TerminalReceipt once COMPLETED or ABORTED; None before.")
      .def_prop_ro("closed", &SequenceSession::is_closed, "True once close() ran (or its with block ended).")
      .def("close", &close_session,
           "Drop the session now: fails it closed unless terminal. The capacity this frees goes back to the "
           "coordinator (its arena; device memory only goes back with the coordinator, without the GIL when this close "
           "lets go of it last).")
      .def("__repr__", [](const SequenceSession& s) {
        auto a = s.sequence_authority();
        return std::string("SequenceSession(authority=") + std::to_string(a.sparse_id) + "/" + std::to_string(a.generation) +
               ", phase=" + member_name(s.phase()) + ", next_frame=" + std::to_string(s.next_frame_id()) + ")";
      })
      .def("__enter__",
           [](nb::handle self) {
             if (nb::cast<SequenceSession&>(self).is_closed())
               refuse_ended_enter("SequenceSession", "the session is closed");
             return nb::borrow(self);
           },
           nb::sig("def __enter__(self) -> SequenceSession"))
      .def("__exit__", [](SequenceSession& s, nb::handle, nb::handle, nb::handle) { close_session(s); },
           nb::arg("exc_type").none(), nb::arg("exc").none(), nb::arg("tb").none());

  m.def("acquire_frames", [](nb::handle sessions) {
          const auto held = table_out::session_list(sessions, "acquire_frames", /*none_ok=*/false);
          return acquire_frames(held.objects);
        }, nb::arg("sessions").none(), nb::sig("def acquire_frames(sessions: collections.abc.Sequence[SequenceSession]) -> list[FrameHold]"),
        "Acquire one frame on every session, all or nothing.");
}

void bind_admission(nb::module_& m) {
  nb::class_<ResourcesHandle>(m, "AdmittedSequenceResources", "What an admission granted; open_session() is one-shot."
                              LIFECORE_RECYCLED)
      .def("open_session", [](ResourcesHandle& h) {
        h.get("open_session");
        // Made inside its Python object: no allocation of its own. A refusal leaves the
        // object unready, and it goes without running a destructor.
        static const nb::handle session_type = nb::type<SequenceSession>();  // bound for the module's life
        nb::object session = nb::inst_alloc(session_type);
        new (nb::inst_ptr<SequenceSession>(session)) SequenceSession(h.resources->open_session_here());
        nb::inst_mark_ready(session);
        return session;
      }, nb::sig("def open_session(self) -> SequenceSession"),
         "The SequenceSession of this admission: it keeps the resources until it closes, and its close spends "
         "them (every handle of them holds nothing since). SessionStateError when a session was already opened "
         "(by any holder); ClosedError once this handle is closed.")
      .def_prop_ro("request_id", [](const ResourcesHandle& h) { return std::string(h.get("request_id").request_id().view()); },
                   "The request id it was admitted under. ClosedError once this handle is closed or the session it "
                   "opened has closed (as every property but closed).")
      .def_prop_ro("prompt_tokens", [](const ResourcesHandle& h) { return h.get("prompt_tokens").prompt_tokens(); },
                   "The prompt's tokens: the initial backing covers them.")
      .def_prop_ro("fit_tokens", [](const ResourcesHandle& h) { return h.get("fit_tokens").fit_tokens(); },
                   "The most tokens the sequence may grow to (an extension above it is a CapacityError).")
      .def_prop_ro("fit_pages", [](const ResourcesHandle& h) { return h.get("fit_pages").fit_pages(); },
                   "The pages fit_tokens take, per domain.")
      .def_prop_ro("opened", [](const ResourcesHandle& h) { return h.get("opened").opened(); },
                   "True once open_session() succeeded.")
      .def_prop_ro("sequence_authority", [](const ResourcesHandle& h) { return h.get("sequence_authority").sequence_authority(); },
                   "The sequence's Authority.")
      .def_prop_ro("request_authority", [](const ResourcesHandle& h) { return h.get("request_authority").request_authority(); },
                   "The request's Authority.")
      .def_prop_ro("initial_backing", [](const ResourcesHandle& h) { return mutable_snapshot(h.get("initial_backing").initial_backing()); },
                   "The BackingSnapshot granted at admission (generation 1, covering the prompt).")
      .def_prop_ro("closed", [](const ResourcesHandle& h) { return h.closed(); },
                   "True once this handle let go (close()), or once the session the resources opened has closed: "
                   "they are spent then, and hold nothing.")
      .def("__repr__", [](const ResourcesHandle& h) {
        if (h.closed()) return std::string("AdmittedSequenceResources(closed)");
        const AdmittedSequenceResources& r = *h.resources;
        return "AdmittedSequenceResources(" + quoted(std::string(r.request_id("repr").view())) +
               ", prompt_tokens=" + std::to_string(r.prompt_tokens()) + ", fit_tokens=" + std::to_string(r.fit_tokens()) +
               ", opened=" + (r.opened() ? "True" : "False") + ")";
      })
      .def("close", [](ResourcesHandle& h) { let_go(std::move(h.resources)); },
           "Let go of this hold; capacity returns when the last holder goes.")
      .def("__enter__",
           [](nb::handle self) {
             if (nb::cast<ResourcesHandle&>(self).closed())
               refuse_ended_enter("AdmittedSequenceResources", "the handle is closed or its resources are spent");
             return nb::borrow(self);
           },
           nb::sig("def __enter__(self) -> AdmittedSequenceResources"))
      .def("__exit__", [](ResourcesHandle& h, nb::handle, nb::handle, nb::handle) { let_go(std::move(h.resources)); },
           nb::arg("exc_type").none(), nb::arg("exc").none(), nb::arg("tb").none());

  nb::class_<AdmittedDecision>(m, "Admitted", "Admission granted." LIFECORE_RECYCLED)
      .def_prop_ro("resources", [](const AdmittedDecision& a) { return a.resources; },
                   nb::sig("def resources(self) -> AdmittedSequenceResources"),
                   "The AdmittedSequenceResources granted: open_session() on it; closing it gives up this hold.")
      .def("__repr__", [](const AdmittedDecision& a) {
        const auto& h = a.handle();
        return h.closed() ? std::string("Admitted(<closed>)")
                          : "Admitted(" + quoted(std::string(h.resources->request_id("repr").view())) + ")";
      });

  nb::class_<AdmissionCoordinator>(m, "AdmissionCoordinator",
                                   "Capacity admission for sequences on one device. AdmissionCoordinator(device=None, *,\n"
                                   "domains, page_bytes, tokens_per_page, max_active_sequences): device None does host\n"
                                   "accounting (block ids, no memory); a lifecore.Device (kept open while the coordinator\n"
                                   "lives; its close() closes the coordinator) or a backend name (a device of its own)\n"
                                   "gives each domain an arena of that device's memory.",
                                   nb::is_weak_referenceable())
      .def(nb::new_([](nb::handle device, nb::handle domains, nb::handle page_bytes, nb::handle tokens_per_page,
                       nb::handle max_active_sequences) {
             constexpr const char* call = "AdmissionCoordinator";
             CoordinatorConfig config;
             config.domains = parse_domains(domains);
             config.page_bytes = uint_argument(page_bytes, call, "page_bytes", std::numeric_limits<std::uint64_t>::max(), 1);
             config.tokens_per_page = static_cast<std::uint32_t>(uint_argument(tokens_per_page, call, "tokens_per_page", max_u32, 1));
             config.max_active_sequences =
                 static_cast<std::uint32_t>(uint_argument(max_active_sequences, call, "max_active_sequences", max_u32, 1));
             config.memory = memory_for_device(device);
             GilRelease release;  // each domain's arena chunk comes from the driver
             return AdmissionCoordinator::create(std::move(config));
           }),
           nb::arg("device").none() = nb::none(), nb::kw_only(), nb::arg("domains").none(), nb::arg("page_bytes").none(),
           nb::arg("tokens_per_page").none(), nb::arg("max_active_sequences").none())
      .def("admit", [](AdmissionCoordinator& c, nb::handle request_id, nb::handle prompt_tokens, nb::handle fit_tokens,
                       nb::handle domains) {
             AdmissionRequest request;
             request.request_id = str_argument(request_id, "admit", "request_id");
             // Counts of tokens: a range that says so (the core's checks word the rest).
             request.prompt_tokens = int_argument(prompt_tokens, "admit", "prompt_tokens", 1);
             request.fit_tokens = int_argument(fit_tokens, "admit", "fit_tokens", 1);
             if (!domains.is_none()) {
               std::size_t i = 0;
               for (nb::handle item : sequence_argument(domains, "admit", "domains", "None or a sequence of domain names")) {
                 const std::string label = "domains[" + std::to_string(i++) + "]";
                 request.domains.push_back(str_argument(item, "admit", label.c_str()));
               }
               // The core reads an empty list as every domain: an empty one given is a caller's mistake.
               if (request.domains.empty())
                 raise(ErrorKind::InvalidArgument, "admit: domains names no domain (give None for every domain)");
             }
             return admission_to_python(c.admit(request));  // ids from the arena: no driver call
           },
           nb::arg("request_id").none(), nb::arg("prompt_tokens").none(), nb::arg("fit_tokens").none(), nb::arg("domains").none() = nb::none(),
           nb::sig("def admit(self, request_id: str, prompt_tokens: typing.SupportsIndex, fit_tokens: typing.SupportsIndex, "
                   "domains: collections.abc.Sequence[str] | None = None) -> Admitted | AdmissionDeferred | AdmissionRejected"),
           "Admitted(resources) | AdmissionDeferred | AdmissionRejected; capacity pressure is never an exception. "
           "domains: the capacity domains the request takes pages in (None: every domain), a name given twice "
           "counted once; an empty list or an unknown name is InvalidArgumentError. ClosedError once the coordinator or its device "
           "is closed.")
      .def("close", &AdmissionCoordinator::close, "Wake every waiter with ClosedError; refuse later admissions.")
      .def_prop_ro("closed", &AdmissionCoordinator::closed, "True once closed, or once its device is closed.")
      .def_prop_ro("id", &AdmissionCoordinator::id, "This coordinator's id: the coordinator_id of what it issues.")
      .def("grow_domain", [](AdmissionCoordinator& c, nb::handle name, nb::handle capacity_bytes) {
             const std::string domain = str_argument(name, "grow_domain", "name");
             const std::uint64_t bytes = uint_argument(capacity_bytes, "grow_domain", "capacity_bytes");
             GilRelease release;  // the new chunk comes from the driver
             c.grow_domain(domain, bytes);
           }, nb::arg("name").none(), nb::arg("capacity_bytes").none(), nb::sig("def grow_domain(self, name: str, capacity_bytes: typing.SupportsIndex) -> None"),
           "Raise domain `name`'s total to `capacity_bytes` (one arena chunk for the new blocks) and, where that adds "
           "a whole block, advance its epoch and wake its waiters (bytes short of a block serve no demand: the total "
           "grows, the epoch does not). InvalidArgumentError for an unknown domain, a shrink or a size above its "
           "maximum (each naming the bytes); ClosedError once closed; a refused allocation raises and changes "
           "nothing.")
      .def("capacity", &AdmissionCoordinator::capacity,
           "A CapacitySnapshot of the accounting now: each domain's usage, the active sequences, the epochs.")
      .def("holders", [](const AdmissionCoordinator& c) {
             // (request_id, pages per domain, domains, owners) for each sequence still holding capacity
             std::vector<std::tuple<std::string, std::uint64_t, std::vector<std::string>, long>> out;
             for (const auto& h : c.holders()) {
               std::vector<std::string> names;
               for (auto d : h.domains) names.push_back(c.domain_name(d));
               out.emplace_back(h.request_id, h.pages, std::move(names), h.holders);
             }
             return out;
           }, "What still holds capacity: (request_id, pages, domains, owners) per live sequence, pages counted in "
              "each of its domains (the same in every one); owners are the "
              "admitted resources (kept by their session until it closes), live frames and unreleased flights, never "
              "snapshots.")
      .def("epoch", [](const AdmissionCoordinator& c, nb::handle source) {
        return c.epoch_of(object_argument<CapacitySource>(source, "epoch", "source", "a CapacitySource"));
      }, nb::arg("source").none(), nb::sig("def epoch(self, source: CapacitySource) -> int"),
         "The epoch of `source` now; StaleAuthorityError for a source of another coordinator.")
      .def_prop_ro("release_epoch", &AdmissionCoordinator::release_epoch,
                   "Advanced whenever claimed capacity comes back: a sequence released, or a claim rolled back.")
      .def("fits_now", [](const AdmissionCoordinator& c, nb::handle deferred) {
             return c.fits_now(object_argument<AdmissionDeferred>(deferred, "fits_now", "deferred", "an AdmissionDeferred"));
           }, nb::arg("deferred").none(), nb::sig("def fits_now(self, deferred: AdmissionDeferred) -> bool"),
           "Whether the deferral's immediate demand (slots and domain bytes) would fit now; claims nothing. "
           "False while its fit is beyond a domain's total (only growth can admit it). "
           "StaleAuthorityError for a deferral of another coordinator.")
      .def("verify_sequence_authority", [](const AdmissionCoordinator& c, nb::handle authority) {
             c.verify_sequence_authority(object_argument<Authority>(authority, "verify_sequence_authority", "authority", "an Authority"));
           }, nb::arg("authority").none(), nb::sig("def verify_sequence_authority(self, authority: Authority) -> None"),
           "StaleAuthorityError unless `authority` is this coordinator's live sequence authority.")
      .def("register_waiter", [](AdmissionCoordinator& c, nb::handle deferred) {
             return c.register_waiter(object_argument<AdmissionDeferred>(deferred, "register_waiter", "deferred", "an AdmissionDeferred"));
           }, nb::arg("deferred").none(), nb::sig("def register_waiter(self, deferred: AdmissionDeferred) -> CapacityWaitRegistration"),
           "A CapacityWaitRegistration subscribed to the deferral's wait condition. StaleAuthorityError for a "
           "deferral or source of another coordinator; InvalidArgumentError for one without a wait condition; "
           "ClosedError once closed.")
      .def_prop_ro("domain_names", [](const AdmissionCoordinator& c) {
        std::vector<std::string> out;
        for (std::uint32_t i = 0; i < c.domain_count(); ++i) out.push_back(c.domain_name(i));
        return out;
      }, "The capacity domains' names, in the order configured.")
      .def_prop_ro("page_bytes", &AdmissionCoordinator::page_bytes, "Bytes of one KV page (one block) in every domain.")
      .def_prop_ro("tokens_per_page", &AdmissionCoordinator::tokens_per_page, "Tokens one page holds.")
      .def_prop_ro("max_active_sequences", &AdmissionCoordinator::max_active_sequences,
                   "The ceiling on sequences holding capacity at once.")
      .def_prop_ro("page_memory_kind", [](const AdmissionCoordinator& c) { return std::string(c.memory()->kind()); },
                   "'host' (device=None: block ids without memory) or 'driver' (an arena of a Device's memory).")
      .def("page_memory_stats", [](const AdmissionCoordinator& c) {
        // Python ints: two domains of 2**64 - 1 bytes hold more than a uint64 counts, and a
        // read of a coordinator the constructor accepted must answer.
        const auto exact = [](PyObject* result) {
          if (!result) throw nb::python_error();
          return nb::steal<nb::int_>(result);
        };
        nb::dict out, blocks, free_blocks;
        out["live_bytes"] = exact(PyNumber_Multiply(nb::int_(c.live_blocks()).ptr(), nb::int_(c.page_bytes()).ptr()));
        out["live_extents"] = c.live_takes();
        out["allocations"] = c.memory()->allocations();
        out["failed_releases"] = c.memory()->failed_releases();
        std::uint64_t chunks = 0;
        nb::int_ arena_bytes(0);
        for (std::uint32_t d = 0; d < c.domain_count(); ++d) {
          const ArenaState state = c.arena_state(d);
          const std::string& name = c.domain_name(d);
          const nb::str key(name.data(), name.size());  // the whole name, NULs and all
          blocks[key] = state.blocks;
          free_blocks[key] = state.free_blocks;
          chunks += state.chunks.size();
          for (const auto& chunk : state.chunks)
            arena_bytes = exact(PyNumber_Add(arena_bytes.ptr(), nb::int_(chunk.memory.bytes).ptr()));
        }
        out["arena_chunks"] = chunks;
        out["arena_bytes"] = arena_bytes;
        out["blocks"] = blocks;
        out["free_blocks"] = free_blocks;
        return out;
      }, nb::sig("def page_memory_stats(self) -> dict[str, int | dict[str, int]]"), "live_bytes (pages handed out * page_bytes), live_extents (takes: one per domain per admission or\n"
         "extension), allocations (arena chunks allocated: one per domain at creation and one per growth that\n"
         "adds a whole block, none for a domain or a growth of less than a page; never one per page), failed_releases, arena_chunks and arena_bytes (0 once the device closed: its close took\n"
         "the arena back), and blocks / free_blocks per domain. Under host accounting (device=None) the chunks\n"
         "and their bytes are counted as a device's would be, with no memory behind them (arena() refuses).")
      .def("fail_next_page_allocations", [](AdmissionCoordinator& c, nb::handle count_arg) {
        const std::uint64_t count = uint_argument(count_arg, "fail_next_page_allocations", "count");
        auto* host = dynamic_cast<HostPageMemory*>(c.memory().get());
        if (!host) raise(ErrorKind::InvalidArgument, "fail_next_page_allocations: only host page memory injects faults");
        host->fail_next_allocations(count);
      }, nb::arg("count").none(), nb::sig("def fail_next_page_allocations(self, count: int) -> None"), "Testing: make the next `count` physical page allocations fail (host memory only).")
      .def("__repr__", [](const AdmissionCoordinator& c) {
        std::string names;
        for (std::uint32_t i = 0; i < c.domain_count(); ++i) names += (i ? ", " : "") + quoted(c.domain_name(i));
        return "AdmissionCoordinator(id=" + std::to_string(c.id()) + ", page_memory=" + quoted(c.memory()->kind()) +
               ", domains=[" + names + "], closed=" + (c.closed() ? "True" : "False") + ")";
      })
      .def("__enter__",
           [](nb::handle self) {
             if (nb::cast<AdmissionCoordinator&>(self).closed())
               refuse_ended_enter("AdmissionCoordinator", "the coordinator is closed");
             return nb::borrow(self);
           },
           nb::sig("def __enter__(self) -> AdmissionCoordinator"))
      .def("__exit__", [](AdmissionCoordinator& c, nb::handle, nb::handle, nb::handle) { c.close(); },
           nb::arg("exc_type").none(), nb::arg("exc").none(), nb::arg("tb").none());
}

void bind_testing_hooks(nb::module_& m) {
  // Test-only: the core's deterministic pause points (see lifecore/sequence/pause_points.hpp).
  m.def("_sequence_pause_arm", [](const std::string& point) {
    if (point == "extension_prepared") return pause_points::arm(pause_points::Point::extension_prepared);
    if (point == "candidate_looked_at") return pause_points::arm(pause_points::Point::candidate_looked_at);
    raise(ErrorKind::InvalidArgument, "_sequence_pause_arm: unknown pause point '" + point + "'");
  }, nb::arg("point"), "Testing only: the next thread to reach `point` stops there until _sequence_pause_resume().");
  m.def("_sequence_pause_wait", [](double timeout) { return pause_points::wait_until_reached(timeout); },
        nb::arg("timeout").none(), nb::call_guard<GilRelease>(),
        "Testing only: True once a thread stopped at the armed point, False after `timeout` seconds.");
  m.def("_sequence_pause_resume", &pause_points::resume, "Testing only: let the stopped thread go on; disarm.");

  nb::class_<SequenceBenchLoop>(m, "_SequenceBenchLoop", "Benchmarks only: the sequence loops in C++ (untimed).")
      .def(nb::init<std::uint64_t, std::uint64_t, std::uint32_t>(), nb::arg("live"), nb::arg("target_tokens"),
           nb::arg("tokens_per_page"))
      .def("lifecycles", &SequenceBenchLoop::lifecycles, nb::arg("count"), nb::arg("primitives"),
           nb::call_guard<GilRelease>())
      .def("decode_steps", &SequenceBenchLoop::decode_steps, nb::arg("count"), nb::arg("primitives"),
           nb::call_guard<GilRelease>());
  m.def("_sequence_bookkeeping_sizes", [] {
    auto z = bookkeeping_sizes();
    nb::dict out;
    out["session_state"] = z.session_state;
    out["session_handle"] = z.session_handle;
    out["resources"] = z.resources;
    out["backing"] = z.backing;
    out["snapshot"] = z.snapshot;
    out["extent"] = z.extent;
    return out;
  }, nb::sig("def _sequence_bookkeeping_sizes() -> dict[str, int]"));
}

}  // namespace

void init_sequence(nb::module_& m) {
  bind_enums(m);
  bind_capacity_facts(m);
  bind_admission_answers(m);
  bind_backing(m);
  bind_terminal_facts(m);
  bind_waiters(m);
  bind_frames_and_flights(m);
  bind_session(m);
  init_sequence_step(m);
  bind_admission(m);
  init_sequence_arena(m);
  init_sequence_preemption(m);
  bind_testing_hooks(m);
}

}  // namespace lifecore::bindings
