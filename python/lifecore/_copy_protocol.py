"""What copies and pickles among the runtime's and the sequence core's types, and what refuses.

Four kinds of object, four answers:

- Values anyone can build (a ``StreamCaptureState``, a ``CaptureEnd``, a ``CapacitySource``, a
  built-in ``Kernel``) copy and pickle. A pickle is rebuilt through the public calls that make
  one (a state is walked through its transitions, a source is named again), so an altered pickle
  is checked as any argument is. A source read back names no coordinator: a coordinator lives in
  one process.
- Reports of plain facts (a ``CapacitySnapshot`` and its ``DomainUsage``, a ``CapacityDemand``, a
  ``CapacityBlocker``, an ``AdmissionRejected``, a ``CancelSnapshot``, a ``BackendInfo``) copy,
  pickle and compare as values: an engine sends them to a metrics or scheduling process. Each
  one's state is a tuple of plain values (``__getstate__``), and ``__setstate__`` checks every
  field of it, so an altered pickle is refused naming the field. A rejection read back names no
  coordinator.
- Handles (a device, a stream, a buffer, a coordinator, a session, a frame...) stand for memory,
  capacity or driver state of this process: a copy would share it and a pickle cannot carry it.
- Reports tied to one coordinator (a ``WaitCondition``'s epochs, a ``TerminalReceipt``'s
  authorities) mean nothing in another process.

The last two refuse ``copy``, ``deepcopy`` and ``pickle`` with a LifecoreTypeError (a TypeError)
that says what to send instead. Capture's types follow the same rule (``capture._value_protocol``).
"""

from __future__ import annotations

from typing import Any, Callable

from . import _core
from .errors import LifecoreTypeError

_runtime: Any = _core.runtime
_sequence: Any = _core.sequence
_driver: Any = _core.driver

_OPEN_THERE = "open a Device in the receiving process"
_HOLDS = "it holds capacity of a coordinator in this process"

# Handles: type -> (why it cannot travel, what to send instead).
_HANDLES: dict[tuple[Any, str], tuple[str, str]] = {
    (_runtime, "Device"): ("it owns a driver context in this process", _OPEN_THERE),
    (_runtime, "Stream"): ("it is a stream of a device in this process", _OPEN_THERE + " and make a stream of it"),
    (_runtime, "Buffer"): ("it is device memory of this process",
                           "send its contents (stream.read(buffer), or numpy.from_dlpack(buffer) on host-visible "
                           "memory) and write them into a buffer allocated there"),
    (_runtime, "BufferView"): ("it is a view of device memory of this process",
                               "send its contents (numpy.from_dlpack(view) on host-visible memory) and view a buffer "
                               "allocated there"),
    (_runtime, "Graph"): ("it is an executable graph of a device in this process", "capture the step again there"),
    (_runtime, "Module"): ("it is code loaded into a device in this process",
                           "send the image or PTX it was loaded from and load it there"),
    (_runtime, "Profile"): ("it times events of a stream in this process", "send its elapsed_ms()"),
    (_sequence, "AdmissionCoordinator"): ("it owns its domains' pages and slots in this process",
                                          "make a coordinator in the receiving process"),
    (_sequence, "Admitted"): (_HOLDS, "send the request id and admit it there"),
    (_sequence, "AdmissionDeferred"): ("it waits on capacity of a coordinator in this process",
                                       "send the request id and admit it there"),
    (_sequence, "AdmittedSequenceResources"): (_HOLDS, "send the request id and admit it there"),
    (_sequence, "SequenceSession"): (_HOLDS, "send the request id and its tokens, and admit it there"),
    (_sequence, "FrameHold"): (_HOLDS, "send its snapshot's block ids (a NumPy array)"),
    (_sequence, "FlightHold"): (_HOLDS, "send its snapshot's block ids (a NumPy array)"),
    (_sequence, "BackingSnapshot"): ("its block ids are valid only while its frame lives in this process",
                                     "send numpy.array(snapshot.block_ids(domain)), a copy"),
    (_sequence, "BackingDecision"): (_HOLDS, "send its outcome and its snapshot's block ids"),
    (_sequence, "CapacityWaitRegistration"): ("it waits on a coordinator in this process",
                                              "register a waiter on the receiving process's coordinator"),
    (_sequence, "Authority"): ("it names a session of a coordinator in this process", "send the request id"),
    (_sequence, "DecodeTable"): ("it steps sessions of a coordinator in this process",
                                 "send its table (a NumPy array)"),
    (_sequence, "_SequenceBenchLoop"): (_HOLDS, "make one in the receiving process"),
    (_sequence, "_WakeChannel"): ("it is a pipe of this process, written by a waiter's hook",
                                  "await the receiving process's registration"),
}

_MOMENT = "it reports a coordinator of this process at one moment, and what it names means nothing elsewhere"
# Reports tied to one coordinator: type -> what to send instead.
_REPORTS: dict[tuple[Any, str], str] = {
    (_sequence, "WaitCondition"): "send its sources (a source pickles); epochs belong to this process's coordinator",
    (_sequence, "TerminalReceipt"): "send its outcome, fingerprint and frame counts; authorities name sessions of "
                                    "this process's coordinator",
}

# Reports of plain facts, which copy, pickle and compare by their state (see the module's doc).
_FACTS: tuple[tuple[Any, str], ...] = (
    (_driver, "BackendInfo"),
    (_sequence, "CapacitySnapshot"),
    (_sequence, "DomainUsage"),
    (_sequence, "CapacityDemand"),
    (_sequence, "CapacityBlocker"),
    (_sequence, "AdmissionRejected"),
    (_sequence, "CancelSnapshot"),
)


def _refusal(why: str, instead: str) -> Callable[..., Any]:
    """What ``copy``, ``deepcopy`` and ``pickle`` of an object that cannot travel call: a
    LifecoreTypeError saying why and what to send instead (capture's bound types and the Engine
    refuse through it too)."""
    def refuse(self: Any, *protocol: Any) -> Any:
        raise LifecoreTypeError(f"{type(self).__name__} cannot be copied or pickled: {why}; {instead}")
    return refuse


# ---- values, rebuilt through the calls that make them ------------------------------------------

def _rebuild_capture_state(variant: str, owner: Any) -> Any:
    """A StreamCaptureState walked to ``variant`` through its own transitions (``owner`` checked
    by ``prepare`` as any owner is)."""
    state = _runtime.StreamCaptureState()
    if variant == "NO_CAPTURE":
        return state
    if variant not in ("PREPARE", "CAPTURE"):
        raise LifecoreTypeError(f"StreamCaptureState: a pickle names no variant of NO_CAPTURE, PREPARE, CAPTURE "
                                f"(got {variant!r})")
    state.prepare(owner)
    if variant == "CAPTURE":
        state.begin()
    return state


def _reduce_capture_state(self: Any) -> tuple[Any, ...]:
    return (_rebuild_capture_state, (self.variant.name, self.owner))


def _rebuild_capture_end(owner: Any, caller: Any) -> Any:
    """The CaptureEnd a window opened by ``owner`` and closed by ``caller`` reports (abandoned
    follows from the two, as it does on a stream)."""
    state = _runtime.StreamCaptureState()
    state.prepare(owner)
    state.begin()
    return state.end(caller)


def _reduce_capture_end(self: Any) -> tuple[Any, ...]:
    return (_rebuild_capture_end, (self.owner, self.caller))


def _rebuild_source(kind: str, domain: Any) -> Any:
    """A source named by hand, as ``Domain(name)``, ``ActiveSequenceSlots`` and ``PhysicalMemory``
    are: it names no coordinator, and compares equal to the one pickled."""
    if kind == "DOMAIN":
        return _sequence.CapacitySource.of_domain(domain)
    if kind == "ACTIVE_SEQUENCE_SLOTS":
        return _sequence.CapacitySource.active_sequence_slots()
    if kind == "PHYSICAL_MEMORY":
        return _sequence.CapacitySource.physical_memory()
    raise LifecoreTypeError(f"CapacitySource: a pickle names no source kind of DOMAIN, ACTIVE_SEQUENCE_SLOTS, "
                            f"PHYSICAL_MEMORY (got {kind!r})")


def _reduce_source(self: Any) -> tuple[Any, ...]:
    return (_rebuild_source, (self.kind.name, self.domain))


def _builtin_kernel(name: str) -> Any:
    """A built-in kernel, found again by its name in ``lifecore.kernels``."""
    from . import kernels
    kernel = getattr(kernels, name, None) if isinstance(name, str) else None
    if not isinstance(kernel, _runtime.Kernel):
        raise LifecoreTypeError(f"Kernel: a pickle names no built-in kernel of lifecore.kernels (got {name!r})")
    return kernel


_refuse_module_kernel = _refusal("it is a function of a module loaded into a device in this process",
                                 "send the module's image and the kernel's name, and look it up there")


def _reduce_kernel(self: Any) -> tuple[Any, ...]:
    if not self.is_builtin:
        _refuse_module_kernel(self)
    return (_builtin_kernel, (self.name,))


def _same_kernel(self: Any, *memo: Any) -> Any:
    if not self.is_builtin:
        _refuse_module_kernel(self)
    return self  # a built-in kernel is one immutable description: a copy is the same one


def _same_facts(self: Any, other: Any) -> Any:
    """Two reports of plain facts are equal when they are of one type and hold the same state."""
    if type(other) is not type(self):
        return NotImplemented
    return self.__getstate__() == other.__getstate__()


def _facts_hash(self: Any) -> int:
    return hash((type(self).__name__, self.__getstate__()))


_VALUES: dict[tuple[Any, str], Callable[[Any], tuple[Any, ...]]] = {
    (_runtime, "StreamCaptureState"): _reduce_capture_state,
    (_runtime, "CaptureEnd"): _reduce_capture_end,
    (_sequence, "CapacitySource"): _reduce_source,
    (_runtime, "Kernel"): _reduce_kernel,
}


def install() -> None:
    """Gives the runtime's and the sequence core's values copying and pickling, and their handles
    and reports a refusal that says what to send instead (idempotent)."""
    for (module, name), reduce in _VALUES.items():
        getattr(module, name).__reduce__ = reduce  # object.__reduce_ex__ and copy call it
    for module, name in _FACTS:  # pickle and copy through __getstate__ / __setstate__ (bound)
        cls = getattr(module, name)
        cls.__eq__ = _same_facts
        cls.__hash__ = _facts_hash
    kernel = _runtime.Kernel
    kernel.__copy__ = _same_kernel
    kernel.__deepcopy__ = _same_kernel
    refusals = {key: _refusal(*reason) for key, reason in _HANDLES.items()}
    refusals.update({key: _refusal(_MOMENT, instead) for key, instead in _REPORTS.items()})
    for (module, name), refuse in refusals.items():
        cls = getattr(module, name)
        cls.__reduce__ = cls.__reduce_ex__ = cls.__copy__ = cls.__deepcopy__ = refuse
