"""Executable reference model of sequence sessions (pure Python, no lifecore import).

It is the specification the C++ core is checked against: admission decisions over capacity
domains and an active-sequence ceiling, availability epochs, one-shot sessions with phases,
frames, participant flights, backing generations, terminal receipts, fail-closed drop, and
release of capacity when the last real holder of a sequence goes (its resources, which the
session keeps until it closes, and live frames; never a snapshot). The session's close spends
its resources: a handle of them kept after it holds nothing. A request id is live from its
admission to that release; admitting it again meanwhile is refused. A batch of decode steps
(``step_all``) is checked whole before any of its rows steps.
Holders are counted explicitly (``close()``), never by garbage collection, so the model is
deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence, Union

from .contract import ModelError

OPEN, CANCEL_REQUESTED, POISONED = "OPEN", "CANCEL_REQUESTED", "POISONED"
COMPLETED, ABORTED, FAIL_CLOSED = "COMPLETED", "ABORTED", "FAIL_CLOSED"
ACTIVE_PHASES = (OPEN, CANCEL_REQUESTED, POISONED)
SLOTS = ("slots", None)
BLOCK_IDS = 2**31  # a domain's pages are int32 block ids: a fit needing more is never served
#: The device memory behind the pages: a failed physical allocation defers on it, and every
#: physical page release advances it.
PHYSICAL = ("physical", None)


def domain(name: str) -> tuple[str, Optional[str]]:
    """The model's name for the source ``Domain(name)``."""
    return ("domain", name)


def _source_key(source: tuple[str, Optional[str]], order: dict[str, int]) -> int:
    if source[0] == "slots":
        return 0
    if source[0] == "physical":
        return 1 + len(order)
    assert source[1] is not None  # a domain's source names it
    return 1 + order[source[1]]


@dataclass
class ModelDeferred:
    coordinator: "ModelCoordinator"
    request_id: str
    sources: list[Any]
    epochs: list[Any]
    action: str
    blockers: list[Any]
    immediate_pages: int
    sequences: int
    domains: list[Any]
    backing_sequence: Optional[int] = None
    expected_generation: Optional[int] = None
    backing_authority_generation: Optional[int] = None  # with backing_sequence: the sequence's authority
    held_pages: Optional[int] = None  # with backing_sequence: the pages it held when deferred
    fit_pages: Optional[int] = None  # an admission's fit, when it is more than the immediate pages


@dataclass
class ModelPreemption:
    """What :meth:`ModelCoordinator.preempt_for` did: victims' authorities in the order picked,
    (authority, reason) of every other session given, the demand's sources whose epochs advanced,
    and whether the demand fits now."""

    victims: list[Any] = field(default_factory=list)
    skipped: list[Any] = field(default_factory=list)
    freed_sources: list[Any] = field(default_factory=list)
    satisfied: bool = False


@dataclass
class ModelRejected:
    request_id: str
    reason: str


@dataclass
class ModelSnapshot:
    sequence: "ModelSequence"
    generation: int
    tokens: int
    pages: int


@dataclass
class ModelSequence:
    """The accounting record of one admitted sequence (what its backing holds)."""

    coordinator: "ModelCoordinator"
    sparse_id: int
    generation: int
    request_id: str
    domains: list[Any]
    pages: int
    fit_tokens: int
    fit_pages: int
    holders: int = 0
    released: bool = False

    def hold(self) -> None:
        self.holders += 1

    def let_go(self) -> None:
        self.holders -= 1
        if self.holders == 0:
            self.coordinator._release(self)


class ModelAdmitted:
    def __init__(self, resources: "ModelResources") -> None:
        self.resources = resources


class ModelCoordinator:
    def __init__(self, *, domains: dict[Any, Any], page_bytes: int, tokens_per_page: int, max_active_sequences: int) -> None:
        self.page_bytes = page_bytes
        self.tokens_per_page = tokens_per_page
        self.max_active = max_active_sequences
        self.total = {}
        self.maximum = {}
        for name, value in domains.items():
            cap, mx = value if isinstance(value, tuple) else (value, value)
            self.total[name], self.maximum[name] = self.servable(cap), mx
        self.order = {name: i for i, name in enumerate(domains)}
        self.used = {name: 0 for name in domains}
        self.epochs = {SLOTS: 1, PHYSICAL: 1, **{domain(n): 1 for n in domains}}
        self.failures_pending = 0  # physical allocations still to fail (host page memory)
        self.release_epoch = 1
        self.active = 0
        self.closed = False
        self.generation_counter = 1
        self.sequences: dict[int, ModelSequence] = {}  # the live ones, by sparse id
        self.free_ids: list[int] = []
        self.id_generation: list[int] = []
        self.waiters: list["ModelWaiter"] = []
        self.live_ids: set[str] = set()  # request ids of sequences that still hold capacity

    # -- helpers --
    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.tokens_per_page)

    def servable(self, capacity: int) -> int:
        """What a domain of ``capacity`` bytes can hand out: no more pages than its block ids."""
        return min(capacity, BLOCK_IDS * self.page_bytes)

    def _bump(self, source: Any) -> None:
        self.epochs[source] += 1
        for w in list(self.waiters):
            if source in w.sources:  # signalled once: its condition has changed for good
                w.wakes += 1
                self.waiters.remove(w)

    def _condition(self, sources: Iterable[Any]) -> tuple[list[Any], list[Any]]:
        unique = sorted(set(sources), key=lambda s: _source_key(s, self.order))
        return unique, [self.epochs[s] for s in unique]

    def _acquire_id(self) -> tuple[int, int]:
        if self.free_ids:
            sid = self.free_ids.pop()
        else:
            sid = len(self.id_generation)
            self.id_generation.append(0)
        self.id_generation[sid] = self.generation_counter
        self.generation_counter += 1
        return sid, self.id_generation[sid]

    def fail_next_page_allocations(self, count: int) -> None:
        self.failures_pending = count

    def _allocate_physical(self, domains: list[Any]) -> bool:
        """One allocation per domain; the first that fails gives back the ones before it."""
        for i, _ in enumerate(domains):
            if self.failures_pending > 0:
                self.failures_pending -= 1
                if i > 0:
                    self._bump(PHYSICAL)
                return False
        return True

    def _physical_deferral(self, request_id: str, observed: int, pages: int, sequences: int, names: list[Any],
                           **backing: Any) -> ModelDeferred:
        return ModelDeferred(self, request_id, [PHYSICAL], [observed], "WAIT_FOR_RELEASE",
                             [("PHYSICAL_MEMORY_UNAVAILABLE", PHYSICAL)], pages, sequences, list(names), **backing)

    def _release(self, seq: ModelSequence) -> None:
        assert not seq.released
        seq.released = True
        del self.sequences[seq.sparse_id]
        self.live_ids.discard(seq.request_id)
        self._bump(PHYSICAL)  # the pages go back first
        bytes_ = seq.pages * self.page_bytes
        if bytes_:
            for d in seq.domains:
                self.used[d] -= bytes_
                assert self.used[d] >= 0
                self._bump(domain(d))
        self.active -= 1
        self._bump(SLOTS)
        self.id_generation[seq.sparse_id] = 0
        self.free_ids.append(seq.sparse_id)
        self.release_epoch += 1

    # -- API --
    def unknown_domain(self, call: str, name: str) -> ModelError:
        # The core's text: the name asked for, then every domain in declaration order.
        known = ", ".join(f"'{n}'" for n in self.total)
        which = "the domain is" if len(self.total) == 1 else "the domains are"
        return ModelError("InvalidArgument", f"{call}: unknown capacity domain '{name}' ({which} {known})")

    def admit(self, request_id: str, prompt_tokens: int, fit_tokens: int,
              domains: Optional[Sequence[str]] = None) -> "Union[ModelAdmitted, ModelDeferred, ModelRejected]":
        if prompt_tokens <= 0:
            raise ModelError("InvalidArgument", "prompt_tokens must be positive")
        if fit_tokens < prompt_tokens:
            raise ModelError("InvalidArgument", "fit_tokens must be at least prompt_tokens")
        if domains is not None and not domains:
            raise ModelError("InvalidArgument", "domains names no domain (None: every domain)")
        for n in domains or ():
            if n not in self.total:
                raise self.unknown_domain("admit", n)
        names = list(self.total) if domains is None else sorted(set(domains), key=lambda n: self.order[n])
        if self.closed:
            raise ModelError("Closed", "the admission coordinator is closed")
        if request_id in self.live_ids:
            raise ModelError("InvalidArgument", f"request id {request_id!r} is already live")
        prompt_pages, fit_pages = self.pages_for(prompt_tokens), self.pages_for(fit_tokens)
        pb, fb = prompt_pages * self.page_bytes, fit_pages * self.page_bytes
        if fit_pages > BLOCK_IDS or any(fb > self.maximum[n] for n in names):
            return ModelRejected(request_id, "fit demand exceeds a domain maximum or its block ids")
        blockers: list[tuple[str, tuple[str, Optional[str]]]] = []
        sources: list[tuple[str, Optional[str]]] = []
        growth = False
        if self.active >= self.max_active:
            blockers.append(("ACTIVE_SEQUENCE_CEILING", SLOTS))
            sources.append(SLOTS)
        for n in names:
            if pb > self.total[n] - self.used[n]:
                blockers.append(("IMMEDIATE_AVAILABILITY", domain(n)))
                sources.append(domain(n))
            if fb > self.total[n]:
                blockers.append(("BACKING_GROWTH_REQUIRED", domain(n)))
                sources.append(domain(n))
                growth = True
        if blockers:
            srcs, epochs = self._condition(sources)
            return ModelDeferred(self, request_id, srcs, epochs,
                                 "AWAIT_BACKING_GROWTH" if growth else "WAIT_FOR_RELEASE",
                                 blockers, prompt_pages, 1, names, fit_pages=fit_pages)
        self.active += 1
        for n in names:
            self.used[n] += pb
        sid, gen = self._acquire_id()
        observed = self.epochs[PHYSICAL]
        if not self._allocate_physical(names):
            # The device could not supply the pages: the claims roll back (pages, then the slot
            # and the authority) and the request waits on physical memory.
            for n in names:
                self.used[n] -= pb
                self._bump(domain(n))
            self.release_epoch += 1
            self.active -= 1
            self._bump(SLOTS)
            self.id_generation[sid] = 0
            self.free_ids.append(sid)
            self.release_epoch += 1
            return self._physical_deferral(request_id, observed, prompt_pages, 1, names)
        seq = ModelSequence(self, sid, gen, request_id, names, prompt_pages, fit_tokens, fit_pages)
        self.sequences[sid] = seq
        self.live_ids.add(request_id)
        return ModelAdmitted(ModelResources(seq, ModelSnapshot(seq, 1, prompt_tokens, prompt_pages)))

    def grow_domain(self, name: str, capacity: int) -> None:
        # The name first; a closed coordinator then refuses before the size is compared with
        # the domain (as every growth after close raises ClosedError).
        if name not in self.total:
            raise self.unknown_domain("grow_domain", name)
        if self.closed:
            raise ModelError("Closed", "closed")
        if capacity < self.total[name] or capacity > self.maximum[name]:
            raise ModelError("InvalidArgument", "bad growth")
        servable = self.servable(capacity)
        if servable != self.total[name]:
            more_pages = servable // self.page_bytes != self.total[name] // self.page_bytes
            self.total[name] = servable
            if more_pages:  # bytes short of a page serve no demand: nobody is woken for them
                self._bump(domain(name))

    def close(self) -> None:
        self.closed = True
        for w in self.waiters:
            w.closed = True

    def fits_now(self, deferred: ModelDeferred) -> bool:
        if deferred.sequences and self.active + 1 > self.max_active:
            return False
        need = deferred.immediate_pages * self.page_bytes
        if not all(need <= self.total[n] - self.used[n] for n in deferred.domains):
            return False
        return not self._needs_growth(deferred)

    def _needs_growth(self, deferred: ModelDeferred) -> bool:
        """Whether the deferral's fit is beyond a domain's total today: only growth can serve it."""
        fit = (deferred.immediate_pages if deferred.fit_pages is None else deferred.fit_pages) * self.page_bytes
        return any(fit > self.total[n] for n in deferred.domains)

    def preempt_for(self, deferred: ModelDeferred, sessions: list[Any], limit: Optional[int] = None) -> "ModelPreemption":
        """Preemption by recompute, in the sessions' order: abort and close a session that
        returns a source the demand waits on and aborts (a quiescent one, or a poisoned one with
        no live frame or flight); every other session is skipped with the
        reason: another coordinator's, the deferral's own sequence, one whose sources cannot be
        read, one that returns no source waited on, one that will not abort, and every session
        after the demand fits or ``limit`` victims were taken. A backing deferral whose sequence
        is gone, or holds other pages than when it was deferred, is refused (StaleAuthority) before
        anything changes, and so is any deferral once the coordinator is closed (Closed); a demand
        only growth can serve (its fit beyond a domain's total) looks at no session."""
        if deferred.coordinator is not self:
            raise ModelError("StaleAuthority", "preempt_for: foreign coordinator")
        if self.closed:  # no extension or admission succeeds once closed: nobody is aborted for one
            raise ModelError("Closed", "preempt_for: the admission coordinator is closed")
        if (deferred.backing_sequence is not None
                and self.id_generation[deferred.backing_sequence] != deferred.backing_authority_generation):
            # the sequence that asked to grow is gone: nobody waits on its demand
            raise ModelError("StaleAuthority", "preempt_for: the deferral's sequence is gone")
        if (deferred.backing_sequence is not None and deferred.held_pages is not None
                and self.sequences[deferred.backing_sequence].pages != deferred.held_pages):
            # it holds other pages now: the demand it names is not what it needs
            raise ModelError("StaleAuthority", "preempt_for: the deferral's sequence holds other pages now")
        stopped = "waits for growth" if self._needs_growth(deferred) else None  # no release can serve it
        wanted = list(deferred.sources)
        before = {source: self.epochs[source] for source in wanted}
        own = (None if deferred.backing_sequence is None
               else (deferred.backing_sequence, deferred.backing_authority_generation))
        out = ModelPreemption()
        for session in sessions:
            authority = session.sequence_authority
            if stopped is None:
                if self.fits_now(deferred):
                    stopped = "the demand fits"
                elif limit is not None and len(out.victims) >= limit:
                    stopped = "the limit of victims is reached"
            if stopped is not None:
                out.skipped.append((authority, stopped))
                continue
            if session.coordinator is not self:
                out.skipped.append((authority, "another coordinator"))
                continue
            if authority == own:
                out.skipped.append((authority, "the sequence that asked to grow"))
                continue
            sources: list[Any] = []
            try:
                session.write_release_capacity_sources(sources)
            except ModelError as error:
                out.skipped.append((authority, str(error)))
                continue
            if not set(sources) & set(wanted):
                out.skipped.append((authority, "holds none of the capacity waited for"))
                continue
            try:
                # A poisoned session (a frame closed uncommitted: its forward failed) can only
                # be aborted: it is taken as a victim as a quiescent one is.
                session.try_abort() if session.phase == POISONED else session.try_abort_if_quiescent()
            except ModelError as error:
                out.skipped.append((authority, str(error)))
                continue
            out.victims.append(authority)
            session.close()
        out.freed_sources = [source for source in wanted if self.epochs[source] != before[source]]
        out.satisfied = self.fits_now(deferred)
        return out

    def register_waiter(self, deferred: ModelDeferred) -> "ModelWaiter":
        if deferred.coordinator is not self:
            raise ModelError("StaleAuthority", "foreign coordinator")
        if self.closed:
            raise ModelError("Closed", "closed")
        w = ModelWaiter(self, list(deferred.sources), list(deferred.epochs), [self.epochs[s] for s in deferred.sources])
        self.waiters.append(w)
        return w


@dataclass
class ModelWaiter:
    coordinator: ModelCoordinator
    sources: list[Any]
    observed: list[Any]
    registered: list[Any]
    wakes: int = 0
    closed: bool = False
    cancelled: bool = False  # nothing signals it any more

    def should_retry(self) -> bool:
        now = [self.coordinator.epochs[s] for s in self.sources]
        return now != self.observed or now != self.registered

    def cancel(self) -> None:
        self.cancelled = True
        if self in self.coordinator.waiters:
            self.coordinator.waiters.remove(self)


class ModelResources:
    def __init__(self, seq: ModelSequence, initial: ModelSnapshot) -> None:
        self.seq = seq
        self.initial_backing = initial
        self.opened = False
        self.closed = False
        seq.hold()

    def open_session(self) -> "ModelSession":
        if self.closed:
            raise ModelError("Closed", "the admitted resources handle is closed")
        if self.opened:
            raise ModelError("SessionState", "already bound to a session")
        self.opened = True
        return ModelSession(self)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.seq.let_go()

    def spend(self) -> None:
        """The close of the session these resources opened: they hold nothing since, whatever
        handles of them remain (a spent handle reads as closed)."""
        self.close()


class ModelFrame:
    def __init__(self, session: "ModelSession", frame_id: int, snapshot: ModelSnapshot) -> None:
        self.session, self.frame_id, self.snapshot, self.finalized = session, frame_id, snapshot, False
        snapshot.sequence.hold()

    def _check(self, op: str) -> None:
        s = self.session
        if self.finalized:
            raise ModelError("SessionState", f"{op}: already finalized")
        s._require_active(op)
        if s.active_frame != self.frame_id:
            raise ModelError("StaleAuthority", f"{op}: not the active frame")

    def _finalize(self) -> None:
        self.finalized = True
        self.snapshot.sequence.let_go()

    def commit(self) -> str:
        self._check("commit")
        s = self.session
        if s.phase == POISONED:
            raise ModelError("SessionState", "commit: poisoned")
        if s.flights:
            raise ModelError("SessionState", "commit: flights live")
        s.active_frame = None
        s.retired += 1
        self._finalize()
        if s.phase == CANCEL_REQUESTED:
            s.discarded += 1
            return "DISCARDED_CANCELLED"
        s.committed += 1
        return "COMMITTED"

    def abort(self) -> None:
        self._check("abort")
        s = self.session
        s.active_frame = None
        s._poison()
        self._finalize()

    def rollback_unsubmitted(self) -> None:
        self._check("rollback_unsubmitted")
        s = self.session
        if s.phase != OPEN:
            raise ModelError("SessionState", "rollback_unsubmitted: not open")
        if s.flights:
            raise ModelError("SessionState", "rollback_unsubmitted: flights live")
        s.active_frame = None
        s.next_frame = self.frame_id
        self._finalize()

    def close(self) -> None:
        if self.finalized:
            return
        s = self.session
        if s.active_frame == self.frame_id:
            s.active_frame = None
            s._poison()
        self._finalize()


class ModelFlight:
    def __init__(self, session: "ModelSession", key: int) -> None:
        self.session, self.key, self.phase, self.released = session, key, "PREPARED", False
        session.seq.hold()  # its work reads the pages until it is released

    def _let_go(self) -> None:
        self.released = True
        self.session.seq.let_go()

    def dispatch(self) -> None:
        if self.released:
            raise ModelError("SessionState", "released")
        self.session._require_open("dispatch")
        if self.phase != "PREPARED":
            raise ModelError("SessionState", "already in flight")
        self.phase = self.session.flights[self.key] = "IN_FLIGHT"

    def not_submitted(self) -> None:
        if self.released:
            raise ModelError("SessionState", "released")
        self.session._require_active("not_submitted")
        if self.phase != "IN_FLIGHT":
            raise ModelError("SessionState", "not in flight")
        self.phase = self.session.flights[self.key] = "PREPARED"

    def finish(self) -> None:
        if self.released or self.phase != "IN_FLIGHT":
            raise ModelError("SessionState", "finish: not in flight")
        self.session.flights.pop(self.key, None)
        self._let_go()

    def release(self) -> None:
        if self.released or self.phase != "PREPARED":
            raise ModelError("SessionState", "release: not prepared")
        self.session.flights.pop(self.key, None)
        self._let_go()

    def close(self) -> None:
        if self.released:
            return
        s = self.session
        s.flights.pop(self.key, None)
        if self.phase == "IN_FLIGHT":
            s._poison()
        self._let_go()


class ModelSession:
    def __init__(self, resources: ModelResources) -> None:
        self.resources = resources
        self.seq = resources.seq
        self.coordinator = self.seq.coordinator
        self.phase = OPEN
        self.handle_closed = False
        self.epoch = 1
        self.current = resources.initial_backing
        self.next_frame = 1
        self.active_frame: Optional[int] = None
        self.flights: dict[int, str] = {}
        self.retired = self.committed = self.discarded = 0
        self.receipt: Optional[dict[Any, Any]] = None
        self.seq.hold()

    # -- checks --
    def _require_handle(self, op: str) -> None:
        if self.handle_closed:
            raise ModelError("Closed", f"{op}: the session handle is closed")

    def _require_active(self, op: str) -> None:
        if self.phase in (COMPLETED, ABORTED):
            raise ModelError("SessionState", f"{op}: already terminal")
        if self.phase == FAIL_CLOSED:
            raise ModelError("SessionState", f"{op}: failed closed")

    def _require_open(self, op: str) -> None:
        self._require_active(op)
        if self.phase != OPEN:
            raise ModelError("SessionState", f"{op}: not open")

    def _poison(self) -> None:
        if self.phase in (OPEN, CANCEL_REQUESTED):
            self.phase = POISONED

    @property
    def quiescent(self) -> bool:
        return self.active_frame is None and not self.flights

    def _finish(self, outcome: str) -> dict[Any, Any]:
        self.phase = COMPLETED if outcome == "COMPLETED" else ABORTED
        self.receipt = dict(outcome=outcome, retired=self.retired, committed=self.committed,
                            discarded=self.discarded, generation=self.current.generation)
        return self.receipt

    # -- API --
    @property
    def sequence_authority(self) -> tuple[int, int]:
        return (self.seq.sparse_id, self.seq.generation)

    def write_release_capacity_sources(self, out: list[Any]) -> None:
        self._require_handle("write_release_capacity_sources")
        self._require_active("write_release_capacity_sources")
        # A release bumps the physical-memory source too (_release): its ids go back to the arenas.
        merged = set(out) | {SLOTS, PHYSICAL} | {domain(d) for d in self.seq.domains}
        out[:] = sorted(merged, key=lambda s: _source_key(s, self.coordinator.order))

    def try_ensure_backing_covers(self, tokens: int, pages: Optional[int] = None) -> tuple[str, Optional[object]]:
        """Returns (outcome, snapshot-or-deferred)."""
        c, seq = self.coordinator, self.seq
        if tokens <= 0:
            raise ModelError("InvalidArgument", "tokens must be positive")
        if pages is not None and pages <= 0:
            raise ModelError("InvalidArgument", "pages must be positive")
        need = c.pages_for(tokens)
        pages = need if pages is None else pages
        if pages < need:
            raise ModelError("InvalidArgument", "pages cannot hold tokens")
        if tokens > seq.fit_tokens or pages > seq.fit_pages:
            raise ModelError("Capacity", "above the fit limit")
        self._require_handle("try_ensure_backing_covers")
        self._require_open("try_ensure_backing_covers")
        cur = self.current
        if tokens <= cur.tokens and pages <= cur.pages:
            return "CURRENT", cur
        if (tokens < cur.tokens and pages > cur.pages) or (tokens > cur.tokens and pages < cur.pages):
            raise ModelError("InvalidArgument", "incomparable target")
        if not self.quiescent:
            return "RETRY_REQUIRED", None
        delta = max(pages, cur.pages) - cur.pages
        if delta:
            if c.closed:
                raise ModelError("Closed", "closed")
            b = delta * c.page_bytes
            short = [d for d in seq.domains if b > c.total[d] - c.used[d]]
            if short:
                srcs, epochs = c._condition([domain(d) for d in short])
                growth = any(b > c.total[d] for d in short)
                return "BACKING_DEFERRED", ModelDeferred(
                    c, seq.request_id, srcs, epochs, "AWAIT_BACKING_GROWTH" if growth else "PREEMPT_AND_RECOMPUTE",
                    [("IMMEDIATE_AVAILABILITY", s) for s in srcs], delta, 0, list(seq.domains),
                    backing_sequence=seq.sparse_id, expected_generation=cur.generation,
                    backing_authority_generation=seq.generation, held_pages=cur.pages)
            # Logical capacity is there (checked first: a logical deferral never touches the
            # device); now the device pages.
            observed = c.epochs[PHYSICAL]
            if not c._allocate_physical(seq.domains):
                return "BACKING_DEFERRED", c._physical_deferral(
                    seq.request_id, observed, delta, 0, seq.domains, backing_sequence=seq.sparse_id,
                    expected_generation=cur.generation, backing_authority_generation=seq.generation,
                    held_pages=cur.pages)
            for d in seq.domains:
                c.used[d] += b
            seq.pages += delta
        self.current = ModelSnapshot(seq, cur.generation + 1, max(tokens, cur.tokens), max(pages, cur.pages))
        return "EXTENDED", self.current

    def register_admission_waiter(self, deferred: ModelDeferred) -> ModelWaiter:
        self._require_handle("register_admission_waiter")
        self._require_active("register_admission_waiter")
        if deferred.coordinator is not self.coordinator:
            raise ModelError("StaleAuthority", "foreign coordinator")
        if deferred.backing_sequence is not None and (
                deferred.backing_sequence, deferred.backing_authority_generation) != self.sequence_authority:
            raise ModelError("StaleAuthority", "a backing deferral of another sequence")
        if deferred.expected_generation is not None and deferred.expected_generation != self.current.generation:
            raise ModelError("StaleAuthority", "stale backing generation")
        return self.coordinator.register_waiter(deferred)

    def request_cancel(self) -> dict[Any, Any]:
        self._require_handle("request_cancel")
        self._require_active("request_cancel")
        if self.phase == POISONED:
            raise ModelError("SessionState", "request_cancel: poisoned")
        self.phase = CANCEL_REQUESTED
        return dict(active_frame=self.active_frame, flights=sorted(self.flights.items()))

    def try_complete(self) -> dict[Any, Any]:
        self._require_handle("try_complete")
        self._require_open("try_complete")
        if not self.quiescent or self.retired == 0:
            raise ModelError("SessionState", "try_complete: not quiescent or nothing retired")
        return self._finish("COMPLETED")

    def try_abort(self) -> dict[Any, Any]:
        self._require_handle("try_abort")
        self._require_active("try_abort")
        if self.phase == OPEN or not self.quiescent:
            raise ModelError("SessionState", "try_abort: open or not quiescent")
        return self._finish("ABORTED")

    def try_abort_if_quiescent(self) -> dict[Any, Any]:
        self._require_handle("try_abort_if_quiescent")
        self._require_active("try_abort_if_quiescent")
        if self.phase == POISONED or not self.quiescent:
            raise ModelError("SessionState", "try_abort_if_quiescent: poisoned or not quiescent")
        return self._finish("ABORTED")

    def acquire_frame(self) -> ModelFrame:
        self._require_handle("acquire_frame")
        self._require_open("acquire_frame")
        if self.active_frame is not None:
            raise ModelError("SessionState", "acquire_frame: a frame is active")
        fid = self.next_frame
        self.next_frame += 1
        self.active_frame = fid
        return ModelFrame(self, fid, self.current)

    def prepare_flight(self, key: int) -> ModelFlight:
        self._require_handle("prepare_flight")
        self._require_open("prepare_flight")
        if self.active_frame is None or key in self.flights:
            raise ModelError("SessionState", "prepare_flight: no active frame or duplicate key")
        self.flights[key] = "PREPARED"
        return ModelFlight(self, key)

    def step(self, tokens: int) -> str:
        """One decode step's bookkeeping: extend (a whole page at a time) if needed, then a
        frame acquired and committed at once."""
        if tokens <= 0:
            raise ModelError("InvalidArgument", "tokens must be positive")
        self._require_handle("step")
        self._require_open("step")
        if not self.quiescent:
            raise ModelError("SessionState", "step: a frame or flight is live")
        outcome = "CURRENT"
        if tokens > self.current.tokens:
            tpp = self.coordinator.tokens_per_page
            page_end = -(-tokens // tpp) * tpp
            target = max(tokens, min(page_end, self.seq.fit_tokens))
            # The target names no pages: those it needs, or the frontier's when pages were
            # reserved ahead of the tokens (never an incomparable target).
            pages = max(self.coordinator.pages_for(target), self.current.pages)
            outcome, _ = self.try_ensure_backing_covers(target, pages)
            if outcome not in ("CURRENT", "EXTENDED"):
                return outcome
        self.next_frame += 1
        self.retired += 1
        self.committed += 1
        return outcome

    def close(self) -> None:
        if self.handle_closed:
            return
        self.handle_closed = True
        if self.phase in ACTIVE_PHASES:
            self.phase = FAIL_CLOSED
        self.resources.spend()
        self.seq.let_go()


def step_all(sessions: list[ModelSession], tokens: list[int]) -> list[str]:
    """A decode iteration's batch (``step_all``; ``DecodeTable.step`` too, for sessions in its
    domain whose ids fit its width): ``sessions[i].step(tokens[i])`` for each row.
    Every row is checked before any row steps, in row order: a count below 1, a closed handle,
    a count above the request's fit, a session an earlier row named (it would step twice); the
    first such row refuses the batch and nothing changed. Then the rows step in order; the
    first that raises stops the batch, and the rows before it stepped."""
    if len(sessions) != len(tokens):
        raise ModelError("InvalidArgument", "one token count per session")
    for row, (session, count) in enumerate(zip(sessions, tokens)):
        if count <= 0:
            raise ModelError("InvalidArgument", f"row {row}: tokens must be positive")
        session._require_handle("step")
        if count > session.seq.fit_tokens:
            raise ModelError("Capacity", f"row {row}: above the fit limit")
        if any(earlier is session for earlier in sessions[:row]):
            raise ModelError("InvalidArgument", f"row {row}: the session is also an earlier row")
    return [session.step(count) for session, count in zip(sessions, tokens)]
