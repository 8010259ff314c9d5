"""Sequence sessions, hardened: waits that cannot wrap and yield to Ctrl-C, arithmetic at the
64-bit boundaries, coordinators that are never taken for one another, deferrals that something
wakes, a closed device, clear errors for wrong arguments, and the prepare -> publish window
pinned with the core's pause points."""

from __future__ import annotations

import _thread
import math
import threading
import time

import pytest

import lifecore
from lifecore import _core
from lifecore.errors import (
    ClosedError,
    InvalidArgumentError,
    LifecoreError,
    LifecoreOverflowError,
    LifecoreTypeError,
    SessionStateError,
    StaleAuthorityError,
)
from lifecore.sequence import (
    ActiveSequenceSlots,
    AdmissionCoordinator,
    AdmissionDeferred,
    AdmissionRejected,
    Admitted,
    BackingOutcome,
    BlockerKind,
    DeferralAction,
    Domain,
    PhysicalMemory,
    SessionPhase,
    acquire_frames,
    preempt_for,
)

from backend_roles import EMULATED
from signal_timer import Stop, python_handles_ctrl_c, stop_after

PAGE = 4096


def make(pages: int = 4, slots: int = 4, device=None) -> AdmissionCoordinator:
    return AdmissionCoordinator(device, domains={"kv": pages * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                max_active_sequences=slots)


def open_one(c: AdmissionCoordinator, prompt: int = 16, fit: int = 64, name: str = "r"):
    adm = c.admit(name, prompt, fit)
    assert isinstance(adm, Admitted), adm
    return adm, adm.resources.open_session()


def state(c: AdmissionCoordinator):
    """Everything a refused call must leave as it was."""
    cap = c.capacity()
    return ([(d.name, d.used_bytes, d.total_bytes, d.epoch) for d in cap.domains], cap.active_sequences,
            cap.slots_epoch, cap.release_epoch, cap.physical_epoch, c.page_memory_stats())


def blocked_waiter(c: AdmissionCoordinator):
    """A coordinator with its only slot taken, and a waiter on the slots: releasing wakes it."""
    adm, s = open_one(c)
    d = c.admit("waiting", 16, 16)
    assert isinstance(d, AdmissionDeferred) and d.wait_condition.sources == [ActiveSequenceSlots]
    return adm, s, c.register_waiter(d)


def release_later(seconds: float, *holds) -> threading.Thread:
    def run():
        time.sleep(seconds)
        for h in holds:
            h.close()
    t = threading.Thread(target=run)
    t.start()
    return t


# ---- section 2: wait(timeout) ----

@pytest.mark.parametrize("timeout", [math.nan, -1, -0.001, -math.inf, -(2**64), -(10**400)])
def test_wait_refuses_nan_and_negative_timeouts(timeout):
    c = make(slots=1)
    adm, s, reg = blocked_waiter(c)
    with pytest.raises(InvalidArgumentError) as info:
        reg.wait(timeout)
    assert isinstance(info.value, ValueError) and "timeout" in str(info.value)
    assert reg.wait(0) is False  # the registration is still usable


def test_wait_and_wait_async_take_a_numpy_timeout_as_a_number():
    # Before: wait(np.int64(0)) and wait(np.float32(0.1)) raised LifecoreTypeError (though
    # np.float64, a float subclass, passed), and wait_async refused them alike.
    import asyncio

    np = pytest.importorskip("numpy")
    c = make(slots=1)
    adm, s, reg = blocked_waiter(c)
    for timeout in (np.int64(0), np.uint8(0), np.float32(0.0), np.float16(0.001), np.float64(0.0)):
        assert reg.wait(timeout) is False
        assert asyncio.run(reg.wait_async(timeout)) is False
    # The same rules as for a float: NaN and negative refused, a bool is not a number.
    for bad, error in ((np.float32("nan"), InvalidArgumentError), (np.int64(-1), InvalidArgumentError),
                       (np.float32(-0.5), InvalidArgumentError), (np.bool_(False), LifecoreTypeError)):
        with pytest.raises(error, match="timeout"):
            reg.wait(bad)
        with pytest.raises(error, match="timeout"):
            asyncio.run(reg.wait_async(bad))
    assert asyncio.run(reg.wait_async(0.001, poll=np.float32(0.001))) is False
    s.close()
    adm.resources.close()
    assert reg.wait(np.float32(5)) is True


@pytest.mark.parametrize("timeout", ["1", True, b"1", [1]])
def test_wait_refuses_a_timeout_that_is_not_a_number(timeout):
    c = make(slots=1)
    adm, s, reg = blocked_waiter(c)
    with pytest.raises(LifecoreTypeError, match="timeout"):
        reg.wait(timeout)


@pytest.mark.time_limit(30)
@pytest.mark.parametrize("timeout", [None, math.inf, 1e10, 2**32, 2**63, 2**64, 1e300, 10**400])
def test_an_infinite_or_huge_timeout_blocks_like_none(timeout):
    # Before: the deadline wrapped and wait(inf) / wait(1e10) answered "no change" at once.
    c = make(slots=1)
    adm, s, reg = blocked_waiter(c)
    releaser = release_later(0.3, s)  # its close spends the resources: the slot goes back
    started = time.monotonic()
    assert reg.wait(timeout) is True
    assert time.monotonic() - started >= 0.25
    releaser.join()


def test_a_short_timeout_still_times_out():
    c = make(slots=1)
    adm, s, reg = blocked_waiter(c)
    started = time.monotonic()
    assert reg.wait(0.2) is False
    assert 0.15 <= time.monotonic() - started < 5
    assert reg.wait(0) is False


INTERRUPT_BOUND = 0.5  # seconds


def _interrupt_main_after(seconds: float, fired: list) -> threading.Timer:
    def fire():
        fired.append(time.monotonic())
        _thread.interrupt_main()
    timer = threading.Timer(seconds, fire)
    timer.start()
    return timer


@pytest.mark.time_limit(30)
@pytest.mark.parametrize("timeout", [None, math.inf, 1e10])
def test_a_blocked_wait_yields_to_ctrl_c_promptly(timeout):
    c = make(slots=1)
    adm, s, reg = blocked_waiter(c)
    fired: list = []
    with python_handles_ctrl_c():
        timer = _interrupt_main_after(0.2, fired)
        with pytest.raises(KeyboardInterrupt):
            reg.wait(timeout)
        latency = time.monotonic() - fired[0]
        timer.join()
    # The wait checks for signals every 50 ms; the bound leaves room for a loaded machine. Without
    # the slices the wait never returns (the test's time limit would end it).
    assert latency < INTERRUPT_BOUND, f"KeyboardInterrupt took {latency:.3f} s"
    # The registration is intact: a later release still wakes it.
    s.close()
    adm.resources.close()
    assert reg.wait(5) is True


@pytest.mark.time_limit(30)
def test_a_signal_handler_that_raises_stops_a_wait():
    c = make(slots=1)
    adm, s, reg = blocked_waiter(c)
    with stop_after(0.2) as fired:
        with pytest.raises(Stop):
            reg.wait(None)
        assert time.monotonic() - fired[0] < INTERRUPT_BOUND


# ---- section 2: every numeric input at 2**32, 2**63 and 2**64 ----

U32_MAX = 2**32 - 1


@pytest.mark.parametrize("field", ["tokens_per_page", "max_active_sequences"])
def test_u32_coordinator_settings_at_the_boundaries(field):
    args = dict(domains={"kv": PAGE}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=1)
    ok = AdmissionCoordinator(**{**args, field: U32_MAX})
    assert getattr(ok, field) == U32_MAX
    for value in (2**32, 2**63, 2**64):
        with pytest.raises(LifecoreOverflowError, match=field) as info:
            AdmissionCoordinator(**{**args, field: value})
        assert isinstance(info.value, OverflowError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("field", ["page_bytes", "domains"])
def test_byte_sizes_at_the_boundaries(field):
    def build(value):
        args = dict(domains={"kv": 2**64 - 1}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=1)
        args[field] = {"kv": value} if field == "domains" else value
        return AdmissionCoordinator(**args)

    for value in (2**32, 2**63, 2**64 - 1):
        build(value)
    with pytest.raises(LifecoreOverflowError, match=field):
        build(2**64)
    with pytest.raises(LifecoreOverflowError, match="maximum_bytes"):
        AdmissionCoordinator(domains={"kv": (0, 2**64)}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=1)


def test_page_memory_stats_answer_past_a_uint64():
    # Two domains of 2**64 - 1 bytes hold more than a uint64 counts: the read raised an
    # overflow for a coordinator its constructor accepted.
    c = AdmissionCoordinator(domains={"a": 2**64 - 1, "b": 2**64 - 1}, page_bytes=2**40, tokens_per_page=1,
                             max_active_sequences=4)
    blocks = (2**64 - 1) // 2**40
    assert c.page_memory_stats()["arena_bytes"] == 2 * blocks * 2**40 > 2**64
    admitted = [c.admit(f"r{i}", blocks // 2, blocks // 2) for i in range(2)]
    assert all(isinstance(a, Admitted) for a in admitted)
    assert c.page_memory_stats()["live_bytes"] == 2 * 2 * (blocks // 2) * 2**40 > 2**64
    for a in admitted:
        a.resources.close()
    assert c.page_memory_stats()["live_bytes"] == 0


def test_a_domain_that_can_never_hold_a_page_is_refused():
    # It gave a coordinator of no blocks that rejected every request without a word.
    with pytest.raises(InvalidArgumentError, match=r"domain 'kv' can never hold a page: its size \(10 bytes\) is below "
                                                   r"page_bytes \(4096\)"):
        AdmissionCoordinator(domains={"kv": 10}, page_bytes=4096, tokens_per_page=16, max_active_sequences=1)
    with pytest.raises(InvalidArgumentError, match=r"domain 'v' can never hold a page: its maximum \(4095 bytes\)"):
        AdmissionCoordinator(domains={"k": 4096, "v": (0, 4095)}, page_bytes=4096, tokens_per_page=16,
                             max_active_sequences=1)
    # A growable domain may start with no page, and a domain of one page holds one.
    grown = AdmissionCoordinator(domains={"kv": (0, 4096)}, page_bytes=4096, tokens_per_page=16, max_active_sequences=1)
    assert grown.num_blocks("kv") == 0
    assert AdmissionCoordinator(domains={"kv": 4096}, page_bytes=4096, tokens_per_page=16,
                                max_active_sequences=1).num_blocks() == 1


@pytest.mark.parametrize("field", ["prompt_tokens", "fit_tokens"])
def test_admission_counts_at_the_boundaries(field):
    c = make()
    before = state(c)
    args = dict(request_id="r", prompt_tokens=16, fit_tokens=16)
    # 2**32 tokens fit in the arithmetic but never in a 4-page domain: a decision, not an error.
    big = {**args, field: 2**32, "fit_tokens": 2**32}
    assert isinstance(c.admit(**big), AdmissionRejected)
    for value in (2**63, 2**64):
        with pytest.raises(LifecoreOverflowError, match=field):
            c.admit(**{**args, field: value})
    assert state(c) == before


def test_a_byte_count_that_would_wrap_is_refused_not_wrapped():
    # 2**40 pages of 2**32 bytes: 2**72 bytes would wrap to 0 and be admitted. A fit that can
    # never be served is a rejection, whichever bound it passes first (it raised an overflow
    # here, where the same fit with smaller pages was rejected for its int32 ids).
    c = AdmissionCoordinator(domains={"kv": 2**64 - 1}, page_bytes=2**32, tokens_per_page=1, max_active_sequences=2)
    before = state(c)
    rejected = c.admit("wrap", 1, 2**40)
    assert isinstance(rejected, AdmissionRejected) and "int32" in rejected.reason
    assert state(c) == before
    huge = AdmissionCoordinator(domains={"kv": 2**64 - 1}, page_bytes=2**40, tokens_per_page=1, max_active_sequences=2)
    rejected = huge.admit("wrap", 1, 2**30)  # 2**30 pages: within the ids, 2**70 bytes
    assert isinstance(rejected, AdmissionRejected)
    assert "1073741824 pages of 1099511627776 bytes exceeds 2**64 bytes" in rejected.reason
    assert huge.capacity().used_bytes == {"kv": 0} and huge.capacity().active_sequences == 0
    # Just below the wrap: a fit of 2**32 - 1 pages is 2**64 - 2**32 bytes, within the domain,
    # but more pages than the domain has int32 block ids: rejected for that, not wrapped.
    rejected = c.admit("edge", 1, 2**32 - 1)
    assert isinstance(rejected, AdmissionRejected) and "int32" in rejected.reason
    adm = c.admit("edge", 1, 2**31)
    assert isinstance(adm, Admitted) and adm.resources.fit_pages == 2**31
    adm.resources.close()
    assert c.capacity().used_bytes == {"kv": 0}


def test_grow_domain_at_the_boundaries():
    c = AdmissionCoordinator(domains={"kv": (PAGE, 2**63)}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=1)
    c.grow_domain("kv", 2**32)
    before = state(c)
    with pytest.raises(LifecoreOverflowError, match="capacity_bytes"):
        c.grow_domain("kv", 2**64)
    c.grow_domain("kv", 2**63)
    assert c.capacity().domains[0].total_bytes == 2**31 * PAGE  # all that its int32 block ids can hand out
    assert state(c) != before


@pytest.mark.parametrize("call", ["extend_tokens", "extend_pages", "step"])
def test_session_counts_at_the_boundaries(call):
    c = make()
    adm, s = open_one(c)
    before = (state(c), s.backing.generation, s.next_frame_id, s.phase)
    run = {
        "extend_tokens": lambda v: s.try_ensure_backing_covers(v),
        "extend_pages": lambda v: s.try_ensure_backing_covers(16, v),
        "step": lambda v: s.step(v),
    }[call]
    with pytest.raises(lifecore.errors.CapacityError):
        run(2**32)  # above the request's fit limit
    for value in (2**63, 2**64):
        with pytest.raises(LifecoreOverflowError):
            run(value)
    assert (state(c), s.backing.generation, s.next_frame_id, s.phase) == before


def test_flight_keys_and_epochs_at_the_boundaries():
    c = make()
    adm, s = open_one(c)
    frame = s.acquire_frame()
    for key in (2**32, 2**63, 2**64 - 1):
        s.prepare_flight(key).release()
    with pytest.raises(LifecoreOverflowError, match="key"):
        s.prepare_flight(2**64)
    assert s.flight_count == 0
    frame.commit()
    for epoch in (2**32, 2**63):
        with pytest.raises(StaleAuthorityError):
            s.verify(epoch, s.fingerprint)
    with pytest.raises(LifecoreOverflowError, match="epoch"):
        s.verify(2**64, s.fingerprint)
    s.verify(s.epoch, s.fingerprint)
    with pytest.raises(LifecoreOverflowError, match="count"):
        c.fail_next_page_allocations(2**64)
    c.fail_next_page_allocations(2**63)
    c.fail_next_page_allocations(0)


# ---- section 4: coordinators are never taken for one another ----

def test_an_authority_of_another_coordinator_is_refused():
    gpu0, gpu1 = make(), make()
    _, s0 = open_one(gpu0)
    _, s1 = open_one(gpu1)
    a0, a1 = s0.sequence_authority, s1.sequence_authority
    # Same (sparse id, generation) on both: only the coordinator tells them apart.
    assert (a0.sparse_id, a0.generation) == (a1.sparse_id, a1.generation)
    assert a0 != a1 and a0.coordinator_id == gpu0.id and a1.coordinator_id == gpu1.id
    gpu0.verify_sequence_authority(a0)
    with pytest.raises(StaleAuthorityError, match="another coordinator"):
        gpu0.verify_sequence_authority(a1)
    with pytest.raises(StaleAuthorityError, match="another coordinator"):
        gpu1.verify_sequence_authority(a0)


def test_preemption_never_picks_a_session_of_another_coordinator():
    gpu0, gpu1 = make(pages=2), make(pages=2)
    _, mine = open_one(gpu0, prompt=32, fit=32, name="mine")
    _, theirs = open_one(gpu1, prompt=32, fit=32, name="theirs")
    d = gpu0.admit("new", 32, 32)
    assert isinstance(d, AdmissionDeferred)
    before1 = state(gpu1)
    report = preempt_for(gpu0, d, [theirs])
    assert report.victims == [] and not report.satisfied
    assert [a for a, _ in report.skipped] == [theirs.sequence_authority]
    assert theirs.phase == SessionPhase.OPEN and not theirs.closed and state(gpu1) == before1
    # With its own session among the candidates, that one is picked.
    report = preempt_for(gpu0, d, [theirs, mine])
    assert report.victims == [mine.sequence_authority] and report.satisfied
    assert theirs.phase == SessionPhase.OPEN


def _preempt_paused_at_a_candidate(c, d, candidates, meanwhile):
    """preempt_for on a thread, paused at its first candidate while ``meanwhile()`` runs."""
    result = {}

    def run():
        try:
            result["report"] = preempt_for(c, d, candidates)
        except BaseException as error:  # noqa: BLE001 - reported to the test thread
            result["error"] = error

    _core._sequence_pause_arm("candidate_looked_at")
    try:
        thread = threading.Thread(target=run)
        thread.start()
        assert _core._sequence_pause_wait(10), "preempt_for never reached its pause point"
        meanwhile()
    finally:
        _core._sequence_pause_resume()
    thread.join(10)
    assert result.get("report") is not None, result
    return result["report"]


@pytest.mark.time_limit(30)
def test_a_candidate_its_owner_closes_during_preemption_is_skipped_and_the_victims_reported():
    """preempt_for runs without the GIL, so a candidate's owner may close it between its look
    and its abort: that candidate is skipped, and the pass still reports what it aborted."""
    c = make(pages=2)
    _, closed_meanwhile = open_one(c, prompt=16, fit=16, name="closed")
    _, victim = open_one(c, prompt=16, fit=16, name="victim")
    d = c.admit("new", 32, 32)
    assert isinstance(d, AdmissionDeferred)
    # its owner ends it while the pass looks at it
    report = _preempt_paused_at_a_candidate(c, d, [closed_meanwhile, victim], closed_meanwhile.close)
    assert [a for a, _ in report.skipped] == [closed_meanwhile.sequence_authority]
    assert "closed" in report.skipped[0][1]
    assert report.victims == [victim.sequence_authority] and report.satisfied
    assert victim.phase == SessionPhase.ABORTED and victim.closed
    assert c.capacity().used_bytes == {"kv": 0} and c.holders() == []


@pytest.mark.time_limit(30)
@pytest.mark.parametrize("change", ["closed", "framed"])
def test_a_requester_gone_during_preemption_stops_the_pass_before_a_victim(change):
    """A backing deferral whose sequence closes (or holds other pages) while the pass runs is
    stale from then on: the pass aborts nobody for it, and says why for each candidate left."""
    c = make(pages=3)
    adm_long, long = open_one(c, prompt=32, fit=48, name="long")
    _, v1 = open_one(c, prompt=16, fit=16, name="v1")
    d = long.try_ensure_backing_covers(48).deferred
    assert d is not None

    def meanwhile():
        if change == "closed":
            long.close()  # the requester's owner ends it while the pass looks at a victim
            adm_long.resources.close()
        else:
            long.acquire_frame().commit()  # ... or it runs a frame: its pages, and its demand, stay

    report = _preempt_paused_at_a_candidate(c, d, [v1], meanwhile)
    if change == "closed":
        assert report.victims == [] and v1.phase == SessionPhase.OPEN and not v1.closed
        assert [a for a, _ in report.skipped] == [v1.sequence_authority]
        assert "the sequence that asked to grow is gone" in report.skipped[0][1]
        assert c.capacity().used_bytes == {"kv": PAGE}  # v1's page: only the requester's came back
    else:
        assert report.victims == [v1.sequence_authority]  # the same demand: still worth a victim
    v1.close()
    long.close()


def test_sources_name_their_coordinator():
    gpu0, gpu1 = make(), make()
    _, s0 = open_one(gpu0)
    _, s1 = open_one(gpu1)
    out0, out1 = [], []
    s0.write_release_capacity_sources(out0)
    s1.write_release_capacity_sources(out1)
    assert out0 == [ActiveSequenceSlots, Domain("kv"), PhysicalMemory]  # a source named by hand matches either
    assert all(a != b for a, b in zip(out0, out1))       # but two coordinators' never match
    assert {s.coordinator_id for s in out0} == {gpu0.id} and Domain("kv").coordinator_id is None
    with pytest.raises(StaleAuthorityError):
        gpu0.epoch(out1[1])
    foreign = [out1[1]]
    with pytest.raises(StaleAuthorityError):
        s0.write_release_capacity_sources(foreign)
    assert foreign == [out1[1]]  # refused: the list is as it was
    assert gpu0.epoch(out0[1]) == gpu0.epoch(Domain("kv"))


def test_a_deferral_of_another_coordinator_is_refused_everywhere():
    gpu0, gpu1 = make(slots=1), make(slots=1)
    held = [open_one(gpu0), open_one(gpu1)]
    d1 = gpu1.admit("x", 16, 16)
    assert isinstance(d1, AdmissionDeferred) and len(held) == 2
    for call in (gpu0.fits_now, gpu0.register_waiter, lambda d: preempt_for(gpu0, d, [])):
        with pytest.raises(StaleAuthorityError):
            call(d1)


# ---- section 5: deferrals that something wakes; a closed device ----

@pytest.mark.time_limit(30)
def test_a_failed_page_take_defers_on_physical_memory_and_a_release_wakes_the_waiter():
    # A device's arena is allocated up front, so only host accounting's injected refusal
    # reaches the physical deferral path now.
    c = make(pages=8)
    held, s = open_one(c, prompt=16, fit=16, name="held")
    c.fail_next_page_allocations(1)
    d = c.admit("r", 32, 64)
    assert isinstance(d, AdmissionDeferred)
    assert d.wait_condition.sources == [PhysicalMemory] and d.action == DeferralAction.WAIT_FOR_RELEASE
    assert [b.kind for b in d.blockers] == [BlockerKind.PHYSICAL_MEMORY_UNAVAILABLE]
    assert c.capacity().used_bytes == {"kv": PAGE}  # the claim rolled back
    reg = c.register_waiter(d)
    assert reg.wait(0) is False  # nothing was released yet
    releaser = release_later(0.2, s)  # its close spends the resources: the pages go back
    assert reg.wait(10) is True  # before: nothing ever advanced Domain('kv') here
    releaser.join()
    assert isinstance(c.admit("r", 32, 64), Admitted)


def test_the_sources_a_release_advances_name_physical_memory():
    """A release gives its ids back to the arenas and advances PhysicalMemory (a deferral on
    physical memory waits for it), so write_release_capacity_sources names it: before, the
    sources it projected left out one that the release advances."""
    c = make(pages=8)
    adm, s = open_one(c, prompt=16, fit=16, name="released")
    out: list = []
    s.write_release_capacity_sources(out)
    assert out == [ActiveSequenceSlots, Domain("kv"), PhysicalMemory]
    before = {source: c.epoch(source) for source in (ActiveSequenceSlots, Domain("kv"), PhysicalMemory)}
    s.close()
    adm.resources.close()
    assert all(c.epoch(source) > before[source] for source in out)


@pytest.mark.time_limit(30)
def test_a_failed_extension_take_defers_on_physical_memory():
    c = make(pages=8)
    other, o = open_one(c, name="other")
    adm, s = open_one(c)
    c.fail_next_page_allocations(1)
    decision = s.try_ensure_backing_covers(48)
    assert decision.outcome == BackingOutcome.BACKING_DEFERRED and "physical" in decision.reason
    d = decision.deferred
    assert d.wait_condition.sources == [PhysicalMemory] and d.is_backing_deferral
    assert d.sequence_authority == s.sequence_authority and d.expected_generation == 1
    reg = s.register_admission_waiter(d)
    o.close()
    other.resources.close()  # its pages go back: the physical source advances
    assert reg.wait(10) is True
    assert s.try_ensure_backing_covers(48).outcome == BackingOutcome.EXTENDED


def test_a_device_fault_never_reaches_an_admission_or_extension():
    with lifecore.Device(EMULATED) as dev:
        c = make(pages=8, device=dev)
        adm, s = open_one(c)
        dev.inject_fault("mem_alloc", 2, times=1)
        assert s.try_ensure_backing_covers(48).outcome == BackingOutcome.EXTENDED
        assert isinstance(c.admit("q", 16, 16), Admitted)
        dev.clear_faults()


def test_a_logical_deferral_never_touches_the_device():
    c = make(pages=4)
    _, s = open_one(c, prompt=16, fit=64)
    _, t = open_one(c, prompt=48, fit=48, name="t")
    stats = c.page_memory_stats()
    d = s.try_ensure_backing_covers(48)
    assert d.outcome == BackingOutcome.BACKING_DEFERRED and d.deferred.wait_condition.sources == [Domain("kv")]
    assert c.page_memory_stats() == stats  # before: pages were allocated, then freed
    with lifecore.Device(EMULATED) as dev:
        c2 = make(pages=4, device=dev)
        _, s2 = open_one(c2, prompt=16, fit=64)
        _, t2 = open_one(c2, prompt=48, fit=48, name="t")
        stats = c2.page_memory_stats()
        assert stats["allocations"] == 1 and stats["live_extents"] == 2  # one arena chunk, two takes
        assert s2.try_ensure_backing_covers(48).outcome == BackingOutcome.BACKING_DEFERRED
        assert c2.page_memory_stats() == stats


def test_a_closed_device_refuses_admission_and_extension_and_leaks_nothing():
    dev = lifecore.Device(EMULATED)
    c = make(pages=8, device=dev)
    adm, s = open_one(c, prompt=16, fit=64)
    deferred_slots = make(pages=8, slots=1, device=dev)
    busy, b = open_one(deferred_slots)
    d = deferred_slots.admit("later", 16, 16)
    dev.close()
    assert c.closed
    allocations = c.page_memory_stats()["allocations"]
    with pytest.raises(ClosedError, match="device"):
        c.admit("after", 16, 16)
    with pytest.raises(ClosedError, match="device"):
        s.try_ensure_backing_covers(32)
    with pytest.raises(ClosedError):
        s.step(32)
    with pytest.raises(ClosedError):
        c.grow_domain("kv", 8 * PAGE)
    with pytest.raises(ClosedError):
        deferred_slots.register_waiter(d)
    assert c.page_memory_stats()["allocations"] == allocations  # nothing allocated after close
    # A live sequence stays a valid state machine on the pages it has; it reaches its end.
    assert s.step(16) == BackingOutcome.CURRENT
    assert s.try_complete().outcome == lifecore.sequence.TerminalOutcome.COMPLETED
    # The last holder returns the pages to the driver: nothing leaks, no free is refused.
    s.close()
    adm.resources.close()
    b.close()
    busy.resources.close()
    for coordinator in (c, deferred_slots):
        stats = coordinator.page_memory_stats()
        assert stats["live_extents"] == 0 and stats["live_bytes"] == 0 and stats["failed_releases"] == 0
        assert coordinator.capacity().used_bytes == {"kv": 0}


@pytest.mark.time_limit(30)
def test_closing_the_device_wakes_a_waiter_with_closed_error():
    dev = lifecore.Device(EMULATED)
    c = make(slots=1, device=dev)
    adm, s, reg = blocked_waiter(c)
    closer = threading.Timer(0.2, dev.close)
    closer.start()
    started = time.monotonic()
    with pytest.raises(ClosedError):
        reg.wait(None)
    assert time.monotonic() - started < 5
    closer.join()
    s.close()
    adm.resources.close()
    assert c.page_memory_stats()["live_extents"] == 0


def test_a_coordinator_cannot_be_made_on_a_closed_device():
    dev = lifecore.Device(EMULATED)
    dev.close()
    with pytest.raises(ClosedError):
        make(device=dev)


# ---- section 6: wrong arguments get clear lifecore errors and change nothing ----

@pytest.mark.parametrize("domains, error, needle", [
    ({"kv": 4096.0}, LifecoreTypeError, "domains['kv']"),
    ({"kv": 2**64}, LifecoreOverflowError, "domains['kv']"),
    ({"kv": None}, LifecoreTypeError, "domains['kv']"),
    ({1: 4096}, LifecoreTypeError, "domain name"),
    ({"kv": True}, LifecoreTypeError, "domains['kv']"),
    ({"kv": 0}, InvalidArgumentError, "domains['kv']"),
    ({"kv": -1}, InvalidArgumentError, "domains['kv']"),
    ({"kv": (1, 2, 3)}, InvalidArgumentError, "tuple"),
    ({"kv": ("a", 2)}, LifecoreTypeError, "capacity_bytes"),
    ([("kv", 4096)], LifecoreTypeError, "domains"),
])
def test_bad_domains_are_refused_clearly(domains, error, needle):
    # Before: RuntimeError: std::bad_cast.
    with pytest.raises(error) as info:
        AdmissionCoordinator(domains=domains, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=1)
    assert needle in str(info.value) and "AdmissionCoordinator" in str(info.value)


@pytest.mark.parametrize("field, value, error", [
    ("page_bytes", 4096.0, LifecoreTypeError), ("page_bytes", None, LifecoreTypeError), ("page_bytes", 0, InvalidArgumentError),
    ("tokens_per_page", True, LifecoreTypeError), ("tokens_per_page", -1, InvalidArgumentError),
    ("max_active_sequences", "4", LifecoreTypeError), ("max_active_sequences", 0, InvalidArgumentError),
    ("device", 5, LifecoreTypeError),
])
def test_bad_coordinator_settings_are_refused_clearly(field, value, error):
    args = dict(domains={"kv": PAGE}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=1)
    args[field] = value
    with pytest.raises(error):
        AdmissionCoordinator(**args)


@pytest.mark.parametrize("args, error, needle", [
    (("a", True, 16), LifecoreTypeError, "prompt_tokens"),     # before: admitted with 1 token
    (("a", 16, False), LifecoreTypeError, "fit_tokens"),
    (("a", 2**64, 2**64), LifecoreOverflowError, "prompt_tokens"),  # before: nanobind's TypeError
    (("a", 16.0, 16), LifecoreTypeError, "prompt_tokens"),
    ((None, 16, 16), LifecoreTypeError, "request_id"),
    (("a", 16, 16, "kv"), LifecoreTypeError, "domains"),
    (("a", 16, 16, [1]), LifecoreTypeError, "domains[0]"),
    (("a", 16, 16, ["nope"]), InvalidArgumentError, "nope"),
    (("a", 0, 16), InvalidArgumentError, "prompt_tokens"),
    (("a", 32, 16), InvalidArgumentError, "fit_tokens"),
])
def test_bad_admissions_are_refused_clearly_and_change_nothing(args, error, needle):
    c = make()
    before = state(c)
    with pytest.raises(error) as info:
        c.admit(*args)
    assert needle in str(info.value)
    assert state(c) == before


@pytest.mark.parametrize("case, error", [
    ("[1]", LifecoreTypeError), ("[None]", LifecoreTypeError), ("[ActiveSequenceSlots, 'kv']", LifecoreTypeError),
    ("(ActiveSequenceSlots,)", LifecoreTypeError), ("None", LifecoreTypeError), ("[Domain('nope')]", InvalidArgumentError),
])
def test_bad_release_source_lists_are_refused_and_left_as_they_were(case, error):
    # Before: RuntimeError: std::bad_cast.
    sources = eval(case, {"ActiveSequenceSlots": ActiveSequenceSlots, "Domain": Domain})  # noqa: S307 - fixed table
    c = make()
    _, s = open_one(c)
    copy = list(sources) if isinstance(sources, (list, tuple)) else sources
    with pytest.raises(error, match="write_release_capacity_sources"):
        s.write_release_capacity_sources(sources)
    if isinstance(sources, list):
        assert sources == copy


@pytest.mark.parametrize("deferred, candidates, error", [
    (5, [], LifecoreTypeError),               # before: AttributeError
    (None, [], LifecoreTypeError),
    ("deferred", [], LifecoreTypeError),
    ("real", [5], LifecoreTypeError),         # before: AttributeError
    ("real", [None], LifecoreTypeError),
    ("real", 5, LifecoreTypeError),
    ("real", "abc", LifecoreTypeError),
])
def test_bad_preemption_arguments_are_refused_before_anything_changes(deferred, candidates, error):
    c = make(pages=2)
    _, victim = open_one(c, prompt=32, fit=32)
    d = c.admit("new", 32, 32)
    assert isinstance(d, AdmissionDeferred)
    before = state(c)
    real_candidates = [victim] + candidates if isinstance(candidates, list) and candidates else candidates
    with pytest.raises(error):
        preempt_for(c, d if deferred == "real" else deferred, real_candidates)
    assert state(c) == before and victim.phase == SessionPhase.OPEN
    with pytest.raises(LifecoreTypeError):
        preempt_for(5, d, [])
    with pytest.raises(LifecoreTypeError):
        preempt_for(c, d, [victim], limit=True)
    with pytest.raises(InvalidArgumentError):
        preempt_for(c, d, [victim], limit=-1)
    assert state(c) == before and victim.phase == SessionPhase.OPEN


def test_other_sequence_entry_points_refuse_wrong_types_with_lifecore_errors():
    c = make()
    adm, s = open_one(c)
    before = state(c)
    calls = [
        lambda: c.epoch("kv"), lambda: c.epoch(None),
        lambda: c.fits_now(5), lambda: c.register_waiter("x"), lambda: c.verify_sequence_authority((0, 1)),
        lambda: c.grow_domain(1, PAGE), lambda: c.grow_domain("kv", 1.5), lambda: c.fail_next_page_allocations(-1),
        lambda: c.fail_next_page_allocations(None),
        lambda: s.verify("1", s.fingerprint), lambda: s.verify(1, 1), lambda: s.verify(True, s.fingerprint),
        lambda: s.register_admission_waiter(None), lambda: s.verify_backing_deferral(5),
        lambda: s.try_ensure_backing_covers("32"), lambda: s.try_ensure_backing_covers(32.0),
        lambda: s.try_ensure_backing_covers(True), lambda: s.try_ensure_backing_covers(32, "2"),
        lambda: s.step(None), lambda: s.step(True), lambda: s.prepare_flight(-1), lambda: s.prepare_flight(1.0),
        lambda: acquire_frames(5), lambda: acquire_frames([5]), lambda: acquire_frames("ab"),
        lambda: Domain(5), lambda: Domain(""),
    ]
    for call in calls:
        with pytest.raises(LifecoreError) as info:
            call()
        assert isinstance(info.value, (TypeError, ValueError)), info.value
    assert state(c) == before and s.phase == SessionPhase.OPEN and s.next_frame_id == 1
    with pytest.raises(TypeError):
        ActiveSequenceSlots < 5  # a Python protocol keeps its contract (NotImplemented -> TypeError)


# ---- section 7: the prepare -> publish window, pinned with the core's pause points ----

def _extend_in_thread(session, tokens):
    result: dict = {}

    def run():
        try:
            result["decision"] = session.try_ensure_backing_covers(tokens)
        except BaseException as error:  # noqa: BLE001 - reported to the test thread
            result["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


@pytest.fixture
def paused_extension():
    """Arms the pause point between preparing an extension's pages and publishing them."""
    _core._sequence_pause_arm("extension_prepared")
    try:
        yield
    finally:
        _core._sequence_pause_resume()


@pytest.mark.time_limit(30)
@pytest.mark.parametrize("interruption", ["cancel", "close"])
def test_a_cancel_or_close_between_prepare_and_publish_refuses_the_publish(paused_extension, interruption):
    c = make(pages=8)
    adm, s = open_one(c, prompt=16, fit=64)
    used, stats = c.capacity().used_bytes, c.page_memory_stats()
    thread, result = _extend_in_thread(s, 48)
    assert _core._sequence_pause_wait(10), "the extension never reached its pause point"
    # Stopped between prepare and publish: the pages are prepared and claimed.
    assert c.capacity().used_bytes == {"kv": 3 * PAGE} and c.page_memory_stats()["live_extents"] == 2
    if interruption == "cancel":
        s.request_cancel()
    else:
        s.close()
    _core._sequence_pause_resume()
    thread.join(10)
    expected = SessionStateError if interruption == "cancel" else ClosedError
    assert isinstance(result.get("error"), expected), result
    # The publish was refused and the prepared pages rolled back: nothing leaks. A close also
    # spent the resources (the decision still refers to them): the sequence's pages went back.
    if interruption == "close":
        used, stats = {"kv": 0}, {"live_extents": 0}
        assert adm.resources.closed
    assert c.capacity().used_bytes == used and c.page_memory_stats()["live_extents"] == stats["live_extents"]
    if interruption == "cancel":
        assert s.backing.generation == 1 and s.backing.pages == 1
        assert s.try_abort().outcome == lifecore.sequence.TerminalOutcome.ABORTED
    s.close()
    adm.resources.close()
    assert c.capacity().used_bytes == {"kv": 0} and c.page_memory_stats()["live_extents"] == 0


@pytest.mark.time_limit(30)
@pytest.mark.parametrize("closing", ["coordinator", "device"])
def test_an_extension_prepared_before_a_close_is_refused_after_it(paused_extension, closing):
    # Before: the extension published its pages after close() had returned (step answered
    # EXTENDED with two more blocks) although an extension after a close raises ClosedError.
    with lifecore.Device(EMULATED) as dev:
        c = make(pages=8, device=dev)
        adm, s = open_one(c, prompt=16, fit=64)
        thread, result = _extend_in_thread(s, 48)
        assert _core._sequence_pause_wait(10), "the extension never reached its pause point"
        (c if closing == "coordinator" else dev).close()
        assert c.closed
        _core._sequence_pause_resume()
        thread.join(10)
        error = result.get("error")
        assert isinstance(error, ClosedError), result
        assert "try_ensure_backing_covers" in str(error)
        # Refused and rolled back: the sequence holds its one page, the prepared ones went back.
        assert s.backing.pages == 1 and s.backing.generation == 1
        assert c.capacity().used_bytes == {"kv": PAGE}
        if closing == "coordinator":
            assert c.page_memory_stats()["live_extents"] == 1
        s.close()
        adm.resources.close()
        assert c.capacity().used_bytes == {"kv": 0}


@pytest.mark.parametrize("closing", ["coordinator", "device"])
def test_after_a_close_a_sequence_extends_within_its_pages_as_the_model_does(closing):
    # The check above went too far in its first version: a frontier that moves within the
    # pages held (no new page) was refused after a close, where step() and the reference
    # model extend it (the README's sequence machine at seed 0 found it).
    with lifecore.Device(EMULATED) as dev:
        c = make(pages=8, device=dev)
        adm, s = open_one(c, prompt=1, fit=32)
        (c if closing == "coordinator" else dev).close()
        assert s.try_ensure_backing_covers(1).outcome == BackingOutcome.CURRENT
        decision = s.try_ensure_backing_covers(2)
        assert decision.outcome == BackingOutcome.EXTENDED and s.backing.pages == 1 and s.backing.tokens == 2
        assert s.step(3) == BackingOutcome.EXTENDED
        with pytest.raises(ClosedError):
            s.try_ensure_backing_covers(17)  # a new page: refused after the close
        assert s.backing.pages == 1


@pytest.mark.time_limit(30)
@pytest.mark.parametrize("timeout", [math.inf, 1e300, 1e10, 2**64])
def test_a_pause_wait_with_a_huge_timeout_waits_for_the_point(paused_extension, timeout):
    # Before: the timeout went through a float-to-integer conversion the clock could not hold,
    # a deadline in the past, and the wait answered False at once.
    c = make(pages=8)
    adm, s = open_one(c, prompt=16, fit=64)
    result: dict = {}

    def extend_later():
        time.sleep(0.2)  # the wait below starts first
        result["decision"] = s.try_ensure_backing_covers(48)

    thread = threading.Thread(target=extend_later)
    thread.start()
    assert _core._sequence_pause_wait(timeout) is True
    _core._sequence_pause_resume()
    thread.join(10)
    assert result["decision"].snapshot.pages == 3
    s.close()
    adm.resources.close()


@pytest.mark.parametrize("timeout", [math.nan, -1.0, -math.inf])
def test_a_pause_wait_refuses_nan_and_negative_timeouts(paused_extension, timeout):
    with pytest.raises(InvalidArgumentError, match="timeout"):
        _core._sequence_pause_wait(timeout)


@pytest.mark.time_limit(30)
def test_an_extension_keeps_its_coordinator_while_everything_else_lets_go(paused_extension):
    # Closed mid-extension, with the coordinator dropped by Python: the extension still rolls
    # back into a live coordinator, and the arena goes back to the device once it returns.
    import gc

    with lifecore.Device(EMULATED) as dev:
        c = make(pages=8, device=dev)
        adm, s = open_one(c, prompt=16, fit=64)
        thread, result = _extend_in_thread(s, 48)
        assert _core._sequence_pause_wait(10), "the extension never reached its pause point"
        s.close()
        adm.resources.close()
        del c, adm
        gc.collect()
        assert dev.memory_stats()["arena_bytes"] == 8 * PAGE  # the extension holds the coordinator
        _core._sequence_pause_resume()
        thread.join(10)
        assert isinstance(result.get("error"), ClosedError), result
        gc.collect()
        assert dev.memory_stats()["arena_bytes"] == 0


@pytest.mark.time_limit(30)
def test_a_frame_acquired_between_prepare_and_publish_makes_the_extension_retry(paused_extension):
    c = make(pages=8)
    adm, s = open_one(c, prompt=16, fit=64)
    thread, result = _extend_in_thread(s, 48)
    assert _core._sequence_pause_wait(10)
    frame = s.acquire_frame()
    _core._sequence_pause_resume()
    thread.join(10)
    decision = result["decision"]
    assert decision.outcome == BackingOutcome.RETRY_REQUIRED and "frame" in decision.reason
    assert frame.snapshot.generation == 1 and c.capacity().used_bytes == {"kv": PAGE}
    frame.commit()
    assert s.try_ensure_backing_covers(48).outcome == BackingOutcome.EXTENDED


@pytest.mark.time_limit(30)
def test_an_extension_published_by_another_thread_meanwhile_is_current(paused_extension):
    c = make(pages=8)
    adm, s = open_one(c, prompt=16, fit=64)
    thread, result = _extend_in_thread(s, 48)
    assert _core._sequence_pause_wait(10)
    assert s.try_ensure_backing_covers(64).outcome == BackingOutcome.EXTENDED  # passes the armed point
    _core._sequence_pause_resume()
    thread.join(10)
    decision = result["decision"]
    assert decision.outcome == BackingOutcome.CURRENT and decision.snapshot.generation == 2
    assert c.capacity().used_bytes == {"kv": 4 * PAGE} and c.page_memory_stats()["live_extents"] == 2


# ---- wait_async follows wait ----

@pytest.mark.parametrize("kwargs, error", [
    ({"timeout": math.nan}, InvalidArgumentError), ({"timeout": -1}, InvalidArgumentError),
    ({"timeout": "1"}, LifecoreTypeError), ({"timeout": True}, LifecoreTypeError),
    ({"poll": 0}, InvalidArgumentError), ({"poll": math.inf}, InvalidArgumentError),
    ({"poll": math.nan}, InvalidArgumentError), ({"poll": "1"}, LifecoreTypeError),
])
def test_wait_async_refuses_bad_timeouts(kwargs, error):
    import asyncio

    c = make(slots=1)
    adm, s, reg = blocked_waiter(c)
    with pytest.raises(error):
        asyncio.run(reg.wait_async(**kwargs))  # before: NaN spun for ever, negative returned False


@pytest.mark.time_limit(30)
@pytest.mark.parametrize("timeout", [math.inf, 1e10, 2**64, 10**400])
def test_wait_async_with_a_huge_timeout_blocks_like_none(timeout):
    import asyncio

    c = make(slots=1)
    adm, s, reg = blocked_waiter(c)
    releaser = release_later(0.3, s)  # its close spends the resources: the slot goes back
    started = time.monotonic()
    assert asyncio.run(reg.wait_async(timeout)) is True
    assert time.monotonic() - started >= 0.25
    releaser.join()


def test_a_registration_is_signalled_once_and_then_costs_no_release_anything():
    """Its wait condition changed at the first signal, so every wait on it returns at once from
    then on: it leaves the coordinator's lists, and releases after that do not signal it (a
    thousand registrations left unawaited made every release pay for each, every time)."""
    c = make(slots=1)
    adm, s, reg = blocked_waiter(c)
    kept = [c.register_waiter(c.admit(f"w{i}", 16, 16)) for i in range(1000)]
    s.close()
    adm.resources.close()
    assert reg.wake_count == 1 and all(r.wake_count == 1 for r in kept)
    assert reg.should_retry() and reg.wait(0) is True  # at once: the condition changed
    adm2, s2 = open_one(c, name="again")
    s2.close()
    adm2.resources.close()
    assert reg.wake_count == 1 and all(r.wake_count == 1 for r in kept)  # not signalled again
    assert not reg.cancelled and not reg.closed
    c.close()
    assert reg.closed and all(r.closed for r in kept)  # a close after the signal still reads
    with pytest.raises(ClosedError):
        reg.wait(0)
