"""The exceptions lifecore raises.

Every failure the C++ core reports arrives as one of these classes (the core names the
kind; the bindings only translate). Every rejected call leaves the object it was called on
unchanged and usable.
"""

from __future__ import annotations

__all__ = [
    "LifecoreError",
    "InvalidArgumentError",
    "LifecoreTypeError",
    "LifecoreOverflowError",
    "CaptureStateError",
    "CaptureRefusedError",
    "DriverError",
    "DeviceLostError",
    "BackendUnavailableError",
    "StaleAuthorityError",
    "CapacityError",
    "BudgetExceededError",
    "AdmissionError",
    "SessionStateError",
    "ClosedError",
    "CaptureSessionError",
    "EngineError",
]


class LifecoreError(Exception):
    """Base class of every lifecore error."""


class InvalidArgumentError(LifecoreError, ValueError):
    """An argument is out of range or malformed (a size, a name, a shape)."""


class LifecoreTypeError(LifecoreError, TypeError):
    """An argument has the wrong type, or a kernel got the wrong number or kinds of arguments."""


class LifecoreOverflowError(InvalidArgumentError, OverflowError):
    """A number is too large for what it sizes or counts, or outside the fixed-width type it is
    passed as (a kernel's ``u32`` argument, a table's int32 pad: below it as above it), or a
    size, count, usage or deadline computed from the arguments does not fit in 64 bits.
    Nothing was changed (arithmetic in lifecore never wraps)."""


class CaptureStateError(LifecoreError):
    """A graph-capture transition was called out of order, an operation that cannot be
    recorded was issued while a stream records, or (outside relaxed capture mode) a call the
    driver forbids while a capture records was made on another stream (``cause``
    ``recording_on_this_thread`` or ``global_recording``, with ``recording_stream`` and
    ``recording_thread``). The stream's state is unchanged."""

    cause: str = ""
    """Why a call was refused because another stream records: ``recording_on_this_thread`` (this
    thread's own recording) or ``global_recording`` (another thread's global one); empty for the
    other refusals."""
    recording_stream: int = 0
    """The stream that records, by its ``Stream.handle``, when ``cause`` is set (else 0)."""
    recording_thread: str = ""
    """The thread that began that recording, as ``threading.get_ident()`` prints it on Linux, when
    ``cause`` is set (else empty)."""


class CaptureRefusedError(LifecoreError):
    """``end_capture`` refused to seal the recording (memory nodes, an invalidated driver
    capture, an error queued during the window). The stream is out of capture and usable,
    except where ``cause`` is ``driver_still_capturing`` (the driver's end failed and it still
    captures): the stream stays in ``CAPTURE`` with ``driver_capturing`` true until an abort
    ends it. ``cause`` names why (e.g. ``memory_nodes``, ``invalidated``, ``queued_error``); a refusal a
    driver status caused also carries that status's ``code``, ``status``, ``call`` and
    ``lifecore_status``."""

    cause: str = ""
    """Why the recording was not sealed: ``memory_nodes``, ``invalidated``, ``queued_error``..."""
    code: int = 0
    """The driver status number behind the refusal, when a driver status caused it (else 0)."""
    status: str = ""
    """The native name of that status, e.g. ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`` (else empty)."""
    call: str = ""
    """The driver call that reported it, by its native name (else empty)."""
    lifecore_status: str = ""
    """lifecore's name for that status, the same on every backend (else empty)."""


class DriverError(LifecoreError):
    """A vendor driver call failed.

    Attributes: ``code`` (the native status number), ``status`` (its name, e.g.
    ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED``), ``call`` (the driver call),
    ``driver_message``, ``lifecore_status`` (lifecore's own name for the status, the same
    on every backend, e.g. ``capture_invalidated``; one of ``lifecore.status_codes()``)
    and ``operation`` (the lifecore call it surfaced in, which the message starts with: a
    failure inside a call made by another, such as an allocation in a captured step, names
    the innermost).
    An error raised without them (by Python code) reads the class's defaults.
    """

    code: int = 0
    """The status number the driver returned, as the backend's own API numbers it."""
    status: str = ""
    """The native name of that status, e.g. ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED``."""
    lifecore_status: str = ""
    """lifecore's name for the status, the same on every backend (e.g. ``capture_invalidated``):
    one of ``lifecore.status_codes()``. Branch on this, not on ``code``."""
    call: str = ""
    """The driver call that failed, by its native name (e.g. ``cuModuleLoadDataEx``)."""
    driver_message: str = ""
    """The driver's own description of the status, when it gives one (else empty)."""
    operation: str = ""
    """The lifecore call the failure surfaced in, as its message starts (e.g. ``Stream.alloc``);
    empty when it reached no lifecore call (raised by Python code, or by a background wait)."""


class DeviceLostError(DriverError):
    """The driver reported a sticky error (for example a kernel fault): the device's context
    is unusable until the process ends. Every later call on the device raises this error
    again; nothing it held can be used. ``code``, ``status`` and ``call`` name the first
    failure; a later call's error also carries ``reason``, the first failure's text."""

    reason: str = ""
    """The first failure's text, on the errors of the calls after it (empty on the first)."""


class BackendUnavailableError(LifecoreError):
    """The requested backend cannot start on this machine; the message says why."""


class StaleAuthorityError(LifecoreError):
    """A sequence-session operation named a stale epoch, fingerprint or authority, or a lease
    of another coordinator."""


class CapacityError(LifecoreError):
    """Capacity accounting refused an operation that can never be satisfied, or found itself
    inconsistent. (Ordinary capacity pressure is a decision, never this error.)"""


class BudgetExceededError(LifecoreError):
    """A capture-session reservation went over a limit with ``on_limit="fail"``.

    Attributes: ``budget`` (``captures``, ``retained_bytes``, ``host_bytes`` or
    ``encoded_bytes``) and ``cumulative`` (whether the cumulative limit, not the per-step
    one, was hit). Nothing was charged.
    """

    budget: str = ""
    """The budget the reservation went over: ``captures``, ``retained_bytes``, ``host_bytes`` or
    ``encoded_bytes``."""
    cumulative: bool = False
    """True when the session's cumulative limit was hit, False when the per-step one was."""


class AdmissionError(LifecoreError):
    """A plan or a request was refused at admission (an unknown observation path is named in the
    error's ``path``)."""

    path: str = ""
    """The observation path admission did not know, when that was the refusal (else empty)."""


class SessionStateError(LifecoreError):
    """The session's phase forbids the operation (terminal, fail-closed, poisoned, ...)."""


class ClosedError(LifecoreError):
    """The object was closed or destroyed (a coordinator, a device, a graph, a buffer)."""


class CaptureSessionError(LifecoreError):
    """A capture-session rule was broken at run time (an undrained step, a point observed
    twice, an unsolicited routing result, ...)."""


class EngineError(LifecoreError, RuntimeError):
    """The reference engine cannot do what was asked (a generate or close called while one runs,
    a request waiting for capacity that no sequence of the run holds, sequences of the engine's
    used elsewhere); also a ``RuntimeError``, what the engine raised before it had a class of
    its own."""
