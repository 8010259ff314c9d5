"""``SequenceSessionMachine``: sequence sessions against the pure-Python reference model.

Many sessions live at once on one coordinator. Every rule applies the same operation to the
implementation and to ``lifecore.models.sequence_session`` and compares results and error
kinds; invariants after every step check phases, capacity accounting (used bytes equal the
sum of live backings, within every domain and the ceiling), epochs, waiters, that a live
frame's snapshot never changes, and that terminal states are absorbing. Teardown drops
everything and checks that usage returns to zero.

``STATS`` counts, across machines in this process, how often each rule ran and which
outcome or error kind it produced (``print(STATS.report())``), so a skewed rule mix shows.

It has the shape of every lifecycle's machine (:mod:`lifecore.testing.machine`). Bind it to a
backend by passing a coordinator factory (``None`` for host pages)::

    for name in lifecore.available_backends():
        SequenceSessionMachine.run(lambda **kw: AdmissionCoordinator(name, **kw), seed=0)
    TestEmulated = SequenceSessionMachine.bind(
        lambda **kw: AdmissionCoordinator(lifecore.testing.emulated_backend(), **kw)).TestCase
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from lifecore.models import sequence_session as model
from lifecore.sequence import (AdmissionCoordinator, AdmissionDeferred, AdmissionRejected, Admitted,
                               BackingOutcome, SourceKind, preempt_for, step_all)

from .machine import LifecycleMachine, clean_up, counted, same
from .machine_stats import MachineStats

PAGE_BYTES = 256
TOKENS_PER_PAGE = 4
CONFIG = dict(domains={"a": (6 * PAGE_BYTES, 10 * PAGE_BYTES), "b": 6 * PAGE_BYTES},
              page_bytes=PAGE_BYTES, tokens_per_page=TOKENS_PER_PAGE, max_active_sequences=3)


def _source_name(source: Any) -> tuple[Any, ...]:
    if source.kind == SourceKind.PHYSICAL_MEMORY:
        return model.PHYSICAL
    return ("slots", None) if source.domain is None else ("domain", source.domain)


#: Every sequence-session machine in this process, counted: how often each rule ran and which
#: outcome or error kind it produced.
TABLE_WIDTH = 12  # columns of the block tables the machine checks: more than any domain's pages
DECODE_ROWS = 4  # rows of the decode tables the machine keeps: fewer than the sessions, so rows change hands
STATS = MachineStats("sequence session")

#: The statistics' former name (one class serves every lifecycle now).
SequenceMachineStats = MachineStats


class Entry:
    """One admitted sequence, on both sides."""

    def __init__(self, real: Any, modeled: model.ModelResources) -> None:
        self.rr: Any = real  # real resources handle (None once closed)
        self.mr = modeled
        self.rs: Any = None  # real session
        self.ms: Any = None  # model.ModelSession, once opened
        self.frame: Optional[tuple[Any, model.ModelFrame, tuple[Any, ...]]] = None
        self.flights: dict[int, tuple[Any, model.ModelFlight]] = {}
        self.terminal: Optional[str] = None
        self.flown: Optional[int] = None  # the last frame the scheduler gave a participant flight
        # Per domain, the ids its snapshot showed at the last check, and those of the kept frame
        # when it was acquired (see block_ids_follow_their_contract).
        self.ids_seen: dict[str, list[int]] = {}
        self.frame_ids: dict[str, list[int]] = {}


class SequenceSessionMachine(LifecycleMachine):
    """Differential state machine: sequence sessions on an admission coordinator against the
    reference model. Construct with a coordinator factory (called with the coordinator's
    configuration as keywords; default: host page memory), or bind one with :meth:`bind`.
    Refusals are compared by error kind (the model's texts describe, they do not fix)."""

    stats = STATS

    def __init__(self, coordinator_factory: Optional[Callable[..., AdmissionCoordinator]] = None) -> None:
        super().__init__()
        factory = self.factory_or_bound(coordinator_factory) or (lambda **kw: AdmissionCoordinator(None, **kw))
        self.real = factory(**CONFIG)
        self.model = model.ModelCoordinator(**CONFIG)  # type: ignore[arg-type]
        self.entries: list[Entry] = []
        self.deferreds: list[tuple[AdmissionDeferred, model.ModelDeferred]] = []
        self.waiters: list[tuple[Any, model.ModelWaiter, model.ModelDeferred]] = []
        self.counter = 0
        self.cursor = 0
        self.requests: dict[str, tuple[Any, ...]] = {}  # deferred request id -> (prompt, fit, domains)
        # model waiter (kept, so its id stays its own) -> its wake-ups already in STATS
        self.wakes_counted: dict[int, tuple[model.ModelWaiter, int]] = {}
        # (domain, rows) -> the block table kept across steps (see block_tables_show_the_current_ids)
        self.tables: dict[tuple[str, int], np.ndarray] = {}
        # domain -> the decode table kept across steps (see decode_tables_show_the_current_ids)
        self.decode_tables: dict[str, Any] = {}
        self.turn = 0
        # frames already finalized, kept on both sides (see reuse_finalized_frame)
        self.finalized: list[tuple[Any, model.ModelFrame]] = []

    # ---------- helpers ----------
    def _pick(self, index: int, pred: Callable[[Entry], bool]) -> Optional[Entry]:
        candidates = [e for e in self.entries if pred(e)]
        return candidates[index % len(candidates)] if candidates else None

    def _target(self, index: int, *preds: Callable[[Entry], bool]) -> Entry:
        """The pick of the first predicate with candidates (a rule's precondition promises one)."""
        for pred in preds:
            e = self._pick(index, pred)
            if e is not None:
                return e
        raise AssertionError("the precondition promised a target")

    def _pick_session(self, index: int) -> Optional[Entry]:
        """Mostly a session whose handle is open; every fourth pick any session (error paths)."""
        if index % 4:
            e = self._pick(index, self._live)
            if e is not None:
                return e
        return self._pick(index, lambda e: e.rs is not None)

    def _has(self, pred: Callable[[Entry], bool]) -> bool:
        return any(pred(e) for e in self.entries)

    @staticmethod
    def _snap(snapshot: Any) -> tuple[Any, ...]:
        return (snapshot.generation, snapshot.tokens, snapshot.pages)

    # ---------- admission ----------
    def _admit(self, prompt: int, fit: int, domains: Optional[list[Any]], open_now: bool, keep_resources: bool = True,
               request_id: Optional[str] = None) -> None:
        """Admit on both sides; an admitted sequence may be opened at once and, when the
        scheduler keeps only the session (``keep_resources`` false), its resources handle is
        dropped so that ending the session releases the capacity."""
        if request_id is None:
            self.counter += 1
            request_id = f"r{self.counter}"
        rid = request_id
        m, r, err = self.both(f"admit({rid}, {prompt}, {fit}, {domains})",
                              lambda: self.model.admit(rid, prompt, fit, domains),
                              lambda: self.real.admit(rid, prompt, fit, domains))
        if err:
            return
        if isinstance(m, model.ModelAdmitted):
            assert isinstance(r, Admitted), r
            STATS.note(STATS.current, "ADMITTED")
            same(self._snap(r.resources.initial_backing), (1, prompt, m.resources.initial_backing.pages))
            entry = Entry(r.resources, m.resources)
            self.entries.append(entry)
            if open_now:
                entry.rs, entry.ms = entry.rr.open_session(), entry.mr.open_session()
                if not keep_resources:
                    entry.rr.close()
                    entry.rr = None
                    entry.mr.close()
        elif isinstance(m, model.ModelDeferred):
            assert isinstance(r, AdmissionDeferred), r
            STATS.note(STATS.current, "DEFERRED:" + ("PHYSICAL" if m.sources == [model.PHYSICAL] else m.action))
            same([_source_name(s) for s in r.wait_condition.sources], m.sources)
            same(list(r.wait_condition.epochs), m.epochs)
            same(r.action.name, m.action)
            self._remember_deferral(r, m)
            self.requests[rid] = (prompt, fit, domains)
        else:
            STATS.note(STATS.current, "REJECTED")
            assert isinstance(r, AdmissionRejected), r

    def _remember_deferral(self, r: AdmissionDeferred, m: model.ModelDeferred) -> None:
        self.deferreds.append((r, m))
        self.deferreds = self.deferreds[-6:]

    @initialize(sizes=st.lists(st.tuples(st.integers(1, 8), st.integers(0, 12), st.booleans()), min_size=1, max_size=3))
    def seed_sessions(self, sizes: list[Any]) -> None:
        """Start with live sessions, so that every session rule has targets from the first step."""
        STATS.current = "seed_sessions"
        for prompt, extra, keep in sizes:
            self._admit(prompt, prompt + extra, None, True, keep)

    @rule(prompt=st.integers(-1, 14), extra=st.integers(0, 28), domains=st.sampled_from([None, ["a"], ["b"], ["b", "a"], [], ["a", "a"], ["c"]]),
          open_now=st.booleans())
    @counted
    def admit(self, prompt: int, extra: int, domains: Optional[list[Any]], open_now: bool) -> None:
        """Any request, invalid and oversized ones included."""
        self._admit(prompt, prompt + extra, domains, open_now)

    @rule(prompt=st.integers(1, 8), extra=st.integers(0, 16), domains=st.sampled_from([None, None, ["a"], ["b"]]),
          keep_resources=st.booleans())
    @counted
    def admit_to_run(self, prompt: int, extra: int, domains: Optional[list[Any]], keep_resources: bool) -> None:
        """A request that fits the pool once it is free, opened at once: keeps capacity near its limits."""
        self._admit(prompt, prompt + extra, domains, True, keep_resources)

    @precondition(lambda self: bool(self.entries))
    @rule(i=st.integers(0, 7), prompt=st.integers(1, 8))
    @counted
    def readmit_request_id(self, i: int, prompt: int) -> None:
        """Admit an admitted request's id again: refused while its sequence still holds capacity
        (one live sequence per request id), a fresh admission once the last holder let go."""
        entry = self.entries[i % len(self.entries)]
        STATS.note("readmit_request_id", "released" if entry.mr.seq.released else "live")
        self._admit(prompt, prompt, None, False, request_id=entry.mr.seq.request_id)

    @precondition(lambda self: any(m.request_id in self.requests for _, m in self.deferreds))
    @rule(d=st.integers(0, 5), keep_resources=st.booleans())
    @counted
    def retry_deferred(self, d: int, keep_resources: bool) -> None:
        """Re-admit a deferred request, preferring one whose waiter says to retry."""
        woken = {id(md) for _, m, md in self.waiters if m.should_retry()}
        pending = [(r, m) for r, m in self.deferreds if m.request_id in self.requests]
        preferred = [(r, m) for r, m in pending if id(m) in woken] or pending
        _, md = preferred[d % len(preferred)]
        prompt, fit, domains = self.requests.pop(md.request_id)
        STATS.note("retry_deferred", "after_wakeup" if id(md) in woken else "blind")
        self._admit(prompt, fit, domains, True, keep_resources, request_id=md.request_id)

    @precondition(lambda self: self.real.page_memory_kind == "host" and self.model.failures_pending == 0)
    @rule(count=st.integers(1, 2))
    @counted
    def fail_page_allocations(self, count: int) -> None:
        """The next physical allocations fail (out of memory): admissions and extensions that
        reach the device defer on physical memory, which a page release advances."""
        self.real.fail_next_page_allocations(count)
        self.model.fail_next_page_allocations(count)

    @precondition(lambda self: self.model.total["a"] < self.model.maximum["a"] or self.model.closed)
    @rule(extra=st.integers(0, 4))
    @counted
    def grow(self, extra: int) -> None:
        """Grows domain ``a`` by up to ``extra`` pages (never past its maximum) on both; the outcomes
        must agree (a closed coordinator refuses alike)."""
        target = min(self.model.total["a"] + extra * PAGE_BYTES, self.model.maximum["a"])
        self.both(f"grow_domain(a, {target})", lambda: self.model.grow_domain("a", target),
                  lambda: self.real.grow_domain("a", target))

    @precondition(lambda self: self._has(lambda e: e.rr is not None and e.rs is None))
    @rule(i=st.integers(0, 50))
    @counted
    def open_session(self, i: int) -> None:
        """Opens the session of an admitted sequence whose resources are held and have none yet, on
        both; a second ``open_session`` must then be refused on both (SessionStateError)."""
        e = self._pick(i, lambda e: e.rr is not None and e.rs is None)
        if e is None:
            return
        m, r, err = self.both("open_session", e.mr.open_session, e.rr.open_session)
        assert err is None
        e.rs, e.ms = r, m
        _, _, err = self.both("open_session (again)", e.mr.open_session, e.rr.open_session)
        same(err, "SessionState")

    @precondition(lambda self: self._has(lambda e: e.rr is not None))
    @rule(i=st.integers(0, 50))
    @counted
    def close_resources(self, i: int) -> None:
        """Closes a held resources handle on both; the sequence's capacity is released once nothing
        else (its session, a frame) holds it."""
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
    @counted
    def extend(self, i: int, delta: int, pages: Optional[int]) -> None:
        """Any target, invalid ones included."""
        e = self._pick(i, self._live)
        if e is None:
            return
        self._extend(e, e.ms.current.tokens + delta, pages)

    def _extend(self, e: Entry, tokens: int, pages: Optional[int]) -> None:
        m, r, err = self.both(f"try_ensure_backing_covers({tokens}, {pages})",
                              lambda: e.ms.try_ensure_backing_covers(tokens, pages),
                              lambda: e.rs.try_ensure_backing_covers(tokens, pages))
        if err:
            return
        outcome, payload = m
        STATS.note(STATS.current, outcome + (":PHYSICAL" if outcome == "BACKING_DEFERRED" and payload.sources == [model.PHYSICAL]
                                             else ""))
        same(r.outcome.name, outcome)
        if outcome in ("CURRENT", "EXTENDED"):
            same(self._snap(r.snapshot), (payload.generation, payload.tokens, payload.pages))
        if outcome == "BACKING_DEFERRED":
            assert r.deferred is not None
            same([_source_name(s) for s in r.deferred.wait_condition.sources], payload.sources)
            same(r.deferred.action.name, payload.action)
            self._remember_deferral(r.deferred, payload)
        del r

    @precondition(lambda self: self._has(self._live))
    @rule(i=st.integers(0, 50), delta=st.integers(-2, 5))
    @counted
    def step(self, i: int, delta: int) -> None:
        """Calls ``step(tokens)`` on a live session (its current tokens plus ``delta``, invalid targets
        included), on both: the outcome's name or the refusal must agree."""
        e = self._pick(i, self._live)
        if e is None:
            return
        tokens = e.ms.current.tokens + delta
        m, r, err = self.both(f"step({tokens})", lambda: e.ms.step(tokens), lambda: e.rs.step(tokens))
        if not err:
            STATS.note("step", m)
            same(r.name, m)

    @precondition(lambda self: self._has(self._live))
    @rule(picks=st.lists(st.integers(0, 50), min_size=1, max_size=4),
          deltas=st.lists(st.integers(-1, 6), min_size=5, max_size=5), mistake=st.integers(0, 9),
          table_domain=st.sampled_from([None, None, "a", "b"]))
    @counted
    def step_batch(self, picks: list[Any], deltas: list[Any], mistake: int, table_domain: Optional[str]) -> None:
        """Steps a batch of distinct sessions in one call, on both: ``step_all``, or the decode table
        of ``table_domain`` (``DecodeTable.step``, over sessions in that domain, which must then
        show what each row holds). Each row within its fit: open idle sessions in half the
        batches, any live ones in the others, of which four in ten make a caller's mistake (a
        session named twice, a closed handle, a count below 1, a count above the fit). The
        refusal, or each row's outcome, must agree with the model's batch."""
        live = [e for e in self.entries if self._live(e)]
        if table_domain is not None:
            live = [e for e in live if table_domain in e.mr.seq.domains]
            if not live:
                return
        if mistake >= 5:
            live = [e for e in live if self._open(e) and e.ms.quiescent] or live
        rows: list[Entry] = []
        for i in picks:
            if all(live[i % len(live)] is not r for r in rows):
                rows.append(live[i % len(live)])
        if table_domain is not None:
            rows = rows[:DECODE_ROWS - 1]  # room for a mistake's extra row
        if mistake == 1:
            rows.append(rows[-1])
        elif mistake == 2:
            closed = self._pick(picks[0], lambda e: e.rs is not None and e.ms.handle_closed and
                                (table_domain is None or table_domain in e.mr.seq.domains))
            rows.append(closed if closed is not None else rows[0])
        tokens = [min(e.ms.current.tokens + d, e.mr.seq.fit_tokens) for e, d in zip(rows, deltas)]
        if mistake == 3:
            tokens[-1] = 0
        elif mistake == 4:
            tokens[-1] = rows[-1].mr.seq.fit_tokens + 1
        table: Any = None
        if table_domain is None:
            core = lambda: step_all([e.rs for e in rows], tokens)  # noqa: E731
        else:
            table = self.decode_tables.get(table_domain)
            if table is None:
                table = self.decode_tables[table_domain] = self.real.decode_table(DECODE_ROWS, TABLE_WIDTH,
                                                                                  domain=table_domain, pad=-1)
            core = lambda: table.step([e.rs for e in rows], tokens)  # noqa: E731
        m, r, err = self.both(f"step_all({tokens})" if table_domain is None else f"DecodeTable.step({tokens})",
                              lambda: model.step_all([e.ms for e in rows], tokens), core)
        if err:
            return
        for outcome in m:
            STATS.note("step_batch", outcome)
        same([BackingOutcome(v).name for v in r.tolist()], m)
        if table_domain is not None:
            for row, e in enumerate(rows):
                ids = e.rs.backing.block_ids(table_domain)
                shown = np.asarray(table.table)[row]
                assert shown[:len(ids)].tolist() == ids.tolist() and (shown[len(ids):] == -1).all(), (row, shown)

    def _open(self, e: Entry) -> bool:
        return self._live(e) and e.ms.phase == model.OPEN

    def _growable(self, e: Entry) -> bool:
        return self._open(e) and e.ms.current.tokens < e.mr.seq.fit_tokens

    @precondition(lambda self: self._has(self._open))
    @rule(i=st.integers(0, 50), ahead=st.integers(1, 2 * TOKENS_PER_PAGE), spare_pages=st.sampled_from([None, None, 0, 1]))
    @counted
    def extend_frontier(self, i: int, ahead: int, spare_pages: Optional[int]) -> None:
        """Grow an open session just past its frontier, within its fit limit (a live frame or
        flight makes this RETRY_REQUIRED; a full pool makes it BACKING_DEFERRED)."""
        e = self._target(i, self._growable, self._open)
        seq = e.mr.seq
        tokens = min(e.ms.current.tokens + ahead, seq.fit_tokens)
        pages = None
        if spare_pages is not None:
            pages = min(max(self.model.pages_for(tokens) + spare_pages, e.ms.current.pages), seq.fit_pages)
        self._extend(e, tokens, pages)

    @precondition(lambda self: self._has(lambda e: self._open(e) and e.ms.quiescent))
    @rule(i=st.integers(0, 50), ahead=st.integers(1, TOKENS_PER_PAGE))
    @counted
    def decode_step(self, i: int, ahead: int) -> None:
        """One decode step of an idle open session, growing it when it still can."""
        def idle(e: Entry) -> bool:
            return self._open(e) and bool(e.ms.quiescent)

        e = self._target(i, lambda e: idle(e) and self._growable(e), idle)
        tokens = min(e.ms.current.tokens + ahead, e.mr.seq.fit_tokens)
        m, r, err = self.both(f"step({tokens})", lambda: e.ms.step(tokens), lambda: e.rs.step(tokens))
        assert err in (None, "Closed"), err  # a closed pool; spare pages cover a step, never an incomparable one
        if not err:
            STATS.note("decode_step", m)
            same(r.name, m)

    def _retirable(self, e: Entry) -> bool:
        if not (self._live(e) and e.ms.quiescent):
            return False
        return e.ms.phase in (model.CANCEL_REQUESTED, model.POISONED) or e.ms.phase == model.OPEN and e.ms.retired > 0

    @precondition(lambda self: self._has(self._retirable))
    @rule(i=st.integers(0, 50))
    @counted
    def retire(self, i: int) -> None:
        """End a sequence the way a scheduler does: complete (or abort a cancelled or poisoned
        one), then drop every handle, releasing its capacity and waking waiters."""
        e = self._target(i, self._retirable)
        how = "try_complete" if e.ms.phase == model.OPEN else "try_abort"
        m, r, err = self.both(how, getattr(e.ms, how), getattr(e.rs, how))
        assert err is None, err
        # Also run by scheduler_tick, whose step it then is: its outcome counted under that rule.
        STATS.note(STATS.current, m["outcome"] if STATS.current == "retire" else "retired " + m["outcome"])
        same(r.outcome.name, m["outcome"])
        e.terminal = m["outcome"]
        e.rs.close()
        e.ms.close()
        if e.rr is not None:
            e.rr.close()
            e.rr = None
            e.mr.close()

    @precondition(lambda self: self._has(self._live))
    @rule()
    @counted
    def scheduler_tick(self) -> None:
        """What a scheduler does to the next live session (round robin): run its frame (every other
        frame with a participant flight, dispatched then finished) and commit it, decode one token
        (growing its backing), retire it once it is done, or take a frame at its fit limit. Having no
        arguments, this rule sorts first, and Hypothesis favours the first rule."""
        live = [e for e in self.entries if self._live(e)]
        self.cursor += 1
        e = live[self.cursor % len(live)]
        if e.frame is not None and e.flights and e.ms.phase == model.OPEN:
            # its participant flight: dispatched, then finished
            key = sorted(e.flights)[0]
            self._flight(e, key, "dispatch" if e.flights[key][1].phase == "PREPARED" else "finish")
        elif e.frame is not None and not e.flights and e.ms.phase == model.OPEN and e.frame[1].frame_id % 2 \
                and e.flown != e.frame[1].frame_id:
            e.flown = e.frame[1].frame_id  # every other frame has a participant flight
            self._prepare_flight(e, 0)
        elif e.frame is not None and not e.flights and e.ms.phase == model.OPEN:
            self._finalize(e, "commit")
            assert e.frame is None, "an open session's quiescent frame was not committed"
            # the committed frame's handle, used again: refused (close: nothing), changing nothing
            self._reuse_finalized(len(self.finalized) - 1, ("commit", "abort", "rollback_unsubmitted", "close")[self.cursor % 4])
        elif self._open(e) and e.ms.quiescent and e.ms.current.tokens < e.mr.seq.fit_tokens:
            tokens = e.ms.current.tokens + 1
            m, r, err = self.both(f"step({tokens})", lambda: e.ms.step(tokens), lambda: e.rs.step(tokens))
            assert err in (None, "Closed", "InvalidArgument"), err
            if not err:
                STATS.note("scheduler_tick", m)
                same(r.name, m)
        elif self._retirable(e):
            self.retire(i=self._index_in(e, self._retirable))
        elif self._open(e) and e.ms.quiescent:
            self._acquire(e)  # at its fit limit with nothing retired yet: a frame needs no growth
        else:
            STATS.note("scheduler_tick", "idle")

    def _index_in(self, e: Entry, pred: Callable[[Entry], bool]) -> int:
        return [x for x in self.entries if pred(x)].index(e)

    @precondition(lambda self: self._has(lambda e: self._open(e) and e.ms.active_frame is None))
    @rule(i=st.integers(0, 50))
    @counted
    def acquire(self, i: int) -> None:
        """Acquires a frame on an open session without one (one pick in five: any live session, to reach
        the refusals), on both: the frame id and its snapshot must agree. The frame is kept."""
        e = (self._pick(i, lambda e: self._open(e) and e.ms.active_frame is None) if i % 5 else None) or self._pick(
            i, self._live)
        if e is not None:
            self._acquire(e)

    def _acquire(self, e: Entry) -> None:
        m, r, err = self.both("acquire_frame", e.ms.acquire_frame, e.rs.acquire_frame)
        if err:
            return
        STATS.note(STATS.current, "acquired")
        same(r.frame_id, m.frame_id)
        shape = self._snap(r.snapshot)
        same(shape, (m.snapshot.generation, m.snapshot.tokens, m.snapshot.pages))
        e.frame = (r, m, shape)
        e.frame_ids = {name: r.block_ids(name).tolist() for name in r.snapshot.domains}

    @precondition(lambda self: self._has(lambda e: e.frame is not None))
    @rule(i=st.integers(0, 50), how=st.sampled_from(["commit", "commit", "commit", "abort", "rollback_unsubmitted",
                                                    "close"]))
    @counted
    def finalize_frame(self, i: int, how: str) -> None:
        """Ends a kept frame by commit, abort, rollback_unsubmitted or close, on both: the outcomes must
        agree (commit's by name), and a frame lifecore finalized is finalized in the model."""
        e = self._pick(i, lambda e: e.frame is not None)
        if e is not None:
            self._finalize(e, how)

    def _finalize(self, e: Entry, how: str) -> None:
        rf, mf, _ = e.frame  # type: ignore[misc]
        m, r, err = self.both(f"frame {how}", getattr(mf, how), getattr(rf, how))
        STATS.note(STATS.current, how + (":err" if err else ":ok"))
        if how == "commit" and not err:
            same(r.name, m)
        assert rf.finalized == mf.finalized, (rf.finalized, mf.finalized)
        if rf.finalized:
            e.frame = None
            self.finalized = (self.finalized + [(rf, mf)])[-4:]

    @precondition(lambda self: self._has(self._live))
    @rule(i=st.integers(0, 50), choice=st.integers(0, 11))
    @counted
    def work_frame(self, i: int, choice: int) -> None:
        """Moves one live session's frame work on by one stage, as an engine step does: acquire a
        frame; prepare a participant flight; dispatch a prepared one (or release it); finish a
        dispatched one (or mark it not submitted, or close it, which poisons); finalize the frame
        (mostly commit; abort, rollback_unsubmitted or close now and then); now and then use a
        finalized frame again (see reuse_finalized_frame). Spread over separate
        rules, a frame with a flight was a rarity in a short run."""
        if self.finalized and choice == 11 and i % 2:
            self._reuse_finalized(i, ("commit", "abort", "rollback_unsubmitted", "close")[i % 4])
            return
        e = self._target(i, lambda e: self._live(e) and (e.frame is not None or self._open(e)), self._live)
        if e.frame is None:
            self._acquire(e)
            return
        prepared = [k for k, (_, mf) in sorted(e.flights.items()) if mf.phase == "PREPARED"]
        dispatched = [k for k, (_, mf) in sorted(e.flights.items()) if mf.phase == "IN_FLIGHT"]
        if dispatched and choice < 8:
            self._flight(e, dispatched[0], {5: "not_submitted", 6: "close"}.get(choice, "finish"))
        elif prepared and choice < 8:
            self._flight(e, prepared[0], "release" if choice == 7 else "dispatch")
        elif choice < 3 and len(e.flights) < 2:
            self._prepare_flight(e, min({0, 1, 2} - set(e.flights)))
        else:
            self._finalize(e, {9: "abort", 10: "rollback_unsubmitted", 11: "close"}.get(choice, "commit"))

    @precondition(lambda self: bool(self.finalized))
    @rule(i=st.integers(0, 50), how=st.sampled_from(["commit", "abort", "rollback_unsubmitted", "close"]))
    @counted
    def reuse_finalized_frame(self, i: int, how: str) -> None:
        """Calls commit, abort, rollback_unsubmitted or close on a frame already finalized, on both:
        refused alike (close does nothing), changing nothing, also when the session's active frame
        has the same id again (rollback_unsubmitted hands its id out once more)."""
        self._reuse_finalized(i, how)

    def _reuse_finalized(self, i: int, how: str) -> None:
        rf, mf = self.finalized[i % len(self.finalized)]
        active = mf.session.active_frame == mf.frame_id
        _, _, err = self.both(f"finalized frame {how}", getattr(mf, how), getattr(rf, how))
        STATS.note(STATS.current, "reused " + how + (":same id active" if active else "") + (":err" if err else ":ok"))

    @precondition(lambda self: self._has(lambda e: self._live(e) and e.frame is not None))
    @rule(i=st.integers(0, 50), key=st.integers(0, 3))
    @counted
    def prepare_flight(self, i: int, key: int) -> None:
        """Prepares flight ``key`` on a live session holding a frame, on both (a duplicate key or no
        active frame is refused alike); a prepared flight is kept."""
        e = self._pick(i, lambda e: self._live(e) and e.frame is not None)
        if e is not None:
            self._prepare_flight(e, key)

    def _prepare_flight(self, e: Entry, key: int) -> None:
        m, r, err = self.both(f"prepare_flight({key})", lambda: e.ms.prepare_flight(key),
                              lambda: e.rs.prepare_flight(key))
        if not err:
            STATS.note(STATS.current, "prepare_flight:ok")
            e.flights[key] = (r, m)

    @precondition(lambda self: self._has(lambda e: bool(e.flights)))
    @rule(i=st.integers(0, 50), how=st.sampled_from(["dispatch", "not_submitted", "finish", "release", "close"]))
    @counted
    def flight_op(self, i: int, how: str) -> None:
        """Dispatches, marks not submitted, finishes, releases or closes a kept flight, on both: the
        outcomes must agree, and whether the flight is released."""
        e = self._pick(i, lambda e: bool(e.flights))
        if e is not None:
            self._flight(e, sorted(e.flights)[i % len(e.flights)], how)

    def _flight(self, e: Entry, key: int, how: str) -> None:
        rf, mf = e.flights[key]
        _, _, err = self.both(f"flight {how}", getattr(mf, how), getattr(rf, how))
        STATS.note(STATS.current, how + (":err" if err else ":ok"))
        same(rf.released, mf.released)
        if rf.released:
            del e.flights[key]

    @precondition(lambda self: self._has(lambda e: e.rs is not None))
    @rule(i=st.integers(0, 50), how=st.sampled_from(["request_cancel", "try_complete", "try_abort",
                                                    "try_abort_if_quiescent"]))
    @counted
    def transition(self, i: int, how: str) -> None:
        """Calls request_cancel, try_complete, try_abort or try_abort_if_quiescent on a session (mostly
        a live one), on both: request_cancel's active frame and flights, or the receipt's outcome,
        frame counts and backing generation, must agree."""
        e = self._pick_session(i)
        if e is None:
            return
        m, r, err = self.both(how, getattr(e.ms, how), getattr(e.rs, how))
        STATS.note("transition", how + (":err" if err else ":ok"))
        if err or how == "request_cancel":
            if how == "request_cancel" and not err:
                same(r.active_frame, m["active_frame"])
                same([(k, p.name) for k, p in r.flights], m["flights"])
            return
        same(r.outcome.name, m["outcome"])
        assert (r.retired_frames, r.committed_frames, r.discarded_frames, r.backing_generation) == (
            m["retired"], m["committed"], m["discarded"], m["generation"])

    @precondition(lambda self: self._has(self._live))
    @rule(i=st.integers(0, 50))
    @counted
    def drop_session(self, i: int) -> None:
        """Closes a live session's handle on both; the sequence's capacity is released once nothing
        else (its resources handle, a frame) holds it."""
        e = self._pick(i, lambda e: e.rs is not None and not e.ms.handle_closed)
        if e is None:
            return
        e.rs.close()
        e.ms.close()

    @precondition(lambda self: self._has(lambda e: e.rs is not None))
    @rule(i=st.integers(0, 50))
    @counted
    def release_sources(self, i: int) -> None:
        """Asks a session (mostly a live one) which capacity sources it would release, on both: the
        outcomes must agree, and the sources be the model's, in its order."""
        e = self._pick_session(i)
        if e is None:
            return
        r_out: list[Any] = []
        m_out: list[Any] = []
        _, _, err = self.both("write_release_capacity_sources", lambda: e.ms.write_release_capacity_sources(m_out),
                              lambda: e.rs.write_release_capacity_sources(r_out))
        if not err:
            same([_source_name(s) for s in r_out], m_out)

    # ---------- waiters and preemption ----------
    @precondition(lambda self: bool(self.deferreds))
    @rule(d=st.integers(0, 5), i=st.integers(0, 50), via_session=st.booleans())
    @counted
    def register_waiter(self, d: int, i: int, via_session: bool) -> None:
        """Registers a waiter for a remembered deferral, on both: through a session (mostly the owning
        one, for a backing deferral) or on the coordinator; the outcomes must agree. The six newest
        waiters are kept; an older one is cancelled."""
        if not self.deferreds:
            return
        rd, md = self.deferreds[d % len(self.deferreds)]
        owner = None if md.backing_sequence is None else (md.backing_sequence, md.backing_authority_generation)
        owned = lambda e: e.rs is not None and e.ms.sequence_authority == owner  # noqa: E731
        # a backing deferral registers through its own session (mostly; another session is refused)
        e = (self._pick(i, owned) if owner is not None and i % 4 else None) or (
            self._pick_session(i) if via_session else None)
        if e is not None:
            m, r, err = self.both("register_admission_waiter", lambda: e.ms.register_admission_waiter(md),
                                  lambda: e.rs.register_admission_waiter(rd))
        else:
            if md.expected_generation is not None:
                return  # backing deferrals register through their session
            m, r, err = self.both("register_waiter", lambda: self.model.register_waiter(md),
                                  lambda: self.real.register_waiter(rd))
        if not err:
            STATS.note("register_waiter", "registered")
            self.waiters.append((r, m, md))
            if len(self.waiters) > 6:
                old_r, old_m, _ = self.waiters.pop(0)
                old_r.cancel()
                old_m.cancel()
                assert old_r.cancelled and old_m.cancelled

    @precondition(lambda self: bool(self.deferreds))
    @rule(d=st.integers(0, 5))
    @counted
    def preempt(self, d: int) -> None:
        """Runs ``preempt_for`` for a remembered deferral over the live sessions, and the same policy on
        the model (abort quiescent sessions that release a source the demand waits on, until it
        fits): the victims, the sessions skipped and whether the demand is satisfied must agree."""
        if not self.deferreds:
            return
        rd, md = self.deferreds[d % len(self.deferreds)]
        live = [e for e in self.entries if e.rs is not None and not e.ms.handle_closed]
        # the same policy, on the model; a backing deferral whose sequence is gone, or holds other
        # pages than when it was deferred, is refused by both
        modeled, report, err = self.both("preempt_for", lambda: self.model.preempt_for(md, [e.ms for e in live]),
                                         lambda: preempt_for(self.real, rd, [e.rs for e in live]))
        if err:
            STATS.note("preempt", "stale")
            return
        victims = modeled.victims
        for e in live:
            if e.ms.sequence_authority in victims:
                e.terminal = model.ABORTED
        STATS.note("preempt", "victims" if victims else "no_victim")
        STATS.outcomes[("preempt", "victim_count")] += len(victims)
        STATS.note("preempt", "satisfied" if report.satisfied else "unsatisfied")
        same([(a.sparse_id, a.generation) for a in report.victims], victims)
        same([(a.sparse_id, a.generation) for a, _ in report.skipped], [a for a, _ in modeled.skipped])
        assert report.satisfied == modeled.satisfied == self.model.fits_now(md)
        same([_source_name(s) for s in report.freed_sources], modeled.freed_sources)

    @precondition(lambda self: bool(self.deferreds) and not self.model.closed)
    @rule(d=st.integers(0, 5), dice=st.integers(0, 39))
    @counted
    def observe_or_close(self, d: int, dice: int) -> None:
        """Whether a deferred demand fits now agrees with the model; rarely, close the coordinator."""
        rd, md = self.deferreds[d % len(self.deferreds)]
        same(self.real.fits_now(rd), self.model.fits_now(md))
        if dice == 0:
            STATS.note("observe_or_close", "closed")
            self.real.close()
            self.model.close()

    # ---------- invariants ----------
    @invariant()
    def phases_match(self) -> None:
        """Checks that each session's phase, next frame id, retired frames and flight count are the
        model's, and that a terminal phase (COMPLETED, ABORTED) never changes."""
        for e in self.entries:
            if e.rs is None:
                continue
            same(e.rs.phase.name, e.ms.phase)
            if e.terminal is not None:
                same(e.ms.phase, e.terminal)  # absorbing
            if e.ms.phase in (model.COMPLETED, model.ABORTED):
                e.terminal = e.ms.phase
            same(e.rs.next_frame_id, e.ms.next_frame)
            same(e.rs.retired_frames, e.ms.retired)
            same(e.rs.flight_count, len(e.ms.flights))

    @invariant()
    def capacity_matches(self) -> None:
        """Checks the coordinator's capacity (used bytes, active sequences, each domain's total and
        epoch, the slots, physical and release epochs) against the model, and that each domain's use,
        and the live page-memory bytes, are its live sequences' pages."""
        cap = self.real.capacity()
        same(cap.used_bytes, self.model.used)
        assert cap.active_sequences == self.model.active <= self.model.max_active
        for d in cap.domains:
            assert d.used_bytes <= d.total_bytes == self.model.total[d.name]
            same(d.epoch, self.model.epochs[model.domain(d.name)])
        same(cap.slots_epoch, self.model.epochs[model.SLOTS])
        same(cap.physical_epoch, self.model.epochs[model.PHYSICAL])
        same(cap.release_epoch, self.model.release_epoch)
        live = [e.mr.seq for e in self.entries if not e.mr.seq.released]
        for name in self.model.total:
            same(self.model.used[name], sum(s.pages * PAGE_BYTES for s in live if name in s.domains))
        stats = self.real.page_memory_stats()
        if stats:
            same(stats["live_bytes"], sum(s.pages * PAGE_BYTES * len(s.domains) for s in live))

    @invariant()
    def block_ids_follow_their_contract(self) -> None:
        """Per domain, no block id is held by two live sequences, and each live sequence's
        snapshot lists exactly one block id per page it holds, each an id of the domain's
        blocks as the model counts them (0 .. blocks - 1: a kernel indexes the arena with it).
        The ids a sequence held at the last check come first, unchanged, in what it holds now
        (it grows by ids after its own: the pages it wrote keep their blocks). A frame not yet
        finalized shows the ids it was acquired with, the first of its sequence's. Checked
        against what the machine saw and the model's sizes, not against lifecore's other views
        of the same ids (a block table, a decode table), which read the same storage."""
        owners: dict[tuple[str, int], Any] = {}
        for e in self.entries:
            if e.rs is None or e.rs.closed:
                continue
            snap = e.rs.backing
            if snap.released:
                continue
            for name in snap.domains:
                ids = snap.block_ids(name).tolist()
                same(len(ids), snap.pages)
                blocks = self.model.total[name] // PAGE_BYTES
                for block in ids:
                    assert 0 <= block < blocks, f"domain {name!r}: block id {block} of {blocks} blocks"
                    assert owners.setdefault((name, block), e) is e, (name, block)
                before = e.ids_seen.get(name, [])
                kept = min(len(before), len(ids))
                assert ids[:kept] == before[:kept], f"domain {name!r}: the ids {before} became {ids}"
                e.ids_seen[name] = ids
                if e.frame is not None and not e.frame[0].finalized and name in e.frame_ids:
                    acquired = e.frame_ids[name]
                    same(e.frame[0].block_ids(name).tolist(), acquired)
                    assert ids[:len(acquired)] == acquired, f"domain {name!r}: frame {acquired}, sequence {ids}"

    @invariant()
    def block_tables_show_the_current_ids(self) -> None:
        """Per domain, a block table of every open session shows each one's current ids, padded.
        It is written in place into a table kept across steps, so the rows that did not change
        are compared and left, and the rows that did are rewritten."""
        for name in CONFIG["domains"]:  # type: ignore[attr-defined]
            sessions = [e.rs for e in self.entries if e.rs is not None and not e.rs.closed
                        and not e.rs.backing.released and name in e.rs.backing.domains]
            if not sessions:
                continue
            out = self.tables.setdefault((name, len(sessions)),
                                         np.full((len(sessions), TABLE_WIDTH), -7, dtype=np.int32))
            assert self.real.block_table(sessions, TABLE_WIDTH, out, domain=name, pad=-1) is out
            for row, s in zip(out.tolist(), sessions):
                ids = s.backing.block_ids(name).tolist()
                assert row == ids + [-1] * (TABLE_WIDTH - len(ids)), (name, row, ids)

    @invariant()
    def decode_tables_show_the_current_ids(self) -> None:
        """Per domain, a decode table kept across steps and updated after each one shows each
        row's current ids, padded. The open sessions take the rows in an order that turns from
        step to step, and every third update leaves the first row empty, so rows change hands,
        grow, shrink and clear; an update writes at least every value that changed."""
        self.turn += 1
        for name in CONFIG["domains"]:  # type: ignore[attr-defined]
            sessions = [e.rs for e in self.entries if e.rs is not None and not e.rs.closed
                        and not e.rs.backing.released and name in e.rs.backing.domains]
            table = self.decode_tables.get(name)
            if table is None:
                table = self.decode_tables[name] = self.real.decode_table(DECODE_ROWS, TABLE_WIDTH, domain=name,
                                                                          pad=-1)
            k = self.turn % (len(sessions) + 1)
            rows: list[Any] = (sessions[k:] + sessions[:k])[:DECODE_ROWS]
            if rows and self.turn % 3 == 0:
                rows[0] = None
            before = np.array(table.table)
            table.update(rows)
            expected = np.full((DECODE_ROWS, TABLE_WIDTH), -1, dtype=np.int32)
            for r, session in enumerate(rows):
                if session is not None:
                    ids = session.backing.block_ids(name)
                    expected[r, :len(ids)] = ids
            shown = np.asarray(table.table)
            assert np.array_equal(shown, expected), (name, shown.tolist(), expected.tolist())
            assert table.last_written >= np.count_nonzero(before != expected)
            STATS.outcomes[("decode table", "rows shown")] += sum(r is not None for r in rows)

    @invariant()
    def live_frames_keep_their_snapshot(self) -> None:
        """Checks that a frame not yet finalized still reports the snapshot (generation, tokens, pages)
        it was acquired with."""
        for e in self.entries:
            if e.frame is not None and not e.frame[0].finalized:
                snap = e.frame[0].snapshot
                assert snap is not None and self._snap(snap) == e.frame[2]

    @invariant()
    def waiters_match(self) -> None:
        """Checks that each kept waiter's ``should_retry()``, wake count and cancellation are the
        model's (and counts new wake-ups in the stats)."""
        for r, m, _ in self.waiters:
            same(r.should_retry(), m.should_retry())
            same(r.wake_count, m.wakes)
            same(r.cancelled, m.cancelled)
            seen = self.wakes_counted.get(id(m), (m, 0))[1]
            if m.wakes > seen:
                STATS.outcomes[("waiters", "wakeups")] += m.wakes - seen
                self.wakes_counted[id(m)] = (m, m.wakes)

    def teardown(self) -> None:
        """Drops every handle on both sides; usage must return to zero (not checked after a
        failed step: see run_failed). The coordinator closes whatever happened, and the machine
        lets go of it: on a device, its arena goes back once nothing else holds it."""
        failed = self.run_failed()
        try:
            self._release_everything(check=not failed)
        finally:
            try:
                self.real.close()
            finally:
                self.tables.clear()
                self.decode_tables.clear()
                self.finalized.clear()
                super().teardown()

    def _release_everything(self, check: bool) -> None:
        """Drops every handle on both sides; ``check``: usage must return to zero. Without it
        every handle is let go whatever the others raised."""
        for r, m, _ in self.waiters:
            clean_up(r.cancel, check)
            clean_up(m.cancel, check)
            assert not check or (r.cancelled and m.cancelled)
        for e in self.entries:
            for rf, mf in e.flights.values():
                clean_up(rf.close, check)
                clean_up(mf.close, check)
            if e.frame is not None:
                clean_up(e.frame[0].close, check)
                clean_up(e.frame[1].close, check)
            if e.rs is not None:
                clean_up(e.rs.close, check)
                clean_up(e.ms.close, check)
            if e.rr is not None:
                clean_up(e.rr.close, check)
                clean_up(e.mr.close, check)
        self.entries.clear()
        self.deferreds.clear()
        self.waiters.clear()
        if not check:
            return
        cap = self.real.capacity()
        assert all(v == 0 for v in cap.used_bytes.values()), cap.used_bytes
        assert cap.active_sequences == 0 and self.model.active == 0
        stats = self.real.page_memory_stats()
        assert not stats or stats["live_bytes"] == 0
