"""Executable specification of graph capture on a stream (pure Python, no import of lifecore).

Two layers, mirroring the runtime:

* :class:`StreamCaptureState` -- the state type alone: ``NO_CAPTURE -> PREPARE -> CAPTURE ->
  NO_CAPTURE`` with the owner that opened the window, the exact rejection messages and the
  cache mode each position implies.
* :class:`DeviceModel` -- a device with streams, buffers, graphs and the info cache, with the
  float32 contents every buffer must hold after eager work and after replays. It says which
  operation is refused in which state on a hardware-graph and on a software-graph device, what a
  graph retains (the device memory its recorded work touches, the info words it pins), and what a
  fault injected into a driver operation does to a transition (the transition fails and the
  stream is back in ``NO_CAPTURE``, re-capturable).

Failures are raised as :class:`ModelError` (:mod:`.contract`), which names the error kind the
real implementation must raise and, where the contract fixes it, the exact message. Every
rejected call changes nothing, except where the contract says a failure closes the window.

Asynchronous failures (a driver operation that fails after being issued) are queued on their
stream, tagged with the window they happened in, and reported by the next read / sync /
graph_prepare / begin_capture; a failure inside a hardware recording makes end_capture refuse.
Memory a hardware recording allocated from the driver (a buffer the pool could not serve, an
info-cache entry first seen there) is a memory node of that recording: the recording is refused,
and that memory never exists outside it (the buffer is unusable; the cache entry is private to
the window, which no other stream or window ever hits, and is dropped when the window ends). A
software recording follows the same rules, so what seals there seals on a driver's graphs: it
refuses such a window, and such a buffer is unusable once it ends (its cache entries, real
memory there, stay shared).

Outside relaxed capture mode a thread records on one stream at a time: while a stream records,
a call on another stream that the driver forbids on the recording thread (beginning a capture,
which synchronizes first; a read, sync, profile or view, which wait on the host; an allocation or
an info upload that needs new driver memory) is refused up front (``CaptureStateError``, naming the
recording stream) and changes nothing; the recording goes on and seals. Every call here comes from
one thread, so every recording is this thread's. Destroying a graph waits for its replays in
relaxed mode instead, which forbids nothing and invalidates no recording.

A profile (``Stream.profile``: driver events around work, then a host wait on the end event)
measures outside a recording only: a recording of its stream refuses it on the spot
(CaptureStateError), a software one because it cannot hold it, a hardware one because its start
would be a node of the graph and the driver would refuse its wait and invalidate the capture. A
read or a sync of the recording stream itself is refused up front on either device in the same
way. No call of lifecore's ever has the driver invalidate a recording: every refusal changes
nothing, and the recording goes on and seals.

Memory is modelled as *slots*: the device memory a buffer was bound to. A freed buffer's slot
lives on while a graph whose recorded work used it is alive (the graph retains it, so the pool can
never hand it to a later allocation while a replay writes it); replays keep reading and writing
it. A graph retains exactly that: what the recording used or allocated. What only the warmup used
(while PREPARE) is held by the window's priming until begin_capture, then goes back to the pool
(its replays never touch it), so a slot freed during warmup may be reused once the window is
recording or gone, and so may one only the warmup used that the recording frees (which
allocation the pool can then serve is the pool's business, reported as ``new_slice``).
Element values are Python floats rounded to float32, or ``None`` where the contents are
undefined (fresh allocations).

A read-only array another library owns (:class:`HostArray`) may be the source of a copy or a
pointer a kernel only reads. Its memory is not the pool's: no window touches it and no graph
retains it as pool memory; a graph that recorded it keeps the array alive, and every replay reads it.
"""

from __future__ import annotations

import enum
import struct
from array import array
from dataclasses import dataclass, field
from typing import Iterable, Literal, Optional, Sequence, Union

from .contract import ModelError

__all__ = [
    "CaptureVariant",
    "CacheMode",
    "CaptureEnd",
    "ModelError",
    "Messages",
    "StreamCaptureState",
    "Slot",
    "BufferModel",
    "GraphModel",
    "Window",
    "StreamModel",
    "DeviceModel",
    "Ref",
    "HostArray",
    "f32",
    "f32_from_bits",
    "f32_bits",
    "KERNELS",
    "TRANSITION_DRIVER_OPERATIONS",
    "DEFERRED_FAULT_OPERATIONS",
    "SOFTWARE_RECORDED",
    "SOFTWARE_REFUSED_LAZILY",
    "SOFTWARE_REFUSED_AT_ONCE",
    "STREAM_DRIVER_OPERATIONS",
    "RECORDING_ELSEWHERE",
    "MEMORY_NODE_ELSEWHERE",
    "PROFILE_DRIVER_OPERATIONS",
    "VIEW_DRIVER_OPERATIONS",
    "QueuedFailure",
]

GraphsKind = Literal["hardware", "software"]


# --------------------------------------------------------------------------------------------
# float32 helpers


def f32(value: float) -> float:
    """``value`` rounded to the nearest float32 (overflow gives +-inf, as on the device)."""
    return array("f", (value,))[0]


def f32_from_bits(bits: int) -> float:
    """The float32 whose IEEE-754 bit pattern is ``bits`` (a u32)."""
    value: float = struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
    return value


def f32_bits(value: float) -> int:
    """The IEEE-754 bit pattern (u32) of ``value`` rounded to float32."""
    bits: int = struct.unpack("<I", struct.pack("<f", f32(value)))[0]
    return bits


# --------------------------------------------------------------------------------------------
# The state type


class CaptureVariant(enum.Enum):
    """Where a stream sits in the graph-capture lifecycle."""

    NO_CAPTURE = 0
    PREPARE = 1
    CAPTURE = 2


class CacheMode(enum.Enum):
    """How the metadata info cache runs at a lifecycle position."""

    NORMAL = 0
    CAPTURE = 1


@dataclass(frozen=True)
class CaptureEnd:
    """What ``end`` reports: who opened the window, who closed it, and whether it was abandoned
    (closed by a caller that is not the owner: no graph is sealed)."""

    owner: int
    caller: int
    abandoned: bool


class Messages:
    """The exact texts of the contract."""

    PREPARE_WHILE_PREPARED = "graph_prepare: a graph capture is already prepared on this stream"
    PREPARE_WHILE_RECORDING = "graph_prepare: a graph capture is already recording on this stream"
    BEGIN_UNPREPARED = "begin_capture: call graph_prepare before starting a capture"
    BEGIN_WHILE_RECORDING = "begin_capture: a graph capture is already recording on this stream"
    END_NOT_RECORDING = "end_capture: no graph capture is recording on this stream"
    ABANDONED = (
        "end_capture: the capture belongs to owner {owner}, not to {caller}; it is discarded "
        "rather than left recording on a stream both share"
    )
    SOFTWARE_REFUSED = (
        "{op}: a software capture window records launches, fills and copies only, so this operation "
        "cannot be part of a graph"
    )
    REPLAY_DESTROYED = "replay: the graph was destroyed"
    HOST_WAIT_WHILE_RECORDING = (
        "{op}: this stream is recording a graph capture, and a host wait on it would invalidate the recording "
        "(the driver refuses it); nothing was done: end the capture first"
    )
    PROFILE_WHILE_RECORDING = (
        "profile: this stream is recording a graph capture, and a profile measures outside one only (its stop "
        "waits on the host, which the driver refuses inside a recording by invalidating it); nothing was done: "
        "end the capture first"
    )


class StreamCaptureState:
    """The only thing allowed to move a stream through the capture lifecycle.

    Every rejected call raises ``ModelError("CaptureState", exact message)`` and leaves the
    state untouched, so two captures can never overlap on one stream and a capture can never
    start unprepared.
    """

    __slots__ = ("_variant", "_owner")

    def __init__(self) -> None:
        self._variant = CaptureVariant.NO_CAPTURE
        self._owner: Optional[int] = None

    @property
    def variant(self) -> CaptureVariant:
        return self._variant

    @property
    def owner(self) -> Optional[int]:
        """The owner that opened the window; ``None`` in ``NO_CAPTURE``."""
        return self._owner

    def is_recording(self) -> bool:
        return self._variant is CaptureVariant.CAPTURE

    def is_active(self) -> bool:
        return self._variant is not CaptureVariant.NO_CAPTURE

    def cache_mode(self) -> CacheMode:
        # Warmup primes the info cache and recording must find every buffer still there, so
        # both PREPARE and CAPTURE run the cache in CAPTURE mode.
        return CacheMode.CAPTURE if self.is_active() else CacheMode.NORMAL

    def prepare(self, owner: int = 0) -> None:
        """NO_CAPTURE -> PREPARE."""
        if self._variant is CaptureVariant.PREPARE:
            raise ModelError("CaptureState", Messages.PREPARE_WHILE_PREPARED)
        if self._variant is CaptureVariant.CAPTURE:
            raise ModelError("CaptureState", Messages.PREPARE_WHILE_RECORDING)
        self._variant, self._owner = CaptureVariant.PREPARE, owner

    def begin(self) -> None:
        """PREPARE -> CAPTURE."""
        if self._variant is CaptureVariant.NO_CAPTURE:
            raise ModelError("CaptureState", Messages.BEGIN_UNPREPARED)
        if self._variant is CaptureVariant.CAPTURE:
            raise ModelError("CaptureState", Messages.BEGIN_WHILE_RECORDING)
        self._variant = CaptureVariant.CAPTURE

    def end(self, caller: int = 0) -> CaptureEnd:
        """CAPTURE -> NO_CAPTURE. A foreign caller still closes the window (abandoned), so a
        window whose owner never comes back cannot wedge the stream."""
        if self._variant is not CaptureVariant.CAPTURE:
            raise ModelError("CaptureState", Messages.END_NOT_RECORDING)
        owner = self._owner
        assert owner is not None
        self._variant, self._owner = CaptureVariant.NO_CAPTURE, None
        return CaptureEnd(owner=owner, caller=caller, abandoned=caller != owner)

    def abort(self) -> None:
        """Any -> NO_CAPTURE; never fails (it is the failure path of a transition's own work)."""
        self._variant, self._owner = CaptureVariant.NO_CAPTURE, None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StreamCaptureState):
            return NotImplemented
        return (self._variant, self._owner) == (other._variant, other._owner)

    def __hash__(self) -> int:
        return hash((self._variant, self._owner))

    def __copy__(self) -> "StreamCaptureState":
        twin = StreamCaptureState()
        twin._variant, twin._owner = self._variant, self._owner
        return twin

    def __repr__(self) -> str:
        if self._owner is None:
            return f"StreamCaptureState({self._variant.name})"
        return f"StreamCaptureState({self._variant.name}, owner={self._owner})"


# --------------------------------------------------------------------------------------------
# Device memory and recorded work


Value = Optional[float]  # None: undefined contents


@dataclass(eq=False)
class Slot:
    """Device memory a buffer was bound to; outlives the buffer while a graph retains it.
    A foreign slot is a :class:`HostArray`'s memory, outside the pool."""

    id: int
    values: list[Value]
    foreign: bool = False

    @property
    def count(self) -> int:
        return len(self.values)


@dataclass(eq=False)
class BufferModel:
    id: int
    nbytes: int
    slot: Slot
    alive: bool = True
    # Allocated while a hardware capture recorded and the pool could not serve it: its memory
    # is a memory node of that capture, which exists only if a graph is sealed (never: memory
    # nodes are refused). Once the window closes the buffer has no memory: every use is refused.
    memory_node: bool = False
    orphaned: bool = False
    owner: int = 0  # the stream that allocated it: the only one that may use a memory node


@dataclass(frozen=True)
class Ref:
    """A buffer argument of a launch (the model's stand-in for a ``Buffer``)."""

    buffer: int


@dataclass(frozen=True)
class HostArray:
    """A read-only float32 array another library owns, given where the caller may pass a
    buffer that is only read (a copy's source, a kernel's ``const ptr``)."""

    values: tuple[float, ...]


def _pool_ids(slots: Iterable[Slot]) -> set[int]:
    """The ids of the pool's slots among ``slots`` (a host array's memory is not the pool's)."""
    return {s.id for s in slots if not s.foreign}


def _axpy(a: float, x: Value, y: Value) -> Value:
    if x is None or y is None:
        return None
    return f32(a * x + y)


def _scale(a: float, x: Value, _unused: Value) -> Value:
    return None if x is None else f32(a * x)


def _add(_unused: float, x: Value, y: Value) -> Value:
    return None if x is None or y is None else f32(x + y)


@dataclass(frozen=True)
class KernelSpec:
    """A built-in kernel: its parameter kinds (as the contract names them), the parameters it
    only reads (``const ptr``: a read-only array may be given there, and only there) and its
    effect."""

    name: str
    params: tuple[str, ...]
    read_only: tuple[int, ...] = ()  # parameter indices


KERNELS: dict[str, KernelSpec] = {
    "axpy_f32": KernelSpec("axpy_f32", ("u32", "f32", "ptr", "ptr"), (2,)),
    "scale_f32": KernelSpec("scale_f32", ("u32", "f32", "ptr", "ptr"), (2,)),
    "add_f32": KernelSpec("add_f32", ("u32", "ptr", "ptr", "ptr"), (1, 2)),
    # info = [n, float_bits(a)] goes through the info cache; the caller passes x and y only.
    "axpy_info_f32": KernelSpec("axpy_info_f32", ("ptr", "ptr", "ptr"), (1,)),
}


@dataclass(frozen=True)
class WriteOp:
    slot: Slot
    values: tuple[float, ...]

    def run(self) -> None:
        self.slot.values[: len(self.values)] = list(self.values)

    def slots(self) -> tuple[Slot, ...]:
        return (self.slot,)


@dataclass(frozen=True)
class FillOp:
    slot: Slot
    value: float

    def run(self) -> None:
        self.slot.values[:] = [self.value] * self.slot.count

    def slots(self) -> tuple[Slot, ...]:
        return (self.slot,)


@dataclass(frozen=True)
class CopyOp:
    dst: Slot
    src: Slot

    def run(self) -> None:
        self.dst.values[:] = list(self.src.values)

    def slots(self) -> tuple[Slot, ...]:
        return (self.dst, self.src)


@dataclass(frozen=True)
class LaunchOp:
    """One elementwise built-in kernel over ``n`` elements: ``out[i] = f(a, x[i], y[i])``."""

    kernel: str
    n: int
    a: float
    x: Slot
    y: Optional[Slot]
    out: Slot
    info: Optional[tuple[int, ...]] = None

    def run(self) -> None:
        fn = {"axpy_f32": _axpy, "axpy_info_f32": _axpy, "scale_f32": _scale, "add_f32": _add}[self.kernel]
        xs, out = self.x.values, self.out.values
        ys = self.y.values if self.y is not None else None
        for i in range(self.n):
            out[i] = fn(self.a, xs[i], ys[i] if ys is not None else None)

    def slots(self) -> tuple[Slot, ...]:
        return tuple(s for s in (self.x, self.y, self.out) if s is not None)


Op = Union[WriteOp, FillOp, CopyOp, LaunchOp]


# --------------------------------------------------------------------------------------------
# Windows, graphs and streams


@dataclass(eq=False)
class Window:
    """What an open window (PREPARE or CAPTURE) holds."""

    owner: int
    recorded: list[Op] = field(default_factory=list)  # work recorded while CAPTURE
    # Slot ids the recording (CAPTURE) used or allocated: retained by the window, then by its graph.
    touched: set[int] = field(default_factory=set)
    # Slot ids the warmup (PREPARE) used or allocated: held by priming until begin_capture ends it.
    primed: set[int] = field(default_factory=set)
    pinned_info: set[tuple[int, ...]] = field(default_factory=set)  # info words used since prepare
    memory_nodes: int = 0  # allocations the pool could not serve while recording (hardware: memory nodes)
    lazy_refusals: list[str] = field(default_factory=list)  # software: operations refused at end
    memory_node_buffers: list[int] = field(default_factory=list)
    # Info entries made as memory nodes: private to this window (never hit by another stream or
    # window), dropped when it ends.
    memory_node_info: set[tuple[int, ...]] = field(default_factory=set)


@dataclass(eq=False)
class GraphModel:
    id: int
    ops: tuple[Op, ...]
    hardware: bool
    retained: frozenset[int]  # slot ids
    pinned_info: frozenset[tuple[int, ...]]
    alive: bool = True
    replayed_on: set[int] = field(default_factory=set)  # streams destroy must wait for

    @property
    def node_count(self) -> int:
        return len(self.ops)


@dataclass(eq=False)
class QueuedFailure:
    """An asynchronous failure waiting on its stream, tagged with the window it happened in."""

    operation: str  # the driver operation that failed
    window: Optional[Window]


@dataclass(eq=False)
class StreamModel:
    id: int
    state: StreamCaptureState = field(default_factory=StreamCaptureState)
    window: Optional[Window] = None
    # Failures of asynchronous work issued outside a recording (eagerly, or during warmup):
    # the next read / sync / graph_prepare / begin_capture reports them (DriverError) and
    # clears the queue; a window that closes takes its own with it.
    queued: list[QueuedFailure] = field(default_factory=list)


# Which driver operations each transition calls, by graph kind, and what a failure of each does
# to it: the lifecore exception class the transition raises (it fails, and the stream is back in
# NO_CAPTURE), or None when the failure is tolerated (the transition still succeeds).
# begin_capture synchronizes the stream first (warmup's failures surface there, not inside the
# window); end_capture reports every failure of its own driver work as a refusal.
TRANSITION_DRIVER_OPERATIONS: dict[tuple[str, str], dict[str, Optional[str]]] = {
    ("graph_prepare", "hardware"): {},
    ("graph_prepare", "software"): {},
    ("begin_capture", "hardware"): {"stream_synchronize": "DriverError", "stream_begin_capture": "DriverError"},
    ("begin_capture", "software"): {"stream_synchronize": "DriverError"},
    ("end_capture", "hardware"): {
        "stream_end_capture": "CaptureRefusedError",
        "graph_node_counts": "CaptureRefusedError",
        "graph_instantiate": "CaptureRefusedError",
        # Only consulted when ending failed; destroying the raw graph after instantiation and
        # uploading ahead of the first replay are not worth failing a good graph for.
        "stream_capture_info": None,
        "graph_destroy": None,
        "graph_upload": None,
    },
    ("end_capture", "software"): {},
}

# Operations whose failure inside a transition does not fail it but is queued on the stream and
# surfaces at its next sync or read: the fence that end_capture (or a failure path) puts behind
# the work deferred while recording.
DEFERRED_FAULT_OPERATIONS: frozenset[str] = frozenset({"event_create", "event_record"})

# The driver operation each asynchronous stream operation issues (fault injection targets).
STREAM_DRIVER_OPERATIONS: dict[str, str] = {
    "write": "memcpy_htod_async",
    "fill": "memset_d32_async",
    "copy": "memcpy_dtod_async",
    "launch": "launch_kernel",
}
# The message fragment of a call refused because another stream records on this thread (outside
# relaxed mode): the driver forbids it there, and letting it through would invalidate that recording.
RECORDING_ELSEWHERE = "is recording a graph capture on this thread"
# The message fragment of a memory node used on a stream other than the one recording it.
MEMORY_NODE_ELSEWHERE = "was allocated inside another stream's capture window"
# The message of a queued failure when it surfaces.
EARLIER_FAILURE = "an earlier asynchronous operation on this stream failed"
# The message fragment of a refusal caused by work that failed inside the window.
FAILED_IN_WINDOW = "an operation inside the capture window failed"

# What a software capture window does with each stream operation while recording.
SOFTWARE_RECORDED = frozenset({"launch", "fill", "copy"})
SOFTWARE_REFUSED_LAZILY = frozenset({"write", "replay"})  # queued; end_capture refuses the graph
SOFTWARE_REFUSED_AT_ONCE = frozenset({"read", "sync", "profile"})

# The driver operations a profile calls, in order (fault injection targets): its start creates
# two events and records one; its stop records the other, waits on it and reads the time.
# event_destroy is not among them: failing to destroy an event loses nothing.
PROFILE_DRIVER_OPERATIONS: tuple[str, ...] = ("event_create", "event_record", "event_synchronize", "event_elapsed")

# The driver operations a zero-copy view (DLPack export) calls, in order, by the kind of memory
# the backend exports (fault injection targets). Host memory ("cpu", the mock): the buffer's
# stream is waited for, then the host bytes are looked up. Device memory: an event recorded on
# the buffer's stream, the consumer's stream made to wait on it, the event destroyed (a failure
# to destroy it loses nothing). A view is refused, calling none of them, while the buffer's
# stream has a window prepared or recording, and a host-memory view (which waits on the host) also
# while another stream records on this thread outside relaxed mode; a failure takes no view and
# changes nothing.
VIEW_DRIVER_OPERATIONS: dict[str, tuple[str, ...]] = {
    "cpu": ("stream_synchronize", "host_view"),
    "device": ("event_create", "event_record", "stream_wait_event"),
}


class DeviceModel:
    """A device with streams, buffers, graphs and the info cache.

    Every method either returns what the implementation must return, or raises
    :class:`ModelError`. Identifiers (streams, buffers, graphs) are small ints handed out by the
    model; the state machine maps them to the real objects.
    """

    def __init__(self, graphs: GraphsKind = "hardware", capture_mode: str = "thread_local") -> None:
        if graphs not in ("hardware", "software"):
            raise ValueError(f"graphs must be 'hardware' or 'software', got {graphs!r}")
        if capture_mode not in ("thread_local", "global", "relaxed"):
            raise ValueError(f"capture_mode must be 'thread_local', 'global' or 'relaxed', got {capture_mode!r}")
        self.graphs: GraphsKind = graphs
        # Every call comes from one thread here, so thread_local and global behave alike: outside
        # relaxed mode each recording forbids that thread the driver's unsafe calls elsewhere.
        self.capture_mode = capture_mode
        self.streams: dict[int, StreamModel] = {}
        self.buffers: dict[int, BufferModel] = {}
        self.graphs_by_id: dict[int, GraphModel] = {}
        self.slots: dict[int, Slot] = {}
        # Info entries every stream shares (a window's private memory-node entries are not here).
        self.shared_info: set[tuple[int, ...]] = set()
        self._next_id = 0
        self._foreign_ids = 0  # host arrays' slots count down from -1, apart from the pool's

    # ---------------------------------------------------------------- bookkeeping

    @property
    def hardware(self) -> bool:
        return self.graphs == "hardware"

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def new_stream(self) -> int:
        sid = self._new_id()
        self.streams[sid] = StreamModel(sid)
        return sid

    def state(self, stream: int) -> StreamCaptureState:
        """A copy of the stream's capture state."""
        return self.streams[stream].state.__copy__()

    def _buffer(self, buf: int, stream: Optional[int] = None) -> BufferModel:
        """A live buffer, for a call on ``stream``. A memory node has memory only while the graph
        its stream records runs: another stream's work would run at an address with nothing
        behind it, so it is refused there (CaptureStateError, nothing issued)."""
        b = self.buffers[buf]
        if not b.alive or b.orphaned:
            raise ModelError("Closed")
        if b.memory_node and stream is not None and stream != b.owner:
            raise ModelError("CaptureState", contains=MEMORY_NODE_ELSEWHERE)
        return b

    def recording_elsewhere(self, stream: int) -> Optional[int]:
        """The stream other than ``stream`` that records on this (the only) thread in a mode that
        forbids the driver's unsafe calls there (thread_local, global), if any."""
        if self.capture_mode == "relaxed":
            return None
        return next((sid for sid, other in self.streams.items() if sid != stream and other.state.is_recording()), None)

    def _refuse_if_recording_elsewhere(self, s: StreamModel) -> None:
        """A call on ``s`` the driver forbids while another stream records on this thread: refused up
        front (CaptureStateError), nothing changed, that recording left to seal."""
        if self.recording_elsewhere(s.id) is not None:
            raise ModelError("CaptureState", contains=RECORDING_ELSEWHERE)

    def _touch(self, stream: StreamModel, slots: Iterable[Slot]) -> None:
        if stream.window is not None:
            held = stream.window.touched if stream.state.is_recording() else stream.window.primed
            held.update(_pool_ids(slots))

    # ---------------------------------------------------------------- expected statistics

    def graphs_alive(self) -> int:
        return sum(1 for g in self.graphs_by_id.values() if g.alive)

    def windows_active(self) -> int:
        return sum(1 for s in self.streams.values() if s.state.is_active())

    def pinned_info(self) -> set[tuple[int, ...]]:
        """Info entries pinned by a live graph or an open window (an entry counts once)."""
        pinned: set[tuple[int, ...]] = set()
        for g in self.graphs_by_id.values():
            if g.alive:
                pinned |= g.pinned_info
        for s in self.streams.values():
            if s.window is not None:
                pinned |= s.window.pinned_info
        return pinned

    def retained_slots(self) -> set[int]:
        """Slots held by a live graph or an open window (what it recorded, and while it primes what
        its warmup used) and not bound to a live buffer: ``memory_stats()["slices_retained"]`` once
        the frees queued on the streams have run."""
        held: set[int] = set()
        for g in self.graphs_by_id.values():
            if g.alive:
                held |= g.retained
        for s in self.streams.values():
            if s.window is not None:
                held |= s.window.touched | s.window.primed
        return held - {b.slot.id for b in self.buffers.values() if b.alive}

    @property
    def info_entries(self) -> frozenset[tuple[int, ...]]:
        """Distinct info words the cache holds: shared, or private to an open window."""
        private: set[tuple[int, ...]] = set()
        for s in self.streams.values():
            if s.window is not None:
                private |= s.window.memory_node_info
        return frozenset(self.shared_info | private)

    def info_miss_records_memory_node(self, stream: int, words: Sequence[int]) -> bool:
        """Whether launching with these info words now would upload them inside a hardware
        recording (a memory node: end_capture will refuse the graph)."""
        s = self.streams[stream]
        key = tuple(words)
        return (self.hardware and s.state.is_recording() and key not in self.shared_info
                and (s.window is None or key not in s.window.memory_node_info))

    def contents(self, buf: int) -> list[Value]:
        """The expected contents (no state check; for the machine's own bookkeeping)."""
        return list(self.buffers[buf].slot.values)

    # ---------------------------------------------------------------- buffers

    def alloc(self, stream: int, nbytes: int, *, new_slice: bool = False) -> int:
        """A buffer of ``nbytes`` (a multiple of 4 here: the model holds float32 elements).

        ``new_slice`` says whether the pool had to ask the driver for memory (the implementation
        reports it through ``driver_allocations``): which requests a pool can serve is the pool's
        business, what such an allocation means for a recording window is the contract's. On a
        hardware-graph device it records a memory node, and ``end_capture`` refuses the graph; a
        software recording's ``end_capture`` refuses it the same way (its memory is real, but a
        driver's graph would refuse it). Outside a hardware recording it is a plain driver
        allocation, refused up front
        (CaptureStateError, nothing allocated) while another stream records on this thread outside
        relaxed mode.
        """
        if nbytes <= 0:
            raise ModelError("InvalidArgument")
        s = self.streams[stream]
        if new_slice and not (s.state.is_recording() and self.hardware):
            self._refuse_if_recording_elsewhere(s)  # a plain driver allocation
        slot = Slot(self._new_id(), [None] * (nbytes // 4))
        self.slots[slot.id] = slot
        bid = self._new_id()
        self.buffers[bid] = BufferModel(bid, nbytes, slot, owner=stream)
        if s.window is not None:
            self._touch(s, (slot,))
            if s.state.is_recording() and new_slice:
                # Hardware: a memory node. Software: real memory, under the same rules (only its
                # stream uses it, the refused window frees it), so a step that passes here
                # passes on a driver's graphs.
                s.window.memory_nodes += 1
                s.window.memory_node_buffers.append(bid)
                self.buffers[bid].memory_node = True
        return bid

    def free(self, buf: int) -> None:
        """Frees a buffer (twice: ClosedError). The slot lives on while a graph holds it."""
        b = self.buffers[buf]
        if not b.alive:
            raise ModelError("Closed")
        b.alive = False

    # ---------------------------------------------------------------- stream work

    def _surface(self, s: StreamModel) -> None:
        """Reports (DriverError) and clears the stream's queued failures, if any."""
        if s.queued:
            s.queued.clear()
            raise ModelError("Driver", contains=EARLIER_FAILURE)

    def _refuse_unrecordable(self, s: StreamModel, op: str) -> None:
        """read / sync: while recording they are refused on the spot, changing nothing (a software
        window cannot hold them; on a hardware device the driver would refuse the host wait and
        invalidate the capture, so it never sees it); otherwise they report the stream's queued
        failures."""
        if not s.state.is_recording():
            self._refuse_if_recording_elsewhere(s)
            self._surface(s)
            return
        if self.hardware:
            raise ModelError("CaptureState", Messages.HOST_WAIT_WHILE_RECORDING.format(op=op))
        raise ModelError("CaptureState", Messages.SOFTWARE_REFUSED.format(op=op))

    def _submit(self, s: StreamModel, op: Op, name: str, fault: Optional[str] = None) -> None:
        """Executes ``op`` eagerly, or records it while the stream records.

        ``fault``: a driver operation that fails once. When ``op`` issues it, ``op`` has no
        effect and the failure is queued: outside a recording it waits on the stream; inside a
        hardware recording it belongs to the window, and end_capture refuses the graph. A
        software recording issues nothing to the driver, so it is not affected."""
        self._touch(s, op.slots())
        failed = fault is not None and fault == STREAM_DRIVER_OPERATIONS.get(name)
        if not s.state.is_recording():
            if failed:
                s.queued.append(QueuedFailure(fault, s.window))  # type: ignore[arg-type]
            else:
                op.run()
            return
        assert s.window is not None
        if not self.hardware and name in SOFTWARE_REFUSED_LAZILY:
            # Refused lazily: a graph missing an operation is worse than a late diagnostic.
            s.window.lazy_refusals.append(name)
            return
        if self.hardware and failed:
            s.window.lazy_refusals.append(FAILED_IN_WINDOW)
            return
        s.window.recorded.append(op)

    def write(self, stream: int, buf: int, values: Sequence[float], *, fault: Optional[str] = None) -> None:
        b = self._buffer(buf, stream)
        if len(values) * 4 != b.nbytes:
            raise ModelError("InvalidArgument")
        self._submit(self.streams[stream], WriteOp(b.slot, tuple(f32(v) for v in values)), "write", fault)

    def fill(self, stream: int, buf: int, bits: int, *, fault: Optional[str] = None) -> None:
        b = self._buffer(buf, stream)
        self._submit(self.streams[stream], FillOp(b.slot, f32_from_bits(bits)), "fill", fault)

    def copy(self, stream: int, dst: int, src: Union[int, HostArray], *, fault: Optional[str] = None) -> None:
        """Copies ``src`` (a buffer, or a read-only host array) into buffer ``dst``."""
        d = self._buffer(dst, stream)
        source = self._operand(src, stream)
        if d.nbytes != 4 * source.count:
            raise ModelError("InvalidArgument")
        if source is d.slot:  # a buffer into itself: a driver copies between disjoint ranges only
            raise ModelError("InvalidArgument")
        self._submit(self.streams[stream], CopyOp(d.slot, source), "copy", fault)

    def _operand(self, given: Union[int, Ref, HostArray], stream: int) -> Slot:
        """The memory behind an operand on ``stream``: a live buffer's slot, or a host array's own."""
        if isinstance(given, HostArray):
            self._foreign_ids -= 1
            return Slot(self._foreign_ids, [f32(v) for v in given.values], foreign=True)
        return self._buffer(given.buffer if isinstance(given, Ref) else given, stream).slot

    def launch(self, stream: int, kernel: str, args: Sequence[object], info: Optional[Sequence[int]] = None,
               *, fault: Optional[str] = None) -> None:
        """Launches a built-in kernel; ``args`` as the caller passes them (``Ref`` for buffers)."""
        spec = KERNELS[kernel]
        s = self.streams[stream]
        # A host array is read-only: only a pointer the kernel only reads may be one.
        offset = len(spec.params) - len(args) if kernel == "axpy_info_f32" else 0  # info is not the caller's
        for k, arg in enumerate(args):
            if isinstance(arg, HostArray) and k + offset not in spec.read_only:
                raise ModelError("InvalidArgument", contains="is read-only, and the operation writes it")
        refs = [a for a in args if isinstance(a, (Ref, HostArray))]
        slots = [self._operand(r, stream) for r in refs]
        if kernel == "axpy_info_f32":
            if info is None or len(info) != 2 or len(args) != 2:
                raise ModelError("TypeMismatch")
            n, a = int(info[0]), f32_from_bits(int(info[1]))
            op = LaunchOp(kernel, n, a, slots[0], slots[1], slots[1], tuple(int(w) for w in info))
            self._use_info(s, op.info)
        elif kernel == "add_f32":
            if len(args) != len(spec.params):
                raise ModelError("TypeMismatch")
            op = LaunchOp(kernel, int(args[0]), 0.0, slots[0], slots[1], slots[2])  # type: ignore[call-overload]
        else:
            if len(args) != len(spec.params):
                raise ModelError("TypeMismatch")
            n, a = int(args[0]), f32(float(args[1]))  # type: ignore[arg-type, call-overload]
            y = slots[1]
            op = LaunchOp(kernel, n, a, slots[0], y if kernel == "axpy_f32" else None, y)
        if any(op.n > slot.count for slot in op.slots()):
            raise ModelError("InvalidArgument")
        self._submit(s, op, "launch", fault)

    def _use_info(self, s: StreamModel, words: Optional[tuple[int, ...]]) -> None:
        """The info cache keeps every small entry (well under its size and count limits here);
        a miss while a hardware capture records uploads into fresh memory, which the driver
        records as a memory node: warmup is what puts the words in the cache. A software
        recording's miss is refused at end_capture the same way."""
        assert words is not None
        if s.window is not None and words in s.window.memory_node_info:
            return  # the window's own memory node, already pinned
        if words not in self.shared_info and s.state.is_recording() and self.hardware:
            assert s.window is not None
            # Memory with nothing behind it outside this recording: private to the window.
            s.window.memory_nodes += 1
            s.window.memory_node_info.add(words)
            s.window.pinned_info.add(words)
            return
        if words not in self.shared_info and s.state.is_recording():
            assert s.window is not None
            # Software: real memory, shared as any entry, but what a driver's graph would record
            # as a memory node: end_capture refuses the window the same way.
            s.window.memory_nodes += 1
        if words not in self.shared_info:
            self._refuse_if_recording_elsewhere(s)  # the upload allocates and waits on the host
        self.shared_info.add(words)
        if s.window is not None:
            s.window.pinned_info.add(words)

    def read(self, stream: int, buf: int) -> list[Value]:
        b = self._buffer(buf, stream)
        self._refuse_unrecordable(self.streams[stream], "read")
        return list(b.slot.values)

    def sync(self, stream: int) -> None:
        self._refuse_unrecordable(self.streams[stream], "sync")

    def profile(self, stream: int, *, fault: Optional[str] = None) -> None:
        """A whole profile (start, then stop) with no work inside; the elapsed time is the
        device's business. ``fault``: a driver operation that fails once (one of
        :data:`PROFILE_DRIVER_OPERATIONS`; any other is not called).

        It never reports the stream's queued failures (its wait is on its own event). A recording
        of this stream refuses it on the spot (CaptureStateError), creating no event: a software
        one cannot hold it, and in a hardware one no profile could ever measure. While another
        stream records on this thread (outside relaxed mode) it is refused up front too (its stop
        waits on the host). Otherwise a failing driver operation raises DriverError and changes
        nothing."""
        s = self.streams[stream]
        if s.state.is_recording():
            if self.hardware:
                raise ModelError("CaptureState", Messages.PROFILE_WHILE_RECORDING)
            raise ModelError("CaptureState", Messages.SOFTWARE_REFUSED.format(op="profile"))
        self._refuse_if_recording_elsewhere(s)
        if fault in PROFILE_DRIVER_OPERATIONS:
            raise ModelError("Driver")

    # ---------------------------------------------------------------- transitions

    def _close_window(self, s: StreamModel) -> None:
        """Discards the window: its pins, its retained slots, whatever it recorded and the
        failures queued inside it; buffers whose memory was a memory node of the recording are
        left without memory."""
        if s.window is not None:
            for bid in s.window.memory_node_buffers:
                self.buffers[bid].orphaned = True
            # Their memory never existed outside the recording: the window's private entries go
            # with it (they are not in shared_info).
            s.queued = [q for q in s.queued if q.window is not s.window]
        s.window = None

    def _fault_kind(self, transition: str, fault: Optional[str]) -> Optional[str]:
        if fault is None:
            return None
        return TRANSITION_DRIVER_OPERATIONS[(transition, self.graphs)].get(fault)

    def graph_prepare(self, stream: int, owner: int = 0, *, fault: Optional[str] = None) -> None:
        """NO_CAPTURE -> PREPARE: arms priming and puts the info cache in CAPTURE mode.

        ``fault`` names a driver operation that fails once during the call (mock fault
        injection); see :data:`TRANSITION_DRIVER_OPERATIONS`.
        """
        s = self.streams[stream]
        probe = s.state.__copy__()
        probe.prepare(owner)
        # Failures queued before the window belong to work outside it: reported now.
        self._surface(s)
        s.state.prepare(owner)
        kind = self._fault_kind("graph_prepare", fault)
        if kind is not None:
            s.state.abort()
            raise ModelError(kind)
        s.window = Window(owner)

    def begin_capture(self, stream: int, *, fault: Optional[str] = None) -> None:
        """PREPARE -> CAPTURE; if opening the window fails, everything is undone and the stream
        is back in NO_CAPTURE (prepare -> begin can be retried).

        After the state rule: while another stream records on this thread (outside relaxed mode)
        the begin is refused up front (it would synchronize this stream first, which the driver
        forbids there): CaptureStateError, this stream still PREPARE, the other still recording."""
        s = self.streams[stream]
        probe = s.state.__copy__()
        probe.begin()
        self._refuse_if_recording_elsewhere(s)
        s.state.begin()
        kind = self._fault_kind("begin_capture", fault)
        if kind is None and s.queued:
            # warmup's failures surface here, not inside the window
            kind = "Driver"
            s.queued.clear()
        if kind is not None:
            s.state.abort()
            self._close_window(s)
            raise ModelError(kind)
        assert s.window is not None
        s.window.primed.clear()  # priming ends: what only the warmup used goes back to the pool

    def end_capture(self, stream: int, caller: int = 0, *, fault: Optional[str] = None) -> int:
        """CAPTURE -> NO_CAPTURE, sealing a graph; returns its id.

        The state moves first, so every failure below leaves the stream in NO_CAPTURE.
        Order of the refusals (all CaptureRefusedError): an abandoned window; the driver's end
        failing; an operation refused lazily or failed inside
        the window; counting the nodes failing; memory nodes; instantiation failing. One
        exception the machine never injects (its statuses are 2, 801 and 999): an end the driver
        answers by invalidating the capture (901) of a window where an operation failed reports
        that operation, the cause, as the window's refusal.
        """
        s = self.streams[stream]
        end = s.state.end(caller)
        window = s.window
        assert window is not None
        self._close_window(s)
        kind = self._fault_kind("end_capture", fault)
        if end.abandoned:
            raise ModelError("CaptureRefused", Messages.ABANDONED.format(owner=end.owner, caller=end.caller))
        if kind is not None and fault == "stream_end_capture":
            raise ModelError(kind)
        if window.lazy_refusals:
            raise ModelError("CaptureRefused", contains=window.lazy_refusals[0])
        if kind is not None and fault == "graph_node_counts":
            raise ModelError(kind)
        if window.memory_nodes:
            raise ModelError("CaptureRefused", contains="memory node")
        if kind is not None:
            raise ModelError(kind)
        gid = self._new_id()
        self.graphs_by_id[gid] = GraphModel(
            gid,
            tuple(window.recorded),
            self.hardware,
            frozenset(window.touched),  # what the recording used: every replay's memory, and only that
            frozenset(window.pinned_info),
        )
        return gid

    def abort_capture(self, stream: int) -> None:
        """Back to NO_CAPTURE from anywhere, undoing the window. In this model (one thread, one
        fault at a time, failing once) it never fails; the real abort_capture may raise when
        another thread began the recording in thread_local / global mode, or when the driver
        still captures after its end failed twice (docs/graph-capture-threads.md)."""
        s = self.streams[stream]
        s.state.abort()
        self._close_window(s)

    # ---------------------------------------------------------------- graphs

    def replay(self, graph: int, stream: int, *, fault: Optional[str] = None) -> None:
        """Re-executes exactly the recorded work, on ``stream``.

        Onto a stream that records: CaptureStateError, nothing changed (the graph would be
        recorded inside the new one). A hardware graph is one driver launch (``graph_launch``); a
        software graph re-issues its operations one by one and stops at the first that fails.
        Either way each replay runs after the graph's previous one, on whatever stream, as a
        driver orders an executable graph's launches (here every operation runs in call order). A
        failure is queued on the
        stream (it surfaces at the next sync or read). A priming window does not hold what a
        replay uses: that memory is the graph's, which keeps it while it lives."""
        g = self.graphs_by_id[graph]
        if not g.alive:
            raise ModelError("Closed", Messages.REPLAY_DESTROYED)
        s = self.streams[stream]
        if s.state.is_recording():
            # A graph inside another, whose memory and life nothing keeps: refused at once, on
            # both kinds of graphs, and the recording goes on.
            raise ModelError("CaptureState", contains="replay")
        g.replayed_on.add(stream)
        if g.hardware and fault == "graph_launch":
            s.queued.append(QueuedFailure(fault, s.window))
            return
        for op in g.ops:
            issued = STREAM_DRIVER_OPERATIONS[{WriteOp: "write", FillOp: "fill", CopyOp: "copy", LaunchOp: "launch"}[type(op)]]
            if not g.hardware and fault == issued:
                s.queued.append(QueuedFailure(fault, s.window))
                return
            op.run()  # the graph's memory, not a window's: the graph holds it, and destroy waits for it

    def destroy(self, graph: int) -> None:
        """Releases the graph's retained memory and its info pins; destroying twice is a no-op.

        It first waits for the graph's work on every stream that replayed it (except one that
        records on a hardware-graph device, where a sync would abort the capture). That wait is a
        stream synchronization, which the driver forbids while a capture of this thread (or any
        global one) records elsewhere; the stream waited for does not capture, so the wait then
        runs in relaxed mode, and no recording is invalidated.
        """
        g = self.graphs_by_id[graph]
        if not g.alive:
            return
        g.alive = False

    def cleanup(self) -> bool:
        """Frees unpinned, unretained pool memory and unpinned info entries. Returns whether it
        ran (it is skipped while any window is active)."""
        if self.windows_active():
            return False
        self.shared_info &= self.pinned_info()
        return True
