"""Only real holders pin a sequence's capacity; admission of a live request id is refused; the
step's deferral sits beside its plain answer; the session fingerprint is hashed on first read."""

from __future__ import annotations

import gc

import pytest

from lifecore.errors import InvalidArgumentError, SessionStateError, StaleAuthorityError
from lifecore.sequence import AdmissionCoordinator, AdmissionDeferred, Admitted, BackingOutcome

PAGE = 4096


def make(pages: int = 64, *, tpp: int = 16) -> AdmissionCoordinator:
    return AdmissionCoordinator(domains={"kv": pages * PAGE}, page_bytes=PAGE, tokens_per_page=tpp,
                                max_active_sequences=8)


def idle(c: AdmissionCoordinator) -> bool:
    cap = c.capacity()
    return cap.used_bytes == {"kv": 0} and cap.active_sequences == 0


def test_a_kept_decision_does_not_pin_a_finished_request():
    # The repro: a BackingDecision left in a variable after complete + close.
    c = make(pages=64)
    admitted = c.admit("r", 16, 16 * 12)
    resources = admitted.resources
    session = resources.open_session()
    resources.close()
    assert session.step(16) == BackingOutcome.CURRENT
    decision = session.try_ensure_backing_covers(16 * 12)
    assert decision.outcome == BackingOutcome.EXTENDED
    assert c.capacity().used_bytes == {"kv": 12 * PAGE} and not decision.snapshot.released
    assert [h[0] for h in c.holders()] == ["r"]
    session.try_complete()
    session.close()
    gc.collect()
    assert idle(c) and c.holders() == []
    snapshot = decision.snapshot
    assert snapshot.released and "released" in repr(snapshot)
    assert (snapshot.generation, snapshot.tokens, snapshot.pages, snapshot.domains) == (2, 192, 12, ["kv"])
    with pytest.raises(SessionStateError, match="released"):
        snapshot.extents


def test_holders_names_resources_and_live_frames_but_never_snapshots():
    c = make()
    admitted = c.admit("a", 16, 64)
    initial = admitted.resources.initial_backing
    assert c.holders() == [("a", 1, ["kv"], 1)]  # the admitted resources
    session = admitted.resources.open_session()
    frame = session.acquire_frame()
    kept = frame.snapshot
    assert c.holders() == [("a", 1, ["kv"], 2)]  # and the live frame
    admitted.resources.close()
    session.request_cancel()
    session.close()  # fails closed; the frame still holds the pages
    assert c.holders() == [("a", 1, ["kv"], 1)] and not initial.released
    frame.close()
    assert c.holders() == [] and idle(c)
    assert initial.released and kept.released


def test_a_flight_in_flight_keeps_its_pages_after_its_frame_and_session_are_gone():
    # Work dispatched on the sequence's pages may still run: no other sequence may get them.
    c = make(pages=2)
    admitted = c.admit("a", 32, 32)
    with admitted.resources:
        session = admitted.resources.open_session()
    frame = session.acquire_frame()
    ids = frame.block_ids().tolist()
    flight = session.prepare_flight(7)
    flight.dispatch()
    frame.close()  # dropped without a commit: poisons the session; the flight still runs
    session.close()
    assert c.holders() == [("a", 2, ["kv"], 1)]  # the flight in flight
    assert isinstance(c.admit("b", 32, 32), AdmissionDeferred)  # no page of "a" is handed out
    flight.finish()  # its work completed: the pages come back
    assert c.holders() == [] and idle(c)
    taken = c.admit("b", 32, 32)
    assert isinstance(taken, Admitted) and sorted(taken.resources.initial_backing.block_ids().tolist()) == sorted(ids)


def test_a_live_request_id_is_refused_then_accepted_after_release():
    c = make()
    first = c.admit("dup", 16, 64)
    assert isinstance(first, Admitted)
    before = c.capacity()
    with pytest.raises(InvalidArgumentError, match="already live"):
        c.admit("dup", 16, 64)
    after = c.capacity()
    assert (after.used_bytes, after.active_sequences) == (before.used_bytes, before.active_sequences)
    assert isinstance(c.admit("other", 16, 64), Admitted)  # other ids are untouched
    session = first.resources.open_session()
    with pytest.raises(InvalidArgumentError):
        c.admit("dup", 16, 64)  # the session keeps it live
    session.step(16)
    session.try_complete()
    with pytest.raises(InvalidArgumentError):
        c.admit("dup", 16, 64)  # terminal, but its resources are still held
    first.resources.close()
    session.close()
    again = c.admit("dup", 16, 64)
    assert isinstance(again, Admitted)


def test_a_deferred_step_names_its_deferral_beside_the_answer():
    c = make(pages=2)
    a = c.admit("a", 16, 32)
    b = c.admit("b", 16, 32)
    session = a.resources.open_session()
    assert session.step(16) == BackingOutcome.CURRENT and session.step_deferral is None
    assert session.step(17) == BackingOutcome.BACKING_DEFERRED
    deferred = session.step_deferral
    assert isinstance(deferred, AdmissionDeferred) and deferred.request_id == "a"
    registration = session.register_admission_waiter(deferred)  # usable as it is
    assert not registration.should_retry()
    b.resources.close()
    assert registration.should_retry()
    assert session.step(17) == BackingOutcome.EXTENDED and session.step_deferral is None
    # A deferral taken on an older generation is stale once the backing moved on.
    with pytest.raises(StaleAuthorityError):
        session.register_admission_waiter(deferred)


def test_fingerprint_is_stable_and_verifiable_after_the_backing_moves():
    c = make()
    session = c.admit("f", 16, 64).resources.open_session()
    session.step(40)  # extends before the first read
    fp = session.fingerprint
    assert len(fp) == 64 and fp == session.fingerprint
    session.verify(session.epoch, fp)
    with pytest.raises(StaleAuthorityError):
        session.verify(session.epoch, "0" * 64)
    receipt = session.try_complete()
    assert receipt.fingerprint == fp and session.receipt.fingerprint == fp
    other = c.admit("g", 16, 64).resources.open_session()
    assert other.fingerprint != fp


def test_reprs_name_enum_members_not_numbers():
    c = AdmissionCoordinator(domains={"kv": 4 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                             max_active_sequences=1)
    first = c.admit("a", 16, 16)
    deferred = c.admit("b", 16, 16)
    assert isinstance(first, Admitted) and isinstance(deferred, AdmissionDeferred)
    text = repr(deferred)
    assert f"action={deferred.action.name}," in text and "action=0" not in text
    session = first.resources.open_session()
    first.resources.close()
    decision = session.try_ensure_backing_covers(16)
    assert repr(decision).startswith(f"BackingDecision(outcome={decision.outcome.name},")
    session.request_cancel()
    session.close()


def test_handles_made_again_after_a_burst_of_releases_are_new_and_the_kept_ones_stay_closed():
    # The admission's Python objects are kept after they die and made again for the next
    # admissions (up to 4,096 of a type): a burst past that, some of its handles kept by the
    # caller. A kept handle is never handed out again; every new one is open, holds its own
    # blocks and knows its own request.
    burst = 5000
    c = AdmissionCoordinator(domains={"kv": 2 * burst * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                             max_active_sequences=2 * burst)
    sessions = []
    for i in range(burst):
        admitted = c.admit(f"first-{i}", 16, 32)
        sessions.append(admitted.resources.open_session())
    for s in sessions:
        s.close()
    kept = sessions[::7]  # the rest die here
    kept_ids = {id(s) for s in kept}
    del sessions, admitted, s
    gc.collect()
    assert idle(c)
    again = []
    for i in range(burst):
        resources = c.admit(f"second-{i}", 32, 32).resources
        again.append((resources, resources.open_session()))
    assert all(s.closed for s in kept)
    assert not kept_ids & {id(s) for _, s in again} and not kept_ids & {id(r) for r, _ in again}
    blocks = [int(b) for _, s in again for b in s.backing.block_ids("kv")]
    assert len(blocks) == 2 * burst and len(set(blocks)) == 2 * burst  # no block held twice
    assert all(not s.closed and r.opened and not r.closed for r, s in again)
    assert [s.resources.request_id for _, s in again[:3]] == ["second-0", "second-1", "second-2"]
    for _, s in again:
        s.close()
    assert idle(c)
