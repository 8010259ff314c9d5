"""An info-cache entry first made inside a hardware recording is a memory node of that recording:
no other stream may ever be handed it (it has no memory behind it for an eager launch)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import lifecore
from lifecore import CaptureRefusedError
from lifecore import kernels as K

from backend_roles import EMULATED

N = 300
BLOCK = 128
GRID = (N + BLOCK - 1) // BLOCK


def upload(stream, values):
    arr = np.asarray(values, dtype=np.float32)
    buf = stream.alloc(arr.nbytes)
    stream.write(buf, arr.tobytes())
    return buf


def f32(stream, buf):
    return np.frombuffer(stream.read(buf), dtype=np.float32)


def launch_with_words(stream, x, y, values):
    """One axpy launch per value, each with info words of its own: each a new cache entry."""
    for value in values:
        stream.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=[N, lifecore.float_bits(float(value))])


def on_another_thread(fn):
    """Runs fn on a thread of its own (a thread_local capture forbids this thread's eager
    allocations, not another thread's) and re-raises what it raised."""
    failures = []

    def run():
        try:
            fn()
        except BaseException as error:  # noqa: BLE001 - re-raised below
            failures.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    if failures:
        raise failures[0]


@pytest.mark.parametrize("close", ["abort", "end"])
@pytest.mark.parametrize("mode", ["relaxed", "thread_local"])
def test_another_stream_never_gets_a_recordings_info_node(mode, close):
    run = (lambda fn: fn()) if mode == "relaxed" else on_another_thread
    with lifecore.Device(EMULATED, graphs="hardware", capture_mode=mode) as device:
        recorder, eager = device.stream(), device.stream()
        x = upload(eager, np.arange(N))
        y = upload(eager, np.ones(N))
        scratch_x, scratch_y = upload(recorder, np.zeros(N)), upload(recorder, np.zeros(N))
        eager.sync()
        recorder.sync()
        words = [N, lifecore.float_bits(3.0)]  # never seen before: a miss inside the recording
        recorder.graph_prepare()
        recorder.begin_capture()
        recorder.launch(K.axpy_info_f32, GRID, BLOCK, [scratch_x, scratch_y], info=words)
        # The same words from another stream, eagerly, while the recording is open.
        result = []
        run(lambda: (eager.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=words), result.append(f32(eager, y))))
        np.testing.assert_array_equal(result[0], 3.0 * np.arange(N, dtype=np.float32) + 1.0)
        stats = device.memory_stats()
        assert stats["info_entries"] == 1 and stats["info_pinned"] == 1  # the same words count once
        if close == "abort":
            recorder.abort_capture()
        else:
            with pytest.raises(CaptureRefusedError, match="memory node"):
                recorder.end_capture()
        # The eager stream's own entry survives the window, and serves every stream.
        assert device.memory_stats()["info_entries"] == 1
        recorder.write(y, np.ones(N, np.float32).tobytes())
        recorder.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=words)
        np.testing.assert_array_equal(f32(recorder, y), 3.0 * np.arange(N, dtype=np.float32) + 1.0)


def test_another_window_gets_its_own_node_not_the_first_ones():
    with lifecore.Device(EMULATED, graphs="hardware", capture_mode="relaxed") as device:
        first, second = device.stream(), device.stream()
        a, b = upload(first, np.zeros(N)), upload(second, np.zeros(N))
        first.sync()
        second.sync()
        words = [N, lifecore.float_bits(5.0)]
        for s, buf in ((first, a), (second, b)):
            s.graph_prepare()
            s.begin_capture()
            s.launch(K.axpy_info_f32, GRID, BLOCK, [buf, buf], info=words)
        assert device.memory_stats()["info_entries"] == 1  # private to each window, counted once
        first.abort_capture()
        assert device.memory_stats()["info_entries"] == 1  # the second window's stays
        with pytest.raises(CaptureRefusedError, match="memory node"):
            second.end_capture()
        assert device.memory_stats()["info_entries"] == 0


def test_model_keeps_a_recordings_info_node_private_to_its_window():
    from lifecore.models.stream_capture import DeviceModel, Ref, f32_bits

    model = DeviceModel("hardware", "relaxed")
    recorder, eager = model.new_stream(), model.new_stream()
    x, y = model.alloc(eager, 16), model.alloc(eager, 16)
    model.write(eager, x, [1.0, 2.0, 3.0, 4.0])
    model.write(eager, y, [0.0] * 4)
    words = [4, f32_bits(3.0)]
    model.graph_prepare(recorder)
    model.begin_capture(recorder)
    model.launch(recorder, "axpy_info_f32", [Ref(x), Ref(y)], info=words)
    assert model.info_entries == {tuple(words)} and not model.shared_info  # private to the window
    model.launch(eager, "axpy_info_f32", [Ref(x), Ref(y)], info=words)  # its own, shared entry
    assert model.shared_info == {tuple(words)} and len(model.info_entries) == 1
    assert model.read(eager, y) == [3.0, 6.0, 9.0, 12.0]
    model.abort_capture(recorder)
    assert model.info_entries == {tuple(words)}  # the eager stream's entry outlives the window
    assert not model.info_miss_records_memory_node(recorder, words)


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_captures_alone_keep_the_info_cache_at_its_count(graphs):
    """A program that only captures, each graph with new info words and then destroyed, never
    runs an eager lookup: the entries its destroyed graphs unpinned are evicted as later
    windows open, so the cache (and the device memory behind it) stays at its count, and the
    last window's entry."""
    with lifecore.Device(EMULATED, graphs=graphs) as dev:
        s = dev.stream()
        x, y = upload(s, np.ones(N)), upload(s, np.zeros(N))
        count = 4096 + 200  # the cache's count, and enough more to pass it
        for i in range(count):
            words = [N, lifecore.float_bits(1.0 + i)]
            graph = s.capture(lambda st, w=words: st.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=w))
            graph.replay()
            graph.destroy()
        stats = dev.memory_stats()
        assert stats["info_pinned"] == 0 and stats["info_entries"] <= 4096 + 1, stats
        s.graph_prepare()  # the next window opens: the count again
        assert dev.memory_stats()["info_entries"] <= 4096
        s.abort_capture()
        s.sync()
        # Each capture's warmup and its one replay added a * x, with its own a = 1 + i: the
        # right words reached every launch.
        assert f32(s, y)[0] == pytest.approx(2 * sum(1.0 + i for i in range(count)), rel=1e-3)


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_a_window_finds_warm_every_entry_cached_before_it(graphs):
    """The specification's capture mode caches every buffer and invalidates none. Before, a
    window's warmup past the cache's count evicted entries cached before the window, and the
    recording that used one then uploaded it: a memory node, and end_capture refused."""
    with lifecore.Device(EMULATED, graphs=graphs) as dev:
        s = dev.stream()
        x, y = upload(s, np.ones(N)), upload(s, np.zeros(N))
        for i in range(4096):  # the cache full, in normal mode
            s.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=[N, lifecore.float_bits(float(i))])
        s.sync()
        assert dev.memory_stats()["info_entries"] == 4096
        s.graph_prepare()
        for i in range(5000, 5010):  # a warmup with new words: nothing evicted while the window is open
            s.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=[N, lifecore.float_bits(float(i))])
        assert dev.memory_stats()["info_entries"] == 4096 + 10
        s.begin_capture()
        s.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=[N, lifecore.float_bits(1.0)])  # cached before
        graph = s.end_capture()  # warm: no upload, no memory node
        graph.replay()
        s.sync()
        graph.destroy()
        s.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=[N, lifecore.float_bits(2.0)])  # no window open
        assert dev.memory_stats()["info_entries"] == 4096  # the count, enforced again


def test_a_capture_another_thread_holds_open_keeps_the_cache_at_its_count():
    # A driver capture only its thread may end stays open while that thread does other things.
    # Its window keeps warm what was cached before it, on top of the count, and no more:
    # eviction goes on for the rest (a first design that evicted nothing while a window was open
    # grew to 8,000 entries here). The thread ends it as it exits, and the count holds again.
    with lifecore.Device(EMULATED, graphs="hardware") as dev:
        s, e = dev.stream(), dev.stream()
        x, y = upload(e, np.ones(N)), upload(e, np.zeros(N))
        launch_with_words(e, x, y, range(10))
        z = s.alloc(64)
        began, leave = threading.Event(), threading.Event()

        def record() -> None:
            s.graph_prepare()
            s.begin_capture()
            s.fill(z, 7)
            began.set()
            leave.wait(30)

        worker = threading.Thread(target=record)
        worker.start()
        assert began.wait(30)
        launch_with_words(e, x, y, range(10, 6000))
        e.sync()
        stats = dev.memory_stats()
        assert stats["info_entries"] == 4096 + 10 and stats["info_pinned"] == 0, stats  # warm, not in use
        leave.set()
        worker.join(30)
        assert s.capture_state.variant is lifecore.CaptureVariant.NO_CAPTURE
        launch_with_words(e, x, y, range(6000, 6010))  # no window open: evicted to the count
        e.sync()
        assert dev.memory_stats()["info_entries"] == 4096


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_overlapping_windows_keep_the_cache_at_its_count(graphs):
    # Two streams capturing in turn, each preparing before the other ends: a window is always
    # open. Each opening evicts over the count, then keeps warm the most recently used up to the
    # count: at most that on top of the count (a first design grew by an entry a capture).
    with lifecore.Device(EMULATED, graphs=graphs) as dev:
        a, b = dev.stream(), dev.stream()
        buffers = {id(s): (upload(s, np.ones(N)), upload(s, np.zeros(N))) for s in (a, b)}
        words: dict[int, list[int]] = {}
        made = [0]

        def prepare(s):
            s.graph_prepare()
            words[id(s)] = [N, lifecore.float_bits(float(made[0]))]
            made[0] += 1
            s.launch(K.axpy_info_f32, GRID, BLOCK, list(buffers[id(s)]), info=words[id(s)])  # its warmup

        def finish(s):
            s.begin_capture()
            s.launch(K.axpy_info_f32, GRID, BLOCK, list(buffers[id(s)]), info=words[id(s)])
            graph = s.end_capture()
            graph.replay()
            graph.destroy()

        prepare(b)
        for _ in range(5000):  # past where a cache growing by an entry a capture would pass the bound
            prepare(a)
            finish(b)
            prepare(b)
            finish(a)
        assert dev.memory_stats()["info_entries"] <= 2 * 4096 + 2
        finish(b)
        a.sync()
        b.sync()


def test_eager_lookups_beside_a_window_over_a_full_cache_still_hit_it():
    # A window over a full cache keeps every entry warm; eager lookups on another stream had no
    # room left and evicted each entry as soon as they made it, uploading on every launch.
    with lifecore.Device(EMULATED, graphs="software") as dev:
        s, e = dev.stream(), dev.stream()
        x, y = upload(e, np.ones(N)), upload(e, np.zeros(N))
        launch_with_words(e, x, y, range(4096))
        s.graph_prepare()  # keeps all 4,096 warm
        uploads = dev.driver_calls("memcpy_htod_async")
        for _ in range(20):
            for i in range(10):
                e.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=[N, lifecore.float_bits(-1.0 - i)])
        assert dev.driver_calls("memcpy_htod_async") - uploads == 10  # each new word once
        s.abort_capture()
        e.sync()
