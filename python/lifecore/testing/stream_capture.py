"""A Hypothesis state machine for graph capture, shipped so anyone can run it on their own GPU.

:class:`StreamCaptureMachine` drives a real :class:`lifecore.Device` and the pure-Python
reference model (:mod:`lifecore.models.stream_capture`) side by side: every rule applies the
same operation to both and compares results, exception classes, messages and capture state.
Rules: allocate / free / write / fill / copy / launch (the built-in kernels on small float
buffers) / read / sync / profile / cleanup, each transition on its own (in any state, so
out-of-order calls are exercised), abandoned ends, aborts, a capture, sync or profile on a
second stream while the first may be recording on the same thread (outside relaxed mode
refused up front, changing nothing), whole capture steps (prepare, warmup, begin, the same
step, end; by hand or through ``Stream.capture``), replays (on the capturing stream or another
one), destroys, a thread that begins recording on the second stream and exits without ending
it (outside relaxed mode it must have aborted the recording before its join returns), and,
where the device offers it (the emulated one), fault injection: a driver operation fails once,
then a transition runs (it fails and leaves the stream re-capturable, or is unaffected), an
asynchronous stream operation runs (its failure is queued and reported later), or a profile
runs (it fails at once). Where the device's memory is host memory (the
emulated device), fill, copy, launch and the capture steps may pass a buffer as its zero-copy
NumPy view (``numpy.from_dlpack``, taken outside any window; where NumPy imports it read-only,
as NumPy before 2.2.5 does, only where the operation reads it): the device must take it as that
buffer in every state, window rules and retention included, so the model does not tell them apart.
A copy's source and a kernel's first operand (a ``const ptr`` of every built-in) may also be a
read-only host array of the machine's own, made for the call and dropped after it: a graph that
recorded it keeps it alive for every replay, and it is never pool memory.

After every step it checks the invariants: the capture state equals the model's; a stream in
``NO_CAPTURE`` accepts a prepare; pool accounting balances, every live buffer's slice is in use
and no slot a graph or a window holds is free, and nothing stays retained once every graph is
gone and no window is open; live graphs and open windows are exactly what the model
says; info-cache entries and pins are exactly what they should be. Each capture step also checks
that the recorded pass allocated nothing and that replaying from the pre-step contents gives the
warmup's results; every read is compared with the model's float32 contents.

It has the shape of every lifecycle's machine (:mod:`lifecore.testing.machine`): a device
factory first, ``bind`` / ``run``, its rules counted in ``STATS``, and each operation compared
by kind, exact message and cause (``compared_fields``).

Usage::

    from lifecore.testing import StreamCaptureMachine, run_stream_capture_machine
    TestDefault = StreamCaptureMachine.bind(lambda: lifecore.Device("auto")).TestCase
    for name in lifecore.available_backends():
        StreamCaptureMachine.run(lambda: lifecore.Device(name), settings=my_settings, seed=0)
    run_stream_capture_machine(lambda: lifecore.Device("auto"), settings=my_settings)  # the same
"""

from __future__ import annotations

from .. import _python_guard

import gc
import math
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional, Sequence, Union

from hypothesis import settings as Settings, strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule
import numpy as np

import lifecore
from lifecore.testing.emulated import DLPACK_CPU
from lifecore.testing.fault_injection import offers_fault_injection
from lifecore.models.stream_capture import (
    DEFERRED_FAULT_OPERATIONS,
    PROFILE_DRIVER_OPERATIONS,
    STREAM_DRIVER_OPERATIONS,
    TRANSITION_DRIVER_OPERATIONS,
    CaptureVariant,
    DeviceModel,
    GraphsKind,
    HostArray,
    ModelError,
    Ref,
    Value,
    f32_bits,
)

from .contract import Agreement
from .machine import LifecycleMachine, clean_up, counted
from .machine_stats import MachineStats

__all__ = ["StreamCaptureMachine", "run_stream_capture_machine", "MachineStats", "STATS"]

DeviceFactory = Callable[[], Any]

SIZES = (4, 16)  # float32 elements per buffer: two size classes
MAX_BUFFERS = 8
VALUES = st.sampled_from([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0])
SCALARS = st.sampled_from([-1.0, -0.5, 0.5, 1.0, 2.0])
FILL_BITS = st.sampled_from([f32_bits(v) for v in (0.0, 1.0, -2.0, 0.25)])
OWNERS = st.integers(0, 3)
PICK = st.integers(0, 63)  # an index taken modulo whatever list it picks from
# A read-only host array's values (another library's tensor), or None for a buffer.
HOST_VALUES = st.none() | st.lists(VALUES, min_size=16, max_size=16)
TRANSITIONS = ("graph_prepare", "begin_capture", "end_capture")
# A bounded sync's timeout: the machine's work is a few small kernels, so reaching it is a hang.
SYNC_DEADLINE_S = 60.0
FAULT_CODES = st.sampled_from([2, 801, 999])  # recoverable statuses (sticky ones lose the device)


#: Every stream-capture machine in this process, counted (the CLI and the benchmarks read it).
STATS = MachineStats("stream capture", event_names=("graphs_sealed", "recordings_discarded", "replays",
                                                     "faults_injected", "view_arguments", "host_arguments",
                                                     "recordings_ended_by_thread_exit"))


def _close(expected: Value, actual: float) -> bool:
    """float32 equality up to rounding (a device may fuse a*x+y); undefined contents match all."""
    if expected is None:
        return True
    if math.isnan(expected) or math.isnan(actual):
        return math.isnan(expected) and math.isnan(actual)
    if math.isinf(expected) or math.isinf(actual):
        # Overflow where one side rounded a*x to float32 before adding y and the other did not:
        # the same sign, and the finite one (if any) at least what is left of a product just
        # past float32's largest (2**103) once y takes up to that largest away. An infinity
        # matches nothing else.
        if math.copysign(1.0, expected) != math.copysign(1.0, actual):
            return False
        return expected == actual or min(abs(expected), abs(actual)) >= 2.0**103
    return math.isclose(expected, actual, rel_tol=1e-5, abs_tol=1e-6)


@dataclass
class _Buffer:
    real: Any  # lifecore.Buffer
    mid: int  # model id
    count: int  # float32 elements
    # A zero-copy NumPy view of it (numpy.from_dlpack), where the device's memory is host
    # memory and the buffer was allocated outside a window (views are refused inside one).
    # Passed to fill / copy / launch in its place, it must be that buffer in every state.
    view: Any = None

    def tensor(self, as_view: bool, written: bool = True) -> Any:
        """What the device side is given: the view when asked for and there is one (a read-only
        one only where the operation does not write it, as a read-only array is refused there)."""
        if as_view and self.view is not None and (self.view.flags.writeable or not written):
            STATS.count("view_arguments")
            return self.view
        return self.real

    def model_arg(self) -> Ref:
        return Ref(self.mid)

    def drop_view(self, check: bool = True) -> None:
        """Lets the view go (free() is refused while one lives); ``check``: no other view may
        remain (not asked after a failed step, whose traceback may still hold one)."""
        self.view = None
        if check and self.real.views:
            gc.collect()
        assert not check or self.real.views == 0, f"buffer {self.mid}: a view outlived the machine's reference"


@dataclass
class _Host:
    """A read-only float32 NumPy array of the machine's own, standing for another library's
    tensor: a copy's source or a kernel's ``const ptr``. Made for one operation and dropped
    after it, so a graph that recorded it must keep it alive for its replays."""

    values: tuple[float, ...]
    mid: str = "host"

    @property
    def count(self) -> int:
        return len(self.values)

    def tensor(self, as_view: bool = False, written: bool = False) -> Any:
        array = np.array(self.values, np.float32)
        array.flags.writeable = False
        STATS.count("host_arguments")
        return array

    def model_arg(self) -> HostArray:
        return HostArray(self.values)


@dataclass
class _Graph:
    real: Any  # lifecore.Graph
    gid: int


@dataclass(frozen=True)
class _Program:
    """One step of a model: temporaries are allocated, initialised from a persistent buffer,
    used, and freed, as a real forward pass does. Operands: ("p", i) persistent, ("t", i) temp,
    ("h", 0) a read-only host array of ``host``'s values (a first operand: every built-in only
    reads it), made for the launch and dropped after it."""

    size_class: int
    temps: int
    ops: tuple[tuple[Any, ...], ...]
    views: bool = False  # persistent operands passed as their NumPy views (where they have one)
    host: tuple[float, ...] = ()


@st.composite
def _programs(draw: Any) -> _Program:
    temps = draw(st.integers(0, 2))
    operand = st.tuples(st.just("p"), PICK)
    if temps:
        operand = operand | st.tuples(st.just("t"), st.integers(0, temps - 1))
    ops: list[tuple[Any, ...]] = []
    for t in range(temps):
        ops.append(("scale_f32", draw(SCALARS), draw(st.tuples(st.just("p"), PICK)), ("t", t)))
    read_only = operand | st.just(("h", 0))
    for _ in range(draw(st.integers(1, 4))):
        kernel = draw(st.sampled_from(["axpy_f32", "scale_f32", "add_f32", "axpy_info_f32"]))
        ops.append((kernel, draw(SCALARS), draw(read_only), draw(operand), draw(operand)))
    host = tuple(draw(st.lists(VALUES, min_size=16, max_size=16)))
    return _Program(draw(st.integers(0, len(SIZES) - 1)), temps, tuple(ops), draw(st.booleans()), host)


class StreamCaptureMachine(LifecycleMachine):
    """Differential state machine: a lifecore device against the reference model.

    Construct with a device factory (``StreamCaptureMachine(factory)``), or bind one to a
    subclass with :meth:`bind` and use its ``TestCase``.

    ``graphs`` (``"hardware"`` or ``"software"``) and ``capture_mode`` (``"thread_local"``,
    ``"global"`` or ``"relaxed"``) say what the device under test must be; the model follows
    them, and a device that reports anything else fails the run. Left out, each is what the
    device reports (the model then trusts that report, and checks only behaviour).
    """

    stats = STATS
    compared_fields = ("message", "contains")
    #: A device factory a subclass sets itself (bind() is the usual way).
    device_factory: ClassVar[Optional[DeviceFactory]] = None

    def __init__(self, device_factory: Optional[DeviceFactory] = None, graphs: Optional[GraphsKind] = None,
                 capture_mode: Optional[str] = None) -> None:
        factory = self.factory_or_bound(device_factory) or type(self).device_factory
        if factory is None:
            raise TypeError("StreamCaptureMachine needs a device factory (see StreamCaptureMachine.bind)")
        graphs = self.option_or_bound("graphs", graphs)
        capture_mode = self.option_or_bound("capture_mode", capture_mode)
        # The model refuses what no device can be, before a device is made.
        DeviceModel(graphs or "hardware", capture_mode or "thread_local")
        super().__init__()
        self.device = factory()
        for name, expected in (("graphs", graphs), ("capture_mode", capture_mode)):
            reported = getattr(self.device, name)
            if expected is not None and reported != expected:
                self.device.close()
                raise AssertionError(f"the device reports {name}={reported!r}, the machine was told {expected!r}")
        self.fault_injection = offers_fault_injection(self.device)
        self.injected_codes: set[int] = set()  # the driver statuses this run injected (see both)
        self.model = DeviceModel(graphs or self.device.graphs, capture_mode or self.device.capture_mode)
        self.kernels = lifecore.kernels
        self.streams = [(self.device.stream(), self.model.new_stream()) for _ in range(2)]
        self.buffers: list[_Buffer] = []
        self.freed: list[_Buffer] = []
        self.graphs: list[_Graph] = []
        self.destroyed: list[_Graph] = []
        self.driver_allocations = self.device.memory_stats()["driver_allocations"]
        # Buffers have NumPy views, and host arrays are device memory, only where the device's
        # memory is host memory.
        self.host_memory = any(info.name == self.device.backend and info.dlpack_device_type == DLPACK_CPU
                               for info in lifecore.backends())

    # ------------------------------------------------------------------ helpers

    @property
    def real0(self) -> Any:
        """Stream 0 of the device under test: the stream most rules work on."""
        return self.streams[0][0]

    @property
    def sid0(self) -> int:
        """The model's id of stream 0."""
        return self.streams[0][1]

    def model_state(self, sid: Optional[int] = None) -> Any:
        """The model's capture state of stream ``sid`` (stream 0 when None)."""
        return self.model.state(self.sid0 if sid is None else sid)

    def _alloc(self, count: int) -> _Buffer:
        """Allocates on both; the model learns from driver_allocations whether the pool grew."""
        real = self.real0.alloc(4 * count)
        grown = self.device.memory_stats()["driver_allocations"]
        new_slice = grown > self.driver_allocations
        self.driver_allocations = grown
        mid = self.model.alloc(self.sid0, 4 * count, new_slice=new_slice)
        view = None
        # Taking a view waits for the stream, which reports a queued failure: only where the
        # model has none to report (and no window, which refuses views).
        stream = self.model.streams[self.sid0]
        if self.host_memory and not stream.state.is_active() and not stream.queued:
            view = np.from_dlpack(real.view("float32"))
        return _Buffer(real, mid, count, view)

    def after_step(self) -> None:
        """Drops the buffers a window closed without a graph left behind (see _drop_orphans)."""
        self._drop_orphans()

    def _drop_orphans(self) -> None:
        """Buffers whose memory was a memory node of a window that closed without a graph have
        no memory: one use of each must be refused (ClosedError), then the machine frees it."""
        for buf in [b for b in self.buffers if self.model.buffers[b.mid].orphaned]:
            self.buffers.remove(buf)
            self.both(f"fill({buf.mid}) after its window closed",
                      lambda: self.model.fill(self.sid0, buf.mid, 0), lambda: self.real0.fill(buf.real, 0))
            buf.drop_view()
            self.both(f"free({buf.mid})", lambda: self.model.free(buf.mid), buf.real.free)
            self.freed.append(buf)

    def _pick(self, index: int, count: Optional[int] = None) -> Optional[_Buffer]:
        pool = [b for b in self.buffers if count is None or b.count == count]
        return pool[index % len(pool)] if pool else None

    def _write(self, stream_index: int, buf: _Buffer, values: Sequence[float], fault: Optional[str] = None) -> None:
        stream, sid = self.streams[stream_index]
        data = struct.pack(f"<{len(values)}f", *values)
        self.both(f"write({buf.mid})", lambda: self.model.write(sid, buf.mid, values, fault=fault),
                  lambda: stream.write(buf.real, data))

    def _launch(self, stream_index: int, kernel: str, a: float, bufs: Sequence[Union[_Buffer, _Host]],
                fault: Optional[str] = None, views: Sequence[bool] = ()) -> None:
        """Launches a built-in kernel over whole buffers (all of one size class); ``views[k]``
        passes operand k as its view."""
        stream, sid = self.streams[stream_index]
        # Operand 0 is a const ptr of every built-in, only read.
        real = [b.tensor(k < len(views) and views[k], written=k > 0) for k, b in enumerate(bufs)]
        model = [b.model_arg() for b in bufs]
        n = bufs[0].count
        grid, block = (n + 63) // 64, 64
        margs: list[Any]
        if kernel == "axpy_info_f32":
            info = [n, f32_bits(a)]
            margs, rargs = [model[0], model[1]], [real[0], real[1]]
        elif kernel == "add_f32":
            info = None
            margs = [n, model[0], model[1], model[2]]
            rargs = [n, real[0], real[1], real[2]]
        else:
            info = None
            margs, rargs = [n, a, model[0], model[1]], [n, a, real[0], real[1]]
        k = getattr(self.kernels, kernel)
        self.both(f"launch {kernel}{tuple(b.mid for b in bufs)}",
                  lambda: self.model.launch(sid, kernel, margs, info, fault=fault),
                  lambda: stream.launch(k, grid, block, rargs, info=info))

    def _read(self, stream_index: int, buf: _Buffer) -> None:
        stream, sid = self.streams[stream_index]
        result = self.both(f"read({buf.mid})", lambda: self.model.read(sid, buf.mid), lambda: stream.read(buf.real))
        if result.kind is None:
            expected, actual = result.expected, struct.unpack(f"<{buf.count}f", result.actual)
            for i, (e, a) in enumerate(zip(expected, actual)):
                assert _close(e, a), f"buffer {buf.mid}[{i}]: device {a!r}, model {e!r} (all: {actual} vs {expected})"

    def _end(self, caller: int, fault: Optional[str] = None,
             stream_index: int = 0) -> tuple[Optional[_Graph], Optional[ModelError]]:
        stream, sid = self.streams[stream_index]
        result = self.both(f"end_capture(caller={caller})",
                           lambda: self.model.end_capture(sid, caller, fault=fault),
                           lambda: stream.end_capture(caller))
        if result.model_error is not None:
            return None, result.model_error
        real = result.actual
        gid = max(self.model.graphs_by_id)
        graph = _Graph(real, gid)
        assert real.alive and real.is_hardware == (self.device.graphs == "hardware")
        assert real.node_count == self.model.graphs_by_id[gid].node_count or not real.is_hardware, (
            f"graph has {real.node_count} nodes, the model recorded {self.model.graphs_by_id[gid].node_count}")
        self.graphs.append(graph)
        STATS.count("graphs_sealed")
        return graph, None

    def _run_program(self, program: _Program) -> None:
        """Runs one step of a model on stream 0 (warmup or recording: the same calls)."""
        count = SIZES[program.size_class]
        persistent = [b for b in self.buffers if b.count == count]
        temps = [self._alloc(count) for _ in range(program.temps)]

        def resolve(operand: tuple[str, int]) -> Union[_Buffer, _Host]:
            kind, i = operand
            if kind == "h":
                return _Host(program.host[:count]) if self.host_memory else persistent[0]
            return persistent[i % len(persistent)] if kind == "p" else temps[i]

        for op in program.ops:
            kernel, a, *operands = op
            self._launch(0, kernel, a, [resolve(o) for o in operands],
                         views=[program.views and o[0] == "p" for o in operands])
        for t in temps:
            t.drop_view()
            t.real.free()
            self.model.free(t.mid)

    # ------------------------------------------------------------------ setup

    @initialize(values=st.lists(VALUES, min_size=16, max_size=16))
    def create_buffers(self, values: list[float]) -> None:
        """Two initialised buffers of each size class."""
        for count in SIZES:
            for k in range(2):
                buf = self._alloc(count)
                self.buffers.append(buf)
                self._write(0, buf, [values[(i + k) % 16] for i in range(count)])

    def teardown(self) -> None:
        """Closing every window and destroying every graph must leave nothing retained (not
        checked after a failed step: see run_failed). The device closes whatever happened."""
        failed = self.run_failed()
        try:
            self._let_go_of_everything(check=not failed)
        finally:
            self.device.close()
            super().teardown()

    def _let_go_of_everything(self, check: bool) -> None:
        """Drops every view, closes every window and destroys every graph; ``check``: raise on
        the first that fails and check that nothing stays retained. Without it, each is tried
        whatever the others raised (the device closes next, and must have tried them all)."""
        for buf in self.buffers:
            clean_up(lambda: buf.drop_view(check), check)  # no view outlives the device's memory
        for stream, sid in self.streams:
            clean_up(stream.abort_capture, check)
            clean_up(lambda: self.model.abort_capture(sid), check)
        for g in self.graphs:
            clean_up(g.real.destroy, check)
            clean_up(lambda: self.model.destroy(g.gid), check)
        self.graphs.clear()
        if not check:
            return
        stats = self.device.memory_stats()
        assert stats["graphs_alive"] == 0 and stats["windows_active"] == 0, stats
        assert stats["slices_retained"] == 0, f"slices still retained with no graph and no window: {stats}"
        assert stats["info_pinned"] == 0, f"info entries still pinned: {stats}"

    # ------------------------------------------------------------------ buffers and eager work

    @precondition(lambda self: len(self.buffers) < MAX_BUFFERS)
    @rule(size_class=st.integers(0, len(SIZES) - 1), values=st.none() | st.lists(VALUES, min_size=16, max_size=16))
    @counted
    def alloc(self, size_class: int, values: Optional[list[float]]) -> None:
        """Allocates a buffer of one size class on both and, outside a recording, writes ``values`` into
        it."""
        buf = self._alloc(SIZES[size_class])
        self.buffers.append(buf)
        if values is not None and not self.model_state().is_recording():
            self._write(0, buf, values[: buf.count])

    @precondition(lambda self: len(self.buffers) > 2)
    @rule(i=PICK)
    @counted
    def free(self, i: int) -> None:
        """Frees a live buffer (more than two are live) on both; the device's buffer must then report
        itself not alive. It is kept for ``use_after_free``."""
        buf = self.buffers.pop(i % len(self.buffers))
        buf.drop_view()
        buf.real.free()
        self.model.free(buf.mid)
        assert not buf.real.alive
        self.freed.append(buf)

    @precondition(lambda self: bool(self.freed))
    @rule(i=PICK)
    @counted
    def use_after_free(self, i: int) -> None:
        """Fills a freed buffer on stream 0: lifecore must refuse it with ClosedError."""
        buf = self.freed[i % len(self.freed)]
        try:
            self.real0.fill(buf.real, 0)
        except lifecore.ClosedError:
            pass
        else:
            raise AssertionError("a fill of a freed buffer was accepted")

    @rule(i=PICK, values=st.lists(VALUES, min_size=16, max_size=16))
    @counted
    def write(self, i: int, values: list[float]) -> None:
        """Writes values into a live buffer on stream 0, on both; the outcomes must agree."""
        buf = self._pick(i)
        if buf is None:
            return  # no live buffer of that size (all freed or discarded with their window)
        self._write(0, buf, values[: buf.count])

    @rule(i=PICK, bits=FILL_BITS, view=st.booleans())
    @counted
    def fill(self, i: int, bits: int, view: bool) -> None:
        """Fills a live buffer (or its view) with a 32-bit pattern on stream 0, on both; the
        outcomes must agree."""
        buf = self._pick(i)
        if buf is None:
            return  # no live buffer of that size (all freed or discarded with their window)
        self.both(f"fill({buf.mid})", lambda: self.model.fill(self.sid0, buf.mid, bits),
                  lambda: self.real0.fill(buf.tensor(view), bits))

    @rule(i=PICK, j=PICK, views=st.tuples(st.booleans(), st.booleans()), host=HOST_VALUES)
    @counted
    def copy(self, i: int, j: int, views: tuple[bool, bool], host: Optional[list[float]]) -> None:
        """Copies a live buffer (or a read-only host array of the machine's) into another of the
        same size (either buffer as its view) on stream 0, on both; the outcomes must agree."""
        dst = self._pick(i)
        if dst is None:
            return  # no live buffer of that size (all freed or discarded with their window)
        src: Union[_Buffer, _Host, None] = (_Host(tuple(host[: dst.count])) if host and self.host_memory
                                            else self._pick(j, dst.count))
        if src is None:
            return  # no live buffer of that size (all freed or discarded with their window)
        model_src = src.model_arg() if isinstance(src, _Host) else src.mid
        self.both(f"copy({dst.mid} <- {src.mid})", lambda: self.model.copy(self.sid0, dst.mid, model_src),
                  lambda: self.real0.copy(dst.tensor(views[0]), src.tensor(views[1], written=False)))

    @rule(kernel=st.sampled_from(["axpy_f32", "scale_f32", "add_f32", "axpy_info_f32"]), a=SCALARS,
          i=PICK, j=PICK, k=PICK, views=st.tuples(st.booleans(), st.booleans(), st.booleans()), host=HOST_VALUES)
    @counted
    def launch(self, kernel: str, a: float, i: int, j: int, k: int, views: tuple[bool, bool, bool],
               host: Optional[list[float]]) -> None:
        """Launches one of the built-in kernels over live buffers of one size (any of them as its
        view; its first operand, which every built-in only reads, may be a read-only host array)
        on stream 0, on both; the outcomes must agree."""
        first = self._pick(i)
        if first is None:
            return  # no live buffer of that size (all freed or discarded with their window)
        operands: list[Any] = [first, self._pick(j, first.count), self._pick(k, first.count)]
        if host and self.host_memory:
            operands[0] = _Host(tuple(host[: first.count]))
        self._launch(0, kernel, a, operands, views=views)

    @rule(i=PICK)
    @counted
    def read(self, i: int) -> None:
        """Reads a live buffer on stream 0, on both: the outcomes must agree, and the contents must be
        the model's float32 values (up to rounding; undefined contents match anything)."""
        buf = self._pick(i)
        if buf is None:
            return  # no live buffer of that size (all freed or discarded with their window)
        self._read(0, buf)

    @rule(bounded=st.booleans())
    @counted
    def sync(self, bounded: bool) -> None:
        """Synchronizes stream 0 on both: a queued failure must surface on both alike. A bounded
        sync (a timeout: it polls the driver) must be refused, or fail, exactly where the
        driver's blocking wait is, and end with the stream idle long before its deadline."""

        def bounded_sync() -> None:
            if self.real0.sync(timeout=SYNC_DEADLINE_S) is not True:
                raise AssertionError(f"sync(timeout={SYNC_DEADLINE_S}) found the stream still busy")

        self.both("sync", lambda: self.model.sync(self.sid0), bounded_sync if bounded else self.real0.sync)

    def _profile(self, what: str, fault: Optional[str] = None) -> None:
        """A whole profile with nothing inside, on both; a measurement is a time, never negative."""

        def measure() -> Optional[float]:
            with self.real0.profile() as p:
                pass
            elapsed: Optional[float] = p.elapsed_ms
            return elapsed

        result = self.both(what, lambda: self.model.profile(self.sid0, fault=fault), measure)
        elapsed = result.actual
        if result.kind is None:
            assert elapsed is not None and elapsed >= 0.0, f"profile measured {elapsed!r}"

    @rule()
    @counted
    def profile(self) -> None:
        """Profiles an empty stretch of stream 0 on both: the outcomes must agree and a measured time is
        never negative."""
        self._profile("profile")

    @rule()
    @counted
    def cleanup(self) -> None:
        """Runs the device's cleanup and the model's: while a window is active it changes nothing (pool
        bytes and slices); otherwise it leaves no free slice and no unpinned info entry."""
        before = self.device.memory_stats()
        ran = self.model.cleanup()
        self.device.cleanup()
        after = self.device.memory_stats()
        if not ran:
            assert after["pool_bytes"] == before["pool_bytes"] and after["slices"] == before["slices"], (
                f"cleanup ran while a window is active: {before} -> {after}")
        else:
            assert after["slices_free"] == 0, f"cleanup left free slices: {after}"
            assert after["info_entries"] == after["info_pinned"], f"cleanup left unpinned info entries: {after}"

    # ------------------------------------------------------------------ transitions

    @rule(owner=OWNERS)
    @counted
    def graph_prepare(self, owner: int) -> None:
        """Calls ``graph_prepare(owner)`` on stream 0 in whatever state it is in, on both; the outcomes
        must agree (an out-of-order call is refused alike)."""
        self.both(f"graph_prepare({owner})", lambda: self.model.graph_prepare(self.sid0, owner),
                  lambda: self.real0.graph_prepare(owner))

    @rule()
    @counted
    def begin_capture(self) -> None:
        """Calls ``begin_capture`` on stream 0 in whatever state it is in, on both; the outcomes must
        agree."""
        self.both("begin_capture", lambda: self.model.begin_capture(self.sid0), self.real0.begin_capture)

    # The rules above call a transition in whatever state the stream is in, so most calls are
    # out-of-order refusals (an abort or another rule comes between a prepare and its begin).
    # These take the in-order path when the stream is where it leads somewhere, so a run
    # reaches recording, sealing and discarding by hand as often as it is refused.
    @precondition(lambda self: self.model_state().variant is CaptureVariant.NO_CAPTURE)
    @rule(owner=OWNERS)
    @counted
    def graph_prepare_idle(self, owner: int) -> None:
        """Calls ``graph_prepare(owner)`` on stream 0 out of capture, on both."""
        self.both(f"graph_prepare({owner})", lambda: self.model.graph_prepare(self.sid0, owner),
                  lambda: self.real0.graph_prepare(owner))

    @precondition(lambda self: self.model_state().variant is CaptureVariant.PREPARE)
    @rule()
    @counted
    def begin_capture_prepared(self) -> None:
        """Calls ``begin_capture`` on stream 0 with a window prepared, on both."""
        self.both("begin_capture", lambda: self.model.begin_capture(self.sid0), self.real0.begin_capture)

    @precondition(lambda self: self.model_state().is_recording())
    @rule(abandon=st.booleans())
    @counted
    def end_capture_recording(self, abandon: bool) -> None:
        """Calls ``end_capture`` on stream 0 while it records, on both: as the window's owner, or
        (``abandon``) as a caller that does not own it."""
        owner = self.model_state().owner
        owner = 0 if owner is None else owner
        self._end(owner + 1 if abandon else owner)

    @rule()
    @counted
    def end_capture(self) -> None:
        """Calls ``end_capture`` on stream 0 as the window's owner (0 when there is none), on both. A
        sealed graph must be alive, hardware exactly on a hardware-graph device, and then hold the
        model's node count."""
        owner = self.model_state().owner
        self._end(0 if owner is None else owner)

    @rule()
    @counted
    def end_capture_abandoned(self) -> None:
        """Calls ``end_capture`` on stream 0 as a caller that does not own the window, on both: the
        window closes without a graph (CaptureRefusedError), or the out-of-order call is refused
        alike."""
        owner = self.model_state().owner
        self._end(1 if owner is None else owner + 1)

    @rule(op=st.sampled_from(["capture", "sync", "profile", "fill"]), i=PICK, bits=FILL_BITS,
          begin_first=st.booleans())
    @counted
    def on_the_other_stream(self, op: str, i: int, bits: int, begin_first: bool) -> None:
        """Runs a call on stream 1, from this same thread, while stream 0 may be recording, on
        both: a whole capture (prepare, begin, a fill of a live buffer, end), a sync, a profile,
        or a fill of a buffer stream 0's recording allocated as a memory node. Outside relaxed
        mode a recording on stream 0 forbids the begin, the sync and the profile (the driver
        would refuse them and invalidate that recording): each is refused up front, changing
        nothing, and stream 0 goes on recording. The fill is refused in every mode: a memory node
        has memory only while that graph runs. (Another buffer's fill on stream 1 would race
        stream 0's work on it, whose order across streams is the caller's to make.) Stream 1 is left out of capture (a window the
        refused begin left prepared is aborted), and a graph it sealed is destroyed. With
        ``begin_first`` a window prepared on stream 0 begins recording first."""
        if begin_first and self.model_state().variant is CaptureVariant.PREPARE:
            self.both("begin_capture", lambda: self.model.begin_capture(self.sid0), self.real0.begin_capture)
        stream, sid = self.streams[1]
        if op == "sync":
            self.both("sync (stream 1)", lambda: self.model.sync(sid), stream.sync)
            return
        if op == "fill":
            nodes = [b for b in self.buffers if self.model.buffers[b.mid].memory_node]
            if nodes:
                target = nodes[i % len(nodes)]
                self.both(f"fill({target.mid}) (stream 1)", lambda: self.model.fill(sid, target.mid, bits),
                          lambda: stream.fill(target.real, bits))
            return
        if op == "profile":

            def measure() -> None:
                with stream.profile():
                    pass

            self.both("profile (stream 1)", lambda: self.model.profile(sid), measure)
            return
        self.both("graph_prepare (stream 1)", lambda: self.model.graph_prepare(sid, 0), lambda: stream.graph_prepare(0))
        began = self.both("begin_capture (stream 1)", lambda: self.model.begin_capture(sid), stream.begin_capture)
        if began.kind is None:
            buf = self._pick(i)
            if buf is not None:
                self.both(f"fill({buf.mid}) (stream 1)", lambda: self.model.fill(sid, buf.mid, bits),
                          lambda: stream.fill(buf.real, bits))
            graph, _ = self._end(0, stream_index=1)
            assert graph is not None, "a capture of one fill on stream 1 was refused"
            # The other rules replay a graph on its own stream as stream 0's: this one goes at once.
            self.graphs.remove(graph)
            graph.real.destroy()
            self.model.destroy(graph.gid)
            self.destroyed.append(graph)
        self.model.abort_capture(sid)
        stream.abort_capture()

    # Stream 1 is out of capture between rules (on_the_other_stream leaves it so); nothing records
    # on stream 0 (the model runs every call on one thread, so it would refuse a begin that
    # another thread may make); no failure is queued on stream 1 for the prepare to surface.
    @precondition(lambda self: not self.model_state().is_recording() and not self.model.streams[self.streams[1][1]].queued)
    @rule(i=PICK, bits=FILL_BITS)
    @counted
    def recording_thread_exits(self, i: int, bits: int) -> None:
        """A thread of its own prepares stream 1, begins recording, records a fill of a live buffer
        and exits without ending the recording (a worker whose function raised). Outside relaxed
        mode only that thread could end it: it aborts as the thread goes, before the join returns,
        and stream 1 is out of capture with nothing recorded run. In relaxed mode it stays
        recording, and this thread aborts it."""
        stream, sid = self.streams[1]
        buf = self._pick(i)
        self.model.graph_prepare(sid, 0)
        self.model.begin_capture(sid)
        if buf is not None:
            self.model.fill(sid, buf.mid, bits)
        failures: list[BaseException] = []

        def record_and_exit() -> None:
            try:
                stream.graph_prepare(0)
                stream.begin_capture()
                if buf is not None:
                    stream.fill(buf.real, bits)
            except BaseException as error:  # noqa: BLE001 - reported by the machine below
                failures.append(error)

        worker = threading.Thread(target=record_and_exit, name="lifecore-machine-recorder")
        worker.start()
        worker.join()
        assert not failures, f"the recording thread was refused what the model accepts: {failures[0]!r}"
        if self.model.capture_mode == "relaxed":
            assert stream.capture_state.variant.name == "CAPTURE", stream.capture_state
            stream.abort_capture()
        self.model.abort_capture(sid)
        assert stream.capture_state.variant.name == "NO_CAPTURE" and not stream.driver_capturing, (
            f"stream 1 after its recording thread exited: {stream.capture_state}")
        STATS.count("recordings_ended_by_thread_exit")

    # Only with a window open: from NO_CAPTURE it is a no-op (on_the_other_stream ends with one
    # on stream 1), and a rule valid in every state cut most prepared windows short.
    @precondition(lambda self: self.model_state().is_active())
    @rule()
    @counted
    def abort_capture(self) -> None:
        """Aborts stream 0's capture on both, from PREPARE or CAPTURE: back to NO_CAPTURE, its
        window undone."""
        self.model.abort_capture(self.sid0)
        self.real0.abort_capture()

    @precondition(lambda self: any(b.count == SIZES[0] for b in self.buffers)
                  and any(b.count == SIZES[1] for b in self.buffers)
                  and not self.model_state().is_active())
    @rule(program=_programs(), owner=OWNERS, use_capture_call=st.booleans(), verify=st.booleans(),
          ending=st.sampled_from(["owner", "owner", "abandon", "abort"]))
    @counted
    def capture_step(self, program: _Program, owner: int, use_capture_call: bool, verify: bool,
                     ending: str = "owner") -> None:
        """prepare -> warmup (the step) -> begin -> the same step -> end. The recorded pass must
        not allocate, replaying from the pre-step contents must give the warmup's results, and the
        memory held by graphs is exactly the model's (the recorded pass's, not the warmup's). By
        hand (not ``capture()``) the recording may instead be closed by a caller that does not own
        it (``abandon``: discarded, CaptureRefusedError) or aborted, and then no memory stays held
        for it."""
        self._drain()
        count = SIZES[program.size_class]
        persistent = [b for b in self.buffers if b.count == count]
        before = {b.mid: self.model.contents(b.mid) for b in persistent}
        marks: dict[str, Any] = {}

        if use_capture_call:
            calls = 0

            def step(stream: Any) -> None:
                nonlocal calls
                calls += 1
                if calls == 1:
                    self.model.graph_prepare(self.sid0, 0)
                else:
                    self.model.begin_capture(self.sid0)
                    marks["begin"] = self.device.memory_stats()["driver_allocations"]
                    marks["warm"] = {b.mid: self.model.contents(b.mid) for b in persistent}
                self._run_program(program)

            real_graph = self.real0.capture(step, warmup=1)
            assert calls == 2, f"capture(warmup=1) called the step {calls} times"
            self.model.end_capture(self.sid0, 0)
            graph = _Graph(real_graph, max(self.model.graphs_by_id))
            self.graphs.append(graph)
            STATS.count("graphs_sealed")
        else:
            self.both(f"graph_prepare({owner})", lambda: self.model.graph_prepare(self.sid0, owner),
                      lambda: self.real0.graph_prepare(owner))
            self._run_program(program)
            self.both("begin_capture", lambda: self.model.begin_capture(self.sid0), self.real0.begin_capture)
            marks["begin"] = self.device.memory_stats()["driver_allocations"]
            marks["warm"] = {b.mid: self.model.contents(b.mid) for b in persistent}
            self._run_program(program)
            if ending == "abort":
                self.both("abort_capture", lambda: self.model.abort_capture(self.sid0), self.real0.abort_capture)
                graph = None
            elif ending == "abandon":
                graph, refused = self._end(owner + 1)
                assert graph is None and refused is not None and refused.kind == "CaptureRefused", (
                    f"a recording closed by a caller that does not own it was not discarded: {refused}")
                STATS.count("recordings_discarded")
            else:
                graph, _ = self._end(owner)
                assert graph is not None, "a prepared, warmed-up capture of launches was refused"
        after_end = self.device.memory_stats()["driver_allocations"]
        assert after_end == marks["begin"], (
            f"the recorded pass allocated {after_end - marks['begin']} slice(s) although its warmup ran the same step")

        warm = marks["warm"]
        if verify and graph is not None and all(v is not None for values in before.values() for v in values):
            for b in persistent:
                self._write(0, b, before[b.mid])  # type: ignore[arg-type]
            self.both("replay", lambda: self.model.replay(graph.gid, self.sid0), lambda: graph.real.replay())
            STATS.count("replays")
            for b in persistent:
                assert self.model.contents(b.mid) == warm[b.mid], "model: replay differs from the eager step"
                self._read(0, b)
        # A graph retains the memory its replays use, and only that: the warmup's temporaries go
        # back to the pool at begin_capture. Counted once the frees queued on the stream have run.
        self.both("sync (retained memory)", lambda: self.model.sync(self.sid0), self.real0.sync)
        retained = self.device.memory_stats()["slices_retained"]
        assert retained == len(self.model.retained_slots()), (
            f"{retained} slice(s) retained, the model holds slots {sorted(self.model.retained_slots())}")

    # ------------------------------------------------------------------ graphs

    @precondition(lambda self: bool(self.graphs) and not self.model_state().is_recording())
    @rule(i=PICK, elsewhere=st.booleans(), explicit=st.booleans())
    @counted
    def replay(self, i: int, elsewhere: bool, explicit: bool) -> None:
        """Replays a live graph outside a recording, on both: on stream 0 (the default stream or named),
        or on stream 1 after stream 0 is drained and synchronized. The outcomes must agree."""
        g = self.graphs[i % len(self.graphs)]
        if elsewhere:
            # Order the other stream after stream 0's eager work, and stream 0 after the replay.
            self._drain()
            self.both("sync", lambda: self.model.sync(self.sid0), self.real0.sync)
            stream, sid = self.streams[1]
            self.both("replay elsewhere", lambda: self.model.replay(g.gid, sid), lambda: g.real.replay(stream))
            stream.sync()
        else:
            self.both("replay", lambda: self.model.replay(g.gid, self.sid0),
                      lambda: g.real.replay(self.real0) if explicit else g.real.replay())
        STATS.count("replays")

    @precondition(lambda self: bool(self.graphs))
    @rule(i=PICK)
    @counted
    def destroy(self, i: int) -> None:
        """Destroys a live graph on both; the device's graph must then report itself not alive. It is
        kept for ``replay_destroyed``."""
        g = self.graphs.pop(i % len(self.graphs))
        g.real.destroy()
        self.model.destroy(g.gid)
        assert not g.real.alive
        self.destroyed.append(g)

    @precondition(lambda self: bool(self.graphs) and self.model_state().is_recording())
    @rule(i=PICK)
    @counted
    def replay_into_the_recording(self, i: int) -> None:
        """Replays a live graph onto stream 0 while it records: refused on both (CaptureStateError),
        nothing recorded, and the recording goes on to seal or fail as it would have."""
        g = self.graphs[i % len(self.graphs)]
        self.both("replay into the recording", lambda: self.model.replay(g.gid, self.sid0),
                  lambda: g.real.replay(self.real0))

    @precondition(lambda self: bool(self.destroyed) and not self.model_state().is_recording())
    @rule(i=PICK)
    @counted
    def replay_destroyed(self, i: int) -> None:
        """Replays a destroyed graph outside a recording: lifecore must refuse it as the model does
        (ClosedError)."""
        g = self.destroyed[i % len(self.destroyed)]
        self.both("replay destroyed", lambda: self.model.replay(g.gid, self.sid0), lambda: g.real.replay())

    # ------------------------------------------------------------------ fault injection (where offered)

    def _inject(self, operation: str, code: int) -> None:
        self.injected_codes.add(code)
        self.device.inject_fault(operation, code, after=0, times=1)

    def both(self, what: str, model_call: Callable[[], Any], core_call: Callable[[], Any]) -> Agreement:
        """As every machine's, and a driver failure lifecore reports carries a status this run
        injected: a recoverable one is not said to be another (a lost device's, say)."""
        result = super().both(what, model_call, core_call)
        error = result.error
        if isinstance(error, lifecore.DriverError):
            assert error.code in self.injected_codes, (
                f"{what}: lifecore reported driver status {error.code} ({error.status}); this run injected "
                f"{sorted(self.injected_codes)}")
        return result

    @precondition(lambda self: self.fault_injection)
    @rule(transition=st.sampled_from(TRANSITIONS), code=FAULT_CODES, data=st.data())
    @counted
    def fault_then_transition(self, transition: str, code: int, data: Any) -> None:
        """A driver operation fails once, then a transition runs: either the transition does not
        use it (no effect), or it fails and the stream is back in NO_CAPTURE, re-capturable."""
        used = list(TRANSITION_DRIVER_OPERATIONS[(transition, self.device.graphs)])
        names = lifecore.driver_operations()
        op = data.draw(st.sampled_from(used) | st.sampled_from(names) if used else st.sampled_from(names), label="operation")
        STATS.count("faults_injected")
        self._inject(op, code)
        try:
            owner = self.model_state().owner
            if transition == "graph_prepare":
                err = self.both(f"graph_prepare with {op} failing",
                                lambda: self.model.graph_prepare(self.sid0, 0, fault=op),
                                lambda: self.real0.graph_prepare(0)).model_error
            elif transition == "begin_capture":
                err = self.both(f"begin_capture with {op} failing",
                                lambda: self.model.begin_capture(self.sid0, fault=op), self.real0.begin_capture).model_error
            else:
                caller = 0 if owner is None else owner
                _, err = self._end(caller, fault=op)
        finally:
            self.device.clear_faults()
        if op in DEFERRED_FAULT_OPERATIONS and not self.model_state().is_active():
            # A fence that could not be put behind deferred work is reported at the next sync
            # (whether there was deferred work is the runtime's business): drain it here.
            self._drain()
            try:
                self.real0.sync()
            except lifecore.DriverError:
                pass
        if err is not None and err.kind != "CaptureState":
            # The failure must leave the stream re-capturable: prove it with a whole cycle.
            assert self.real0.capture_state.variant.name == "NO_CAPTURE"
            self._recapture()

    @precondition(lambda self: self.fault_injection)
    @rule(op=st.sampled_from(PROFILE_DRIVER_OPERATIONS + ("event_destroy",)), code=FAULT_CODES)
    @counted
    def fault_then_profile(self, op: str, code: int) -> None:
        """A driver operation of a profile fails once: the profile raises DriverError (or, for
        event_destroy, still measures), and the stream stays usable."""
        STATS.count("faults_injected")
        self._inject(op, code)
        try:
            self._profile(f"profile with {op} failing", fault=op)
        finally:
            self.device.clear_faults()

    def _drain(self) -> None:
        """Reports the stream's queued failures (a sync that must raise them), so that what
        follows starts clean."""
        if self.model.streams[self.sid0].queued:
            assert self.both("sync (drain)", lambda: self.model.sync(self.sid0), self.real0.sync).kind is not None

    def _recapture(self) -> None:
        self._drain()
        first = self._pick(0, SIZES[0])
        if first is None:
            return
        self.both("graph_prepare (re-capture)", lambda: self.model.graph_prepare(self.sid0, 0),
                  lambda: self.real0.graph_prepare(0))
        self._launch(0, "axpy_f32", 1.0, [first, first])
        self.both("begin_capture (re-capture)", lambda: self.model.begin_capture(self.sid0), self.real0.begin_capture)
        self._launch(0, "axpy_f32", 1.0, [first, first])
        assert self._end(0)[0] is not None, "a capture right after a failed transition was refused"

    @precondition(lambda self: self.fault_injection)
    @rule(operation=st.sampled_from(["write", "fill", "copy", "launch", "replay"]), code=FAULT_CODES,
          i=PICK, j=PICK, values=st.lists(VALUES, min_size=16, max_size=16))
    @counted
    def fault_then_operation(self, operation: str, code: int, i: int, j: int, values: list[float]) -> None:
        """The driver operation an asynchronous stream operation issues fails once: the operation
        has no effect and the failure waits on the stream (or fails the recording it was in)."""
        if operation == "replay":
            if not self.graphs or self.model_state().is_recording():
                return
            g = self.graphs[i % len(self.graphs)]
            op = "graph_launch" if g.real.is_hardware else ("launch_kernel", "memset_d32_async", "memcpy_dtod_async")[j % 3]
        else:
            op = STREAM_DRIVER_OPERATIONS[operation]
        buf = self._pick(i)
        if buf is None:
            return  # no live buffer of that size (all freed or discarded with their window)
        STATS.count("faults_injected")
        self._inject(op, code)
        try:
            if operation == "write":
                self._write(0, buf, values[: buf.count], fault=op)
            elif operation == "fill":
                self.both(f"fill({buf.mid}) with {op} failing",
                          lambda: self.model.fill(self.sid0, buf.mid, f32_bits(values[0]), fault=op),
                          lambda: self.real0.fill(buf.real, f32_bits(values[0])))
            elif operation == "copy":
                src = self._pick(j, buf.count)
                if src is None:
                    return  # no live buffer of that size (all freed or discarded with their window)
                self.both(f"copy({buf.mid} <- {src.mid}) with {op} failing",
                          lambda: self.model.copy(self.sid0, buf.mid, src.mid, fault=op),
                          lambda: self.real0.copy(buf.real, src.real))
            elif operation == "launch":
                other = self._pick(j, buf.count)
                if other is None:
                    return  # no live buffer of that size (all freed or discarded with their window)
                self._launch(0, "axpy_f32", values[1] or 1.0, [other, buf], fault=op)
            else:
                self.both(f"replay with {op} failing", lambda: self.model.replay(g.gid, self.sid0, fault=op),
                          lambda: g.real.replay())
        finally:
            self.device.clear_faults()

    # ------------------------------------------------------------------ invariants

    @invariant()
    def agrees_with_the_model(self) -> None:
        """Checks each stream's capture state against the model's (and that NO_CAPTURE accepts a
        prepare), that the pool balances, that every live buffer's slice is in use and every slot a
        live graph or an open window holds stays out of the free list (counted from the model),
        that graphs, windows, info entries and pins are the model's counts, and that nothing stays
        retained once no graph and no window is left."""
        start = time.perf_counter()
        try:
            self._check_invariants()
        finally:
            STATS.invariant_seconds += time.perf_counter() - start

    def _check_invariants(self) -> None:
        for stream, sid in self.streams:
            real = stream.capture_state
            expected = self.model.state(sid)
            assert real.variant.name == expected.variant.name, f"state {real!r}, model {expected!r}"
            assert real.owner == expected.owner, f"owner {real.owner}, model {expected.owner}"
            assert real.is_recording() == expected.is_recording() and real.is_active() == expected.is_active()
            assert real.cache_mode().name == expected.cache_mode().name
            if expected.variant is CaptureVariant.NO_CAPTURE:
                real.prepare(0)  # a copy: proves a prepare would be accepted, changes nothing
        stats = self.device.memory_stats()
        assert stats["slices"] == stats["slices_in_use"] + stats["slices_retained"] + stats["slices_free"], (
            f"pool accounting does not balance: {stats}")
        # Counted from the model, not from the stats' own sum: every live buffer holds a slice,
        # and every slot a live graph or an open window holds stays out of the free list. A
        # freed buffer's slice may stay in use while queued work runs, so these are bounds.
        live = sum(1 for b in self.model.buffers.values() if b.alive and not b.orphaned)
        held = len(self.model.retained_slots())
        assert stats["slices_in_use"] >= live, f"{live} live buffers, {stats['slices_in_use']} slices in use: {stats}"
        assert stats["slices_retained"] <= held, f"{held} slots held by graphs and windows: {stats}"
        assert stats["slices_in_use"] + stats["slices_retained"] >= live + held, (
            f"{live} live buffers and {held} held slots, fewer slices out of the free list: {stats}")
        counts = {"graphs_alive": self.model.graphs_alive(), "windows_active": self.model.windows_active(),
                  "info_pinned": len(self.model.pinned_info()), "info_entries": len(self.model.info_entries)}
        for key, value in counts.items():
            assert stats[key] == value, f"{key} is {stats[key]}, the model says {value} ({stats})"
        assert stats["driver_allocations"] >= self.driver_allocations, "driver_allocations went backwards"
        self.driver_allocations = stats["driver_allocations"]
        if stats["graphs_alive"] == 0 and stats["windows_active"] == 0:
            assert stats["slices_retained"] == 0, f"slices retained with no graph and no window: {stats}"


def run_stream_capture_machine(factory: DeviceFactory, settings: Optional[Settings] = None,
                               seed: Optional[int] = None, *, graphs: Optional[GraphsKind] = None,
                               capture_mode: Optional[str] = None) -> None:
    """Runs the machine against devices made by ``factory`` (raises on the first failure,
    after Hypothesis has shrunk it). ``seed`` makes the run reproducible: the same seed runs
    the same steps; ``graphs`` and ``capture_mode``: what each device must be (see
    :class:`StreamCaptureMachine`). The same as ``StreamCaptureMachine.run``."""
    StreamCaptureMachine.run(factory, settings=settings, seed=seed, graphs=graphs, capture_mode=capture_mode)


# Plain functions answer an argument they do not take with LifecoreTypeError (the
# machines' classes are Hypothesis's to call, so only the functions are guarded).
run_stream_capture_machine = _python_guard.guarded(run_stream_capture_machine, "run_stream_capture_machine")
