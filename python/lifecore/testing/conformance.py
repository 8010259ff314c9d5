"""The backend conformance suite: what every registered backend must do, through the public API.

A backend passes when a device opens and closes, buffers round-trip through write, read, fill
and copy, a capture seals a graph whose replays give the eager results, an aborted or failed
capture leaves the stream re-capturable, memory accounting balances, a profile measures, and,
where the device offers fault injection, a failure at every driver operation reaches the caller
as a lifecore error carrying the native code while the device stays usable.

The suite is a pytest class to subclass, with no test of its own until bound to a backend::

    from lifecore.testing.conformance import BackendConformance

    class TestMyBackend(BackendConformance):
        backend = "mybackend"

Each test that uses a stream runs with hardware and with software graphs (``graph_kinds``). An
unavailable backend skips every test with the registry's reason (unless ``LIFECORE_REQUIRE``
names it: :mod:`lifecore.testing.required`). To run the suite over several backends,
override the ``backend`` fixture instead (lifecore's own tests parametrize it over
``lifecore.backends()``). Requires pytest and numpy.
"""

from __future__ import annotations

import gc
from typing import Any, ClassVar, Iterator, Optional

import numpy as np
import pytest

import lifecore
from lifecore import CaptureVariant
from lifecore._stub_types import GraphsMode
from lifecore import kernels as K
from lifecore.errors import LifecoreTypeError
from lifecore.testing.emulated import DLPACK_CPU
from lifecore.testing.fault_injection import offers_fault_injection
from lifecore.testing.required import requirement_note

__all__ = ["BackendConformance"]

N = 300  # float32 words: not a multiple of BLOCK, so the kernels' bounds checks matter
BLOCK = 128
GRID = (N + BLOCK - 1) // BLOCK
FAULT_STATUS = 999  # an unknown error: recoverable, not a lost device
# Pool figures that return to where they were once a cycle's buffers and graphs are gone.
BALANCED = ("slices_in_use", "graphs_alive", "info_pinned", "windows_active")
#: Driver operations whose failure lifecore does not report, by design, with why: a release
#: (the handle goes either way), a poll (a failure reads as not ready, and a later poll or a
#: sync decides), a prefetch (the first launch uploads instead) and a mode switch around a wait
#: (where the driver cannot switch, the mode stays as it was). A fault there must still leave the
#: device usable with its pool balanced.
UNREPORTED_OPERATIONS: dict[str, str] = {
    **{op: "a release" for op in ("stream_destroy", "event_destroy", "mem_free", "mem_free_async", "graph_destroy",
                                  "graph_exec_destroy", "module_unload", "unmap_host")},
    "event_query": "a poll",
    "graph_upload": "a prefetch",
    "thread_exchange_capture_mode": "a mode switch around a wait",
}


def _f32(stream: Any, buf: Any) -> np.ndarray:
    return np.frombuffer(stream.read(buf), np.float32)


def _upload(stream: Any, values: np.ndarray) -> Any:
    data = np.ascontiguousarray(values, np.float32)
    buf = stream.alloc(data.nbytes)
    stream.write(buf, data.tobytes())
    return buf


def _step(x: Any, y: Any) -> Any:
    """A capture body of launches only (what software graphs record): y = 2 * (2x + y)."""

    def body(stream: Any) -> None:
        tmp = stream.alloc(4 * N)
        stream.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, x, tmp])  # tmp = 2x
        stream.launch(K.axpy_f32, GRID, BLOCK, [N, 1.0, tmp, y])  # y += tmp
        stream.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, y, y])  # y *= 2
        tmp.free()

    return body


def _variant(stream: Any) -> CaptureVariant:
    """The stream's capture variant now (read afresh: a call may have moved it)."""
    variant: CaptureVariant = stream.capture_state.variant
    return variant


def _expected(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    expected: np.ndarray = ((2 * x + y) * 2).astype(np.float32)
    return expected


class BackendConformance:
    """Conformance tests for one backend; subclass and set ``backend`` (or override its fixture)."""

    #: The registered backend's name (``lifecore.backend_names()``), or None to supply it through
    #: an overridden ``backend`` fixture.
    backend: ClassVar[Optional[str]] = None
    #: The graph kinds every test runs with.
    graph_kinds: ClassVar[tuple[str, ...]] = ("hardware", "software")

    # ------------------------------------------------------------------ fixtures

    @pytest.fixture(name="backend")
    def _backend(self) -> str:
        if self.backend is None:
            raise TypeError(f"{type(self).__name__}: set the class attribute 'backend' to a registered "
                            "backend's name, or override the 'backend' fixture")
        return self.backend

    @pytest.fixture(name="graphs", params=["hardware", "software"])
    def _graphs(self, request: Any) -> GraphsMode:
        mode: GraphsMode = request.param
        unknown = [kind for kind in self.graph_kinds if kind not in ("hardware", "software")]
        if unknown or not self.graph_kinds:  # a typo would skip every test, and the suite pass vacuously
            raise LifecoreTypeError(f"{type(self).__name__}.graph_kinds must name 'hardware' and/or 'software', "
                                    f"got {self.graph_kinds!r}")
        if mode not in self.graph_kinds:
            pytest.skip(f"{type(self).__name__} does not run {mode} graphs")
        return mode

    @pytest.fixture(name="info")
    def _info(self, backend: str) -> Any:
        info = lifecore.backend_info(backend)
        if not info.available:
            reason = f"{backend}: {info.reason or 'unavailable'}"
            if (required := requirement_note(backend)) is not None:
                pytest.fail(f"{reason} ({required})")
            pytest.skip(reason)
        return info

    @pytest.fixture(name="device")
    def _device(self, backend: str, graphs: GraphsMode, info: Any) -> Iterator[Any]:
        with lifecore.Device(backend, graphs=graphs) as device:
            yield device

    # ------------------------------------------------------------------ device

    def test_device_reports_its_backend(self, device: Any, backend: str, graphs: GraphsMode, info: Any) -> None:
        assert device.backend == backend and device.graphs == graphs
        assert device.ordinal == 0 and not device.closed and not device.lost
        assert isinstance(device.name, str) and device.name
        assert info.device_count >= 1
        assert backend in lifecore.available_backends()

    def test_close_is_final_and_idempotent(self, backend: str, graphs: GraphsMode, info: Any) -> None:
        device = lifecore.Device(backend, graphs=graphs)
        stream = device.stream()
        buf = stream.alloc(64)
        device.close()
        device.close()
        assert device.closed
        with pytest.raises(lifecore.ClosedError):
            stream.fill(buf, 0)
        with pytest.raises(lifecore.ClosedError):
            device.stream()
        with lifecore.Device(backend, graphs=graphs) as again:  # the backend opens a new device
            assert not again.closed
        assert again.closed

    def test_an_ordinal_past_the_devices_is_refused(self, backend: str, info: Any) -> None:
        with pytest.raises(lifecore.LifecoreError):
            lifecore.Device(backend, ordinal=info.device_count)

    # ------------------------------------------------------------------ buffers

    @pytest.mark.parametrize("words", [1, 17, N, 4096])
    def test_write_read_round_trip(self, device: Any, words: int) -> None:
        stream = device.stream()
        values = np.arange(words, dtype=np.float32) * 0.5 - 3
        buf = _upload(stream, values)
        assert buf.nbytes == values.nbytes
        np.testing.assert_array_equal(_f32(stream, buf), values)

    def test_fill_sets_every_word(self, device: Any) -> None:
        stream = device.stream()
        buf = stream.alloc(4 * N)
        stream.fill(buf, 0xDEADBEEF)
        np.testing.assert_array_equal(np.frombuffer(stream.read(buf), np.uint32), np.full(N, 0xDEADBEEF, np.uint32))

    def test_copy_between_buffers(self, device: Any) -> None:
        stream = device.stream()
        values = np.linspace(-1, 1, N, dtype=np.float32)
        src, dst = _upload(stream, values), stream.alloc(4 * N)
        stream.fill(dst, 0)
        stream.copy(dst, src)
        np.testing.assert_array_equal(_f32(stream, dst), values)
        np.testing.assert_array_equal(_f32(stream, src), values)

    def test_builtin_kernels_compute(self, device: Any) -> None:
        stream = device.stream()
        x, y = np.arange(N, dtype=np.float32), np.full(N, 3.0, np.float32)
        bx, by, out = _upload(stream, x), _upload(stream, y), stream.alloc(4 * N)
        stream.launch(K.add_f32, GRID, BLOCK, [N, bx, by, out])
        np.testing.assert_array_equal(_f32(stream, out), x + y)
        stream.launch(K.axpy_info_f32, GRID, BLOCK, [bx, by], info=[N, K.float_bits(2.0)])
        np.testing.assert_array_equal(_f32(stream, by), 2 * x + y)

    def test_streams_of_one_device_share_its_memory(self, device: Any) -> None:
        first, second = device.stream(), device.stream()
        buf = _upload(first, np.full(N, 7.0, np.float32))
        first.sync()
        np.testing.assert_array_equal(_f32(second, buf), np.full(N, 7.0, np.float32))

    # ------------------------------------------------------------------ capture

    def test_a_replayed_capture_matches_the_eager_run(self, device: Any) -> None:
        stream = device.stream()
        x0, y0 = np.arange(N, dtype=np.float32) - 100, np.full(N, 0.25, np.float32)
        x, y = _upload(stream, x0), _upload(stream, y0)
        body = _step(x, y)
        body(stream)  # eager
        eager = _f32(stream, y).copy()
        np.testing.assert_array_equal(eager, _expected(x0, y0))
        stream.write(y, y0.tobytes())
        graph = stream.capture(body)  # the warmup runs eagerly, the recorded pass does not
        assert stream.capture_state.variant is CaptureVariant.NO_CAPTURE
        assert graph.alive and graph.is_hardware is (device.graphs == "hardware")
        np.testing.assert_array_equal(_f32(stream, y), eager)
        stream.write(y, y0.tobytes())
        graph.replay()
        np.testing.assert_array_equal(_f32(stream, y), eager)
        graph.replay()  # replays run against the current contents
        np.testing.assert_array_equal(_f32(stream, y), _expected(x0, eager))
        graph.destroy()
        assert not graph.alive

    def test_a_graph_replays_on_another_stream(self, device: Any) -> None:
        stream, other = device.stream(), device.stream()
        x0, y0 = np.ones(N, np.float32), np.zeros(N, np.float32)
        x, y = _upload(stream, x0), _upload(stream, y0)
        graph = stream.capture(_step(x, y))
        stream.write(y, y0.tobytes())
        stream.sync()
        graph.replay(other)
        np.testing.assert_array_equal(_f32(other, y), _expected(x0, y0))

    def test_the_manual_lifecycle_seals_the_same_graph(self, device: Any) -> None:
        stream = device.stream()
        x0, y0 = np.full(N, 2.0, np.float32), np.full(N, 1.0, np.float32)
        x, y = _upload(stream, x0), _upload(stream, y0)
        body = _step(x, y)
        stream.graph_prepare()
        assert _variant(stream) is CaptureVariant.PREPARE
        body(stream)
        stream.begin_capture()
        assert _variant(stream) is CaptureVariant.CAPTURE
        assert stream.driver_capturing is (device.graphs == "hardware")
        assert device.memory_stats()["windows_active"] == 1
        body(stream)
        graph = stream.end_capture()
        assert device.memory_stats()["windows_active"] == 0
        stream.write(y, y0.tobytes())
        graph.replay()
        np.testing.assert_array_equal(_f32(stream, y), _expected(x0, y0))

    def test_an_abort_leaves_the_stream_recapturable(self, device: Any) -> None:
        stream = device.stream()
        x0, y0 = np.ones(N, np.float32), np.zeros(N, np.float32)
        x, y = _upload(stream, x0), _upload(stream, y0)
        stream.graph_prepare()
        stream.begin_capture()
        stream.launch(K.scale_f32, GRID, BLOCK, [N, 5.0, x, y])
        stream.abort_capture()
        self.assert_recapturable(device, stream)
        np.testing.assert_array_equal(_f32(stream, y), y0)  # the aborted recording never ran

    def test_a_failing_capture_body_is_aborted(self, device: Any) -> None:
        stream = device.stream()

        def body(st: Any) -> None:
            st.launch(K.scale_f32, GRID, BLOCK, [N, 1.0, st.alloc(4 * N), st.alloc(4 * N)])
            if st.capture_state.variant is CaptureVariant.CAPTURE:
                raise KeyError("the caller's own failure")

        with pytest.raises(KeyError):
            stream.capture(body)
        self.assert_recapturable(device, stream)

    def test_out_of_order_transitions_are_refused_and_change_nothing(self, device: Any) -> None:
        stream = device.stream()
        before = device.memory_stats()
        for call in (stream.begin_capture, stream.end_capture):
            with pytest.raises(lifecore.CaptureStateError):
                call()
            assert stream.capture_state.variant is CaptureVariant.NO_CAPTURE
        assert device.memory_stats() == before
        self.assert_recapturable(device, stream)

    # ------------------------------------------------------------------ accounting and profile

    def test_memory_stats_balance(self, device: Any) -> None:
        stream = device.stream()
        baseline = device.memory_stats()
        x, y = _upload(stream, np.ones(N, np.float32)), _upload(stream, np.zeros(N, np.float32))
        stats = device.memory_stats()
        assert stats["slices_in_use"] >= baseline["slices_in_use"] + 2
        assert stats["slices"] == stats["slices_in_use"] + stats["slices_retained"] + stats["slices_free"]
        graph = stream.capture(_step(x, y))
        assert device.memory_stats()["graphs_alive"] == baseline["graphs_alive"] + 1
        graph.replay()
        stream.sync()
        graph.destroy()
        x.free()
        y.free()
        stream.sync()
        device.cleanup()
        stats = device.memory_stats()
        moved = {k: (baseline[k], stats[k]) for k in BALANCED if stats[k] != baseline[k]}
        assert not moved, moved
        assert stats["slices"] == stats["slices_in_use"] + stats["slices_retained"] + stats["slices_free"]

    def test_a_profile_measures_the_work_inside_it(self, device: Any) -> None:
        stream = device.stream()
        x, y = _upload(stream, np.ones(N, np.float32)), _upload(stream, np.zeros(N, np.float32))
        graph = stream.capture(_step(x, y))
        with stream.profile() as profile:
            graph.replay()
        assert profile.stopped
        assert profile.elapsed_ms >= 0.0

    # ------------------------------------------------------------------ faults

    @pytest.mark.parametrize("operation", lifecore.driver_operations())
    def test_a_fault_at_a_driver_operation_reaches_the_caller_and_the_device_recovers(
            self, device: Any, operation: str) -> None:
        if not offers_fault_injection(device):
            pytest.skip(f"the {device.backend} backend does not offer fault injection")
        stream = device.stream()
        baseline = device.memory_stats()
        calls = device.driver_calls(operation)
        device.inject_fault(operation, FAULT_STATUS)
        reported = False
        try:
            self.run_cycle(stream)
        except (lifecore.DriverError, lifecore.CaptureRefusedError) as error:
            # The native number as the driver gave it, and the call; a refused seal carries the
            # driver failure that caused it the same way.
            assert getattr(error, "code", None) == FAULT_STATUS, error
            assert getattr(error, "call", ""), error
            reported = True
        finally:
            device.clear_faults()
        if device.driver_calls(operation) == calls:  # the fault was never reached: nothing was checked
            pytest.skip(f"the cycle never calls {operation} on {device.backend} with {device.graphs} graphs")
        if not reported:
            assert operation in UNREPORTED_OPERATIONS, (
                f"a fault at {operation} was reached, and no error reached the caller")
        self.recover(stream)
        self.assert_recapturable(device, stream)
        stream.sync()
        device.cleanup()
        stats = device.memory_stats()
        moved = {k: (baseline[k], stats[k]) for k in BALANCED if stats[k] != baseline[k]}
        assert not moved, moved
        assert not device.lost

    # ------------------------------------------------------------------ helpers (usable by subclasses)

    @staticmethod
    def run_cycle(stream: Any) -> None:
        """A whole cycle: buffers, writes, fills, copies, a capture, a profiled replay, reads; a
        second stream made and let go; a bounded sync; a read into an array; where the device's
        memory is host memory, a copy out to a NumPy array and a zero-copy view; last, the pool's
        free memory handed back."""
        device = stream.device
        x0 = np.ones(N, np.float32)
        x, y, z = _upload(stream, x0), stream.alloc(4 * N), stream.alloc(4 * N)
        stream.fill(y, 0)
        stream.copy(z, x)
        graph = stream.capture(_step(x, y))
        stream.fill(y, 0)
        with stream.profile():
            graph.replay()
        got = _f32(stream, y)
        graph.destroy()
        other = device.stream()
        other.sync()
        del other
        into = np.empty(N, np.float32)
        stream.read_into(z, into)
        if x.__dlpack_device__()[0] == DLPACK_CPU:  # host memory: NumPy reaches it (mapped, or viewed)
            host = np.zeros(N, np.float32)
            stream.copy(host, z)
            view = np.from_dlpack(z)
            np.testing.assert_array_equal(view.view(np.float32), x0)
            del view
            assert stream.sync(timeout=60) is True
            np.testing.assert_array_equal(host, x0)
        assert stream.sync(timeout=60) is True
        for buf in (x, y, z):
            buf.free()
        gc.collect()  # the second stream goes now, on this thread
        device.cleanup()
        np.testing.assert_array_equal(got, _expected(x0, np.zeros(N, np.float32)))
        np.testing.assert_array_equal(into, x0)

    @staticmethod
    def recover(stream: Any) -> None:
        """What a caller does after a failure: abort from the capturing thread (an abort whose
        driver end fails leaves the stream in capture, hence twice), then surface any queued
        asynchronous failure once."""
        for _ in range(2):
            if stream.capture_state.variant is CaptureVariant.NO_CAPTURE:
                break
            try:
                stream.abort_capture()
            except lifecore.LifecoreError:
                pass
        try:
            stream.sync()
        except lifecore.LifecoreError:
            pass

    @staticmethod
    def assert_recapturable(device: Any, stream: Any) -> None:
        """Out of capture, no window open, and a new capture replays exactly."""
        assert stream.capture_state.variant is CaptureVariant.NO_CAPTURE
        assert not stream.driver_capturing
        stream.sync()
        assert device.memory_stats()["windows_active"] == 0
        x0, y0 = np.full(N, 3.0, np.float32), np.full(N, -1.0, np.float32)
        x, y = _upload(stream, x0), _upload(stream, y0)
        graph = stream.capture(_step(x, y))
        stream.write(y, y0.tobytes())
        graph.replay()
        np.testing.assert_array_equal(_f32(stream, y), _expected(x0, y0))
        graph.destroy()
        x.free()
        y.free()
