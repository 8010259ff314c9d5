"""Continuous batching: admit, prefill, extend one token per decode step, preempt, complete.

The scheduler decides; a *memory* says yes or no. :class:`LifecoreMemory` is the memory on
``lifecore.sequence``: admission is ``coordinator.admit`` (a deferral registers a waiter, and
admission is retried only once the waiter fires), each decode step extends every sequence
with ``step_all`` (``session.step(tokens)`` for the batch in one call), the batch's frames
are acquired for the block table and committed in one call each, a deferred extension
preempts younger sequences through
``preempt_for`` (recompute: a victim goes back to the head of the queue and recomputes its
prompt and generated tokens when readmitted), and a finished sequence completes and closes.
A run that raises (the model, a progress callback, Ctrl-C) first gives back every sequence it
holds and the frames of the step it was in. Any object with the same methods serves (the
benchmark's plain free list does).

One iteration: admit what fits (oldest first), prefill the admitted, extend every running
sequence by the token it is about to write (one batch call; then, in batch order, each
deferred one preempts younger sequences), one decode forward over the batch, greedy tokens,
completions.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np

from ..sequence import (AdmissionCoordinator, AdmissionDeferred, Admitted, BackingOutcome, SequenceSession,
                        acquire_frames, commit_frames, preempt_for, step_all)
from .. import _core
from ..errors import EngineError
from .kv_cache import KVCache

__all__ = ["Request", "Running", "Memory", "LifecoreMemory", "Scheduler", "Stats", "ADMITTED", "DEFERRED",
           "REJECTED"]

ADMITTED, DEFERRED, REJECTED = "admitted", "deferred", "rejected"
# A context manager's __exit__ that, when its block raised, runs self._release() until a run
# completes, a KeyboardInterrupt inside one starting another (see _GiveBackOnError).
_exit_releasing_on_error: Any = getattr(_core, "_exit_releasing_on_error")
_CURRENT = BackingOutcome.CURRENT
_DEFERRED = BackingOutcome.BACKING_DEFERRED.value
_RETRY = BackingOutcome.RETRY_REQUIRED.value


def _frame_still_live(where: str) -> EngineError:
    # RETRY_REQUIRED extends nothing: decoding on would write past the sequence's blocks. A step
    # begun with a frame live raises SessionStateError instead; this answer means another thread
    # took a frame of the sequence, or moved its backing, while the step ran: the engine's
    # sessions are its own, so that is a caller sharing them.
    return EngineError(f"{where}: a step answered RETRY_REQUIRED (another thread took a frame of the sequence or "
                       "moved its backing while the step ran; nothing was extended): the engine's sessions must "
                       "not be used elsewhere")


@dataclass
class Request:
    """One generation request: ``request_id`` (unique while live), the ``prompt`` token ids and
    ``max_new_tokens`` to generate greedily. The engine appends to ``generated``; ``rejected``
    holds the reason (the coordinator's, or the engine's) when the request can never fit. ``tokens`` is the prompt
    followed by what was generated, ``fit_tokens`` the most tokens its sequence holds in the KV
    cache (what it is admitted for), and ``done`` is true once ``max_new_tokens`` were generated.
    ``cancel()`` stops it early (``cancelled`` then reads true)."""

    request_id: str
    prompt: list[int]
    max_new_tokens: int
    generated: list[int] = field(default_factory=list)
    rejected: Optional[str] = None
    cancelled: bool = field(default=False, init=False)
    """True once ``cancel()`` was called."""

    def cancel(self) -> None:
        """Stops this request where it is: before its next scheduler iteration's admission and
        again before its next decode step, a waiting request leaves the queue and a running one
        gives its sequence back (its KV blocks and request id are free for others at once). It
        keeps the tokens generated so far, and ``Engine.generate``'s result lists it in
        ``cancelled``. Safe from any thread and from a progress callback; cancelling a request
        that already finished (or cancelling twice) changes nothing."""
        self.cancelled = True

    @property
    def tokens(self) -> list[int]:
        """The prompt followed by the tokens generated so far."""
        return self.prompt + self.generated

    @property
    def fit_tokens(self) -> int:
        """The most tokens this request's sequence holds in the KV cache: the prompt and every
        generated token but the last, which is never fed back (prompt plus ``max_new_tokens``
        minus one)."""
        return len(self.prompt) + self.max_new_tokens - 1

    @property
    def done(self) -> bool:
        """True once ``max_new_tokens`` tokens were generated."""
        return len(self.generated) >= self.max_new_tokens


@dataclass
class Running:
    """A request with KV memory: ``request`` is the :class:`Request`, ``handle`` what the
    :class:`Memory` gave for it (its sequence session and frames, on lifecore's), and ``cached``
    tokens are in the cache; the last generated one is written by the next decode step."""

    request: Request
    handle: Any
    cached: int = 0


@dataclass
class Stats:
    """Counts of one scheduler run: ``iterations`` (scheduler iterations: each admits what
    fits, prefills it and runs at most one decode step of the batch), ``deferrals`` (admissions
    the coordinator deferred; a deferred extension shows as preemptions), ``preemptions``
    (sequences aborted to recompute later), ``prefill_tokens`` (prompt tokens run, recomputation included),
    ``generated`` (tokens produced) and ``bookkeeping_s`` (seconds spent inside the memory's
    calls: lifecore's, or the free list's in the benchmark)."""

    iterations: int = 0
    deferrals: int = 0
    preemptions: int = 0
    prefill_tokens: int = 0
    generated: int = 0
    bookkeeping_s: float = 0.0  # time inside the memory's calls


class Memory(Protocol):
    """What the scheduler asks of its memory; a handle is whatever ``admit`` hands out."""

    def admit(self, request_id: str, prompt_tokens: int, fit_tokens: int) -> tuple[str, Any]:
        """Memory for a prompt, sized to grow to ``fit_tokens``: (ADMITTED, handle), (DEFERRED,
        None) until memory frees up, or (REJECTED, reason) for a request that can never fit."""
        ...

    def admission_may_fit(self) -> bool:
        """Whether a deferred admission may fit now (memory was freed since it was deferred)."""
        ...

    def extend(self, handle: Any, tokens: int) -> bool:
        """Covers ``tokens`` tokens of the handle's sequence; False when the extension was deferred."""
        ...

    def extend_all(self, handles: Sequence[Any], tokens: Sequence[int]) -> Sequence[int]:
        """``extend`` for every row in one call: the indices of the rows deferred, in order."""
        ...

    def preempt(self, handle: Any, candidates: Sequence[Any]) -> tuple[list[Any], bool]:
        """Frees memory for ``handle``'s deferred extension by preempting ``candidates`` in order:
        the victims (their memory released) and whether the extension can now proceed."""
        ...

    def release(self, handle: Any, completed: bool) -> None:
        """Gives back the handle's memory, its sequence completed or (``completed=False``) preempted."""
        ...

    def block_table(self, handles: Sequence[Any], width: int, out: np.ndarray) -> np.ndarray:
        """Writes the handles' block ids into ``out`` (``[rows, width]``) for one step and returns
        it; the ids stay the sequences' until ``finish_step``."""
        ...

    def finish_step(self) -> None:
        """The step's forward ran: lets go of what ``block_table`` held for it."""
        ...

    def abandon(self, handles: Sequence[Any]) -> None:
        """A failed run: drops the step's hold and releases every handle, whatever its state.
        Safe to repeat: a Ctrl-C inside it runs it again with the same handles."""
        ...


class LifecoreMemory:
    """The scheduler's memory on a coordinator and its KV cache; a handle is the sequence's
    ``SequenceSession`` (it holds the admitted resources until it closes)."""

    def __init__(self, coordinator: AdmissionCoordinator, kv: KVCache):
        self.coordinator, self.kv = coordinator, kv
        self.waiter: Any = None  # the registration of the deferred head of the queue
        self.frames: list[Any] = []

    def admit(self, request_id: str, prompt_tokens: int, fit_tokens: int) -> tuple[str, Any]:
        decision = self.coordinator.admit(request_id, prompt_tokens, fit_tokens)
        try:  # from the first instruction after the admission: a Ctrl-C anywhere later gives it back
            if isinstance(decision, Admitted):
                self.waiter = None
                return ADMITTED, decision.resources.open_session()  # the session holds the resources now
        except BaseException:
            if isinstance(decision, Admitted):
                decision.resources.close()  # a kept error must not keep the admission's capacity
            raise
        if isinstance(decision, AdmissionDeferred):
            self.waiter = self.coordinator.register_waiter(decision)
            return DEFERRED, None
        return REJECTED, decision.reason

    def admission_may_fit(self) -> bool:
        return self.waiter is None or self.waiter.wait(0)

    def extend(self, handle: SequenceSession, tokens: int) -> bool:
        outcome = handle.step(tokens)
        if outcome is _CURRENT:  # the common step: the last block has room
            return True
        if outcome == BackingOutcome.RETRY_REQUIRED:
            raise _frame_still_live("LifecoreMemory.extend")
        return outcome != BackingOutcome.BACKING_DEFERRED

    def extend_all(self, handles: Sequence[SequenceSession], tokens: Sequence[int]) -> Sequence[int]:
        """Steps every row in one call; the rows whose extension was deferred, in order."""
        outcomes = step_all(handles, tokens).tobytes()
        if _RETRY in outcomes:
            raise _frame_still_live("LifecoreMemory.extend_all")
        if _DEFERRED not in outcomes:
            return ()
        return [i for i, outcome in enumerate(outcomes) if outcome == _DEFERRED]

    def preempt(self, handle: SequenceSession, candidates: Sequence[SequenceSession]) -> tuple[list[SequenceSession], bool]:
        deferred = handle.step_deferral
        if deferred is None:  # its last step was not deferred: nothing to preempt for
            return [], False
        report = preempt_for(self.coordinator, deferred, candidates)
        victims: list[SequenceSession] = []
        wanted = len(report.victims)
        for candidate in candidates:  # the victims are picked in candidate order
            if len(victims) == wanted:
                break
            if candidate.closed:
                victims.append(candidate)
        return victims, report.satisfied

    def release(self, handle: SequenceSession, completed: bool) -> None:
        if completed:
            handle.try_complete()
        else:
            handle.try_abort_if_quiescent()  # preempted: no frame is live between steps
        handle.close()

    def block_table(self, handles: Sequence[SequenceSession], width: int, out: np.ndarray) -> np.ndarray:
        # The frames hold their snapshots, so the ids in the table stay theirs until commit.
        self.frames = acquire_frames(handles)
        return self.kv.block_table(self.frames, width, out)

    def finish_step(self) -> None:
        commit_frames(self.frames)
        self.frames = []

    def abandon(self, handles: Sequence[SequenceSession]) -> None:
        """A failed run: the step's frames are dropped (its outcome is unknown) and every
        session closes, so its blocks and slot come back whatever state it was left in."""
        for frame in self.frames:  # closing a closed frame or session does nothing: safe to repeat
            frame.close()
        self.frames = []
        self.waiter = None
        for handle in handles:
            handle.close()


class _GiveBackOnError:
    """A run's guard: leaving it on an error gives back what the run holds (``release``), to
    the end whatever Ctrl-C lands meanwhile. Its ``__exit__`` is C: one in Python could be
    stopped at its first instruction, before any ``try``, and a second Ctrl-C landing in the
    cleanup would leave sequences holding their blocks until the collector freed them."""

    __slots__ = ("_release",)

    def __init__(self, release: Callable[[], None]) -> None:
        self._release = release

    def __enter__(self) -> None:
        return None

    __exit__ = _exit_releasing_on_error


class Model(Protocol):
    """What the scheduler runs: greedy next tokens for prefill rows and for one decode step."""

    def table_width(self, blocks: int) -> int: ...
    def prefill(self, requests: Sequence[Request], table: np.ndarray) -> list[int]: ...
    def decode(self, running: Sequence[Running], table: np.ndarray) -> list[int]: ...


class Scheduler:
    """Continuous batching of ``Request``s over a ``memory`` and a ``model`` (see the module's
    docstring). ``block_size`` is the memory's tokens per block; ``max_batch`` the most
    sequences it runs at once (the rows of its block table, whatever slots the memory has);
    ``max_blocks`` the widest table; ``progress(1)`` is called for every token generated.
    ``add`` queues a request; ``run`` serves the queue to the end and returns the ``Stats``;
    ``finished`` holds the requests done or rejected."""

    def __init__(self, memory: Memory, model: Model, *, block_size: int, max_batch: int, max_blocks: int,
                 progress: Optional[Callable[[int], None]] = None):
        self.memory, self.model, self.block_size, self.max_batch = memory, model, block_size, max_batch
        self.waiting: deque[Request] = deque()
        self.running: list[Running] = []
        self.finished: list[Request] = []
        self.cancelled: list[Request] = []  # stopped by Request.cancel() before they were done
        # The queue's head the memory last deferred: admission waits on the memory's word for it
        # (admission_may_fit), and on nothing once another request heads the queue (it was
        # cancelled, or preempted ones went before it).
        self._deferred: Optional[Request] = None
        self.stats = Stats()
        self.table = np.zeros((max_batch, max_blocks), dtype=np.int32)
        self.progress = progress

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def run(self) -> Stats:
        with _GiveBackOnError(self.abandon):
            while self.waiting or self.running:
                self.iteration()
        return self.stats

    def abandon(self) -> None:
        """Gives back every sequence this run holds (none completes); their requests keep what
        they generated. ``run`` calls it when an iteration raises, run again to the end if a
        Ctrl-C lands inside it (every step is safe to repeat)."""
        self.memory.abandon([r.handle for r in self.running])
        self.running = []

    def _timed(self, fn: Callable[..., Any], *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.stats.bookkeeping_s += time.perf_counter() - start

    def _table(self, running: Sequence[Running], tokens: int) -> np.ndarray:
        width = self.model.table_width(-(-tokens // self.block_size))
        table: np.ndarray = self._timed(self.memory.block_table, [r.handle for r in running], width, self.table)
        return table[: len(running), :width]

    def _cancel(self) -> None:
        """Drops the requests cancelled since the last look: from the queue, and from the batch
        (each running one's sequence given back as a preempted one is, its frames long committed)."""
        if any(r.cancelled for r in self.waiting):
            stopped = [r for r in self.waiting if r.cancelled]
            self.waiting = deque(r for r in self.waiting if not r.cancelled)
            self.cancelled += stopped
            self.finished += stopped
        for r in [r for r in self.running if r.request.cancelled and not r.request.done]:
            # Released while still in `running`: if the release raises, abandon() gives it back.
            self._timed(self.memory.release, r.handle, False)
            self.running[:] = [other for other in self.running if other is not r]
            self.cancelled.append(r.request)
            self.finished.append(r.request)

    def iteration(self) -> None:
        stats, memory = self.stats, self.memory
        stats.iterations += 1
        self._cancel()
        admitted = self._admit()
        if not admitted and not self.running and self.waiting and not any(r.cancelled for r in self.waiting):
            # Deferred with nothing of this run holding capacity: no release of ours can wake it.
            raise EngineError(f"{self.waiting[0].request_id!r} waits for capacity that no sequence of this run "
                              "holds: nothing this run does can free it")
        if admitted:
            tokens = self.model.prefill([r.request for r in admitted], self._table(admitted, max(
                len(r.request.tokens) for r in admitted)))
            self._timed(memory.finish_step)
            for r, token in zip(admitted, tokens):
                r.cached = len(r.request.tokens)
                stats.prefill_tokens += r.cached
                self._emit(r.request, token)
            self._complete()
        self._cancel()  # cancelled during the prefill (from a progress callback, another thread)
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
        """Admits from the head of the queue until one is deferred (then a waiter says when to
        retry) or ``max_batch`` sequences run. The admitted join ``running`` at once, so a
        failure before their prefill ends gives them back with the rest."""
        admitted: list[Running] = []
        memory = self.memory
        if not self.waiting or len(self.running) >= self.max_batch:  # a memory with more slots than our rows
            return admitted
        if self.waiting[0] is self._deferred and not self._timed(memory.admission_may_fit):
            return admitted
        while self.waiting and len(self.running) < self.max_batch:
            request = self.waiting[0]
            outcome, value = self._timed(memory.admit, request.request_id, len(request.tokens), request.fit_tokens)
            if outcome == DEFERRED:
                self.stats.deferrals += 1
                self._deferred = request
                break
            try:
                self.waiting.popleft()
                if outcome == REJECTED:
                    request.rejected = str(value)
                    self.finished.append(request)
                    continue
                admitted.append(Running(request, value))
                self.running.append(admitted[-1])
            except BaseException:
                # A Ctrl-C before the sequence joined `running`, which abandon() gives back: give it
                # back here, or it would hold its blocks and request id for as long as the error is
                # kept (an interactive session keeps the last one).
                if outcome == ADMITTED and not any(r.handle is value for r in self.running):
                    memory.release(value, False)
                raise
        return admitted

    def _extend(self) -> None:
        """Every running sequence gets room for the token it writes next, the batch in one call;
        then, in batch order, a deferred one preempts the youngest sequences (they recompute
        later), or is preempted itself when that is not enough."""
        memory, running = self.memory, self.running
        deferred = self._timed(memory.extend_all, [r.handle for r in running], [r.cached + 1 for r in running])
        if not deferred:
            return
        waiting = {id(running[k]) for k in deferred}
        freed = False  # nothing came back since the batch's extension: a deferral still stands
        i = 0
        while i < len(running):
            r = running[i]
            # A deferred row retries once a preemption before it may have made room.
            if id(r) not in waiting or (freed and self._timed(memory.extend, r.handle, r.cached + 1)):
                i += 1
                continue
            freed = True
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
                raise EngineError(f"{r.request.request_id}: the extension is deferred after a satisfied preemption")
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
