"""``SequenceSessionMachine``: sequence sessions against the pure-Python reference model.

Many sessions live at once on one coordinator. Every rule applies the same operation to the
implementation and to ``lifecore.models.sequence_session`` and compares results and error
kinds; invariants after every step check phases, capacity accounting (used bytes equal the
sum of live backings, within every domain and the ceiling), epochs, waiters, that a live
frame's snapshot never changes, and that terminal states are absorbing. Teardown drops
everything and checks that usage returns to zero.

Bind it to a backend by passing a coordinator factory::

    run_state_machine_as_test(lambda: SequenceSessionMachine(lambda **kw: AdmissionCoordinator("mock", **kw)))
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lifecore import errors
from lifecore.models import sequence_session as model
from lifecore.sequence import (AdmissionCoordinator, AdmissionDeferred, AdmissionRejected, Admitted,
                               preempt_for)

PAGE_BYTES = 256
TOKENS_PER_PAGE = 4
CONFIG = dict(domains={"a": (6 * PAGE_BYTES, 10 * PAGE_BYTES), "b": 6 * PAGE_BYTES},
              page_bytes=PAGE_BYTES, tokens_per_page=TOKENS_PER_PAGE, max_active_sequences=3)

_KINDS = {
    errors.SessionStateError: "SessionState", errors.StaleAuthorityError: "StaleAuthority",
    errors.InvalidArgumentError: "InvalidArgument", errors.CapacityError: "Capacity", errors.ClosedError: "Closed",
}


def _kind(error: BaseException) -> str:
    for cls, name in _KINDS.items():
        if isinstance(error, cls):
            return name
    raise error


def _source_name(source: Any) -> tuple:
    return ("slots", None) if source.domain is None else ("domain", source.domain)


def both(real: Callable[[], Any], modeled: Callable[[], Any]) -> tuple[Any, Any, Optional[str]]:
    """Run both sides; they must succeed together or fail with the same error kind."""
    try:
        r = real()
        r_error = None
    except errors.LifecoreError as e:
        r, r_error = None, _kind(e)
    try:
        m = modeled()
        m_error = None
    except model.ModelError as e:
        m, m_error = None, e.kind
    assert r_error == m_error, f"implementation: {r_error}, model: {m_error}"
    return r, m, r_error


class Entry:
    """One admitted sequence, on both sides."""

    def __init__(self, real: Any, modeled: model.ModelResources) -> None:
        self.rr: Any = real  # real resources handle (None once closed)
        self.mr = modeled
        self.rs: Any = None  # real session
        self.ms: Optional[model.ModelSession] = None
        self.frame: Optional[tuple[Any, model.ModelFrame, tuple]] = None
        self.flights: dict[int, tuple[Any, model.ModelFlight]] = {}
        self.terminal: Optional[str] = None


class SequenceSessionMachine(RuleBasedStateMachine):
    def __init__(self, coordinator_factory: Optional[Callable[..., AdmissionCoordinator]] = None) -> None:
        super().__init__()
        factory = coordinator_factory or (lambda **kw: AdmissionCoordinator(None, **kw))
        self.real = factory(**CONFIG)
        self.model = model.ModelCoordinator(**CONFIG)
        self.entries: list[Entry] = []
        self.deferreds: list[tuple[AdmissionDeferred, model.ModelDeferred]] = []
        self.waiters: list[tuple[Any, model.ModelWaiter]] = []
        self.counter = 0

    # ---------- helpers ----------
    def _pick(self, index: int, pred: Callable[[Entry], bool]) -> Optional[Entry]:
        candidates = [e for e in self.entries if pred(e)]
        return candidates[index % len(candidates)] if candidates else None

    def _has(self, pred: Callable[[Entry], bool]) -> bool:
        return any(pred(e) for e in self.entries)

    @staticmethod
    def _snap(snapshot: Any) -> tuple:
        return (snapshot.generation, snapshot.tokens, snapshot.pages)

    # ---------- admission ----------
    @rule(prompt=st.integers(-1, 14), extra=st.integers(0, 28), domains=st.sampled_from([None, ["a"], ["b"], ["b", "a"]]),
          open_now=st.booleans())
    def admit(self, prompt: int, extra: int, domains: Optional[list], open_now: bool) -> None:
        self.counter += 1
        rid = f"r{self.counter}"
        r, m, err = both(lambda: self.real.admit(rid, prompt, prompt + extra, domains),
                         lambda: self.model.admit(rid, prompt, prompt + extra, domains))
        if err:
            return
        if isinstance(m, model.ModelAdmitted):
            assert isinstance(r, Admitted), r
            assert self._snap(r.resources.initial_backing) == (1, prompt, m.resources.initial_backing.pages)
            entry = Entry(r.resources, m.resources)
            self.entries.append(entry)
            if open_now:
                entry.rs, entry.ms = entry.rr.open_session(), entry.mr.open_session()
        elif isinstance(m, model.ModelDeferred):
            assert isinstance(r, AdmissionDeferred), r
            assert [_source_name(s) for s in r.wait_condition.sources] == m.sources
            assert list(r.wait_condition.epochs) == m.epochs
            assert r.action.name == m.action
            self.deferreds.append((r, m))
            self.deferreds = self.deferreds[-6:]
        else:
            assert isinstance(r, AdmissionRejected), r

    @rule(extra=st.integers(0, 4))
    def grow(self, extra: int) -> None:
        target = min(self.model.total["a"] + extra * PAGE_BYTES, self.model.maximum["a"])
        both(lambda: self.real.grow_domain("a", target), lambda: self.model.grow_domain("a", target))

    @precondition(lambda self: self._has(lambda e: e.rr is not None and e.rs is None))
    @rule(i=st.integers(0, 50))
    def open_session(self, i: int) -> None:
        e = self._pick(i, lambda e: e.rr is not None and e.rs is None)
        if e is None:
            return
        r, m, err = both(e.rr.open_session, e.mr.open_session)
        assert err is None
        e.rs, e.ms = r, m
        _, _, err = both(e.rr.open_session, e.mr.open_session)
        assert err == "SessionState"

    @precondition(lambda self: self._has(lambda e: e.rr is not None))
    @rule(i=st.integers(0, 50))
    def close_resources(self, i: int) -> None:
        e = self._pick(i, lambda e: e.rr is not None)
        if e is None:
            return
        e.rr.close()
        e.rr = None
        e.mr.close()

    # ---------- session operations ----------
    def _live(self, e: Entry) -> bool:
        return e.rs is not None and not e.ms.handle_closed

    @precondition(lambda self: self._has(self._live))
    @rule(i=st.integers(0, 50), delta=st.integers(-3, 9), pages=st.one_of(st.none(), st.integers(0, 10)))
    def extend(self, i: int, delta: int, pages: Optional[int]) -> None:
        e = self._pick(i, self._live)
        if e is None:
            return
        tokens = e.ms.current.tokens + delta
        r, m, err = both(lambda: e.rs.try_ensure_backing_covers(tokens, pages),
                         lambda: e.ms.try_ensure_backing_covers(tokens, pages))
        if err:
            return
        outcome, payload = m
        assert r.outcome.name == outcome
        if outcome in ("CURRENT", "EXTENDED"):
            assert self._snap(r.snapshot) == (payload.generation, payload.tokens, payload.pages)
        if outcome == "BACKING_DEFERRED":
            assert r.deferred is not None
            assert [_source_name(s) for s in r.deferred.wait_condition.sources] == payload.sources
            assert r.deferred.action.name == payload.action
            self.deferreds.append((r.deferred, payload))
            self.deferreds = self.deferreds[-6:]
        del r

    @precondition(lambda self: self._has(self._live))
    @rule(i=st.integers(0, 50), delta=st.integers(-2, 5))
    def step(self, i: int, delta: int) -> None:
        e = self._pick(i, self._live)
        if e is None:
            return
        tokens = e.ms.current.tokens + delta
        r, m, err = both(lambda: e.rs.step(tokens), lambda: e.ms.step(tokens))
        if not err:
            assert r.name == m

    @precondition(lambda self: self._has(self._live))
    @rule(i=st.integers(0, 50))
    def acquire(self, i: int) -> None:
        e = self._pick(i, self._live)
        if e is None:
            return
        r, m, err = both(e.rs.acquire_frame, e.ms.acquire_frame)
        if err:
            return
        assert r.frame_id == m.frame_id
        shape = self._snap(r.snapshot)
        assert shape == (m.snapshot.generation, m.snapshot.tokens, m.snapshot.pages)
        e.frame = (r, m, shape)

    @precondition(lambda self: self._has(lambda e: e.frame is not None))
    @rule(i=st.integers(0, 50), how=st.sampled_from(["commit", "abort", "rollback_unsubmitted", "close"]))
    def finalize_frame(self, i: int, how: str) -> None:
        e = self._pick(i, lambda e: e.frame is not None)
        if e is None:
            return
        rf, mf, _ = e.frame
        r, m, err = both(getattr(rf, how), getattr(mf, how))
        if how == "commit" and not err:
            assert r.name == m
        if rf.finalized:
            assert mf.finalized
            e.frame = None

    @precondition(lambda self: self._has(lambda e: self._live(e) and e.frame is not None))
    @rule(i=st.integers(0, 50), key=st.integers(0, 3))
    def prepare_flight(self, i: int, key: int) -> None:
        e = self._pick(i, self._live)
        if e is None:
            return
        r, m, err = both(lambda: e.rs.prepare_flight(key), lambda: e.ms.prepare_flight(key))
        if not err:
            e.flights[key] = (r, m)

    @precondition(lambda self: self._has(lambda e: bool(e.flights)))
    @rule(i=st.integers(0, 50), how=st.sampled_from(["dispatch", "not_submitted", "finish", "release", "close"]))
    def flight_op(self, i: int, how: str) -> None:
        e = self._pick(i, lambda e: bool(e.flights))
        if e is None:
            return
        key = sorted(e.flights)[i % len(e.flights)]
        rf, mf = e.flights[key]
        both(getattr(rf, how), getattr(mf, how))
        assert rf.released == mf.released
        if rf.released:
            del e.flights[key]

    @precondition(lambda self: self._has(lambda e: e.rs is not None))
    @rule(i=st.integers(0, 50), how=st.sampled_from(["request_cancel", "try_complete", "try_abort",
                                                    "try_abort_if_quiescent"]))
    def transition(self, i: int, how: str) -> None:
        e = self._pick(i, lambda e: e.rs is not None)
        if e is None:
            return
        r, m, err = both(getattr(e.rs, how), getattr(e.ms, how))
        if err or how == "request_cancel":
            if how == "request_cancel" and not err:
                assert r.active_frame == m["active_frame"]
                assert [(k, p.name) for k, p in r.flights] == m["flights"]
            return
        assert r.outcome.name == m["outcome"]
        assert (r.retired_frames, r.committed_frames, r.discarded_frames, r.backing_generation) == (
            m["retired"], m["committed"], m["discarded"], m["generation"])

    @precondition(lambda self: self._has(self._live))
    @rule(i=st.integers(0, 50))
    def drop_session(self, i: int) -> None:
        e = self._pick(i, lambda e: e.rs is not None and not e.ms.handle_closed)
        if e is None:
            return
        e.rs.close()
        e.ms.close()

    @precondition(lambda self: self._has(lambda e: e.rs is not None))
    @rule(i=st.integers(0, 50))
    def release_sources(self, i: int) -> None:
        e = self._pick(i, lambda e: e.rs is not None)
        if e is None:
            return
        r_out: list = []
        m_out: list = []
        _, _, err = both(lambda: e.rs.write_release_capacity_sources(r_out),
                         lambda: e.ms.write_release_capacity_sources(m_out))
        if not err:
            assert [_source_name(s) for s in r_out] == m_out

    # ---------- waiters and preemption ----------
    @precondition(lambda self: bool(self.deferreds))
    @rule(d=st.integers(0, 5), i=st.integers(0, 50), via_session=st.booleans())
    def register_waiter(self, d: int, i: int, via_session: bool) -> None:
        if not self.deferreds:
            return
        rd, md = self.deferreds[d % len(self.deferreds)]
        e = self._pick(i, lambda e: e.rs is not None) if via_session else None
        if e is not None:
            r, m, err = both(lambda: e.rs.register_admission_waiter(rd), lambda: e.ms.register_admission_waiter(md))
        else:
            if md.expected_generation is not None:
                return  # backing deferrals register through their session
            r, m, err = both(lambda: self.real.register_waiter(rd), lambda: self.model.register_waiter(md))
        if not err:
            self.waiters.append((r, m))
            if len(self.waiters) > 6:
                old_r, old_m = self.waiters.pop(0)
                old_r.cancel()
                old_m.cancel()

    @precondition(lambda self: bool(self.deferreds))
    @rule(d=st.integers(0, 5))
    def preempt(self, d: int) -> None:
        if not self.deferreds:
            return
        rd, md = self.deferreds[d % len(self.deferreds)]
        if md.expected_generation is not None:
            return
        live = [e for e in self.entries if e.rs is not None and not e.ms.handle_closed]
        report = preempt_for(self.real, rd, [e.rs for e in live])
        victims = []
        for e in live:  # the same policy, on the model
            if self.model.fits_now(md):
                break
            out: list = []
            try:
                e.ms.write_release_capacity_sources(out)
            except model.ModelError:
                continue
            if not set(out) & set(md.sources):
                continue
            try:
                e.ms.try_abort_if_quiescent()
            except model.ModelError:
                continue
            victims.append(e.ms.sequence_authority)
            e.ms.close()
        assert [(a.sparse_id, a.generation) for a in report.victims] == victims
        assert report.satisfied == self.model.fits_now(md)

    @rule(dice=st.integers(0, 29))
    def close_coordinator_rarely(self, dice: int) -> None:
        if dice == 17 and not self.model.closed:
            self.real.close()
            self.model.close()

    # ---------- invariants ----------
    @invariant()
    def phases_match(self) -> None:
        for e in self.entries:
            if e.rs is None:
                continue
            assert e.rs.phase.name == e.ms.phase
            if e.terminal is not None:
                assert e.ms.phase == e.terminal  # absorbing
            if e.ms.phase in (model.COMPLETED, model.ABORTED):
                e.terminal = e.ms.phase
            assert e.rs.next_frame_id == e.ms.next_frame
            assert e.rs.retired_frames == e.ms.retired
            assert e.rs.flight_count == len(e.ms.flights)

    @invariant()
    def capacity_matches(self) -> None:
        cap = self.real.capacity()
        assert cap.used_bytes == self.model.used
        assert cap.active_sequences == self.model.active <= self.model.max_active
        for d in cap.domains:
            assert d.used_bytes <= d.total_bytes == self.model.total[d.name]
            assert d.epoch == self.model.epochs[model.domain(d.name)]
        assert cap.slots_epoch == self.model.epochs[model.SLOTS]
        assert cap.release_epoch == self.model.release_epoch
        live = [e.mr.seq for e in self.entries if not e.mr.seq.released]
        for name in self.model.total:
            assert self.model.used[name] == sum(s.pages * PAGE_BYTES for s in live if name in s.domains)
        stats = self.real.page_memory_stats()
        if stats:
            assert stats["live_bytes"] == sum(s.pages * PAGE_BYTES * len(s.domains) for s in live)

    @invariant()
    def live_frames_keep_their_snapshot(self) -> None:
        for e in self.entries:
            if e.frame is not None and not e.frame[0].finalized:
                snap = e.frame[0].snapshot
                assert snap is not None and self._snap(snap) == e.frame[2]

    @invariant()
    def waiters_match(self) -> None:
        for r, m in self.waiters:
            assert r.should_retry() == m.should_retry()
            assert r.wake_count == m.wakes

    def teardown(self) -> None:
        for r, m in self.waiters:
            r.cancel()
            m.cancel()
        for e in self.entries:
            for rf, mf in e.flights.values():
                rf.close()
                mf.close()
            if e.frame is not None:
                e.frame[0].close()
                e.frame[1].close()
            if e.rs is not None:
                e.rs.close()
                e.ms.close()
            if e.rr is not None:
                e.rr.close()
                e.mr.close()
        self.entries.clear()
        self.deferreds.clear()
        cap = self.real.capacity()
        assert all(v == 0 for v in cap.used_bytes.values()), cap.used_bytes
        assert cap.active_sequences == 0 and self.model.active == 0
        stats = self.real.page_memory_stats()
        assert not stats or stats["live_bytes"] == 0
