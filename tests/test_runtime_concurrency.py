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
