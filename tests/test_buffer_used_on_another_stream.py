"""A buffer used by work queued on a stream other than the one that allocated it keeps its
memory out of the pool until that work is done, whatever happens to the Buffer meanwhile.

The allocating stream's fence covers only its own work: before this rule a buffer dropped while
another stream's work on it was still queued went back to the pool as soon as its own stream was
idle, the next allocation got the same memory, and the queued work wrote into it (what torch
leaves its users to prevent with record_stream). Each scenario holds the mock's queued work with
_pause_streams_for so the other stream's work is certainly still queued when the buffer goes."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import lifecore
from lifecore import kernels as K

from backend_roles import EMULATED
from numpy_views import needs_writable_views

N = 64


def f32(stream, buf) -> np.ndarray:
    return np.frombuffer(stream.read(buf), dtype=np.float32)


def doubled_on(stream, buf, times: int = 200) -> None:
    for _ in range(times):
        stream.launch(K.scale_f32, 1, N, [N, 2.0, buf, buf])


USES = {
    "launch": doubled_on,
    "fill": lambda stream, buf: [stream.fill(buf, 0x40000000) for _ in range(50)],  # float32 2.0
    "copy": lambda stream, buf: [stream.copy(buf, stream.alloc(4 * N)) for _ in range(50)],
    "write": lambda stream, buf: [stream.write(buf, np.full(N, 2.0, np.float32).tobytes()) for _ in range(50)],
    "dlpack view": lambda stream, buf: [stream.fill(np.from_dlpack(buf), 0x40000000) for _ in range(50)],
}


@pytest.mark.parametrize("use", [pytest.param(use, marks=needs_writable_views) if use == "dlpack view" else use
                                 for use in USES])
def test_a_buffer_dropped_while_another_stream_uses_it_is_not_reused_under_that_work(use) -> None:
    with lifecore.Device(EMULATED) as dev:
        a, b = dev.stream(), dev.stream()
        buf = a.alloc(4 * N)
        a.write(buf, np.zeros(N, np.float32).tobytes())
        a.sync()
        old = buf.ptr
        dev._pause_streams_for(0.2)
        USES[use](b, buf)  # queued on b, held by the pause
        del buf
        gc.collect()
        a.sync()  # a's own work is done (after the pause): its fence passes
        assert dev.memory_stats()["slices_in_use"] >= 1  # b's queued work still pins the slice
        new = a.alloc(4 * N)
        assert new.ptr != old  # the pinned slice was not handed out
        a.write(new, np.ones(N, np.float32).tobytes())
        b.sync()
        np.testing.assert_array_equal(f32(a, new), np.ones(N, np.float32))
        del new
        gc.collect()
        a.sync()
        stats = dev.memory_stats()
        assert stats["slices_in_use"] == 0 and stats["slices_free"] == stats["slices"]  # all back


def test_the_allocating_streams_own_work_pins_nothing() -> None:
    # Work on a buffer's own stream is covered by its fence: it is returned exactly as before.
    with lifecore.Device(EMULATED) as dev:
        a = dev.stream()
        buf = a.alloc(4 * N)
        doubled_on(a, buf, 3)
        old = buf.ptr
        del buf
        gc.collect()
        a.sync()
        assert a.alloc(4 * N).ptr == old


def test_a_kv_arena_used_on_another_stream_outlives_its_coordinator_until_that_work_is_done() -> None:
    from lifecore.sequence import AdmissionCoordinator

    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        c = AdmissionCoordinator(dev, domains={"kv": 4 * 4096}, page_bytes=4096, tokens_per_page=16,
                                 max_active_sequences=2)
        arena = c.arena("kv")  # its own stream, not s
        dev._pause_streams_for(0.2)
        s.fill(arena, 7)
        del arena, c
        gc.collect()
        assert dev.memory_stats()["arenas"] == 1  # s's queued fill holds it
        s.sync()
        assert dev.memory_stats()["arenas"] == 0  # s's fence passed: back to the driver


def test_a_recording_on_another_stream_pins_nothing_the_graph_retains_it() -> None:
    with lifecore.Device(EMULATED, graphs="hardware") as dev:
        a, b = dev.stream(), dev.stream()
        buf = a.alloc(4 * N)
        a.write(buf, np.ones(N, np.float32).tobytes())
        a.sync()
        graph = b.capture(lambda st: doubled_on(st, buf, 1))
        del buf
        gc.collect()
        a.sync()
        b.sync()
        assert dev.memory_stats()["slices_retained"] == 1  # the graph's, no pin left behind
        graph.destroy()
        a.sync()
        b.sync()
        stats = dev.memory_stats()
        assert stats["slices_retained"] == 0 and stats["slices_in_use"] == 0
