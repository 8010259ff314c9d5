"""Graph capture through Device / Stream / Graph, on both hardware and software graphs, on every
available backend."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import lifecore
from lifecore import (
    CaptureRefusedError,
    CaptureStateError,
    CaptureVariant,
    ClosedError,
    DriverError,
    InvalidArgumentError,
)
from lifecore import kernels as K

N = 300  # not a multiple of the block: the kernels' bounds check matters
BLOCK = 128
GRID = (N + BLOCK - 1) // BLOCK


# Every registered backend (the backend_name fixture: unavailable ones skip with the reason)
# x graph mode.
@pytest.fixture(params=["hardware", "software"])
def device(request, backend_name):
    with lifecore.Device(backend_name, graphs=request.param) as dev:
        yield dev


@pytest.fixture
def hardware_device(backend_name):
    with lifecore.Device(backend_name, graphs="hardware") as dev:
        yield dev


@pytest.fixture
def software_device(backend_name):
    with lifecore.Device(backend_name, graphs="software") as dev:
        yield dev


def f32(stream, buf) -> np.ndarray:
    return np.frombuffer(stream.read(buf), dtype=np.float32)


def upload(stream, values) -> lifecore.Buffer:
    arr = np.asarray(values, dtype=np.float32)
    buf = stream.alloc(arr.nbytes)
    stream.write(buf, arr.tobytes())
    return buf


def doubling(x):
    """A capture step that doubles ``x`` in place."""
    return lambda st: st.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, x, x])


def recording_a_doubling(device, **prepare):
    """A new stream whose open capture window has recorded one in-place doubling of a buffer of
    ones: returns the stream and the buffer. ``prepare`` goes to ``graph_prepare``."""
    s = device.stream()
    x = upload(s, np.ones(N))
    s.graph_prepare(**prepare)
    s.begin_capture()
    s.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, x, x])
    return s, x


def assert_a_fresh_capture_doubles_twice(s, x, **capture) -> None:
    """The stream captures again: the warmup and one replay each double ``x``, still all ones."""
    graph = s.capture(doubling(x), **capture)
    graph.replay()
    np.testing.assert_array_equal(f32(s, x), np.full(N, 4.0, np.float32))


def stats_consistent(dev) -> dict:
    stats = dev.memory_stats()
    assert stats["slices"] == stats["slices_in_use"] + stats["slices_retained"] + stats["slices_free"]
    return stats


def test_device_properties(device, backend_name) -> None:
    assert device.backend == backend_name
    assert device.graphs in ("hardware", "software")
    assert device.capture_mode == "thread_local"
    assert device.ordinal == 0 and device.name
    stream = device.stream()
    assert isinstance(stream.handle, int) and stream.handle != 0
    assert stream.device is device
    assert "graphs=" in repr(device) and "NO_CAPTURE" in repr(stream)


def test_prepare_warmup_capture_replay_twice_exact(device) -> None:
    s = device.stream()
    xs = np.arange(N, dtype=np.float32)
    x = upload(s, xs)
    y = upload(s, np.ones(N))

    def step(st):
        st.launch(K.axpy_f32, GRID, BLOCK, [N, 2.0, x, y])

    graph = s.capture(step, warmup=1)
    assert graph.is_hardware == (device.graphs == "hardware")
    assert graph.node_count >= 1 and graph.alive
    after_warmup = 1 + 2 * xs
    np.testing.assert_array_equal(f32(s, y), after_warmup)  # the recorded pass did not execute
    graph.replay()
    np.testing.assert_array_equal(f32(s, y), after_warmup + 2 * xs)
    graph.replay(s)
    np.testing.assert_array_equal(f32(s, y), after_warmup + 4 * xs)
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE
    stats = stats_consistent(device)
    assert stats["graphs_alive"] == 1 and stats["windows_active"] == 0


def test_manual_transitions_and_multi_op_graph(device) -> None:
    s = device.stream()
    xs = np.linspace(-1, 1, N).astype(np.float32)
    x = upload(s, xs)
    y = s.alloc(4 * N)
    out = s.alloc(4 * N)
    s.graph_prepare(owner=11)
    assert s.capture_state.variant is CaptureVariant.PREPARE and s.capture_state.owner == 11
    s.fill(y, 0)
    s.launch(K.scale_f32, GRID, BLOCK, [N, 3.0, x, y])
    s.launch(K.add_f32, GRID, BLOCK, (N, x, y, out))
    np.testing.assert_allclose(f32(s, out), 4 * xs, rtol=1e-6)  # reads are fine in PREPARE
    s.begin_capture()
    assert s.capture_state.is_recording()
    s.fill(out, 0)
    s.copy(y, x)
    s.launch(K.add_f32, GRID, BLOCK, (N, x, y, out))
    graph = s.end_capture(11)
    assert graph.node_count >= 3
    s.fill(out, 0x7FC00000)  # NaN sentinel overwritten by the replay
    s.sync()
    graph.replay()
    np.testing.assert_allclose(f32(s, out), 2 * xs, rtol=1e-6)
    np.testing.assert_allclose(f32(s, y), xs, rtol=1e-6)


def test_rewriting_an_input_changes_the_next_replay(device) -> None:
    s = device.stream()
    x = upload(s, np.ones(N))
    out = s.alloc(4 * N)
    graph = s.capture(lambda st: st.launch(K.scale_f32, GRID, BLOCK, [N, 5.0, x, out]))
    graph.replay()
    np.testing.assert_array_equal(f32(s, out), np.full(N, 5.0, np.float32))
    s.write(x, np.arange(N, dtype=np.float32).tobytes())
    graph.replay()
    np.testing.assert_array_equal(f32(s, out), 5.0 * np.arange(N, dtype=np.float32))


def test_more_launches_than_the_flush_threshold_in_one_capture(device) -> None:
    s = device.stream()
    x = upload(s, np.ones(N))
    y = upload(s, np.zeros(N))
    launches = 150  # > 64: fenced flushes inside the window must be deferred, not captured

    def step(st):
        for _ in range(launches):
            st.launch(K.axpy_f32, GRID, BLOCK, [N, 1.0, x, y])

    graph = s.capture(step, warmup=1)
    np.testing.assert_array_equal(f32(s, y), np.full(N, launches, np.float32))  # warmup only
    graph.replay()
    graph.replay()
    np.testing.assert_array_equal(f32(s, y), np.full(N, 3 * launches, np.float32))
    assert graph.node_count >= launches


def test_info_launch_through_the_cache_pins_and_releases(device) -> None:
    s = device.stream()
    x = upload(s, np.arange(N))
    y = upload(s, np.zeros(N))
    info = [N, K.float_bits(0.5)]
    s.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=info)
    np.testing.assert_array_equal(f32(s, y), 0.5 * np.arange(N, dtype=np.float32))
    assert device.memory_stats()["info_entries"] == 1
    graph = s.capture(lambda st: st.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=info))
    stats = device.memory_stats()
    assert stats["info_entries"] == 1 and stats["info_pinned"] == 1  # identical words share one buffer
    graph.replay()
    np.testing.assert_array_equal(f32(s, y), 1.5 * np.arange(N, dtype=np.float32))
    graph.destroy()
    assert device.memory_stats()["info_pinned"] == 0
    device.cleanup()
    assert device.memory_stats()["info_entries"] == 0


def test_large_info_is_transient_in_normal_mode_and_cached_in_capture(device) -> None:
    s = device.stream()
    x = upload(s, np.ones(N))
    y = upload(s, np.zeros(N))
    big = [N, K.float_bits(1.0)] + [0] * 600  # > 2048 bytes
    s.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=big)
    s.sync()
    assert device.memory_stats()["info_entries"] == 0
    graph = s.capture(lambda st: st.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=big))
    assert device.memory_stats()["info_pinned"] == 1
    graph.replay()
    np.testing.assert_array_equal(f32(s, y), np.full(N, 3.0, np.float32))


def test_a_launch_with_uncached_info_words_evicts_past_the_count_too(device) -> None:
    """Entries a window kept warm are past the count once it ends; only a launch whose words the
    cache served evicted them, not one whose words are too large to cache (the README says any
    launch with info words does)."""
    s = device.stream()
    x = upload(s, np.ones(N))
    y = upload(s, np.zeros(N))
    for i in range(4096):
        s.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=[N, i])
    s.graph_prepare()
    for i in range(4096, 4106):  # kept: the window pins what was cached as it opened
        s.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=[N, i])
    s.abort_capture()
    s.sync()
    assert device.memory_stats()["info_entries"] == 4106
    big = [N, K.float_bits(0.0)] + [0] * 600  # > 2048 bytes: uploaded for this launch alone
    s.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=big)
    s.sync()
    assert device.memory_stats()["info_entries"] == 4096


def test_stream_transitions_raise_the_state_messages(device) -> None:
    s = device.stream()
    with pytest.raises(CaptureStateError, match="^begin_capture: call graph_prepare before starting a capture$"):
        s.begin_capture()
    with pytest.raises(CaptureStateError, match="^end_capture: no graph capture is recording on this stream$"):
        s.end_capture()
    s.graph_prepare()
    with pytest.raises(CaptureStateError, match="already prepared"):
        s.graph_prepare()
    with pytest.raises(CaptureStateError, match="^end_capture: no graph capture is recording on this stream$"):
        s.end_capture()
    s.begin_capture()
    with pytest.raises(CaptureStateError, match="^graph_prepare: a graph capture is already recording on this stream$"):
        s.graph_prepare()
    with pytest.raises(CaptureStateError, match="^begin_capture: a graph capture is already recording on this stream$"):
        s.begin_capture()
    assert s.capture_state.is_recording()
    graph = s.end_capture()
    assert graph.node_count == 0
    assert device.memory_stats()["windows_active"] == 0


def test_a_refused_begin_flushes_no_drop_queued_in_the_window(device) -> None:
    """A drop queued inside a window is not flushed on the way to a refused begin_capture (a
    flush there would abort the live capture): the window still seals and replays."""
    s = device.stream()
    x = upload(s, np.ones(N))
    spare = s.alloc(4 * N)  # made before the window: dropped inside it, its release is queued
    s.graph_prepare()
    s.begin_capture()
    s.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, x, x])
    del spare
    gc.collect()
    with pytest.raises(CaptureStateError, match="already recording"):
        s.begin_capture()
    assert s.capture_state.is_recording()
    graph = s.end_capture()
    assert graph.node_count == 1
    graph.replay()
    np.testing.assert_array_equal(f32(s, x), np.full(N, 2.0, np.float32))  # recorded, then replayed once
    graph.destroy()


def test_capture_state_is_a_copy(device) -> None:
    s = device.stream()
    state = s.capture_state
    state.prepare(1)
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE


def test_abandoned_end_is_refused_and_the_stream_is_free(device) -> None:
    s, x = recording_a_doubling(device, owner=1)
    with pytest.raises(CaptureRefusedError) as raised:
        s.end_capture(caller=2)
    assert str(raised.value) == (
        "end_capture: the capture belongs to owner 1, not to 2; it is discarded rather than left recording on a "
        "stream both share"
    )
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE
    stats = stats_consistent(device)
    assert stats["windows_active"] == 0 and stats["graphs_alive"] == 0 and stats["info_pinned"] == 0
    assert_a_fresh_capture_doubles_twice(s, x, owner=2)


def test_abort_capture_from_anywhere(device) -> None:
    s = device.stream()
    x = upload(s, np.ones(N))
    s.abort_capture()  # idle: nothing to do
    s.graph_prepare()
    s.launch(K.axpy_info_f32, GRID, BLOCK, [x, x], info=[N, K.float_bits(1.0)])
    assert device.memory_stats()["info_pinned"] == 1
    s.abort_capture()
    assert device.memory_stats()["info_pinned"] == 0 and device.memory_stats()["windows_active"] == 0
    s.graph_prepare()
    s.begin_capture()
    s.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, x, x])
    s.abort_capture()
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE
    np.testing.assert_array_equal(f32(s, x), np.full(N, 2.0, np.float32))  # recorded work never ran
    assert s.capture(lambda st: None).node_count == 0


def test_failing_warmup_in_capture_leaves_the_stream_recapturable(device) -> None:
    s = device.stream()
    x = upload(s, np.ones(N))

    def bad(st):
        raise RuntimeError("warmup failed")

    with pytest.raises(RuntimeError, match="warmup failed"):
        s.capture(bad)
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE
    assert device.memory_stats()["windows_active"] == 0
    graph = s.capture(doubling(x))
    graph.replay()
    np.testing.assert_array_equal(f32(s, x), np.full(N, 4.0, np.float32))  # warmup doubles, the replay doubles


def test_capture_rejects_bad_warmup(device) -> None:
    s = device.stream()
    with pytest.raises(InvalidArgumentError):
        s.capture(lambda st: None, warmup=-1)
    with pytest.raises(TypeError):
        s.capture(42)
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE


def test_priming_grows_the_pool_to_the_working_set(device) -> None:
    s = device.stream()
    x = upload(s, np.ones(N))
    out = s.alloc(4 * N)

    def step(st):
        # Three sequential temporaries: the transient peak is one, the working set three.
        for scale in (2.0, 3.0, 4.0):
            tmp = st.alloc(4 * N)
            st.launch(K.scale_f32, GRID, BLOCK, [N, scale, x, tmp])
            st.launch(K.add_f32, GRID, BLOCK, [N, tmp, out, out])
            tmp.free()

    s.fill(out, 0)
    allocations_before = device.memory_stats()["driver_allocations"]
    graph = s.capture(step, warmup=1)
    s.sync()  # freed slices return to the pool after the stream's fence
    stats = stats_consistent(device)
    assert stats["driver_allocations"] - allocations_before == 3  # warmup only: the recording allocated none
    assert stats["slices_retained"] == 3  # the graph holds its temporaries' slices
    np.testing.assert_array_equal(f32(s, out), np.full(N, 9.0, np.float32))
    graph.replay()
    np.testing.assert_array_equal(f32(s, out), np.full(N, 18.0, np.float32))
    # Sentinels allocated now must not get the graph's slices.
    sentinels = [s.alloc(4 * N) for _ in range(3)]
    for sentinel in sentinels:
        s.fill(sentinel, 0x12345678)
    graph.replay()
    np.testing.assert_array_equal(f32(s, out), np.full(N, 27.0, np.float32))
    for sentinel in sentinels:
        assert set(np.frombuffer(s.read(sentinel), dtype=np.uint32)) == {0x12345678}
    graph.destroy()
    s.sync()
    assert stats_consistent(device)["slices_retained"] == 0


def test_one_warmup_primes_a_step_that_drops_its_output_before_allocating_the_next(device) -> None:
    """The warmup's output, dropped inside the recording before the next is allocated, serves
    that allocation: nothing records reads it, so no fence is needed (a memory node otherwise)."""
    s = device.stream()
    x = upload(s, np.arange(N))
    held: dict[str, lifecore.Buffer] = {}

    def step(st):
        held.pop("out", None)  # the previous output goes first
        held["out"] = out = st.alloc(4 * N)
        st.launch(K.scale_f32, GRID, BLOCK, [N, 3.0, x, out])

    graph = s.capture(step)  # one warmup
    allocations = device.memory_stats()["driver_allocations"]
    out = held["out"]
    s.fill(out, 0)
    graph.replay()
    np.testing.assert_array_equal(f32(s, out), np.arange(N, dtype=np.float32) * 3)
    # The graph writes the step's output: a later allocation never gets its slice.
    other = s.alloc(4 * N)
    s.fill(other, 0x12345678)
    graph.replay()
    assert set(np.frombuffer(s.read(other), dtype=np.uint32)) == {0x12345678}
    assert device.memory_stats()["driver_allocations"] == allocations + 1  # only `other`'s
    # A previous output the recording reads stays the graph's alone, even dropped before the
    # next allocation: were its slice the new output's, each replay would read the last one's.
    def reads_then_replaces(st):
        prev = held.pop("out")
        tmp = st.alloc(4 * N)
        st.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, prev, tmp])
        del prev
        held["out"] = out = st.alloc(4 * N)
        st.launch(K.scale_f32, GRID, BLOCK, [N, 1.0, tmp, out])

    graph.destroy()
    del out, other
    held["out"] = upload(s, np.arange(N))
    graph = s.capture(reads_then_replaces, warmup=2)  # the warmups write 2x, then 4x
    for _ in range(2):  # every replay reads the input it recorded: the second warmup's output
        graph.replay()
        np.testing.assert_array_equal(f32(s, held["out"]), np.arange(N, dtype=np.float32) * 8)
    stats_consistent(device)

def test_freed_buffer_used_by_a_graph_stays_retained(device) -> None:
    s = device.stream()
    x = upload(s, np.ones(N))
    tmp = s.alloc(4 * N)
    out = s.alloc(4 * N)

    def step(st):
        st.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, x, tmp])
        st.launch(K.scale_f32, GRID, BLOCK, [N, 3.0, tmp, out])

    graph = s.capture(step)
    tmp.free()
    s.sync()
    assert not tmp.alive
    stats = stats_consistent(device)
    assert stats["slices_retained"] == 1
    other = s.alloc(4 * N)  # same size: must not reuse the graph's slice
    s.fill(other, 0)
    graph.replay()
    np.testing.assert_array_equal(f32(s, out), np.full(N, 6.0, np.float32))
    assert set(np.frombuffer(s.read(other), dtype=np.uint32)) == {0}
    del graph
    gc.collect()
    s.sync()
    stats = stats_consistent(device)
    assert stats["graphs_alive"] == 0 and stats["slices_retained"] == 0


def replayed_elsewhere_then_freed(dev):
    """A graph that fills a buffer, replayed once on another stream, its buffer freed: returns
    the graph, that stream, and the address the graph keeps."""
    s, other = dev.stream(), dev.stream()
    x = s.alloc(4 * N)
    s.fill(x, 0)
    graph = s.capture(lambda st: st.fill(x, 7))
    used = x.ptr
    x.free()
    s.sync()
    graph.replay(other)
    return s, graph, other, used


def test_a_graph_whose_wait_failed_keeps_its_memory_until_the_replay_has_run(mock_hardware_device) -> None:
    # destroy waits for the streams that replayed the graph before its retained memory can be
    # reused. When the driver refuses that wait, the replay may still be queued: its memory used
    # to go back to the pool at once, and the next buffer of that size got it while the replay
    # could still write it. It now goes at that stream's next fence.
    dev = mock_hardware_device
    s, graph, other, used = replayed_elsewhere_then_freed(dev)
    dev.inject_fault("stream_synchronize", 999)
    graph.destroy()
    dev.clear_faults()
    assert dev.memory_stats()["slices_retained"] == 1
    y = s.alloc(4 * N)  # the same size: it must not get the memory the replay may still write
    assert y.ptr != used
    other.sync()  # the replay has run: its memory goes back to the pool
    stats = stats_consistent(dev)
    assert stats["graphs_alive"] == 0 and stats["slices_retained"] == 0
    assert s.alloc(4 * N).ptr == used


def test_a_graph_destroyed_inside_a_capture_of_this_thread_still_waits_for_its_replays(mock_hardware_device) -> None:
    # In thread_local mode a capture of this thread forbids the wait. The stream waited for does
    # not capture, so the wait runs in relaxed mode, chosen up front (it used to be retried so
    # after the driver had refused it and invalidated the capture): the replay has run when
    # destroy returns, its memory can go back to the pool at once, and the capture still seals.
    dev = mock_hardware_device
    s, graph, other, used = replayed_elsewhere_then_freed(dev)
    recording = dev.stream()
    recording.graph_prepare()
    recording.begin_capture()
    graph.destroy()
    recording.end_capture().destroy()
    stats = stats_consistent(dev)
    assert stats["graphs_alive"] == 0 and stats["slices_retained"] == 0
    y = s.alloc(4 * N)
    assert y.ptr == used
    assert set(np.frombuffer(s.read(y), dtype=np.uint32)) == {7}  # the replay wrote it before


def test_graph_destroy_and_replay_after_destroy(device) -> None:
    s = device.stream()
    x = upload(s, np.ones(N))
    with s.capture(lambda st: st.launch(K.scale_f32, GRID, BLOCK, [N, 1.0, x, x])) as graph:
        graph.replay()
        assert device.memory_stats()["graphs_alive"] == 1
    assert not graph.alive and "destroyed" in repr(graph)
    assert device.memory_stats()["graphs_alive"] == 0
    with pytest.raises(ClosedError, match="^replay: the graph was destroyed$"):
        graph.replay()
    graph.destroy()  # idempotent


def test_replay_on_another_stream_and_device(device) -> None:
    s = device.stream()
    x = upload(s, np.ones(N))
    graph = s.capture(doubling(x))
    other = device.stream()
    s.sync()
    graph.replay(other)
    other.sync()
    np.testing.assert_array_equal(f32(s, x), np.full(N, 4.0, np.float32))
    with lifecore.Device(device.backend, graphs=device.graphs) as second:
        with pytest.raises(InvalidArgumentError, match="another device"):
            graph.replay(second.stream())


def test_cleanup_is_skipped_while_a_window_is_active(device) -> None:
    s = device.stream()
    for _ in range(3):
        s.alloc(1 << 12).free()
    s.sync()
    before = device.memory_stats()
    assert before["slices_free"] >= 1
    s.graph_prepare()
    device.cleanup()
    assert device.memory_stats()["pool_bytes"] == before["pool_bytes"]
    s.abort_capture()
    device.cleanup()
    after = stats_consistent(device)
    assert after["slices_free"] == 0 and after["pool_bytes"] < before["pool_bytes"]


def test_close_with_an_open_window_then_everything_is_closed(device) -> None:
    s = device.stream()
    x = upload(s, np.ones(N))
    graph = s.capture(doubling(x))
    s.graph_prepare()
    device.close()
    device.close()  # idempotent
    assert device.closed and not x.alive and not graph.alive
    with pytest.raises(ClosedError):
        s.alloc(16)
    with pytest.raises(ClosedError):
        s.sync()
    with pytest.raises(ClosedError):
        device.stream()
    with pytest.raises(ClosedError):
        graph.replay()
    with pytest.raises(ClosedError):
        x.ptr
    del x  # the last reference of a buffer of a closed device is harmless


# ---- hardware-graph semantics -----------------------------------------------------------


def test_growing_the_pool_inside_the_window_is_refused_for_memory_nodes(hardware_device) -> None:
    dev = hardware_device
    s = dev.stream()
    x = upload(s, np.ones(N))
    s.graph_prepare()
    s.begin_capture()
    fresh = s.alloc(1 << 16)  # the pool cannot serve it: a memory node
    s.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, x, x])
    with pytest.raises(CaptureRefusedError, match=r"memory node") as raised:
        s.end_capture()
    assert raised.value.cause == "memory_nodes"
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE
    stats = stats_consistent(dev)
    assert stats["windows_active"] == 0 and stats["graphs_alive"] == 0
    del fresh
    assert_a_fresh_capture_doubles_twice(s, x)


def test_a_memory_node_is_refused_on_another_stream_and_the_device_stays_usable(hardware_device) -> None:
    """A buffer allocated inside a driver capture is a node of the graph being recorded: it has
    memory only while that graph runs. Before: another stream's copy into it was issued at an
    address with no memory behind it, which lost the device (ILLEGAL_ADDRESS) at its next sync.
    Now every use on another stream is refused before anything is issued."""
    import threading

    dev = hardware_device
    s, other = dev.stream(), dev.stream()
    src = other.alloc(1 << 16)
    x = upload(other, np.ones(N))
    other.sync()
    before = stats_consistent(dev)
    s.graph_prepare()
    s.begin_capture()
    node = s.alloc(1 << 16)  # the pool cannot serve it: a memory node
    refused = r"was allocated inside another stream's capture window, so its memory is a node of the graph"
    with pytest.raises(CaptureStateError, match=rf"^copy: argument 'dst' {refused}"):
        other.copy(node, src)
    with pytest.raises(CaptureStateError, match=rf"^copy: argument 'src' {refused}"):
        other.copy(src, node)
    with pytest.raises(CaptureStateError, match=rf"^fill: argument 'buf' {refused}"):
        other.fill(node, 0)
    with pytest.raises(CaptureStateError, match=rf"^launch: argument 'out' {refused}"):
        other.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, x, node])
    with pytest.raises(CaptureStateError, match=rf"^write: the buffer {refused}"):
        other.write(node, b"\0" * 64)
    answers: dict[str, BaseException | None] = {}

    def wait_elsewhere() -> None:  # a host wait on another thread, which the recording allows
        for name, call in (("read", lambda: other.read(node)),
                           ("read_into", lambda: other.read_into(node, np.empty(1 << 14, np.float32)))):
            try:
                call()
                answers[name] = None
            except BaseException as error:  # noqa: BLE001 - reported below
                answers[name] = error

    thread = threading.Thread(target=wait_elsewhere)
    thread.start()
    thread.join()
    for name in ("read", "read_into"):
        assert isinstance(answers[name], CaptureStateError), answers[name]
        assert str(answers[name]).startswith(f"{name}: the buffer was allocated inside another stream's")
    s.fill(node, 0)  # its own stream, recording, may use it
    with pytest.raises(CaptureRefusedError, match="memory node"):
        s.end_capture()
    other.sync()
    s.sync()
    assert not dev.lost
    # Discarded with the window: not counted as in use while the Python object lives on.
    assert not node.alive
    after = stats_consistent(dev)
    assert after["slices_in_use"] == before["slices_in_use"]
    with pytest.raises(lifecore.ClosedError, match=r"^fill: the buffer was allocated inside a capture window that "
                                                   r"was discarded"):
        other.fill(node, 0)
    node.free()  # taken once, as for any buffer: nothing is given back twice
    with pytest.raises(lifecore.ClosedError, match=r"^free: the buffer was already freed"):
        node.free()
    del node
    gc.collect()
    assert stats_consistent(dev)["slices_in_use"] == before["slices_in_use"]
    assert_a_fresh_capture_doubles_twice(s, x)


@pytest.mark.parametrize("wait", ["read", "read_into", "sync", "timed sync"])
def test_a_host_wait_on_the_recording_stream_is_refused_and_the_recording_seals(hardware_device, wait) -> None:
    """The driver refuses a host wait on a stream it captures and invalidates the capture (CUDA
    900, then 901 at the end); lifecore refuses it before the driver sees it, so the recording
    goes on and seals."""
    s, x = recording_a_doubling(hardware_device)
    attempts = {"read": lambda: s.read(x), "read_into": lambda: s.read_into(x, np.empty(N, np.float32)),
                "sync": s.sync, "timed sync": lambda: s.sync(1.0)}
    op = wait.split()[-1]
    with pytest.raises(CaptureStateError, match=f"^{op}: this stream is recording a graph capture"):
        attempts[wait]()
    assert s.capture_state.is_recording()
    graph = s.end_capture()
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE
    np.testing.assert_array_equal(f32(s, x), np.ones(N, np.float32))  # recorded, not run
    graph.replay()
    np.testing.assert_array_equal(f32(s, x), np.full(N, 2.0, np.float32))
    graph.destroy()


def test_a_capture_without_warmup_finds_the_builtin_kernels_loaded(hardware_device) -> None:
    # The driver refuses a module load while a stream captures: the first launch of a built-in
    # kernel on a fresh device, inside a capture, must not be the one that loads it.
    s = hardware_device.stream()
    x = upload(s, np.ones(N))
    s.graph_prepare()
    s.begin_capture()
    s.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, x, x])
    graph = s.end_capture()
    graph.replay()
    np.testing.assert_array_equal(f32(s, x), np.full(N, 2.0, np.float32))


def test_a_module_loaded_inside_a_hardware_capture_is_refused_clearly(mock_hardware_device) -> None:
    # The driver refuses a load while this thread records, and invalidates the capture: lifecore
    # refuses it first, naming the recording, and the capture still seals.
    from test_runtime_modules import FILL_PTX

    s, x = recording_a_doubling(mock_hardware_device)
    with pytest.raises(CaptureStateError, match=r"^Module\.from_ptx: stream .* is recording a graph capture on this "
                                                r"thread .* this call loads a module") as raised:
        lifecore.Module.from_ptx(mock_hardware_device, FILL_PTX)
    assert raised.value.recording_stream == s.handle
    graph = s.end_capture()
    graph.replay()
    np.testing.assert_array_equal(f32(s, x), np.full(N, 2.0, np.float32))
    graph.destroy()


def test_write_in_a_hardware_graph_keeps_its_staging(mock_hardware_device) -> None:
    # Emulated device only: a real driver may refuse to capture a copy from pageable host memory.
    s = mock_hardware_device.stream()
    x = s.alloc(4 * N)
    out = s.alloc(4 * N)
    payload = np.full(N, 7.0, np.float32).tobytes()

    def step(st):
        st.write(x, payload)
        st.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, x, out])

    graph = s.capture(step)
    s.fill(x, 0)
    s.fill(out, 0)
    s.sync()
    gc.collect()
    graph.replay()
    np.testing.assert_array_equal(f32(s, x), np.full(N, 7.0, np.float32))  # re-read the staging copy
    np.testing.assert_array_equal(f32(s, out), np.full(N, 14.0, np.float32))


# ---- software-graph semantics -----------------------------------------------------------


@pytest.mark.parametrize("op", ["read", "sync"])
def test_software_read_and_sync_are_refused_on_the_spot(software_device, op) -> None:
    s, x = recording_a_doubling(software_device)
    with pytest.raises(CaptureStateError) as raised:
        s.read(x) if op == "read" else s.sync()
    assert str(raised.value) == (
        f"{op}: a software capture window records launches, fills and copies only, so this operation cannot be part of a graph"
    )
    assert s.capture_state.is_recording()
    graph = s.end_capture()  # refused on the spot, so the recording is still whole
    graph.replay()
    np.testing.assert_array_equal(f32(s, x), np.full(N, 2.0, np.float32))


def test_software_write_is_refused_lazily_at_end_capture(software_device) -> None:
    s = software_device.stream()
    x = upload(s, np.ones(N))
    s.graph_prepare()
    s.begin_capture()
    s.write(x, np.zeros(N, np.float32).tobytes())  # accepted now ...
    s.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, x, x])
    with pytest.raises(CaptureRefusedError, match="write: a software capture window records launches, fills and copies only"):
        s.end_capture()  # ... refused here, nothing sealed
    stats = stats_consistent(software_device)
    assert stats["graphs_alive"] == 0 and stats["windows_active"] == 0
    s.sync()  # the refusal does not linger in the stream's error queue
    np.testing.assert_array_equal(f32(s, x), np.ones(N, np.float32))
    assert s.capture(doubling(x)).node_count == 1


def test_a_window_allocation_follows_the_memory_node_rules_on_both_kinds_of_graphs(device) -> None:
    """Software graphs let another stream use a buffer the window allocated (the pool could not
    serve it), and kept it alive and usable after the window was refused, where a driver's
    graphs refuse the use and free the buffer: code that passed on software graphs failed on a
    GPU. Both follow the memory-node rules now."""
    s, other = device.stream(), device.stream()
    before = stats_consistent(device)
    s.graph_prepare()
    s.begin_capture()
    node = s.alloc(1 << 16)  # the pool cannot serve it
    with pytest.raises(CaptureStateError, match=r"^fill: argument 'buf' was allocated inside another stream's"):
        other.fill(node, 0)
    with pytest.raises(CaptureStateError, match=r"^copy: argument 'dst' was allocated inside another stream's"):
        other.copy(node, node)
    s.fill(node, 1)  # its own stream, inside the window: allowed
    with pytest.raises(CaptureRefusedError) as refused:
        s.end_capture()
    assert refused.value.cause == "memory_nodes"
    assert not node.alive
    with pytest.raises(ClosedError):
        s.fill(node, 0)
    node.free()  # its owner's free() is still taken, once
    s.sync()
    after = stats_consistent(device)
    assert (after["slices_in_use"], after["windows_active"], after["graphs_alive"]) == (
        before["slices_in_use"], 0, 0)
    assert_a_fresh_capture_doubles_twice(s, upload(s, np.ones(N)))


def test_a_software_window_refuses_an_allocation_the_pool_cannot_serve_as_a_driver_graph_does(
        software_device) -> None:
    """Software graphs sealed a window that made a new allocation, where a driver's graphs (CUDA,
    HIP, the mock's hardware graphs) refuse its memory node: a step that passed on software
    graphs failed on a GPU. Refused the same way now, and served from the primed pool after a
    warmup, as there."""
    s = software_device.stream()
    x = upload(s, np.ones(N))
    out = s.alloc(4 * N)

    def step(stream) -> None:
        tmp = stream.alloc(4 * N)
        stream.launch(K.scale_f32, GRID, BLOCK, [N, 3.0, x, tmp])
        stream.copy(out, tmp)

    before = software_device.memory_stats()
    with pytest.raises(CaptureRefusedError, match="made 1 new allocation.*memory node") as refused:
        s.capture(step, warmup=0)
    assert refused.value.cause == "memory_nodes"
    s.sync()
    after = software_device.memory_stats()
    assert (after["windows_active"], after["graphs_alive"], after["slices_in_use"]) == (
        0, 0, before["slices_in_use"])
    graph = s.capture(step, warmup=1)  # the warmup primes the pool: nothing new inside
    s.sync()
    assert software_device.memory_stats()["slices_retained"] == 1  # the step's buffer, kept by the graph
    s.fill(out, 0)
    graph.replay()
    np.testing.assert_array_equal(f32(s, out), np.full(N, 3.0, np.float32))


def test_errors_queued_before_the_window_surface_at_graph_prepare(mock_device) -> None:
    device = mock_device
    s = device.stream()
    x = upload(s, np.ones(N))
    device.inject_fault("launch_kernel", 999)
    s.launch(K.scale_f32, GRID, BLOCK, [N, 2.0, x, x])  # fails asynchronously: queued
    with pytest.raises(DriverError, match="graph_prepare") as raised:
        s.graph_prepare()
    assert raised.value.code == 999
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE
    assert device.memory_stats()["windows_active"] == 0
    s.graph_prepare()  # reported once: the retry is accepted
    assert s.capture_state.variant is CaptureVariant.PREPARE
    s.abort_capture()


def test_info_words_first_seen_inside_the_window(device) -> None:
    s = device.stream()
    x = upload(s, np.ones(N))
    y = upload(s, np.zeros(N))
    s.graph_prepare()
    s.begin_capture()  # no warmup: the cache has never seen these words
    s.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=[N, K.float_bits(2.0)])
    # Uploading a new info buffer inside the window allocates: a memory node with a driver's
    # graphs, refused; software graphs refuse it the same way (they sealed it before, so a step
    # that sealed there failed on a GPU).
    with pytest.raises(CaptureRefusedError, match="memory node") as refused:
        s.end_capture()
    assert refused.value.cause == "memory_nodes"
    assert device.memory_stats()["info_pinned"] == 0
    # A warmup puts the words in the cache: the capture then seals on both.
    graph = s.capture(lambda st: st.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=[N, K.float_bits(2.0)]),
                      warmup=1)
    s.fill(y, 0)
    graph.replay()
    np.testing.assert_array_equal(f32(s, y), np.full(N, 2.0, np.float32))


def test_a_replay_into_a_recording_is_refused_at_once_and_the_recording_seals(device) -> None:
    """A replay onto a recording stream was accepted and failed the whole window at end_capture
    (software: lazily; the mock's hardware graphs: the driver's graph launch), on whichever
    stream records: refused at once now, nothing recorded, and the recording seals."""
    s = device.stream()
    x = upload(s, np.ones(N))
    graph = s.capture(doubling(x))
    for target in (s, device.stream()):
        target.graph_prepare()
        target.begin_capture()
        with pytest.raises(CaptureStateError, match="^replay: the stream records a capture.*Nothing was changed"):
            graph.replay(target)
        assert target.capture_state.variant is CaptureVariant.CAPTURE
        target.fill(x, lifecore.float_bits(5.0))
        sealed = target.end_capture()
        assert sealed.node_count == 1 and graph.alive
        sealed.replay()
        np.testing.assert_array_equal(f32(target, x), np.full(N, 5.0, np.float32))


@pytest.mark.parametrize("close", ["abort", "refuse"])
def test_a_memory_node_buffer_dangles_after_the_window(hardware_device, close) -> None:
    s = hardware_device.stream()
    s.graph_prepare()
    s.begin_capture()
    orphan = s.alloc(1 << 16)  # no free slice of that size: a memory node
    if close == "abort":
        s.abort_capture()
    else:
        with pytest.raises(CaptureRefusedError, match="memory node"):
            s.end_capture()
    assert not orphan.alive
    for call in (lambda: s.fill(orphan, 0), lambda: s.read(orphan), lambda: orphan.ptr):
        with pytest.raises(ClosedError, match="discarded"):
            call()
    s.sync()  # the stream was not poisoned
    # Its slice went back with the window, while the Python object lives on; free() is still
    # taken, once, and gives nothing back twice.
    assert stats_consistent(hardware_device)["slices_in_use"] == 0
    orphan.free()
    with pytest.raises(ClosedError, match="^free: the buffer was already freed"):
        orphan.free()
    s.sync()
    assert stats_consistent(hardware_device)["slices_in_use"] == 0


def test_info_words_first_seen_in_a_discarded_recording_are_uploaded_again(hardware_device) -> None:
    s = hardware_device.stream()
    x = upload(s, np.arange(N))
    y = upload(s, np.zeros(N))
    words = [N, K.float_bits(2.0)]
    s.graph_prepare()
    s.begin_capture()
    s.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=words)
    s.abort_capture()
    assert hardware_device.memory_stats()["info_entries"] == 0
    s.launch(K.axpy_info_f32, GRID, BLOCK, [x, y], info=words)
    np.testing.assert_array_equal(f32(s, y), 2.0 * np.arange(N, dtype=np.float32))


def test_a_stream_dropped_while_recording_is_reached_through_its_buffers(device) -> None:
    """Its buffers keep it, and its window, alive: every other stream of this thread is refused
    while it records. The refusal says how to reach it, and Buffer.stream gives it back."""
    s = device.stream()
    x = upload(s, np.ones(N))
    s.graph_prepare()
    s.begin_capture()
    handle = s.handle
    del s
    gc.collect()
    other = device.stream()
    with pytest.raises(CaptureStateError, match=r"lives on in its buffers, whose \.stream gives it back"):
        other.sync()
    recording = x.stream
    assert recording.handle == handle and recording.capture_state.is_recording()
    recording.abort_capture()
    other.sync()
    assert stats_consistent(device)["windows_active"] == 0
    assert_a_fresh_capture_doubles_twice(recording, x)
