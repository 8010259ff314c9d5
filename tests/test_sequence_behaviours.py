"""One test per behaviour of sequence sessions (the reference's list), plus the seed's methods."""

from __future__ import annotations

import gc

import pytest

from lifecore.errors import (AdmissionError, CapacityError, ClosedError, InvalidArgumentError,
                             SessionStateError, StaleAuthorityError)
from lifecore.sequence import (ActiveSequenceSlots, AdmissionCoordinator, AdmissionDeferred, AdmissionRejected,
                               Admitted, BackingOutcome, BlockerKind, DeferralAction, Domain, FlightPhase,
                               FrameDisposition, PhysicalMemory, SessionPhase, TerminalOutcome, acquire_frames,
                               preempt_for)

PAGE = 4096


def make(pages: int = 64, *, slots: int = 8, domains=None, tpp: int = 16) -> AdmissionCoordinator:
    return AdmissionCoordinator(domains=domains or {"kv": pages * PAGE}, page_bytes=PAGE, tokens_per_page=tpp,
                                max_active_sequences=slots)


def open_one(c: AdmissionCoordinator, prompt: int = 16, fit: int = 256, name: str = "r", **kw):
    decision = c.admit(name, prompt, fit, **kw)
    assert isinstance(decision, Admitted), decision
    return decision, decision.resources.open_session()


def used(c: AdmissionCoordinator) -> dict:
    return c.capacity().used_bytes


def test_frames_start_at_one_and_advance_contiguously():
    c = make()
    _, s = open_one(c)
    ids = []
    for _ in range(4):
        f = s.acquire_frame()
        ids.append(f.frame_id)
        assert f.commit() == FrameDisposition.COMMITTED
    assert ids == [1, 2, 3, 4]
    assert s.next_frame_id == 5 and s.retired_frames == 4


def test_cancelled_participant_rejects_a_batched_acquire_atomically():
    c = make()
    _, a = open_one(c, name="a")
    _, b = open_one(c, name="b")
    b.request_cancel()
    with pytest.raises(SessionStateError, match=r"\(row 1; no frame was acquired\)$"):
        acquire_frames([a, b])
    assert a.active_frame is None and a.next_frame_id == 1  # nothing acquired on a
    holds = acquire_frames([a])
    assert [h.frame_id for h in holds] == [1]
    holds[0].commit()


def test_cancel_after_acquire_discards_only_that_participant_yet_retires():
    c = make()
    _, a = open_one(c, name="a")
    _, b = open_one(c, name="b")
    fa, fb = acquire_frames([a, b])
    snap = b.request_cancel()
    assert snap.active_frame == fb.frame_id and snap.phase == SessionPhase.CANCEL_REQUESTED
    assert fb.commit() == FrameDisposition.DISCARDED_CANCELLED
    assert fa.commit() == FrameDisposition.COMMITTED
    assert b.retired_frames == 1 and a.retired_frames == 1
    receipt = b.try_abort()
    assert receipt.outcome == TerminalOutcome.ABORTED and receipt.discarded_frames == 1 and receipt.committed_frames == 0


def test_dropped_frame_hold_fails_closed_and_never_reuses_the_frame():
    c = make()
    _, s = open_one(c)
    f = s.acquire_frame()
    assert f.frame_id == 1
    del f
    gc.collect()
    assert s.phase == SessionPhase.POISONED
    with pytest.raises(SessionStateError):
        s.acquire_frame()
    assert s.next_frame_id == 2  # frame 1 is consumed for good
    assert s.try_abort().outcome == TerminalOutcome.ABORTED


def test_explicit_frame_abort_keeps_the_session_poisoned():
    c = make()
    _, s = open_one(c)
    f = s.acquire_frame()
    f.abort()
    assert s.phase == SessionPhase.POISONED
    for op in (s.request_cancel, s.try_complete, s.try_abort_if_quiescent, s.acquire_frame):
        with pytest.raises(SessionStateError):
            op()
    assert s.phase == SessionPhase.POISONED
    with pytest.raises(SessionStateError):
        f.commit()  # already finalized
    assert s.try_abort().outcome == TerminalOutcome.ABORTED


def test_unsubmitted_rollback_restores_the_frame_for_retry():
    c = make()
    _, s = open_one(c)
    f = s.acquire_frame()
    f.rollback_unsubmitted()
    g = s.acquire_frame()
    assert g.frame_id == f.frame_id == 1
    g.commit()
    assert s.phase == SessionPhase.OPEN


def test_duplicate_prepared_flight_is_rejected():
    c = make()
    _, s = open_one(c)
    f = s.acquire_frame()
    fl = s.prepare_flight(7)
    with pytest.raises(SessionStateError, match="already prepared"):
        s.prepare_flight(7)
    assert s.flight_count == 1
    fl.dispatch()
    assert fl.phase == FlightPhase.IN_FLIGHT
    with pytest.raises(SessionStateError, match="^dispatch: the flight is already in flight$"):
        fl.dispatch()
    assert fl.phase == FlightPhase.IN_FLIGHT and s.flight_count == 1
    with pytest.raises(SessionStateError):
        f.commit()  # flights still live
    fl.not_submitted()
    fl.dispatch()
    fl.finish()
    assert s.flight_count == 0
    for released_call in (fl.not_submitted, fl.dispatch):  # a released flight is gone for good
        with pytest.raises(SessionStateError, match="already released"):
            released_call()
    assert s.flight_count == 0
    f.commit()


def test_flight_dropped_in_flight_poisons_and_prepared_drop_does_not():
    c = make()
    _, s = open_one(c)
    f = s.acquire_frame()
    p = s.prepare_flight(1)
    p.close()
    assert s.phase == SessionPhase.OPEN and s.flight_count == 0
    q = s.prepare_flight(2)
    q.dispatch()
    q.close()
    assert s.phase == SessionPhase.POISONED and s.flight_count == 0
    f.abort()
    s.try_abort()


def test_quiescent_abort_is_one_terminal_transition_and_a_later_cancel_errors():
    c = make()
    _, s = open_one(c)
    f = s.acquire_frame()
    with pytest.raises(SessionStateError, match="nothing changed"):
        s.try_abort_if_quiescent()
    assert s.phase == SessionPhase.OPEN
    f.commit()
    receipt = s.try_abort_if_quiescent()
    assert receipt.outcome == TerminalOutcome.ABORTED and s.phase == SessionPhase.ABORTED
    with pytest.raises(SessionStateError, match="terminal"):
        s.request_cancel()
    assert s.receipt.outcome == TerminalOutcome.ABORTED


def test_quiescent_abort_waits_for_a_live_flight_after_cancel_too():
    c = make()
    _, s = open_one(c)
    frame = s.acquire_frame()
    flight = s.prepare_flight(1)
    flight.dispatch()  # the frame and its flight are live
    for cancel in (False, True):
        if cancel:
            s.request_cancel()
        phase = s.phase
        with pytest.raises(SessionStateError, match="nothing changed"):
            s.try_abort_if_quiescent()
        assert s.phase == phase and s.flight_count == 1 and s.receipt is None
    assert s.phase == SessionPhase.CANCEL_REQUESTED
    flight.finish()
    frame.commit()
    assert s.try_abort_if_quiescent().outcome == TerminalOutcome.ABORTED and s.phase == SessionPhase.ABORTED


def test_a_step_captures_the_exact_backing_snapshot():
    c = make()
    _, s = open_one(c, prompt=16, fit=256)
    f = s.acquire_frame()
    assert f.snapshot.generation == 1 and f.snapshot.tokens == 16
    d = s.try_ensure_backing_covers(40)
    assert d.outcome == BackingOutcome.RETRY_REQUIRED
    assert f.snapshot.generation == 1 and s.backing.generation == 1
    f.commit()
    assert s.try_ensure_backing_covers(40).outcome == BackingOutcome.EXTENDED
    g = s.acquire_frame()
    assert g.snapshot.generation == 2 and g.snapshot.pages == 3
    g.commit()


def test_a_target_with_the_same_tokens_and_fewer_pages_is_covered_not_incomparable():
    c = make(pages=8)
    _, s = open_one(c, prompt=16, fit=64)
    assert s.try_ensure_backing_covers(32, 3).outcome == BackingOutcome.EXTENDED  # 32 tokens on 3 pages
    covered = s.try_ensure_backing_covers(32, 2)
    assert covered.outcome == BackingOutcome.CURRENT and covered.snapshot.pages == 3
    assert s.backing.pages == 3
    s.close()


def test_a_decode_step_after_spare_pages_covers_its_tokens_on_the_pages_it_has():
    # Pages reserved ahead of the tokens (three pages for sixteen tokens): a step past the
    # frontier's tokens needs no page, so it extends the tokens on the pages it has. Every way
    # of stepping agrees, and so does the reference model.
    import lifecore.sequence as sequence
    from lifecore.models.sequence_session import ModelCoordinator

    for how in ("step", "step_all", "decode_table"):
        c = make(pages=8)
        _, s = open_one(c, prompt=16, fit=64)
        assert s.try_ensure_backing_covers(16, 3).outcome == BackingOutcome.EXTENDED
        before = used(c)
        if how == "step":
            outcome = s.step(17)
        elif how == "step_all":
            outcome = BackingOutcome(int(sequence.step_all([s], [17])[0]))
        else:
            table = c.decode_table(1, 4, pad=-1)
            outcome = BackingOutcome(int(table.step([s], [17])[0]))
            assert table.table[0].tolist() == s.backing.block_ids().tolist() + [-1]
        assert outcome == BackingOutcome.EXTENDED, how
        assert (s.backing.tokens, s.backing.pages) == (32, 3) and used(c) == before, how
        assert s.retired_frames == 1 and s.step(40) == BackingOutcome.EXTENDED, how
        assert (s.backing.tokens, s.backing.pages) == (48, 3), how
        s.close()

    model = ModelCoordinator(domains={"kv": 8 * PAGE}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=8)
    ms = model.admit("r", 16, 64).resources.open_session()
    assert ms.try_ensure_backing_covers(16, 3)[0] == "EXTENDED"
    assert ms.step(17) == "EXTENDED" and (ms.current.tokens, ms.current.pages) == (32, 3)


def test_extension_publishes_atomically_between_frames():
    c = make(pages=8)
    adm, s = open_one(c, prompt=16, fit=64)
    assert used(c) == {"kv": PAGE}
    f = s.acquire_frame()
    assert s.try_ensure_backing_covers(32).outcome == BackingOutcome.RETRY_REQUIRED
    assert used(c) == {"kv": PAGE}  # nothing claimed while a step is live
    f.commit()
    d = s.try_ensure_backing_covers(32)
    assert d.outcome == BackingOutcome.EXTENDED and d.snapshot.generation == 2 and d.snapshot.pages == 2
    assert s.try_ensure_backing_covers(20).outcome == BackingOutcome.CURRENT  # narrower target
    live = s.acquire_frame()  # a frontier already wider is returned unchanged, a frame live or not
    for tokens in (16, 32):
        current = s.try_ensure_backing_covers(tokens)
        assert current.outcome == BackingOutcome.CURRENT and current.snapshot.generation == 2
        assert current.snapshot.block_ids("kv").tolist() == live.snapshot.block_ids("kv").tolist()
    assert s.try_ensure_backing_covers(33).outcome == BackingOutcome.RETRY_REQUIRED  # wider: not while live
    live.commit()
    with pytest.raises(CapacityError, match="fit limit"):
        s.try_ensure_backing_covers(65)  # over the request's ceiling
    assert s.backing.generation == 2 and used(c) == {"kv": 2 * PAGE}
    del d, f
    s.close()
    adm.resources.close()
    assert used(c) == {"kv": 0}
    assert c.page_memory_stats()["live_bytes"] == 0 and c.capacity().active_sequences == 0


def test_extension_waits_for_released_capacity_then_retries():
    c = make(pages=3)
    adm_a, a = open_one(c, prompt=32, fit=48, name="a")
    adm_b, b = open_one(c, prompt=16, fit=16, name="b")
    d = a.try_ensure_backing_covers(48)
    assert d.outcome == BackingOutcome.BACKING_DEFERRED and d.deferred is not None
    assert d.deferred.action == DeferralAction.PREEMPT_AND_RECOMPUTE
    assert d.deferred.wait_condition.sources == [Domain("kv")]
    reg = a.register_admission_waiter(d.deferred)
    assert not reg.should_retry()
    b.acquire_frame().commit()
    b.try_complete()
    assert not reg.should_retry()  # completing releases nothing by itself
    b.close()  # spends b's resources, though the Admitted still refers to them
    assert adm_b.resources.closed
    assert reg.should_retry() and reg.wait(0) is True
    assert a.try_ensure_backing_covers(48).outcome == BackingOutcome.EXTENDED


def test_a_deferral_rejects_a_stale_generation():
    c = make(pages=4)
    _, a = open_one(c, prompt=16, fit=64, name="a")
    _, b = open_one(c, prompt=16, fit=16, name="b")
    assert a.try_ensure_backing_covers(20).outcome == BackingOutcome.EXTENDED  # generation 2, no new page
    d = a.try_ensure_backing_covers(64)
    assert d.outcome == BackingOutcome.BACKING_DEFERRED and d.expected_generation == 2
    assert a.try_ensure_backing_covers(30).outcome == BackingOutcome.EXTENDED  # generation 3
    with pytest.raises(StaleAuthorityError, match="stale"):
        a.register_admission_waiter(d.deferred)
    with pytest.raises(StaleAuthorityError, match="retry admission"):
        a.verify_backing_deferral(d)
    with pytest.raises(StaleAuthorityError):
        b.register_admission_waiter(d.deferred)  # names another sequence


def grower_and_two_victims(pages: int, prompt: int, fit: int):
    """A coordinator of `pages`, a sequence "a" that may grow to `fit` tokens and two of one page each."""
    c = make(pages=pages)
    _, a = open_one(c, prompt=prompt, fit=fit, name="a")
    _, b = open_one(c, prompt=16, fit=16, name="b")
    _, x = open_one(c, prompt=16, fit=16, name="x")
    return c, a, b, x


def test_preemption_refuses_a_deferral_its_sequence_outgrew_and_aborts_no_victim():
    # a asked for two more pages and was deferred, then grew by one: the old demand is stale, and
    # preempting for it would abort two victims where the one page a still needs takes one.
    c, a, b, x = grower_and_two_victims(pages=4, prompt=16, fit=64)
    old = a.try_ensure_backing_covers(48)
    assert old.outcome == BackingOutcome.BACKING_DEFERRED and old.expected_generation == 1
    assert a.try_ensure_backing_covers(32).outcome == BackingOutcome.EXTENDED  # the last free page
    before = used(c)
    with pytest.raises(StaleAuthorityError, match="holds 2 pages now, 1 when it was deferred"):
        preempt_for(c, old.deferred, [b, x])
    assert b.phase == x.phase == SessionPhase.OPEN and used(c) == before  # nothing changed
    fresh = a.try_ensure_backing_covers(48)
    assert fresh.outcome == BackingOutcome.BACKING_DEFERRED
    report = preempt_for(c, fresh.deferred, [b, x])
    assert report.victims == [b.sequence_authority] and report.satisfied and x.phase == SessionPhase.OPEN
    assert a.try_ensure_backing_covers(48).outcome == BackingOutcome.EXTENDED


def test_preemption_refuses_the_deferral_of_a_sequence_that_is_gone():
    c, a, b, x = grower_and_two_victims(pages=3, prompt=16, fit=48)
    d = a.try_ensure_backing_covers(48)
    assert d.outcome == BackingOutcome.BACKING_DEFERRED
    a.try_abort_if_quiescent()
    a.close()  # nobody waits on its demand any more
    with pytest.raises(StaleAuthorityError, match=r"^preempt_for: the sequence that asked to grow is gone; its "
                                                  r"deferral is stale \(stale sequence session authority"):
        preempt_for(c, d.deferred, [b, x])
    assert b.phase == x.phase == SessionPhase.OPEN


def test_preemption_still_serves_a_deferral_after_an_extension_that_took_no_page():
    # Tokens within the pages held change the generation, not the demand: the deferral still
    # names the pages the sequence needs, and preemption serves it.
    c, a, b, x = grower_and_two_victims(pages=3, prompt=8, fit=48)
    d = a.try_ensure_backing_covers(48)
    assert d.outcome == BackingOutcome.BACKING_DEFERRED and d.expected_generation == 1
    assert a.try_ensure_backing_covers(12).outcome == BackingOutcome.EXTENDED  # generation 2, still one page
    with pytest.raises(StaleAuthorityError):
        a.register_admission_waiter(d.deferred)  # a waiter retries on its generation
    report = preempt_for(c, d.deferred, [b, x])
    assert report.victims == [b.sequence_authority, x.sequence_authority] and report.satisfied
    assert a.try_ensure_backing_covers(48).outcome == BackingOutcome.EXTENDED


def test_waiters_retry_only_when_their_exact_domain_changed():
    c = make(domains={"a": 2 * PAGE, "b": 2 * PAGE})
    adm_a, _ = c.admit("x", 32, 32, domains=["a"]), None
    adm_b = c.admit("y", 32, 32, domains=["b"])
    wa = c.admit("wa", 16, 16, domains=["a"])
    wb = c.admit("wb", 16, 16, domains=["b"])
    assert isinstance(wa, AdmissionDeferred) and wa.wait_condition.sources == [Domain("a")]
    ra, rb = c.register_waiter(wa), c.register_waiter(wb)
    adm_b.resources.close()
    assert rb.should_retry() and not ra.should_retry()
    assert ra.wake_count == 0 and rb.wake_count >= 1
    assert ra.wait(0.01) is False
    adm_a.resources.close()
    assert ra.should_retry()


def test_closing_the_pool_wakes_waiters_with_no_lost_notification():
    import threading
    c = make(pages=1)
    held = c.admit("x", 16, 16)
    d = c.admit("y", 16, 16)
    reg = c.register_waiter(d)
    errors = []
    started = threading.Event()

    def waiter():
        started.set()
        try:
            reg.wait(None)
        except ClosedError as e:
            errors.append(e)

    t = threading.Thread(target=waiter)
    t.start()
    started.wait()
    c.close()
    t.join(5)
    assert not t.is_alive() and len(errors) == 1
    with pytest.raises(ClosedError):
        reg.wait(0)
    with pytest.raises(ClosedError):
        c.admit("z", 16, 16)
    with pytest.raises(ClosedError):
        c.register_waiter(d)
    held.resources.close()  # releases still account after close
    assert c.capacity().active_sequences == 0


def test_sparse_ids_reuse_storage_and_change_generation():
    c = make()
    adm, s = open_one(c, name="a")
    first = s.sequence_authority
    s.close()
    adm.resources.close()
    with pytest.raises(StaleAuthorityError):
        c.verify_sequence_authority(first)
    adm2, s2 = open_one(c, name="b")
    second = s2.sequence_authority
    assert second.sparse_id == first.sparse_id and second.generation > first.generation
    assert second != first
    c.verify_sequence_authority(second)
    with pytest.raises(StaleAuthorityError):
        c.verify_sequence_authority(first)


def test_racing_openers_admit_exactly_one():
    import threading
    c = make()
    adm = c.admit("r", 16, 32)
    barrier = threading.Barrier(8)
    results = []

    def opener():
        barrier.wait()
        try:
            results.append(adm.resources.open_session())
        except SessionStateError:
            results.append(None)

    threads = [threading.Thread(target=opener) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r is not None for r in results) == 1


def test_admission_decisions_are_values_not_errors():
    c = make(pages=4, slots=2, domains={"kv": (2 * PAGE, 4 * PAGE)})
    a = c.admit("a", 16, 32)
    assert isinstance(a, Admitted)
    growth = c.admit("big", 16, 48)  # fit 3 pages > total 2 (maximum 4)
    assert isinstance(growth, AdmissionDeferred) and growth.action == DeferralAction.AWAIT_BACKING_GROWTH
    assert BlockerKind.BACKING_GROWTH_REQUIRED in [b.kind for b in growth.blockers]
    never = c.admit("huge", 16, 80)
    assert isinstance(never, AdmissionRejected) and "maximum" in never.reason
    b = c.admit("b", 16, 16)
    ceiling = c.admit("c", 16, 16)
    assert isinstance(ceiling, AdmissionDeferred)
    assert ActiveSequenceSlots in ceiling.wait_condition.sources
    assert ceiling.immediate.sequences == 1 and ceiling.fit.tokens == 16
    reg = c.register_waiter(growth)
    c.grow_domain("kv", 4 * PAGE)
    assert reg.should_retry()
    del a, b


def test_release_sources_are_exact_sorted_and_deduplicated():
    c = make(domains={"k": 32 * PAGE, "v": 32 * PAGE, "other": 8 * PAGE})
    _, s = open_one(c, domains=["v", "k"])
    out = [Domain("v"), ActiveSequenceSlots]
    s.write_release_capacity_sources(out)
    assert out == [ActiveSequenceSlots, Domain("k"), Domain("v"), PhysicalMemory]
    with pytest.raises(InvalidArgumentError):
        s.write_release_capacity_sources([Domain("nope")])


def test_release_bumps_exactly_the_sources_it_frees():
    c = make(domains={"k": 32 * PAGE, "v": 32 * PAGE})
    adm, s = open_one(c, domains=["k"])
    before = {src: c.epoch(src) for src in (Domain("k"), Domain("v"), ActiveSequenceSlots)}
    release_epoch = c.release_epoch
    s.close()
    adm.resources.close()
    assert c.epoch(Domain("k")) == before[Domain("k")] + 1
    assert c.epoch(ActiveSequenceSlots) == before[ActiveSequenceSlots] + 1
    assert c.epoch(Domain("v")) == before[Domain("v")]
    assert c.release_epoch > release_epoch


def test_identity_epoch_fingerprint_and_authorities():
    c = make()
    _, s = open_one(c, name="a")
    _, t = open_one(c, name="b")
    assert s.epoch == 1 and len(s.fingerprint) == 64 and int(s.fingerprint, 16) >= 0
    assert s.fingerprint != t.fingerprint
    assert s.sequence_authority != t.sequence_authority and s.request_authority != t.request_authority
    s.verify(1, s.fingerprint)
    with pytest.raises(StaleAuthorityError):
        s.verify(2, s.fingerprint)
    with pytest.raises(StaleAuthorityError):
        s.verify(1, t.fingerprint)
    before = s.fingerprint
    s.try_ensure_backing_covers(64)
    assert s.fingerprint == before  # extension never changes the fingerprint


def test_session_dropped_while_active_fails_closed_and_holds_see_it():
    c = make()
    adm, s = open_one(c)
    f = s.acquire_frame()
    s.close()
    with pytest.raises(ClosedError):
        s.acquire_frame()
    with pytest.raises(SessionStateError, match="failed closed"):
        f.commit()
    assert used(c) == {"kv": PAGE}  # the frame still holds its snapshot
    f.close()
    adm.resources.close()
    assert used(c) == {"kv": 0} and c.capacity().active_sequences == 0


def test_terminal_session_left_alone_on_drop_and_absorbing():
    c = make()
    adm, s = open_one(c)
    with s:
        s.step(16)
        r = s.try_complete()
        assert r.outcome == TerminalOutcome.COMPLETED and r.retired_frames == 1
        for op in (s.try_complete, s.try_abort, s.try_abort_if_quiescent, s.request_cancel, s.acquire_frame):
            with pytest.raises(SessionStateError, match="terminal"):
                op()
    assert s.phase == SessionPhase.COMPLETED and s.closed


def test_open_session_is_one_shot():
    c = make()
    adm, s = open_one(c)
    with pytest.raises(SessionStateError, match="one incarnation"):
        adm.resources.open_session()


def test_complete_requires_a_retired_frame_and_quiescence():
    c = make()
    _, s = open_one(c)
    with pytest.raises(SessionStateError, match="no frame"):
        s.try_complete()
    f = s.acquire_frame()
    with pytest.raises(SessionStateError):
        s.try_complete()
    f.commit()
    assert s.try_complete().outcome == TerminalOutcome.COMPLETED


def test_frame_context_manager_commits_or_aborts():
    c = make()
    _, s = open_one(c)
    with s.acquire_frame() as f:
        pass
    assert f.finalized and s.retired_frames == 1
    with pytest.raises(RuntimeError):
        with s.acquire_frame():
            raise RuntimeError("step failed")
    assert s.phase == SessionPhase.POISONED


def test_a_frames_block_ends_the_frame_when_the_session_ended_inside_it():
    """Leaving the block commits or aborts; when that is refused (the session was closed inside
    the block), the frame is dropped anyway, so the sequence's blocks come back, and an
    exception leaving the block is the one the caller sees. Before: __exit__ raised the
    refusal over a KeyboardInterrupt, and the frame held the blocks until its variable went."""
    c = make()
    s = c.admit("a", 16, 64).resources.open_session()
    with pytest.raises(KeyboardInterrupt):  # not the SessionStateError of the refused abort
        with s.acquire_frame() as f:
            s.close()
            raise KeyboardInterrupt
    assert f.finalized and c.holders() == [] and used(c) == {"kv": 0}
    s = c.admit("b", 16, 64).resources.open_session()
    with pytest.raises(SessionStateError, match="^commit: "):  # a clean exit: why the commit was refused
        with s.acquire_frame() as f:
            s.close()
    assert f.finalized and c.holders() == [] and used(c) == {"kv": 0}


def test_a_frames_block_left_with_a_live_flight_drops_the_frame():
    c = make()
    _, s = open_one(c)
    with pytest.raises(SessionStateError, match="participant flights of this frame are still live"):
        with s.acquire_frame() as f:
            flight = s.prepare_flight(1)
            flight.dispatch()
    # Dropped unfinalized, as close() does: the step's outcome is unknown, so the session is poisoned.
    assert f.finalized and s.phase == SessionPhase.POISONED
    flight.finish()
    assert s.try_abort().outcome == TerminalOutcome.ABORTED


def test_physical_page_failure_is_a_backing_deferral():
    c = make()
    adm, s = open_one(c, prompt=16, fit=64)
    c.fail_next_page_allocations(1)
    d = s.try_ensure_backing_covers(32)
    # The deferral waits on physical memory, which every page release advances.
    assert d.outcome == BackingOutcome.BACKING_DEFERRED and "physical" in d.reason
    assert [repr(x) for x in d.deferred.wait_condition.sources] == ["PhysicalMemory"]
    assert used(c) == {"kv": PAGE} and s.backing.generation == 1
    assert s.try_ensure_backing_covers(32).outcome == BackingOutcome.EXTENDED
    c.fail_next_page_allocations(1)
    d2 = c.admit("x", 16, 16)
    assert isinstance(d2, AdmissionDeferred)
    assert c.capacity().active_sequences == 1 and used(c) == {"kv": 2 * PAGE}


def test_preemption_reports_every_candidate_it_does_not_pick_with_why():
    c = make(domains={"a": 2 * PAGE, "b": 4 * PAGE})
    held = {name: open_one(c, prompt=16, fit=16, name=name, domains=[domain])
            for name, domain in (("b0", "b"), ("a0", "a"), ("b1", "b"), ("a1", "a"))}
    for adm, _ in held.values():
        adm.resources.close()  # the scheduler keeps only the sessions
    d = c.admit("new", 16, 16, domains=["a"])
    assert isinstance(d, AdmissionDeferred)
    pool = [s for _, s in held.values()]
    report = preempt_for(c, d, pool, limit=0)
    assert report.victims == [] and [a for a, _ in report.skipped] == [s.sequence_authority for s in pool]
    assert all("limit" in why for _, why in report.skipped)
    import numpy as np

    report = preempt_for(c, d, pool, limit=np.int64(0))  # a NumPy count, as every other count here
    assert report.victims == [] and all("limit" in why for _, why in report.skipped)
    report = preempt_for(c, d, pool)
    b0, a0, b1, a1 = pool
    assert report.victims == [a0.sequence_authority] and report.satisfied
    why = dict(report.skipped)
    assert set(why) == {b0.sequence_authority, b1.sequence_authority, a1.sequence_authority}
    assert "none of the capacity" in why[b0.sequence_authority]
    assert "demand fits" in why[b1.sequence_authority] and "demand fits" in why[a1.sequence_authority]
    assert a1.phase == SessionPhase.OPEN and b0.phase == SessionPhase.OPEN


def test_preemption_for_a_growing_sequence_names_it_among_the_skipped():
    c = make(domains={"kv": 2 * PAGE})
    _, grow = open_one(c, prompt=16, fit=32, name="grow")
    other_adm, other = open_one(c, prompt=16, fit=16, name="other")
    other_adm.resources.close()
    assert grow.step(17) == BackingOutcome.BACKING_DEFERRED
    deferral = grow.step_deferral
    report = preempt_for(c, deferral, [grow, other])
    assert report.victims == [other.sequence_authority] and report.satisfied
    assert [(a, "asked to grow" in why) for a, why in report.skipped] == [(grow.sequence_authority, True)]
    assert grow.step(17) == BackingOutcome.EXTENDED


def test_preemption_aborts_quiescent_victims_only_and_reports_what_was_freed():
    c = make(pages=3, slots=8)
    victims = []
    for i in range(3):
        adm, s = open_one(c, prompt=16, fit=16, name=f"v{i}")
        victims.append((adm, s))
    busy = victims[0][1].acquire_frame()  # v0 is mid-step: never half-cancelled
    d = c.admit("new", 32, 32)
    assert isinstance(d, AdmissionDeferred)
    for adm, _ in victims:
        adm.resources.close()  # the scheduler keeps only the sessions
    report = preempt_for(c, d, [s for _, s in victims])
    assert victims[0][1].phase == SessionPhase.OPEN and len(report.skipped) == 1
    assert len(report.victims) == 2 and report.satisfied
    assert report.freed_sources == [Domain("kv")]
    assert all(r.outcome == TerminalOutcome.ABORTED for r in report.receipts)
    assert isinstance(c.admit("new", 32, 32), Admitted)
    busy.commit()


def test_an_admission_that_waits_for_growth_does_not_fit_now_and_preempts_no_one():
    c = make(domains={"kv": (2 * PAGE, 8 * PAGE)})
    _, s = open_one(c, prompt=16, fit=16, name="a")
    d = c.admit("grows", 16, 64)  # one page fits now; the fit's four do not fit the domain's two
    assert isinstance(d, AdmissionDeferred) and d.action == DeferralAction.AWAIT_BACKING_GROWTH
    assert not c.fits_now(d) and isinstance(c.admit("grows", 16, 64), AdmissionDeferred)
    report = preempt_for(c, d, [s])
    assert report.victims == [] and not report.satisfied and s.phase == SessionPhase.OPEN
    assert [(a, "waits for growth" in why) for a, why in report.skipped] == [(s.sequence_authority, True)]
    c.grow_domain("kv", 8 * PAGE)
    assert c.fits_now(d) and isinstance(c.admit("grows", 16, 64), Admitted)


def test_foreign_coordinator_deferral_is_refused():
    c1, c2 = make(), make(pages=1)
    held = c2.admit("x", 16, 16)
    d = c2.admit("y", 16, 16)
    _, s = open_one(c1)
    with pytest.raises(StaleAuthorityError, match="another coordinator"):
        s.register_admission_waiter(d)
    with pytest.raises(StaleAuthorityError):
        c1.register_waiter(d)
    with pytest.raises(StaleAuthorityError):
        c1.fits_now(d)
    del held


def test_a_batch_s_outcomes_compare_equal_to_the_enum_members():
    # step_all, DecodeTable.step and commit_frames answer uint8 arrays of the enums' values. An
    # engine that tests them against the members (outcomes == BackingOutcome.BACKING_DEFERRED)
    # must see the deferral: with members that never equal a number it saw none, and decoded on
    # into tokens no page covered.
    import lifecore.sequence as sequence
    from lifecore.sequence import FrameDisposition

    c = make(pages=3)
    _, a = open_one(c, prompt=16, fit=48, name="a")
    _, b = open_one(c, prompt=16, fit=48, name="b")
    outcomes = sequence.step_all([a, b], [17, 33])
    assert outcomes[0] == BackingOutcome.EXTENDED and outcomes[1] == BackingOutcome.BACKING_DEFERRED
    assert (outcomes == BackingOutcome.BACKING_DEFERRED).tolist() == [False, True]
    assert BackingOutcome(outcomes[1]) is BackingOutcome.BACKING_DEFERRED
    table = c.decode_table(2, 4)
    assert (table.step([a, b], [18, 33]) == BackingOutcome.BACKING_DEFERRED).tolist() == [False, True]
    frames = sequence.acquire_frames([a, b])
    assert (sequence.commit_frames(frames) == FrameDisposition.COMMITTED).all()
    assert type(a.step(19)) is BackingOutcome and a.step(19) == BackingOutcome.CURRENT
    a.close()
    b.close()
