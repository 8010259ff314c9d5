"""Bad input: a clear exception, nothing changed, no capacity leaked."""

from __future__ import annotations

import numpy as np
import pytest

import lifecore
from lifecore.errors import (CapacityError, ClosedError, InvalidArgumentError, LifecoreTypeError,
                             SessionStateError, StaleAuthorityError)
from lifecore.sequence import (AdmissionCoordinator, Admitted, BackingOutcome, SessionPhase)

PAGE = 4096


def coordinator(**kw) -> AdmissionCoordinator:
    args = dict(domains={"kv": 16 * PAGE}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=4)
    args.update(kw)
    return AdmissionCoordinator(**args)


def snapshot(c):
    cap = c.capacity()
    return (cap.used_bytes, cap.active_sequences, cap.slots_epoch, cap.release_epoch,
            [d.epoch for d in cap.domains], c.page_memory_stats())


@pytest.mark.parametrize("kw", [
    dict(domains={}), dict(domains={"kv": 0}), dict(domains={"kv": -1}), dict(page_bytes=0),
    dict(tokens_per_page=0), dict(max_active_sequences=0), dict(tokens_per_page=-3),
    dict(domains={"kv": (4 * PAGE, 2 * PAGE)}),
])
def test_bad_coordinator_configuration(kw):
    with pytest.raises(InvalidArgumentError):
        coordinator(**kw)


def test_bad_device_argument():
    with pytest.raises(LifecoreTypeError):
        coordinator(device=42)


@pytest.mark.parametrize("prompt,fit", [(0, 16), (-1, 16), (16, 8), (16, -5)])
def test_bad_admission_tokens(prompt, fit):
    c = coordinator()
    before = snapshot(c)
    with pytest.raises(InvalidArgumentError):
        c.admit("r", prompt, fit)
    assert snapshot(c) == before


def test_unknown_domain():
    c = coordinator()
    before = snapshot(c)
    with pytest.raises(InvalidArgumentError, match=r"^admit: unknown capacity domain 'nope' \(the domain is 'kv'\)$"):
        c.admit("r", 16, 16, domains=["nope"])
    with pytest.raises(InvalidArgumentError, match=r"^grow_domain: unknown capacity domain 'nope' \(the domain is 'kv'\)$"):
        c.grow_domain("nope", PAGE)
    assert snapshot(c) == before


def test_an_unknown_domain_error_lists_every_domain():
    # The caller's typo is answered with what it could have named, in the coordinator's order.
    c = coordinator(domains={"k": 4 * PAGE, "v": 4 * PAGE, "state": PAGE})
    listed = r"\(the domains are 'k', 'v', 'state'\)$"
    with pytest.raises(InvalidArgumentError, match=r"^admit: unknown capacity domain 'kv' " + listed):
        c.admit("r", 16, 16, domains=["kv"])
    with pytest.raises(InvalidArgumentError, match=r"^num_blocks: unknown capacity domain 'K' " + listed):
        c.num_blocks("K")
    adm = c.admit("r", 16, 16)
    session = adm.resources.open_session()
    with pytest.raises(InvalidArgumentError, match=r"^block_ids: unknown capacity domain 'kv' " + listed):
        session.backing.block_ids("kv")


@pytest.mark.parametrize("domains", [{"kv": 4 * PAGE}, {"k": 4 * PAGE, "v": 4 * PAGE, "state": PAGE}])
def test_the_model_names_an_unknown_domain_as_the_core_does(domains):
    # The executable specification words the refusal as the core does, domain list included.
    from lifecore.models import sequence_session as model
    from lifecore.models.contract import ModelError

    c = coordinator(domains=domains)
    m = model.ModelCoordinator(domains=domains, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=4)
    # A NUL in the name: the core's message once ended there, and the two texts differed.
    for call, core_call, model_call in (("admit", lambda: c.admit("r", 16, 16, domains=["nope"]),
                                         lambda: m.admit("r", 16, 16, domains=["nope"])),
                                        ("grow_domain", lambda: c.grow_domain("nope", PAGE),
                                         lambda: m.grow_domain("nope", PAGE)),
                                        ("admit", lambda: c.admit("r", 16, 16, domains=["a\0b"]),
                                         lambda: m.admit("r", 16, 16, domains=["a\0b"]))):
        with pytest.raises(InvalidArgumentError) as core_error:
            core_call()
        with pytest.raises(ModelError) as model_error:
            model_call()
        assert model_error.value.kind == "InvalidArgument"
        assert model_error.value.message == str(core_error.value), call


@pytest.mark.parametrize("domains", [[], ()])
def test_an_empty_domain_list_is_refused(domains):
    """None means every domain; an empty list (a caller's list that ended up empty) is not read
    as every domain."""
    c = coordinator()
    before = snapshot(c)
    with pytest.raises(InvalidArgumentError, match="names no domain"):
        c.admit("r", 16, 16, domains=domains)
    assert snapshot(c) == before
    assert isinstance(c.admit("r", 16, 16, domains=["kv"]), Admitted)


def test_bad_extension_targets_change_nothing():
    c = coordinator()
    adm = c.admit("r", 20, 64)
    s = adm.resources.open_session()
    assert s.try_ensure_backing_covers(24).outcome == BackingOutcome.EXTENDED  # frontier (24, 2)
    before = snapshot(c), s.backing.generation
    cases = [
        (InvalidArgumentError, dict(tokens=0)),
        (InvalidArgumentError, dict(tokens=-4)),
        (InvalidArgumentError, dict(tokens=40, pages=1)),      # pages cannot hold tokens
        (InvalidArgumentError, dict(tokens=10, pages=3)),      # incomparable: fewer tokens, more pages
        (InvalidArgumentError, dict(tokens=8, pages=0)),
        (CapacityError, dict(tokens=65)),                      # above the fit limit
        (CapacityError, dict(tokens=16, pages=5)),
    ]
    for error, kw in cases:
        with pytest.raises(error):
            s.try_ensure_backing_covers(**kw)
        assert (snapshot(c), s.backing.generation) == before, kw
    with pytest.raises(InvalidArgumentError):
        s.step(0)
    with pytest.raises(CapacityError):
        s.step(100)
    assert s.phase == SessionPhase.OPEN and s.retired_frames == 0


def test_operations_on_terminal_and_dropped_sessions():
    c = coordinator()
    adm = c.admit("r", 16, 64)
    s = adm.resources.open_session()
    s.step(16)
    s.try_complete()
    before = snapshot(c)
    for op in (lambda: s.try_ensure_backing_covers(32), s.acquire_frame, lambda: s.prepare_flight(1),
               s.request_cancel, s.try_abort, lambda: s.step(16), lambda: s.write_release_capacity_sources([])):
        with pytest.raises(SessionStateError):
            op()
    assert snapshot(c) == before
    s.close()
    for op in (lambda: s.try_ensure_backing_covers(32), s.acquire_frame, s.request_cancel, lambda: s.resources):
        with pytest.raises(ClosedError):
            op()
    adm.resources.close()
    with pytest.raises(ClosedError):
        adm.resources.open_session()
    assert c.capacity().used_bytes == {"kv": 0} and c.page_memory_stats()["live_bytes"] == 0


def test_closed_coordinator_refuses_new_work_but_accounts_releases():
    c = coordinator()
    adm = c.admit("r", 16, 64)
    s = adm.resources.open_session()
    c.close()
    with pytest.raises(ClosedError):
        c.admit("x", 16, 16)
    with pytest.raises(ClosedError):
        s.try_ensure_backing_covers(32)
    assert s.phase == SessionPhase.OPEN and s.backing.generation == 1
    assert c.capacity().used_bytes == {"kv": PAGE}  # the prepared page rolled back
    assert c.page_memory_stats()["live_bytes"] == PAGE
    s.step(16)
    s.try_complete()
    s.close()
    adm.resources.close()
    assert c.capacity().used_bytes == {"kv": 0} and c.capacity().active_sequences == 0


@pytest.mark.parametrize("name, capacity, error", [
    ("kv", 2 * PAGE, ClosedError),           # a shrink: the closed coordinator refuses first
    ("kv", 64 * PAGE, ClosedError),          # above the maximum, likewise
    ("kv", 16 * PAGE, ClosedError),          # its size now
    ("nope", 16 * PAGE, InvalidArgumentError),  # an unknown name is refused before the state is read
])
def test_a_closed_coordinators_growth_is_refused_alike_by_the_model(name, capacity, error):
    from lifecore.models.contract import ModelError, error_kind
    from lifecore.models.sequence_session import ModelCoordinator

    config = dict(domains={"kv": (4 * PAGE, 32 * PAGE)}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=4)
    c = AdmissionCoordinator(**config)
    model = ModelCoordinator(**config)
    c.close()
    model.close()
    with pytest.raises(error):
        c.grow_domain(name, capacity)
    with pytest.raises(ModelError) as refused:
        model.grow_domain(name, capacity)
    assert error_kind(refused.value.kind) == error_kind(error.__name__)


def test_frame_and_flight_misuse():
    c = coordinator()
    adm = c.admit("r", 16, 64)
    s = adm.resources.open_session()
    with pytest.raises(SessionStateError):
        s.prepare_flight(1)  # no active frame
    f = s.acquire_frame()
    with pytest.raises(SessionStateError):
        s.acquire_frame()
    fl = s.prepare_flight(1)
    with pytest.raises(SessionStateError):
        fl.finish()  # not in flight
    with pytest.raises(SessionStateError):
        f.rollback_unsubmitted()  # flights live
    fl.release()
    with pytest.raises(SessionStateError):
        fl.release()
    f.commit()
    with pytest.raises(SessionStateError):
        f.commit()
    with pytest.raises(SessionStateError):
        f.rollback_unsubmitted()
    assert s.phase == SessionPhase.OPEN and s.retired_frames == 1


def test_negative_wait_timeout():
    c = coordinator(domains={"kv": PAGE})
    held = c.admit("a", 16, 16)
    d = c.admit("b", 16, 16)
    reg = c.register_waiter(d)
    with pytest.raises(InvalidArgumentError):
        reg.wait(-1)
    assert isinstance(held, Admitted)


def test_foreign_or_stale_admission_deferral_from_another_session():
    c = coordinator(domains={"kv": 2 * PAGE})
    a = c.admit("a", 16, 32).resources.open_session()
    b = c.admit("b", 16, 32).resources.open_session()
    d = a.try_ensure_backing_covers(32)
    assert d.outcome == BackingOutcome.BACKING_DEFERRED
    with pytest.raises(StaleAuthorityError):
        b.register_admission_waiter(d.deferred)


def test_numpy_integers_are_counts_where_ints_are():
    # The runtime and the capture lifecycle take a NumPy integer as a count; so do sequences (before:
    # LifecoreTypeError "must be an int, got int64", though step_all took an int64 array).
    np = pytest.importorskip("numpy")
    c = coordinator(domains={np.str_("kv"): np.int64(16 * PAGE)}, page_bytes=np.int64(PAGE),
                    tokens_per_page=np.uint32(16), max_active_sequences=np.int8(4))
    admitted = c.admit("a", np.int64(16), np.uint64(64))
    assert isinstance(admitted, Admitted)
    session = admitted.resources.open_session()
    assert session.step(np.int32(17)) == BackingOutcome.EXTENDED
    assert session.try_ensure_backing_covers(np.int64(48)).snapshot.tokens == 48
    c.grow_domain("kv", np.int64(16 * PAGE))
    assert c.block_table([session], np.int64(4), pad=np.int32(-1)).shape == (1, 4)
    with session.acquire_frame() as frame:
        assert session.prepare_flight(np.uint64(2**64 - 1)).key == 2**64 - 1
        frame.commit()
    # The same ranges as an int: a NumPy integer out of range is refused the same way.
    with pytest.raises(InvalidArgumentError, match="prompt_tokens"):
        c.admit("b", np.int64(-1), 16)
    # A bool is not a count, NumPy's included.
    for flag in (True, np.bool_(True)):
        with pytest.raises(LifecoreTypeError, match="tokens"):
            session.step(flag)
    assert [holder[0] for holder in c.holders()] == ["a"]


def test_an_array_that_is_no_integer_is_a_type_error_naming_the_count():
    """A float or many-element array has an __index__ slot that refuses: the count's check let
    that refusal through as a bare TypeError, naming neither the call nor the argument."""
    np = pytest.importorskip("numpy")
    c = coordinator()
    before = snapshot(c)
    for bad in (np.array([16.0]), np.array([16, 32]), np.float64(16.0)):
        with pytest.raises(LifecoreTypeError, match="admit: argument 'prompt_tokens'"):
            c.admit("a", bad, 64)
    assert snapshot(c) == before and c.holders() == []


def test_a_device_table_is_refused_before_it_is_exported():
    """Exporting a GPU tensor orders streams (torch makes its current stream wait), so an `out`
    whose __dlpack_device__ names a device is refused from that answer, before __dlpack__ runs."""
    c = coordinator()
    admitted = c.admit("a", 16, 64)
    assert isinstance(admitted, Admitted)
    session = admitted.resources.open_session()

    class DeviceTable:
        exported = False

        def __dlpack_device__(self):
            return (2, 0)  # DLPack's CUDA

        def __dlpack__(self, **kwargs):
            DeviceTable.exported = True
            raise AssertionError("exported")

    with pytest.raises(InvalidArgumentError, match=r"argument 'out' must live in host memory \(DLPack device type 2\)"):
        c.block_table([session], 4, DeviceTable())
    assert not DeviceTable.exported
    with pytest.raises(InvalidArgumentError, match="must live in host memory"):
        c.decode_table(1, 4, out=DeviceTable())
    assert not DeviceTable.exported


def test_errors_after_a_device_close_name_the_call_made():
    # Before: step() named try_ensure_backing_covers, register_waiter named
    # register_admission_waiter, and a DLPack export of a buffer named `ptr`.
    import numpy as np

    from lifecore.sequence import AdmissionDeferred

    dev = lifecore.Device("mock")
    s = dev.stream()
    buf = s.alloc(64)
    c = AdmissionCoordinator(dev, domains={"kv": 8 * 512}, page_bytes=512, tokens_per_page=4, max_active_sequences=1)
    session = c.admit("a", 4, 32).resources.open_session()
    deferred = c.admit("b", 4, 4)
    assert isinstance(deferred, AdmissionDeferred)
    dev.close()
    with pytest.raises(lifecore.ClosedError, match=r"^__dlpack(_device)?__: the device is closed"):
        np.from_dlpack(buf)
    with pytest.raises(lifecore.ClosedError, match=r"^step: "):
        session.step(20)
    with pytest.raises(lifecore.ClosedError, match=r"^try_ensure_backing_covers: "):
        session.try_ensure_backing_covers(20)
    with pytest.raises(lifecore.ClosedError, match=r"^register_waiter: "):
        c.register_waiter(deferred)
    with pytest.raises(lifecore.ClosedError, match=r"^register_admission_waiter: "):
        session.register_admission_waiter(deferred)


def test_a_message_quoting_a_name_with_a_nul_is_whole():
    # Before: a core error became its Python exception through a C string, so a request id
    # holding a NUL cut the message there ("admit: request id 'x").
    c = coordinator()
    held = c.admit("x\0y", 1, 16)
    with pytest.raises(InvalidArgumentError) as caught:
        c.admit("x\0y", 1, 16)
    assert str(caught.value) == "admit: request id 'x\0y' is already live; complete or close its sequence first"
    with pytest.raises(InvalidArgumentError) as caught:
        lifecore.Device("mock\0x")
    assert str(caught.value).startswith("Device: unknown backend 'mock\0x': expected 'auto'")
    del held


def test_should_retry_names_itself_once_nothing_holds_the_coordinator():
    import gc

    c = coordinator(domains={"kv": 2 * PAGE})
    kept = c.admit("a", 32, 32)  # both pages
    deferred = c.admit("b", 16, 16)
    registration = c.register_waiter(deferred)
    del c, kept
    gc.collect()
    with pytest.raises(ClosedError, match=r"^should_retry: the admission coordinator was closed"):
        registration.should_retry()
    with pytest.raises(ClosedError, match=r"^recheck: the admission coordinator was closed"):
        registration.recheck()


@pytest.mark.parametrize("pad", [-(2**31) - 1, 2**31, 2**63, -(2**64)])
def test_a_pad_outside_int32_is_an_overflow_either_way(pad) -> None:
    """The pad is written as an int32: a value outside it, below as above, does not fit (an
    overflow, also an InvalidArgumentError), and nothing is written."""
    c = AdmissionCoordinator(domains={"kv": 1 << 20}, page_bytes=4096, tokens_per_page=16, max_active_sequences=2)
    adm = c.admit("r", 16, 64)
    session = adm.resources.open_session()
    table = np.full((1, 4), 7, dtype=np.int32)
    with pytest.raises(lifecore.LifecoreOverflowError, match="argument 'pad' must be between -2\\*\\*31 and"):
        c.block_table([session], 4, table, pad=pad)
    with pytest.raises(lifecore.LifecoreOverflowError, match="argument 'pad'"):
        c.decode_table(1, 4, pad=pad)
    assert (table == 7).all()


def test_any_sequence_or_mapping_is_taken_where_the_stubs_say_so() -> None:
    """The stubs type these arguments Sequence and Mapping: a deque, a range or a mapping proxy
    is taken as a list, tuple or dict is (a scheduler may keep its batch in a deque), and what
    is no sequence (a str, bytes, an iterator, a dict) is still refused by name."""
    import collections
    import types

    from lifecore.sequence import acquire_frames, commit_frames, step_all

    c = AdmissionCoordinator(domains=types.MappingProxyType({"kv": 1 << 20}), page_bytes=4096, tokens_per_page=16,
                             max_active_sequences=4)
    assert c.domain_names == ["kv"]
    session = c.admit("a", 16, 64, domains=collections.deque(["kv"])).resources.open_session()
    assert step_all(collections.deque([session]), range(17, 18)).tolist() == [BackingOutcome.EXTENDED.value]
    frames = acquire_frames(collections.deque([session]))
    assert commit_frames(collections.deque(frames)).tolist() == [0]
    expected = c.block_table([session], 4)
    assert np.array_equal(c.block_table(collections.deque([session]), 4), expected)
    table = c.decode_table(1, 4)
    table.update(collections.deque([session]))
    assert np.array_equal(table.table, expected)
    for bad in ("ab", b"ab", iter([session]), {session: 1}):
        with pytest.raises(LifecoreTypeError, match=r"step_all: argument 'sessions' must be a sequence \(list, tuple"):
            step_all(bad, [18])
    with pytest.raises(LifecoreTypeError, match="argument 'domains' must be a mapping"):
        AdmissionCoordinator(domains=[("kv", 1 << 20)], page_bytes=4096, tokens_per_page=16, max_active_sequences=4)
    assert session.phase == SessionPhase.OPEN
