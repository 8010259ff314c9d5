"""copy, deepcopy and pickle of the runtime's and the sequence core's types: values anyone can
build travel (rebuilt through the calls that make them, so an altered pickle is checked), reports
of plain facts travel and compare by their checked state, and handles and the reports tied to one
coordinator refuse with a LifecoreTypeError that says what to send instead."""

from __future__ import annotations

import copy
import enum
import inspect
import pickle
import subprocess
import sys

import pytest

import lifecore
from lifecore import _copy_protocol, _core, kernels
from lifecore.errors import CaptureStateError, LifecoreTypeError
from lifecore.sequence import ActiveSequenceSlots, AdmissionCoordinator, CapacitySource, Domain, PhysicalMemory

ATTEMPTS = [copy.copy, copy.deepcopy, pickle.dumps]


def _round_trip(value):
    return pickle.loads(pickle.dumps(value))


def test_every_bound_class_of_the_runtime_and_sequence_core_has_an_answer():
    """A class added to the core without saying whether it travels would fall back to nanobind's
    bare 'cannot pickle': the tables must name each one."""
    named = {(module, name) for module, name in
             list(_copy_protocol._VALUES) + list(_copy_protocol._HANDLES) + list(_copy_protocol._REPORTS) +
             list(_copy_protocol._FACTS)}
    for module in (_core.runtime, _core.sequence, _core.driver):
        for name, cls in vars(module).items():
            if not inspect.isclass(cls) or issubclass(cls, (BaseException, enum.Enum)):
                continue
            if name in ("_Driver", "_VendorDriver"):
                continue  # the driver's own interface, never handed to a user
            assert (module, name) in named, f"{module.__name__}.{name} says nothing about copy and pickle"


@pytest.mark.parametrize("steps, owner", [([], None), (["prepare"], 0), (["prepare"], 7), (["prepare", "begin"], 3)])
def test_a_stream_capture_state_pickles_to_an_equal_state_in_the_same_place(steps, owner):
    state = lifecore.StreamCaptureState()
    for step in steps:
        state.prepare(owner) if step == "prepare" else state.begin()
    back = _round_trip(state)
    assert back == state and back is not state
    assert (back.variant, back.owner, back.is_recording()) == (state.variant, state.owner, state.is_recording())
    if state.is_recording():  # the copy moves on its own: ending it leaves the original recording
        assert back.end(owner).abandoned is False and state.is_recording()


@pytest.mark.parametrize("owner, caller", [(2, 2), (2, 5)])
def test_a_capture_end_pickles_and_copies_to_an_equal_report(owner, caller):
    state = lifecore.StreamCaptureState()
    state.prepare(owner)
    state.begin()
    end = state.end(caller)
    for back in (_round_trip(end), copy.copy(end), copy.deepcopy(end)):
        assert back == end and (back.owner, back.caller, back.abandoned) == (owner, caller, owner != caller)


def test_capacity_sources_pickle_as_sources_named_by_hand():
    coordinator = AdmissionCoordinator(domains={"kv": 4096}, page_bytes=4096, tokens_per_page=16,
                                       max_active_sequences=1)
    held = coordinator.admit("a", 16, 16)
    deferred = coordinator.admit("b", 16, 16)
    issued = deferred.wait_condition.sources[0]
    assert issued.coordinator_id == coordinator.id
    for source in (Domain("kv"), PhysicalMemory, ActiveSequenceSlots, issued):
        back = _round_trip(source)
        assert back == source and hash(back) == hash(source) and back.kind == source.kind
        assert back.domain == source.domain and back.coordinator_id is None  # a coordinator lives in one process
        assert copy.deepcopy(source) == source
    del held


def test_a_built_in_kernel_pickles_as_itself_and_copies_as_itself():
    for kernel in (kernels.axpy_f32, kernels.add_f32):
        assert _round_trip(kernel) is kernel
        assert copy.copy(kernel) is kernel and copy.deepcopy(kernel) is kernel


def test_values_read_back_in_another_interpreter():
    state = lifecore.StreamCaptureState()
    state.prepare(4)
    payload = pickle.dumps([state, Domain("kv"), kernels.scale_f32])
    code = ("import pickle, sys; s, d, k = pickle.loads(sys.stdin.buffer.read()); "
            "print(s.variant.name, s.owner, d.domain, k.name)")
    out = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().split() == ["PREPARE", "4", "kv", "scale_f32"]


def test_an_altered_pickle_is_checked_as_any_argument_is():
    with pytest.raises(LifecoreTypeError, match="no variant"):
        _copy_protocol._rebuild_capture_state("RECORDING", 1)
    with pytest.raises(LifecoreTypeError):
        _copy_protocol._rebuild_capture_state("PREPARE", "one")  # prepare's own check of an owner
    with pytest.raises(LifecoreTypeError, match="no source kind"):
        _copy_protocol._rebuild_source("GPU", None)
    with pytest.raises(LifecoreTypeError, match="no built-in kernel"):
        _copy_protocol._builtin_kernel("Device")
    with pytest.raises(LifecoreTypeError, match="no built-in kernel"):
        _copy_protocol._builtin_kernel(["axpy_f32"])
    forged = pickle.dumps(lifecore.StreamCaptureState()).replace(b"NO_CAPTURE", b"NO_CAPTUR_")
    with pytest.raises(LifecoreTypeError, match="no variant"):
        pickle.loads(forged)
    with pytest.raises(CaptureStateError):  # a window cannot end where it never began: no forged end either
        lifecore.StreamCaptureState().end(1)


def _refuses(obj, *words):
    for attempt in ATTEMPTS:
        with pytest.raises(LifecoreTypeError, match=f"^{type(obj).__name__} cannot be copied or pickled: ") as info:
            attempt(obj)
        assert isinstance(info.value, TypeError)  # what pickle's and copy's callers catch
        for word in words:
            assert word in str(info.value)


def test_runtime_handles_refuse_and_say_what_to_send():
    with lifecore.Device("mock") as device:
        stream = device.stream()
        buffer = stream.alloc(64)
        graph = stream.capture(lambda s: s.fill(buffer, 1), warmup=0)
        profile = stream.profile()
        _refuses(device, "open a Device in the receiving process")
        _refuses(stream, "make a stream")
        _refuses(buffer, "send its contents")
        _refuses(buffer.view("float32", (16,)), "send its contents")
        _refuses(graph, "capture the step again")
        _refuses(profile, "elapsed_ms")
        profile.stop()
        graph.replay()  # nothing refused changed anything
        stream.sync()
        assert stream.read(buffer)[:8] == (1).to_bytes(4, "little") * 2  # the fill wrote 32-bit words


def test_sequence_handles_and_reports_refuse_and_say_what_to_send():
    coordinator = AdmissionCoordinator(domains={"kv": 4 * 4096}, page_bytes=4096, tokens_per_page=16,
                                       max_active_sequences=1)
    admitted = coordinator.admit("a", 20, 40)
    deferred = coordinator.admit("b", 16, 16)
    rejected = coordinator.admit("c", 10**6, 10**6)
    resources = admitted.resources
    session = resources.open_session()
    frame = session.acquire_frame()
    table = coordinator.decode_table(2, 4)
    registration = coordinator.register_waiter(deferred)
    for handle, word in [(coordinator, "make a coordinator"), (admitted, "request id"), (deferred, "request id"),
                         (resources, "request id"), (session, "request id"), (frame, "block ids"),
                         (frame.snapshot, "numpy.array(snapshot.block_ids(domain))"), (session.sequence_authority, "request id"),
                         (table, "its table"), (registration, "register a waiter")]:
        _refuses(handle, word)
    _refuses(deferred.wait_condition, "epochs belong to this process's coordinator")
    _refuses(session.try_ensure_backing_covers(32), "outcome")
    flight = session.prepare_flight(1)
    _refuses(flight, "block ids")
    flight.release()
    assert coordinator.capacity().active_sequences == 1  # nothing refused let go of or took capacity
    frame.commit()
    session.request_cancel()
    _refuses(session.try_abort(), "authorities name sessions")
    session.close()


# ---- reports of plain facts ---------------------------------------------------------------------

def _facts():
    """One of each report of plain facts, from a coordinator and a session as an engine meets them."""
    coordinator = AdmissionCoordinator(domains={"kv": 4 * 4096, "v": (8 * 4096, 16 * 4096)},
                                       page_bytes=4096, tokens_per_page=16, max_active_sequences=1)
    admitted = coordinator.admit("a", 20, 40)
    deferred = coordinator.admit("b", 16, 48)
    rejected = coordinator.admit("c", 10**6, 10**6)
    session = admitted.resources.open_session()
    frame = session.acquire_frame()
    flight = session.prepare_flight(3)
    cancel = session.request_cancel()
    facts = [coordinator.capacity(), coordinator.capacity().domains[1], deferred.immediate, deferred.fit,
             deferred.blockers[0], rejected, cancel, lifecore.backend_info("mock"), lifecore.backend_info("cuda")]
    return facts, (coordinator, admitted, session, frame, flight)


def test_reports_of_plain_facts_copy_and_pickle_to_equal_reports():
    facts, _held = _facts()
    assert [type(f).__name__ for f in facts] == ["CapacitySnapshot", "DomainUsage", "CapacityDemand", "CapacityDemand",
                                                 "CapacityBlocker", "AdmissionRejected", "CancelSnapshot",
                                                 "BackendInfo", "BackendInfo"]
    for report in facts:
        for back in (_round_trip(report), copy.copy(report), copy.deepcopy(report)):
            assert back is not report and back == report and hash(back) == hash(report)
            assert repr(back) == repr(report)
    snapshot, demand, cancel, info = facts[0], facts[2], facts[6], facts[7]
    back = _round_trip(snapshot)
    assert back.used_bytes == snapshot.used_bytes == {"kv": 8192, "v": 8192}
    assert [d.maximum_bytes for d in back.domains] == [4 * 4096, 16 * 4096]
    assert (back.active_sequences, back.max_active_sequences) == (1, 1)
    assert _round_trip(demand).bytes == demand.bytes == {"kv": 4096, "v": 4096}
    assert _round_trip(cancel).flights == cancel.flights == [(3, lifecore.sequence.FlightPhase.PREPARED)]
    assert _round_trip(cancel).active_frame == cancel.active_frame is not None
    assert _round_trip(info).emulated and _round_trip(info).code_object_kinds == info.code_object_kinds
    # emulated travels with the report: a report under a name this registry does not know keeps
    # it (it was read back by name from the receiving registry), and it takes part in ==.
    state = list(info.__getstate__())
    state[0] = "their_emulator"
    renamed = _set_state(type(info), tuple(state))
    assert renamed.emulated and renamed.name == "their_emulator"
    state[11] = False
    assert _set_state(type(info), tuple(state)) != renamed


def test_reports_of_plain_facts_compare_by_value():
    facts, (coordinator, *_held) = _facts()
    snapshot = facts[0]
    assert coordinator.capacity() == snapshot and coordinator.capacity() is not snapshot
    assert len({snapshot, coordinator.capacity(), _round_trip(snapshot)}) == 1
    assert snapshot != snapshot.domains[0] and snapshot != snapshot.__getstate__() and snapshot != None  # noqa: E711
    assert facts[2] != facts[3]  # the immediate and the fit demand
    assert facts[7] != facts[8]  # two backends' infos
    grown = AdmissionCoordinator(domains={"kv": 4 * 4096}, page_bytes=4096, tokens_per_page=16,
                                 max_active_sequences=1)
    before = grown.capacity()
    held = grown.admit("x", 16, 16)
    assert grown.capacity() != before  # one byte count or epoch apart is another report
    del held


def test_a_rejection_read_back_names_no_coordinator_and_reports_the_same():
    facts, _held = _facts()
    rejected = facts[5]
    back = _round_trip(rejected)
    assert (back.request_id, back.reason) == (rejected.request_id, rejected.reason)
    assert [b.kind for b in back.blockers] == [b.kind for b in rejected.blockers]
    assert all(b.source.coordinator_id is None for b in back.blockers)
    assert all(b.source.coordinator_id is not None for b in rejected.blockers)


def test_reports_of_plain_facts_read_back_in_another_interpreter():
    facts, _held = _facts()
    payload = pickle.dumps(facts)
    code = ("import pickle, sys; r = pickle.loads(sys.stdin.buffer.read()); "
            "print(r[0].used_bytes['kv'], r[1].name, r[2].pages, r[4].kind.name, r[5].request_id, "
            "r[6].phase.name, r[7].name, r[7].emulated)")
    out = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().split() == ["8192", "v", "1", "ACTIVE_SEQUENCE_CEILING", "c", "CANCEL_REQUESTED",
                                           "mock", "True"]


def _set_state(cls, state):
    obj = cls.__new__(cls)  # what pickle and copy make before __setstate__
    obj.__setstate__(state)
    return obj


@pytest.mark.parametrize("cls_name, state, error, words", [
    ("DomainUsage", ("kv", 1, 4), LifecoreTypeError, "a tuple of 5 fields"),
    ("DomainUsage", ["kv", 1, 4, 8, 0], LifecoreTypeError, "got list"),
    ("DomainUsage", ("kv", 5, 4, 8, 0), lifecore.InvalidArgumentError, "used_bytes (5) exceeds total_bytes (4)"),
    ("DomainUsage", ("kv", 1, 9, 8, 0), lifecore.InvalidArgumentError, "total_bytes (9) exceeds maximum_bytes (8)"),
    ("DomainUsage", ("kv", -1, 4, 8, 0), lifecore.InvalidArgumentError, "state[1] (used_bytes)"),
    ("DomainUsage", (b"kv", 1, 4, 8, 0), LifecoreTypeError, "state[0] (name)' must be a str"),
    ("CapacitySnapshot", ((("kv", 1, 4, 8, 0),), 0, 1, 0, 0, 0), LifecoreTypeError,
     "state[0] (domains)[0]' must be a DomainUsage"),
    ("CapacitySnapshot", ((), 2, 1, 0, 0, 0), lifecore.InvalidArgumentError, "active_sequences (2) exceeds"),
    ("CapacitySnapshot", ((), 0, 2**32, 0, 0, 0), lifecore.LifecoreOverflowError, "max_active_sequences"),
    # BackendInfo reports no registry makes (accepted before; and emulated was left out, read
    # back from the receiving process's registry by name).
    ("BackendInfo", ("", True, "", 0, 1, "", "", 1, False, "cpu", ("builtin",), True), lifecore.InvalidArgumentError,
     "a backend needs a name"),
    ("BackendInfo", ("x", True, "", 0, 0, "", "", 1, False, "cpu", ("builtin",), True), lifecore.InvalidArgumentError,
     "an available backend sees at least one device"),
    ("BackendInfo", ("x", False, "", 0, 0, "", "", 2, False, "cuda", ("ptx",), False), lifecore.InvalidArgumentError,
     "an unavailable backend says why"),
    ("BackendInfo", ("x", True, "", 0, 1, "", "", 99, False, "cpu", ("builtin",), True), lifecore.InvalidArgumentError,
     "dlpack_device_type 99 is no DLPack device type"),
    ("BackendInfo", ("x", True, "", 0, 1, "", "", 1, False, "cpu", ("nonsense",), True), lifecore.InvalidArgumentError,
     "'nonsense' is no code object kind"),
    ("BackendInfo", ("x", True, "", 0, 1, "", "", 1, False, "cpu", (), True), lifecore.InvalidArgumentError,
     "at least one code object kind"),
    ("BackendInfo", ("x", True, "", 0, 1, "", "", 1, False, "", ("builtin",), True), lifecore.InvalidArgumentError,
     "torch_device is empty"),
    # Accepted before: reports no coordinator could make, as a coordinator refuses to be made.
    ("DomainUsage", ("", 0, 0, 8, 0), lifecore.InvalidArgumentError, "a domain needs a name"),
    ("DomainUsage", ("kv", 0, 0, 0, 0), lifecore.InvalidArgumentError, "maximum_bytes is 0"),
    ("CapacitySnapshot", ((), 0, 1, 1, 1, 1), lifecore.InvalidArgumentError, "it has no domains"),
    ("CapacitySnapshot", lambda: ((_set_state(_core.sequence.DomainUsage, ("kv", 0, 4, 8, 1)),), 0, 0, 1, 1, 1),
     lifecore.InvalidArgumentError, "max_active_sequences is 0"),
    # Accepted before: epochs no coordinator reports (they start at 1), a flight outside a frame,
    # a session completed while a frame was live.
    ("DomainUsage", ("kv", 0, 4, 8, 0), lifecore.InvalidArgumentError, "epoch is 0 (a coordinator's epochs start at 1)"),
    ("CapacitySnapshot", lambda: ((_set_state(_core.sequence.DomainUsage, ("kv", 0, 4, 8, 1)),), 0, 1, 1, 0, 1),
     lifecore.InvalidArgumentError, "an epoch is 0"),
    ("CancelSnapshot", (lifecore.sequence.SessionPhase.CANCEL_REQUESTED, None,
                        ((1, lifecore.sequence.FlightPhase.IN_FLIGHT),), 0),
     lifecore.InvalidArgumentError, "it has flights and no active frame"),
    ("CancelSnapshot", (lifecore.sequence.SessionPhase.COMPLETED, 3, (), 0), lifecore.InvalidArgumentError,
     "its phase is"),
    ("CancelSnapshot", (lifecore.sequence.SessionPhase.OPEN, 7, ((1, lifecore.sequence.FlightPhase.IN_FLIGHT),), 3),
     lifecore.InvalidArgumentError, "(request_cancel() reports CANCEL_REQUESTED)"),
    # The label of a field of an item (before: "statestate[3] ...").
    ("CapacityDemand", (1, 16, 1, ((0, "kv", -1),)), lifecore.InvalidArgumentError,
     "argument 'state[3] (domains)[0][2] (bytes)'"),
    ("CapacityDemand", (2, 16, 1, ()), lifecore.LifecoreOverflowError, "state[0] (sequences)"),
    ("CapacityDemand", (1, 16, 1, ((0, "kv", 4096), (1, "kv", 4096))), lifecore.InvalidArgumentError,
     "domain 'kv' appears twice"),
    ("CapacityDemand", (1, 16, 1, ((0, "kv"),)), LifecoreTypeError, "state[3] (domains)[0]' must be a tuple of 3"),
    ("CapacityBlocker", lambda: (3, Domain("kv")), LifecoreTypeError, "state[0] (kind)' must be a BlockerKind, got int"),
    ("CapacityBlocker", (lifecore.sequence.BlockerKind.ACTIVE_SEQUENCE_CEILING, "kv"), LifecoreTypeError,
     "state[1] (source)' must be a CapacitySource"),
    ("AdmissionRejected", lambda: ("c", "why", (Domain("kv"),)), LifecoreTypeError,
     "state[2] (blockers)[0]' must be a CapacityBlocker"),
    ("CancelSnapshot", (lifecore.sequence.SessionPhase.CANCEL_REQUESTED, None,
                        ((2, lifecore.sequence.FlightPhase.PREPARED), (2, lifecore.sequence.FlightPhase.IN_FLIGHT)), 0),
     lifecore.InvalidArgumentError, "sorted by key, each key once"),
    ("CancelSnapshot", ("CANCEL_REQUESTED", None, (), 0), LifecoreTypeError, "must be a SessionPhase"),
    # Accepted before: demands and blockers no coordinator makes (every demand covers tokens, a
    # page holds a token or more, each domain needs the same whole pages; each blocker kind has
    # its own kind of source).
    ("CapacityDemand", (1, 0, 1, ((0, "kv", 4096),)), lifecore.InvalidArgumentError, "tokens is 0"),
    ("CapacityDemand", (1, 16, 1, ((0, "kv", 4096), (0, "v", 4096))), lifecore.InvalidArgumentError,
     "domain index 0 appears twice"),
    ("CapacityDemand", (1, 16, 1, ((0, "", 4096),)), lifecore.InvalidArgumentError, "a domain has no name"),
    ("AdmissionRejected", ("r", "", ()), lifecore.InvalidArgumentError, "its reason is empty"),
    ("AdmissionRejected", ("r", "too big", ()), lifecore.InvalidArgumentError, "it has no blockers"),
    ("AdmissionRejected", lambda: ("r", "too big", (_set_state(
        _core.sequence.CapacityBlocker, (lifecore.sequence.BlockerKind.IMMEDIATE_AVAILABILITY, Domain("kv"))),)),
     lifecore.InvalidArgumentError, "a BlockerKind.IMMEDIATE_AVAILABILITY blocker (a rejection's blockers are"),
    ("AdmissionRejected", lambda: ("r", "too big", tuple(_set_state(
        _core.sequence.CapacityBlocker, (lifecore.sequence.BlockerKind.PERMANENT_DOMAIN_MAXIMUM, Domain("kv")))
        for _ in range(2))), lifecore.InvalidArgumentError, "domain 'kv' is named twice"),
    ("CapacityDemand", (1, 4, 2, ((0, "kv", 2**64 - 1),)), lifecore.InvalidArgumentError,
     "18446744073709551615 bytes in domain 'kv' are not 2 whole pages"),
    ("CapacityDemand", (1, 4, 0, ((0, "kv", 4096),)), lifecore.InvalidArgumentError, "pages is 0"),
    ("CapacityDemand", (0, 4, 0, ((0, "kv", 0),)), lifecore.InvalidArgumentError, "pages is 0"),
    ("CapacityDemand", (1, 1, 5, ((0, "kv", 5 * 4096),)), lifecore.InvalidArgumentError,
     "5 pages for an admission of 1 tokens"),
    ("CapacityDemand", (1, 4, 1, ()), lifecore.InvalidArgumentError, "it names no domain"),
    ("CapacityDemand", (1, 16, 1, ((0, "kv", 4096), (1, "v", 8192))), lifecore.InvalidArgumentError,
     "domain 'v' needs 8192 bytes and domain 'kv' 4096"),
    ("CapacityBlocker", lambda: (lifecore.sequence.BlockerKind.ACTIVE_SEQUENCE_CEILING, Domain("kv")),
     lifecore.InvalidArgumentError, "blocker names the source"),
    ("CapacityBlocker", lambda: (lifecore.sequence.BlockerKind.IMMEDIATE_AVAILABILITY, ActiveSequenceSlots),
     lifecore.InvalidArgumentError, "blocker names the source"),
    ("CapacityBlocker", lambda: (lifecore.sequence.BlockerKind.PHYSICAL_MEMORY_UNAVAILABLE, Domain("kv")),
     lifecore.InvalidArgumentError, "blocker names the source"),
    ("CapacityBlocker", lambda: (lifecore.sequence.BlockerKind.PERMANENT_DOMAIN_MAXIMUM, PhysicalMemory),
     lifecore.InvalidArgumentError, "blocker names the source"),
    ("BackendInfo", ("mock", 1, "", 0, 0, "", "", 1, False, "cpu", (), True), LifecoreTypeError,
     "state[1] (available)' must be a bool"),
    ("BackendInfo", ("mock", True, "", 0, 1, "", "", 1, False, "cpu", ("builtin", 7), True), LifecoreTypeError,
     "code_object_kinds)[1]' must be a str"),
])
def test_an_altered_report_state_is_refused_naming_the_field(cls_name, state, error, words):
    module = _core.driver if cls_name == "BackendInfo" else _core.sequence
    cls = getattr(module, cls_name)
    state = state() if callable(state) else state  # a source is made in the test, not at collection
    with pytest.raises(error) as info:
        _set_state(cls, state)
    assert f"{cls_name}.__setstate__" in str(info.value) and words in str(info.value)


def test_a_report_state_read_back_as_given_and_one_past_the_ceiling_refused():
    snapshot = AdmissionCoordinator(domains={"kv": 4096}, page_bytes=4096, tokens_per_page=16,
                                    max_active_sequences=3).capacity()
    assert _set_state(type(snapshot), snapshot.__getstate__()) == snapshot
    state = list(snapshot.__getstate__())
    state[1] = 4  # more sequences active than the ceiling: no coordinator reports that
    with pytest.raises(lifecore.InvalidArgumentError, match="active_sequences"):
        _set_state(type(snapshot), tuple(state))
