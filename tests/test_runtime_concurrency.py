"""Several Python threads on one device: each its own stream, launching, capturing and
replaying, while another polls the device. Results stay exact and the accounting consistent."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import lifecore
from lifecore import kernels as K

from backend_roles import EMULATED

N = 256


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_threads_capture_and_replay_on_their_own_streams(graphs) -> None:
    errors: list[BaseException] = []
    with lifecore.Device(EMULATED, graphs=graphs) as dev:
        stop = threading.Event()

        def worker(seed: int) -> None:
            try:
                s = dev.stream()
                x = s.alloc(4 * N)
                y = s.alloc(4 * N)
                s.write(x, np.full(N, float(seed), np.float32).tobytes())
                for round_ in range(5):
                    s.fill(y, 0)

                    def step(st):
                        tmp = st.alloc(4 * N)
                        st.launch(K.scale_f32, 2, 128, [N, 2.0, x, tmp])
                        st.launch(K.axpy_info_f32, 2, 128, [tmp, y], info=[N, lifecore.float_bits(1.0)])
                        tmp.free()

                    graph = s.capture(step, owner=seed)
                    graph.replay()
                    got = np.frombuffer(s.read(y), np.float32)
                    np.testing.assert_array_equal(got, np.full(N, 4.0 * seed, np.float32))
                    graph.destroy()
            except BaseException as error:  # reported by the main thread
                errors.append(error)

        def poller() -> None:
            while not stop.is_set():
                stats = dev.memory_stats()
                assert stats["slices"] == stats["slices_in_use"] + stats["slices_retained"] + stats["slices_free"]
                dev.cleanup()

        threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(1, 5)]
        watcher = threading.Thread(target=poller)
        watcher.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        stop.set()
        watcher.join(timeout=60)
        assert not errors, errors
        stats = dev.memory_stats()
        assert stats["graphs_alive"] == 0 and stats["windows_active"] == 0 and stats["info_pinned"] == 0


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_info_entry_is_ready_for_every_stream_once_published(graphs) -> None:
    """The info cache shares one buffer per metadata array across streams: a launch on another
    stream that hits a brand-new entry must read its words, even while the inserting stream
    still has a long queue ahead of the upload (it used to read zeros and do nothing)."""
    with lifecore.Device(EMULATED, graphs=graphs) as dev:
        busy, other = dev.stream(), dev.stream()
        big = busy.alloc(16 << 20)
        xa, ya = busy.alloc(4 * N), busy.alloc(4 * N)
        xb, yb = other.alloc(4 * N), other.alloc(4 * N)
        busy.write(xa, np.full(N, 1.0, np.float32).tobytes())
        busy.fill(ya, 0)
        other.write(xb, np.full(N, 3.0, np.float32).tobytes())
        other.fill(yb, 0)
        busy.sync()
        other.sync()
        for _ in range(8):  # the upload's copy queues behind this work
            busy.fill(big, 0)
        words = [N, lifecore.float_bits(0.5)]
        busy.launch(K.axpy_info_f32, 2, 128, [xa, ya], info=words)
        other.launch(K.axpy_info_f32, 2, 128, [xb, yb], info=words)
        np.testing.assert_array_equal(np.frombuffer(other.read(yb), np.float32), np.full(N, 1.5, np.float32))
        np.testing.assert_array_equal(np.frombuffer(busy.read(ya), np.float32), np.full(N, 0.5, np.float32))


def test_a_view_racing_close_completes_or_is_refused_as_closed() -> None:
    """docs/graph-capture-threads.md, calls racing close(): a view taken while another thread
    closes the device completes or raises ClosedError. It once raised the driver's error when
    close() gave the memory back between the view's check and its host mapping (about one
    round in 30); 200 rounds here."""
    import random
    import time

    rng = random.Random(7)
    seen: dict[str, int] = {"closed": 0}
    for _ in range(200):
        dev = lifecore.Device(EMULATED)
        s = dev.stream()
        buf = s.alloc(1 << 12)
        s.sync()
        errors: list[BaseException] = []

        def viewer() -> None:
            while True:
                try:
                    np.from_dlpack(buf)
                except lifecore.ClosedError:
                    seen["closed"] += 1
                    return
                except BaseException as error:  # noqa: BLE001 - what the test reports
                    errors.append(error)
                    return

        thread = threading.Thread(target=viewer)
        thread.start()
        time.sleep(rng.uniform(0, 0.001))
        dev.close()
        thread.join(10)
        assert not thread.is_alive() and errors == []
    assert seen["closed"] == 200


def test_a_global_mode_capture_never_invalidates_another_threads_recording() -> None:
    """In global mode, Stream.capture() synchronizes its stream before it begins; a recording
    another thread began after the check must be left alone (the sync runs in relaxed mode),
    never invalidated, and the caller refused with CaptureStateError or succeeding. Once a
    raw DriverError (900) a few times per second; two seconds here."""
    import time

    dev = lifecore.Device(EMULATED, graphs="hardware", capture_mode="global")
    n = 256
    stop = threading.Event()
    bad: list[str] = []
    counts = {"captured": 0, "recorded": 0}
    streams = [(st, st.alloc(4 * n), st.alloc(4 * n)) for st in (dev.stream(), dev.stream())]

    def capturing() -> None:
        s, x, y = streams[0]
        while not stop.is_set():
            try:
                graph = s.capture(lambda st: st.launch(K.axpy_f32, 4, 64, [n, 2.0, x, y]))
                graph.replay()
                s.sync(timeout=5)
                graph.destroy()
                counts["captured"] += 1
            except lifecore.CaptureStateError:
                pass
            except BaseException as error:  # noqa: BLE001 - what the test reports
                bad.append(f"capture: {type(error).__name__}: {error}")

    def recording() -> None:
        s, x, _ = streams[1]
        while not stop.is_set():
            try:
                s.graph_prepare()
                s.fill(x, 1)
                s.begin_capture()
                s.fill(x, 2)
                time.sleep(0.0005)
                s.end_capture().destroy()
                counts["recorded"] += 1
            except lifecore.CaptureStateError:
                if s.capture_state.variant != lifecore.CaptureVariant.NO_CAPTURE:
                    s.abort_capture()
            except BaseException as error:  # noqa: BLE001 - what the test reports
                bad.append(f"record: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=capturing), threading.Thread(target=recording)]
    for thread in threads:
        thread.start()
    time.sleep(2.0)
    stop.set()
    for thread in threads:
        thread.join(10)
    assert bad == [] and counts["recorded"] > 0
    assert dev.memory_stats()["windows_active"] == 0 and dev.abandoned_captures == 0
    dev.close()
