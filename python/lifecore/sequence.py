"""Sequence sessions: the lifecycle of a generated sequence and the KV pages behind it.

The C++ core does the work; this module names it and adds what is Pythonic:

- ``AdmissionCoordinator(device=None, *, domains, page_bytes, tokens_per_page,
  max_active_sequences)``: ``domains`` maps a name to its capacity in bytes, or to
  ``(capacity, maximum)`` when the domain can grow. ``device`` is ``None`` (host accounting:
  block ids with no memory behind them), a ``lifecore.Device`` (each domain's pages are blocks
  of one arena of that device's memory), or a registered backend's name (one of
  ``lifecore.backend_names()``, or ``"auto"``, kept for compatibility: the coordinator opens and
  keeps a ``lifecore.Device`` of its own, as ``lifecore.Device(name)`` would open it).
- ``admit(request_id, prompt_tokens, fit_tokens, domains=None)`` returns ``Admitted``,
  ``AdmissionDeferred`` or ``AdmissionRejected``: capacity pressure is a decision, never an
  exception.
  A request id is live from its admission until its sequence's capacity is released;
  admitting a live id again raises ``InvalidArgumentError`` (a ``ValueError``) and changes
  nothing, as a serving engine refuses a duplicate request id.
- ``Admitted.resources.open_session()`` (one-shot) returns a ``SequenceSession``.
- Release: only real holders keep a sequence's pages and active slot: its admitted resources
  (which the session keeps until it closes; its close spends them, so a handle of them or the
  ``Admitted`` decision kept after it holds nothing and reads as closed), its live frames and
  its unreleased flights (their work may still read the pages). Capacity returns when the
  last of them goes (``close()``, a ``with`` block, or the last reference). Snapshots and
  ``BackingDecision``s left in variables observe without owning: once the holders are gone a
  snapshot reports ``released`` and its ``extents`` raise ``SessionStateError``. Nor do they,
  receipts or closed sessions keep the coordinator (and its arena's device memory) alive.
  ``coordinator.holders()`` names what still holds capacity: ``(request_id, pages, domains,
  owners)`` per live sequence. Dropping a session that is not terminal fails it closed.
- ``session.step(tokens)`` answers a plain ``BackingOutcome``; after ``BACKING_DEFERRED``,
  ``session.step_deferral`` is the ``AdmissionDeferred`` to wait on
  (``register_admission_waiter``) or to preempt for (``preempt_for``), with no second call.
- ``session.fingerprint`` is hashed on first read (opening a session computes no digest).

KV pages are block ids. Each domain has ``num_blocks(domain)`` = floor(capacity_bytes /
page_bytes) blocks, ids ``0 .. num_blocks - 1``, in one arena: on a device, one exact-size
allocation of the device's memory manager made when the coordinator is created (counted by
``memory_stats()["arena_bytes"]``, outside the pools; a graph whose recording used it keeps it until
the graph goes);
``grow_domain`` adds one chunk for the new blocks, whose ids continue from the last chunk. Host
accounting hands out the same ids with no memory. A per-domain LIFO free list hands ids out
(released ids first; a release gives a sequence's ids back in reverse, so they come out again in
their order): an admission, an extension or a release makes no driver call. No id is ever held
by two live sequences.

- ``snapshot.block_ids(domain=None)`` (``frame.block_ids()`` alike): the snapshot's ``pages`` ids as
  a zero-copy, read-only int32 NumPy array (``None``: the snapshot's first domain). The storage
  behind it never moves under a view: it is made at admission for the prompt's pages (at least
  4, at most the fit) and grows by doubling up to the fit; an array taken before a growth keeps
  its old storage (the same prefix).
  Once the sequence is released, ``block_ids`` raises ``SessionStateError`` and every array taken
  before reads -1: it can never show ids another sequence may now hold. The array is the
  sequence's own id storage, read-only to NumPy; torch ignores that flag (``torch.from_dlpack``
  and ``torch.as_tensor`` of it give a writable tensor): never write through such a tensor, or
  a release gives back the ids written instead of the sequence's own.
- ``coordinator.block_table(frames, width, out=None, *, domain=None, pad=0)``: the padded
  ``[len(frames), width]`` int32 table, built in C++ in one pass. A row comes from a live
  ``FrameHold`` or an open ``SequenceSession`` (its current backing). ``out`` may be a C-contiguous
  writable int32 array of that shape (NumPy, any buffer-protocol object, a host DLPack tensor such
  as a torch CPU tensor) filled in place, or a lifecore ``Buffer`` of at least that many bytes (one
  host-to-device copy, so a captured decode step can read a fixed table). Any error writes
  nothing.
- ``step_all(sessions, tokens)``: ``sessions[i].step(tokens[i])`` for a batch in one call; returns
  the outcomes as a uint8 array. A count below 1 or above the fit, a closed session or a session
  named by two rows is refused before any row steps; after that, not all-or-nothing: a row that
  raises stops the batch.
- ``commit_frames(frames)``: ``frames[i].commit()`` for a batch in one call (the frames of
  ``acquire_frames``, after the forward pass that read their block table); returns the
  dispositions as a uint8 array. Not all-or-nothing: a frame that raises stops the batch.
- ``coordinator.decode_table(rows, width, out=None, *, domain=None, pad=0)``: a persistent
  ``DecodeTable`` for a decode loop. ``table.update(sessions)`` makes row ``r`` show
  ``sessions[r]`` (``None`` or past the end: pad) and writes only what changed since the last
  update: a grown sequence's new ids, a whole row whose sequence changed, pad over a row that
  shows none now; so an iteration costs O(rows + new blocks), not O(total blocks).
  ``table.step(sessions, tokens)`` is ``step_all`` then ``update`` in one call. The same checks
  as ``block_table`` (any error names the row and writes nothing); ``out`` is held for the
  table's life (a ``Buffer`` is written from a host copy after each call that changed it).
- ``coordinator.arena(domain=None)``: the arena as a ``Buffer`` (block ``b`` at byte
  ``b * page_bytes``) exporting ``__dlpack__`` (and ``__cuda_array_interface__`` on CUDA); on the
  mock it is host memory exported as CPU. Shape it into the KV cache, e.g.
  ``torch.from_dlpack(c.arena("kv")).view(torch.float16).view(num_blocks, block_size, heads,
  head_dim)``. The Buffer and its views keep the memory alive after the coordinator; freeing the
  Buffer drops only its own hold. A grown domain has several chunks: ``arena()`` raises and
  ``arena_chunks(domain)`` gives ``(first_block, blocks, Buffer)`` each (create the coordinator at
  its maximum for one tensor). Host accounting has no memory: ``arena()`` raises.
- ``snapshot.extents`` still gives ``(domain, first_page, pages, address, bytes)``, now one per run
  of consecutive block ids within one chunk, domain by domain (``first_page`` counts pages within
  the sequence, not block ids). ``page_memory_stats()`` counts
  ``live_bytes``, ``live_extents`` (takes: one per domain per admission or extension),
  ``allocations`` (arena chunks, never pages), ``arena_bytes``, and ``blocks`` / ``free_blocks`` per
  domain. ``fail_next_page_allocations(n)`` (host accounting) makes the next ``n`` takes of ids
  fail, the physical deferral path.

A deferral (or a registration) of another coordinator is refused with
``StaleAuthorityError`` (a foreign coordinator is a stale authority here). Authorities and the
sources a coordinator issues name it (``coordinator_id``): ``verify_sequence_authority`` refuses
another coordinator's authority, ``epoch`` and ``write_release_capacity_sources`` refuse its
sources, and ``preempt_for`` never picks its sessions, even when domain names match.

Every deferral names a source that advances when its condition can change: a domain or the
slots when a release returns them, a domain when it grows, and ``PhysicalMemory`` when the
pages could not be taken (an injected fault on host accounting; a device's arena is allocated
up front): that source advances on every page release of the coordinator. Memory freed on the device by anything else is
not observed, so a waiter on ``PhysicalMemory`` of a coordinator that holds no pages should wait
with a timeout. Logical capacity is checked before the device is touched, so a logical deferral
never allocates pages.

Closing the device a coordinator takes its pages from closes the coordinator: admissions,
extensions, growth and registrations raise ``ClosedError``, and waiters wake with it at once (the
device calls back when it closes). Live sequences keep their block ids until their last holder goes; the device's
close returned the arena's memory, so nothing leaks and nothing new is allocated on a closed
device.

``CapacityWaitRegistration.wait(timeout)``: ``None``, ``inf`` or a timeout too large for the
clock waits without a deadline; NaN or a negative timeout is ``InvalidArgumentError``; a timeout
is any real number but a bool (an int, a float, a NumPy integer or float); the wait
runs in short slices without the GIL, so Ctrl-C (``KeyboardInterrupt``) stops it promptly.
``wait_async`` (and ``await registration``) takes no thread: the registration writes a byte to a
pipe the event loop watches, and the loop rechecks.
"""

from __future__ import annotations

import asyncio
import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

import numpy as np

from . import _python_guard
from .capture.backends.arguments import as_index, is_bool_like
from ._core import sequence as _core_sequence
from .errors import (ClosedError, InvalidArgumentError, LifecoreOverflowError, LifecoreTypeError, SessionStateError,
                     StaleAuthorityError)

AdmissionCoordinator = _core_sequence.AdmissionCoordinator
Admitted = _core_sequence.Admitted
AdmissionDeferred = _core_sequence.AdmissionDeferred
AdmissionRejected = _core_sequence.AdmissionRejected
AdmittedSequenceResources = _core_sequence.AdmittedSequenceResources
SequenceSession = _core_sequence.SequenceSession
FrameHold = _core_sequence.FrameHold
FlightHold = _core_sequence.FlightHold
BackingSnapshot = _core_sequence.BackingSnapshot
BackingDecision = _core_sequence.BackingDecision
CancelSnapshot = _core_sequence.CancelSnapshot
TerminalReceipt = _core_sequence.TerminalReceipt
CapacityWaitRegistration = _core_sequence.CapacityWaitRegistration
CapacitySource = _core_sequence.CapacitySource
CapacityDemand = _core_sequence.CapacityDemand
CapacityBlocker = _core_sequence.CapacityBlocker
CapacitySnapshot = _core_sequence.CapacitySnapshot
DomainUsage = _core_sequence.DomainUsage
WaitCondition = _core_sequence.WaitCondition
Authority = _core_sequence.Authority
SessionPhase = _core_sequence.SessionPhase
TerminalOutcome = _core_sequence.TerminalOutcome
FrameDisposition = _core_sequence.FrameDisposition
FlightPhase = _core_sequence.FlightPhase
BackingOutcome = _core_sequence.BackingOutcome
BlockerKind = _core_sequence.BlockerKind
DeferralAction = _core_sequence.DeferralAction
SourceKind = _core_sequence.SourceKind
acquire_frames = _core_sequence.acquire_frames
step_all = _core_sequence.step_all
commit_frames = _core_sequence.commit_frames
DecodeTable = _core_sequence.DecodeTable

#: The active-sequence slots source.
ActiveSequenceSlots: CapacitySource = CapacitySource.active_sequence_slots()
#: The physical-memory source: the device pages behind the domains. A failed device
#: allocation (out of memory) defers on it; every physical page release advances it.
PhysicalMemory: CapacitySource = CapacitySource.physical_memory()


def Domain(name: str) -> CapacitySource:  # noqa: N802 - reads like the source it names
    """The availability source of capacity domain ``name``."""
    return CapacitySource.of_domain(name)


# A timeout longer than this (about 31 years) waits like None.
_FOREVER = 1e9
# Seconds between rechecks of an awaited registration that was cancelled (nothing signals it).
_CANCELLED_RECHECK = 0.05


def _checked_seconds(value: object, name: str, *, allow_infinite: bool) -> Optional[float]:
    """A number of seconds for ``wait_async``, read as ``wait`` reads its timeout: None (only
    for the timeout); an integer (an int, or anything whose ``__index__`` answers: a NumPy
    integer, a 0-d integer array), one too large for a float as good as infinite; or another
    real number (a float, a NumPy float). Never a bool or a masked array, never NaN or negative."""
    if value is None and allow_infinite:
        return None
    if is_bool_like(value) or isinstance(value, np.ma.MaskedArray):
        raise LifecoreTypeError(f"wait_async: argument '{name}' must be a number, got {type(value).__name__}")
    integer = as_index(value)  # None for a 0-d float array: read as a number below
    if integer is not None:
        if integer < 0:
            raise InvalidArgumentError(f"wait_async: argument '{name}' must not be NaN or negative, got {value!r}")
        try:
            seconds = float(integer)
        except OverflowError:  # too large for a float: a deadline no clock reaches
            seconds = math.inf
    elif isinstance(value, numbers.Real):
        try:
            seconds = float(value)
        except OverflowError:
            raise LifecoreOverflowError(f"wait_async: argument '{name}' is too large for a float") from None
        except TypeError as error:  # a real number by registration that no float reads
            raise LifecoreTypeError(f"wait_async: argument '{name}' could not be read as a float "
                                    f"({type(error).__name__}: {error})") from None
        except Exception as error:  # what its own __float__ raised (an interrupt stays one)
            raise InvalidArgumentError(f"wait_async: argument '{name}' could not be read as a float "
                                       f"({type(error).__name__}: {error})") from None
    else:
        raise LifecoreTypeError(f"wait_async: argument '{name}' must be a number, got {type(value).__name__}")
    if math.isnan(seconds) or seconds < 0:
        raise InvalidArgumentError(f"wait_async: argument '{name}' must not be NaN or negative, got {value!r}")
    if math.isinf(seconds) and not allow_infinite:
        raise InvalidArgumentError(f"wait_async: argument '{name}' must be finite, got {value!r}")
    return seconds


async def _wait_async(self: CapacityWaitRegistration, timeout: Optional[float] = None,
                      *, poll: Optional[float] = None) -> bool:
    """Await a change of the registration's sources: True to retry, False on timeout.

    No thread and no timer: the registration writes a byte to a pipe the event loop watches
    when it is signalled, cancelled, or its coordinator (or the coordinator's device) closes,
    and the loop rechecks. A registration cancelled while awaited can no longer be signalled,
    so from then on the loop rechecks every 50 ms until its sources change or the deadline.
    Raises ClosedError when the coordinator closes (or goes: a registration does not keep it
    alive). ``timeout`` follows ``wait``: None, inf or a timeout too large to matter waits
    without a deadline; NaN or a negative timeout is
    InvalidArgumentError. ``poll``, when given (a positive, finite number of seconds), adds a
    recheck every ``poll`` seconds."""
    timeout = _checked_seconds(timeout, "timeout", allow_infinite=True)
    if poll is not None:
        checked_poll = _checked_seconds(poll, "poll", allow_infinite=False)
        if not checked_poll:
            raise InvalidArgumentError("wait_async: argument 'poll' must be positive, got 0")
        poll = checked_poll
    interval = poll if poll is not None else _CANCELLED_RECHECK  # between rechecks, when there are any
    # _check and _wake_channel are the binding's private half of this method:
    # the generated stubs list public names only, so they are reached through an untyped name.
    registration: Any = self
    if registration._check():
        return True
    if timeout == 0:
        return False
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bool] = loop.create_future()
    deadline = None if timeout is None or timeout > _FOREVER else loop.time() + timeout
    timer: Optional[asyncio.TimerHandle] = None
    deadline_timer: Optional[asyncio.TimerHandle] = None

    def check() -> None:
        if done.done():
            return
        try:
            if registration._check():
                done.set_result(True)
            elif deadline is not None and loop.time() >= deadline:
                done.set_result(False)
        except Exception as error:  # ClosedError, an epoch regression
            done.set_exception(error)

    def woken() -> None:
        channel.drain()
        check()
        if timer is None and not done.done() and registration.cancelled:
            tick()  # nothing signals it any more: recheck on a timer

    def expire() -> None:
        check()
        if not done.done():
            done.set_result(False)

    def tick() -> None:
        nonlocal timer
        check()
        if not done.done():
            timer = loop.call_later(interval, tick)

    # The wake channel is one object, made in one call, that closes its pipe and removes its
    # hook when it goes: a Ctrl-C landing anywhere here (as it is made, too) leaves neither a
    # descriptor nor a hook on the registration behind.
    channel = registration._wake_channel()
    if isinstance(channel, int):  # no descriptor left for the pipe: the process's limit, as os.pipe says it
        raise OSError(-channel, os.strerror(-channel))
    try:
        read_fd = channel.fileno()
        try:
            loop.add_reader(read_fd, woken)
            check()  # a wake between the first check and the hook
            if poll is not None or registration.cancelled:
                timer = loop.call_later(interval, tick)
            if deadline is not None:
                deadline_timer = loop.call_at(deadline, expire)
            return await done
        finally:
            loop.remove_reader(read_fd)
            for handle in (timer, deadline_timer):
                if handle is not None:
                    handle.cancel()
    finally:
        channel.close()  # the hook is never called after this


# Guarded here: the class is the core's, so no export list of this module reaches its method.
# Named as the method it is, for help() and the API reference (not the module's private name).
_wait_async.__name__, _wait_async.__qualname__ = "wait_async", "CapacityWaitRegistration.wait_async"
CapacityWaitRegistration.wait_async = _python_guard.guarded(  # type: ignore[method-assign]  # declared in the stub
    _wait_async, "CapacityWaitRegistration.wait_async")
CapacityWaitRegistration.__await__ = lambda self: _wait_async(self).__await__()  # type: ignore[method-assign]


@dataclass
class PreemptionReport:
    """What a preemption did: victims aborted (recompute only), candidates left alone with
    the reason, the deferral's sources whose epochs advanced, and whether the deferred
    demand fits now."""

    victims: list[Authority] = field(default_factory=list)
    """The Authority of each session aborted, in the order they were picked."""
    receipts: list[TerminalReceipt] = field(default_factory=list)
    """The TerminalReceipt of each victim (parallel to ``victims``)."""
    skipped: list[tuple[Authority, str]] = field(default_factory=list)
    """``(Authority, reason)`` for each candidate not picked, in the candidates' order: another
    coordinator's, the sequence that asked to grow, holding none of the capacity waited for, not
    quiescent, terminal or closed, not looked at once the demand fit, ``limit`` was reached or
    the demand waits for growth, or not aborted once the sequence that asked to grow went (or
    came to hold other pages) during the pass. Every candidate given is a victim or in here (a
    session given twice is a victim once, then skipped as closed)."""
    freed_sources: list[CapacitySource] = field(default_factory=list)
    """The deferral's sources whose epochs advanced: capacity that actually came back."""
    satisfied: bool = False
    """Whether the deferred demand fits now (``coordinator.fits_now(deferred)``)."""


def preempt_for(coordinator: AdmissionCoordinator, deferred: AdmissionDeferred,
                candidates: Iterable[SequenceSession], *, limit: Optional[int] = None) -> PreemptionReport:
    """Free capacity for ``deferred`` by aborting quiescent victims (recompute only).

    A candidate is a victim when its release sources intersect the deferral's wait
    condition; it is aborted with ``try_abort_if_quiescent()`` (one transition, or nothing
    changes: a candidate with a live frame or flight is skipped, never half-cancelled; a
    poisoned one, whose forward failed and which can never step again, with ``try_abort()``), then
    its session is closed, which spends its resources: with no frame or flight live, nothing
    else holds the victim, so its capacity comes back at once, whatever handles of its
    ``Admitted`` decision the caller keeps; ``freed_sources`` reports what actually came back.
    Stops once the deferred demand fits, or after ``limit`` victims.
    A demand only growth can serve (its fit beyond a domain's total, ``AWAIT_BACKING_GROWTH``)
    picks no victim: no release admits it.

    A candidate of another coordinator is never picked (it is reported in ``skipped``), even
    when its domains have the same names. Wrong types are refused before anything changes:
    ``LifecoreTypeError`` for a coordinator, deferral, candidate or limit of the wrong type,
    ``StaleAuthorityError`` for a deferral of another coordinator, or for a backing deferral
    whose sequence is gone (nobody waits on its demand any more) or holds other pages than when
    it was deferred (the demand is not what it needs: extend again, and preempt for the deferral
    that answers); a requester that goes during the pass is asked about again before each abort,
    and from then on no candidate is aborted (each is in ``skipped``, the deferral stale),
    ``InvalidArgumentError`` for a negative limit. ``ClosedError`` once the coordinator (or its
    device) is closed: no extension or admission can succeed then, so no victim is aborted for
    one (a close during the pass stops it the same way, the rest in ``skipped``).
    """
    if not isinstance(coordinator, AdmissionCoordinator):
        raise LifecoreTypeError(
            f"preempt_for: argument 'coordinator' must be an AdmissionCoordinator, got {type(coordinator).__name__}")
    if not isinstance(deferred, AdmissionDeferred):
        raise LifecoreTypeError(
            f"preempt_for: argument 'deferred' must be an AdmissionDeferred, got {type(deferred).__name__}")
    if deferred.coordinator_id != coordinator.id:
        raise StaleAuthorityError("preempt_for: the deferral belongs to another coordinator (foreign coordinator)")
    if limit is not None:
        given, limit = limit, as_index(limit)  # a NumPy integer too, as every other count here
        if limit is None:
            raise LifecoreTypeError(f"preempt_for: argument 'limit' must be None or an int, got {type(given).__name__}")
        if limit < 0:
            raise InvalidArgumentError(f"preempt_for: argument 'limit' must not be negative, got {limit}")
    if isinstance(candidates, (str, bytes)):
        raise LifecoreTypeError("preempt_for: argument 'candidates' must be an iterable of SequenceSession, got str")
    try:
        pool = list(candidates)  # ours: nobody can drop a candidate while the core holds it
    except TypeError:
        raise LifecoreTypeError(
            f"preempt_for: argument 'candidates' must be an iterable of SequenceSession, "
            f"got {type(candidates).__name__}") from None
    # Every candidate is checked (candidates[i] must be a SequenceSession) before anything
    # changes; the pass itself runs in the core.
    core_pass = _core_sequence._preempt_for  # private to this module
    victims, receipts, skipped, freed, satisfied = core_pass(coordinator, deferred, pool, limit)
    return PreemptionReport(victims, receipts, skipped, freed, satisfied)


__all__ = [
    "AdmissionCoordinator", "Admitted", "AdmissionDeferred", "AdmissionRejected", "AdmittedSequenceResources",
    "SequenceSession", "FrameHold", "FlightHold", "BackingSnapshot", "BackingDecision", "CancelSnapshot",
    "TerminalReceipt", "CapacityWaitRegistration", "CapacitySource", "CapacityDemand", "CapacityBlocker",
    "CapacitySnapshot", "DomainUsage", "WaitCondition", "Authority", "SessionPhase", "TerminalOutcome", "FrameDisposition",
    "FlightPhase", "BackingOutcome", "BlockerKind", "DeferralAction", "SourceKind", "acquire_frames", "commit_frames", "step_all",
    "DecodeTable",
    "ActiveSequenceSlots", "PhysicalMemory", "Domain", "PreemptionReport", "preempt_for",
]


# Last: what this module exports answers a call it cannot bind with LifecoreTypeError.
_python_guard.install(__name__)
