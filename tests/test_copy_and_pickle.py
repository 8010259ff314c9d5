"""copy, deepcopy and pickle of the runtime's and the sequence core's types: values anyone can
build travel (rebuilt through the calls that make them, so an altered pickle is checked), and
handles and reports refuse with a LifecoreTypeError that says what to send instead."""

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
             list(_copy_protocol._VALUES) + list(_copy_protocol._HANDLES) + list(_copy_protocol._REPORTS)}
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
        _refuses(lifecore.backend_info("mock"), "backend_info(name)")
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
    for report in (coordinator.capacity(), coordinator.capacity().domains[0], deferred.immediate, deferred.blockers[0],
                   deferred.wait_condition, rejected):
        _refuses(report, "no constructor")
    _refuses(session.try_ensure_backing_covers(32), "outcome")
    flight = session.prepare_flight(1)
    _refuses(flight, "block ids")
    flight.release()
    assert coordinator.capacity().active_sequences == 1  # nothing refused let go of or took capacity
    frame.commit()
    _refuses(session.request_cancel(), "no constructor")
    _refuses(session.try_abort(), "no constructor")
    session.close()
