"""Continuous batching: admit, prefill, extend one token per decode step, preempt, complete.

The scheduler decides; a *memory* says yes or no. :class:`LifecoreMemory` is the memory on
``lifecore.sequence``: admission is ``coordinator.admit`` (a deferral registers a waiter, and
admission is retried only once the waiter fires), each decode step extends every sequence
with ``session.step(tokens)``, a deferred extension preempts younger sequences through
``preempt_for`` (recompute: a victim goes back to the head of the queue and recomputes its
prompt and generated tokens when readmitted), and a finished sequence completes and closes.
Any object with the same methods serves (the benchmark's plain free list does).

One iteration: admit what fits (oldest first), prefill the admitted, extend every running
sequence by the token it is about to write (preempting when that is deferred), one decode
forward over the batch, greedy tokens, completions.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np

from ..sequence import (AdmissionCoordinator, AdmissionDeferred, Admitted, BackingOutcome, acquire_frames,
                        preempt_for)
from .kv_cache import KVCache

__all__ = ["Request", "Running", "Memory", "LifecoreMemory", "Scheduler", "Stats", "ADMITTED", "DEFERRED",
           "REJECTED"]

ADMITTED, DEFERRED, REJECTED = "admitted", "deferred", "rejected"
_CURRENT = BackingOutcome.CURRENT


@dataclass
class Request:
    """One generation request: ``request_id`` (unique while live), the ``prompt`` token ids and
    ``max_new_tokens`` to generate greedily. The engine appends to ``generated``; ``rejected``
    holds the coordinator's reason when the request can never fit. ``tokens`` is the prompt
    followed by what was generated, ``fit_tokens`` the length the request may reach (what it is
    admitted for), and ``done`` is true once ``max_new_tokens`` were generated."""

    request_id: str
    prompt: list[int]
    max_new_tokens: int
    generated: list[int] = field(default_factory=list)
    rejected: Optional[str] = None

    @property
    def tokens(self) -> list[int]:
        """The prompt followed by the tokens generated so far."""
        return self.prompt + self.generated

    @property
    def fit_tokens(self) -> int:
        """The most tokens this request's sequence can hold: prompt plus ``max_new_tokens``."""
        return len(self.prompt) + self.max_new_tokens

    @property
    def done(self) -> bool:
        """True once ``max_new_tokens`` tokens were generated."""
        return len(self.generated) >= self.max_new_tokens


@dataclass
class Running:
    """A request with KV memory: ``cached`` tokens are in the cache; the last generated one is
    written by the next decode step."""

    request: Request
    handle: Any
    cached: int = 0


@dataclass
class Stats:
    """Counts of one scheduler run: ``iterations`` (decode steps of a batch), ``deferrals``
    (admissions or extensions the coordinator deferred), ``preemptions`` (sequences aborted to
    recompute later), ``prefill_tokens`` (prompt tokens run, recomputation included),
    ``generated`` (tokens produced) and ``bookkeeping_s`` (seconds spent inside the memory's
    calls: lifecore's, or the free list's in the benchmark)."""

    iterations: int = 0
    deferrals: int = 0
    preemptions: int = 0
    prefill_tokens: int = 0
    generated: int = 0
    bookkeeping_s: float = 0.0  # time inside the memory's calls


class Memory(Protocol):
    def admit(self, request_id: str, prompt_tokens: int, fit_tokens: int) -> tuple[str, Any]: ...
    def admission_may_fit(self) -> bool: ...
    def extend(self, handle: Any, tokens: int) -> bool: ...
    def preempt(self, handle: Any, candidates: Sequence[Any]) -> tuple[list[Any], bool]: ...
    def release(self, handle: Any, completed: bool) -> None: ...
    def block_table(self, handles: Sequence[Any], width: int, out: np.ndarray) -> np.ndarray: ...
    def finish_step(self) -> None: ...


class _Sequence:
    """lifecore's handle on one running request."""

    __slots__ = ("request_id", "session")

    def __init__(self, request_id: str, session: Any):
        self.request_id, self.session = request_id, session


class LifecoreMemory:
    """The scheduler's memory on a coordinator and its KV cache."""

    def __init__(self, coordinator: AdmissionCoordinator, kv: KVCache):
        self.coordinator, self.kv = coordinator, kv
        self.waiter: Any = None  # the registration of the deferred head of the queue
        self.frames: list = []

    def admit(self, request_id: str, prompt_tokens: int, fit_tokens: int) -> tuple[str, Any]:
        decision = self.coordinator.admit(request_id, prompt_tokens, fit_tokens)
        if isinstance(decision, Admitted):
            self.waiter = None
            session = decision.resources.open_session()  # the session holds the resources now
            return ADMITTED, _Sequence(request_id, session)
        if isinstance(decision, AdmissionDeferred):
            self.waiter = self.coordinator.register_waiter(decision)
            return DEFERRED, None
        return REJECTED, decision.reason

    def admission_may_fit(self) -> bool:
        return self.waiter is None or self.waiter.wait(0)

    def extend(self, handle: _Sequence, tokens: int) -> bool:
        outcome = handle.session.step(tokens)
        if outcome is _CURRENT:  # the common step: the last block has room
            return True
        return outcome != BackingOutcome.BACKING_DEFERRED

    def preempt(self, handle: _Sequence, candidates: Sequence[_Sequence]) -> tuple[list[_Sequence], bool]:
        report = preempt_for(self.coordinator, handle.session.step_deferral, [c.session for c in candidates])
        victims = [c for c in candidates if c.session.closed]
        return victims, report.satisfied

    def release(self, handle: _Sequence, completed: bool) -> None:
        session = handle.session
        if completed:
            session.try_complete()
        else:
            session.try_abort_if_quiescent()  # preempted: no frame is live between steps
        session.close()

    def block_table(self, handles: Sequence[_Sequence], width: int, out: np.ndarray) -> np.ndarray:
        # The frames hold their snapshots, so the ids in the table stay theirs until commit.
        self.frames = acquire_frames([h.session for h in handles])
        return self.kv.block_table(self.frames, [h.request_id for h in handles], width, out)

    def finish_step(self) -> None:
        for frame in self.frames:
            frame.commit()
        self.frames = []


class Model(Protocol):
    """What the scheduler runs: greedy next tokens for prefill rows and for one decode step."""

    def table_width(self, blocks: int) -> int: ...
    def prefill(self, requests: Sequence[Request], table: np.ndarray) -> list[int]: ...
    def decode(self, running: Sequence[Running], table: np.ndarray) -> list[int]: ...


class Scheduler:
    def __init__(self, memory: Memory, model: Model, *, block_size: int, max_batch: int, max_blocks: int,
                 progress: Optional[Callable[[int], None]] = None):
        self.memory, self.model, self.block_size = memory, model, block_size
        self.waiting: deque[Request] = deque()
        self.running: list[Running] = []
        self.finished: list[Request] = []
        self.stats = Stats()
        self.table = np.zeros((max_batch, max_blocks), dtype=np.int32)
        self.progress = progress

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def run(self) -> Stats:
        while self.waiting or self.running:
            self.iteration()
        return self.stats

    def _timed(self, fn: Callable[..., Any], *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.stats.bookkeeping_s += time.perf_counter() - start

    def _table(self, running: Sequence[Running], tokens: int) -> np.ndarray:
        width = self.model.table_width(-(-tokens // self.block_size))
        return self._timed(self.memory.block_table, [r.handle for r in running], width, self.table)[
            : len(running), :width]

    def iteration(self) -> None:
        stats, memory = self.stats, self.memory
        stats.iterations += 1
        admitted = self._admit()
        if admitted:
            tokens = self.model.prefill([r.request for r in admitted], self._table(admitted, max(
                len(r.request.tokens) for r in admitted)))
            self._timed(memory.finish_step)
            for r, token in zip(admitted, tokens):
                r.cached = len(r.request.tokens)
                stats.prefill_tokens += r.cached
                self._emit(r.request, token)
            self.running += admitted
            self._complete()
        if not self.running:
            return
        self._extend()
        if self.running:
            tokens = self.model.decode(self.running, self._table(self.running, max(r.cached + 1 for r in self.running)))
            self._timed(memory.finish_step)
            for r, token in zip(self.running, tokens):
                r.cached += 1
                self._emit(r.request, token)
            self._complete()

    def _emit(self, request: Request, token: int) -> None:
        request.generated.append(int(token))
        self.stats.generated += 1
        if self.progress is not None:
            self.progress(1)

    def _admit(self) -> list[Running]:
        """Admits from the head of the queue until one is deferred (then a waiter says when to retry)."""
        admitted: list[Running] = []
        memory = self.memory
        if self.waiting and not self._timed(memory.admission_may_fit):
            return admitted
        while self.waiting:
            request = self.waiting[0]
            outcome, value = self._timed(memory.admit, request.request_id, len(request.tokens), request.fit_tokens)
            if outcome == DEFERRED:
                self.stats.deferrals += 1
                break
            self.waiting.popleft()
            if outcome == REJECTED:
                request.rejected = str(value)
                self.finished.append(request)
                continue
            admitted.append(Running(request, value))
        return admitted

    def _extend(self) -> None:
        """Every running sequence gets room for the token it writes next; a deferral preempts the
        youngest sequences (they recompute later), or the deferred one itself when that is not enough."""
        memory, running = self.memory, self.running
        i = 0
        while i < len(running):
            r = running[i]
            if self._timed(memory.extend, r.handle, r.cached + 1):
                i += 1
                continue
            younger = running[i + 1:][::-1]
            victims, satisfied = self._timed(memory.preempt, r.handle, [v.handle for v in younger])
            gone = {id(v) for v in victims}
            preempted = [v for v in younger if id(v.handle) in gone]
            if not satisfied:
                self._timed(memory.release, r.handle, False)
                preempted.append(r)
            for victim in preempted:  # youngest first, so the oldest ends at the head
                self.waiting.appendleft(victim.request)
            self.stats.preemptions += len(preempted)
            dropped = {id(v) for v in preempted}
            self.running[:] = running = [v for v in running if id(v) not in dropped]
            if satisfied and not self._timed(memory.extend, r.handle, r.cached + 1):
                raise RuntimeError(f"{r.request.request_id}: the extension is deferred after a satisfied preemption")
            if satisfied:
                i += 1

    def _complete(self) -> None:
        done = [r for r in self.running if r.request.done]
        if not done:
            return
        for r in done:
            self._timed(self.memory.release, r.handle, True)
            self.finished.append(r.request)
        self.running[:] = [r for r in self.running if not r.request.done]
