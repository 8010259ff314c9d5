"""Outside relaxed capture mode a thread records on one stream at a time: a call the driver forbids
on a thread while its capture records (beginning another capture, which synchronizes its stream
first; a sync, read, view or profile; a driver allocation; a module load) is refused up front with
CaptureStateError naming the recording stream, and changes nothing: the recording goes on, seals and
replays, and the refused call works once it has ended. In global mode the same holds on every
thread while a global capture records. What lifecore must wait for itself (a graph's replays when
it is destroyed, a dropped stream's work) waits in relaxed mode instead, invalidating nothing.

The registry behind it (runtime/capture_registry.hpp) is checked against each stream's own state,
so every way a recording ends lets the thread record again."""

from __future__ import annotations

import contextlib
import gc
import threading

import numpy as np
import pytest

import lifecore
from lifecore import CaptureRefusedError, CaptureStateError, CaptureVariant
from lifecore import kernels as K

from backend_roles import EMULATED

N = 64
FORBIDDING = ["thread_local", "global"]


def f32(stream, buf) -> np.ndarray:
    return np.frombuffer(stream.read(buf), dtype=np.float32)


def ones(stream) -> lifecore.Buffer:
    buf = stream.alloc(4 * N)
    stream.write(buf, np.ones(N, np.float32).tobytes())
    return buf


def begin_doubling(stream, x) -> None:
    """prepare, a warmup, begin, then the doubling of x recorded."""
    stream.graph_prepare()
    stream.launch(K.scale_f32, 1, N, [N, 2.0, x, x])
    stream.begin_capture()
    stream.launch(K.scale_f32, 1, N, [N, 2.0, x, x])


def recording_on_a_thread_that_waits(stream, x) -> tuple[threading.Thread, threading.Event]:
    """A thread that begins the doubling on ``stream`` and then waits, recording, until the
    event returned is set (then it exits, the recording still open)."""
    began, leave = threading.Event(), threading.Event()

    def record_then_wait() -> None:
        begin_doubling(stream, x)
        began.set()
        leave.wait(30)

    thread = threading.Thread(target=record_then_wait)
    thread.start()
    assert began.wait(30)
    return thread, leave


def seal_and_replay(stream, x, before: float = 2.0) -> None:
    """Ends the recording begun by begin_doubling: one node, and a replay doubles x again."""
    graph = stream.end_capture()
    assert graph.node_count == 1
    graph.replay()
    np.testing.assert_array_equal(f32(stream, x), np.full(N, 2.0 * before, np.float32))
    graph.destroy()


@contextlib.contextmanager
def a_records(mode: str, graphs: str = "hardware"):
    """A device whose stream ``a`` records a doubling of ``x`` begun on this thread, and an idle
    stream ``b`` with a buffer ``y`` of ones: yields (device, a, b, x, y)."""
    with lifecore.Device(EMULATED, graphs=graphs, capture_mode=mode) as dev:
        a, b = dev.stream(), dev.stream()
        x, y = ones(a), ones(b)
        b.sync()
        begin_doubling(a, x)
        yield dev, a, b, x, y


def refused(call, a, mode: str = "thread_local", op: str = "begin_capture", this_thread: bool = True) -> CaptureStateError:
    with pytest.raises(CaptureStateError) as info:
        call()
    error = info.value
    message = str(error)
    assert message.startswith(f"{op}: stream {a.handle:#x} is recording a graph capture "), message
    assert "Nothing was changed" in message and "relaxed" in message
    assert error.recording_stream == a.handle
    if this_thread:
        assert f"on this thread (capture_mode '{mode}')" in message
        assert "end or abort that capture first" in message
        assert error.cause == "recording_on_this_thread"
        assert error.recording_thread == str(threading.get_ident())
    else:
        assert "in capture_mode 'global' on thread" in message
        assert error.cause == "global_recording"
    return error


@pytest.mark.parametrize("graphs", ["hardware", "software"])
@pytest.mark.parametrize("mode", FORBIDDING)
def test_a_second_begin_on_this_thread_is_refused_and_changes_nothing(mode, graphs) -> None:
    with a_records(mode, graphs) as (dev, a, b, x, y):
        b.graph_prepare()
        windows = dev.memory_stats()["windows_active"]
        refused(b.begin_capture, a, mode)
        # Nothing changed: b is still prepared, a still records on this thread, the pools agree.
        assert b.capture_state.variant is CaptureVariant.PREPARE
        assert a.capture_state.variant is CaptureVariant.CAPTURE
        assert a.capture_thread == str(threading.get_ident())
        assert a.driver_capturing == (graphs == "hardware")
        assert dev.memory_stats()["windows_active"] == windows
        refused(b.begin_capture, a, mode)  # as often as it is asked
        a.launch(K.scale_f32, 1, N, [N, 1.0, x, x])  # a still records: a second node
        graph = a.end_capture()
        assert graph.node_count == 2
        graph.replay()
        np.testing.assert_array_equal(f32(a, x), np.full(N, 2.0 * 2.0, np.float32))
        # b begins once a has ended, and seals.
        b.begin_capture()
        b.launch(K.scale_f32, 1, N, [N, 3.0, y, y])
        other = b.end_capture()
        other.replay()
        np.testing.assert_array_equal(f32(b, y), np.full(N, 3.0, np.float32))


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_only_relaxed_mode_records_on_two_streams_from_one_thread(graphs) -> None:
    for mode in ("thread_local", "global", "relaxed"):
        with lifecore.Device(EMULATED, graphs=graphs, capture_mode=mode) as dev:
            a, b, c = dev.stream(), dev.stream(), dev.stream()
            x, y = ones(a), ones(b)
            begin_doubling(a, x)
            if mode != "relaxed":
                b.graph_prepare()
                refused(b.begin_capture, a, mode)
                refused(c.sync, a, mode, op="sync")
                b.abort_capture()
                seal_and_replay(a, x)
                continue
            begin_doubling(b, y)
            c.sync()  # nothing forbids a call elsewhere either
            seal_and_replay(a, x)
            seal_and_replay(b, y)


@pytest.mark.parametrize("mode", FORBIDDING)
def test_every_call_that_would_synchronize_elsewhere_is_refused_up_front(mode) -> None:
    with a_records(mode) as (dev, a, b, x, y):
        out = bytearray(4 * N)
        calls = {
            "sync": b.sync,
            "read": lambda: b.read(y),
            "read_into": lambda: b.read_into(y, out),
            "__dlpack__": lambda: np.from_dlpack(y.view("float32")),  # NumPy exports through it
            "profile": b.profile,
            "alloc": lambda: b.alloc(1 << 20),  # no free slice of that size: a driver allocation
            "launch": lambda: b.launch(K.axpy_info_f32, 1, N, [y, y], info=[N, 0x3F800000]),  # a new info entry
        }
        for op, call in calls.items():
            refused(call, a, mode, op=op)
        with pytest.raises(CaptureStateError, match=r"^Module\.from_ptx: stream "):
            lifecore.Module.from_ptx(dev, ".version 6.0\n.target sm_50\n.address_size 64\n")
        stats = dev.memory_stats()
        assert stats["info_entries"] == 0 and y.alive and bytes(out) == bytes(4 * N)
        seal_and_replay(a, x)
        # Once a has ended each of them works.
        b.sync()
        np.testing.assert_array_equal(f32(b, y), np.ones(N, np.float32))
        with b.profile():
            pass
        assert b.alloc(1 << 20).alive


@pytest.mark.parametrize("mode", FORBIDDING)
def test_what_lifecore_waits_for_itself_leaves_the_recording_alone(mode) -> None:
    # A graph's destroy waits for its replays, a dropped stream for its work: both synchronize a
    # stream that does not record, which they now do in relaxed mode.
    with lifecore.Device(EMULATED, graphs="hardware", capture_mode=mode) as dev:
        a, b = dev.stream(), dev.stream()
        x, y = ones(a), ones(b)
        graph = b.capture(lambda s: s.launch(K.scale_f32, 1, N, [N, 2.0, y, y]))
        graph.replay()
        begin_doubling(a, x)
        graph.destroy()
        dropped = dev.stream()
        del dropped  # its shutdown synchronizes it
        gc.collect()
        seal_and_replay(a, x)
        np.testing.assert_array_equal(f32(b, y), np.full(N, 4.0, np.float32))


@pytest.mark.parametrize("mode", FORBIDDING)
def test_fences_of_other_streams_wait_until_the_recording_ends(mode) -> None:
    # A stream flushes its drop queue behind a fence every so often and when a window of its own
    # is undone; collecting queries the fence, which the driver forbids while this thread records.
    with a_records(mode) as (dev, a, b, x, y):
        for value in range(200):  # each write stages host memory the queue releases
            b.write(y, np.full(N, value, np.float32).tobytes())
        b.graph_prepare()
        b.abort_capture()  # undoing a window flushes
        seal_and_replay(a, x)
        np.testing.assert_array_equal(f32(b, y), np.full(N, 199.0, np.float32))


@pytest.mark.parametrize("mode", FORBIDDING)
def test_every_way_a_recording_ends_lets_this_thread_record_again(mode) -> None:
    with lifecore.Device(EMULATED, graphs="hardware", capture_mode=mode) as dev:
        b = dev.stream()
        b.sync()

        def b_records_again() -> None:
            b.graph_prepare()
            b.begin_capture()
            b.abort_capture()

        def recording(then) -> None:
            a = dev.stream()
            held = [a, ones(a)]  # the stream and its buffer (which keeps it alive)
            begin_doubling(*held)
            b.graph_prepare()
            refused(b.begin_capture, a, mode)
            b.abort_capture()
            del a
            then(held)
            b_records_again()

        def sealed(held) -> None:
            seal_and_replay(*held)

        def aborted(held) -> None:
            held[0].abort_capture()

        def refused_by_the_driver(held) -> None:
            a, x = held
            with pytest.raises(CaptureStateError, match="^read: this stream is recording"):
                a.read(x)  # its own stream: refused before the driver would invalidate it
            with pytest.raises(CaptureStateError, match="^profile: this stream is recording"):
                with a.profile():  # its start: refused before its stop's wait would invalidate it
                    pass
            dev.inject_fault("stream_end_capture", 901)  # a call made outside lifecore invalidated it
            with pytest.raises(CaptureRefusedError, match="invalidated"):
                a.end_capture()
            dev.clear_faults()

        def end_failed_then_aborted(held) -> None:
            a = held[0]
            dev.inject_fault("stream_end_capture", 999, times=2)
            with pytest.raises(CaptureRefusedError) as info:
                a.end_capture()
            dev.clear_faults()
            assert info.value.cause == "driver_still_capturing" and a.driver_capturing
            refused(b.sync, a, mode, op="sync")  # the driver still captures: still refused
            a.abort_capture()

        def memory_node(held) -> None:
            a = held[0]
            a.alloc(1 << 16)  # the pool holds no such slice: a memory node, which end_capture refuses
            with pytest.raises(CaptureRefusedError, match="memory node"):
                a.end_capture()

        def stream_dropped(held) -> None:
            held.clear()  # the last references: the stream ends its recording as it goes
            gc.collect()

        recording(sealed)
        recording(aborted)
        recording(refused_by_the_driver)
        recording(end_failed_then_aborted)
        recording(memory_node)
        recording(stream_dropped)
        # A begin the driver refused never recorded.
        a = dev.stream()
        a.graph_prepare()
        dev.inject_fault("stream_begin_capture", 999)
        with pytest.raises(lifecore.DriverError):
            a.begin_capture()
        dev.clear_faults()
        b_records_again()


def test_a_recording_forbids_calls_on_its_own_device_only() -> None:
    # The emulated backend keeps each device's captures its own: a stream of another device is not
    # refused. Closing the device ends its recording: nothing stays listed for this thread.
    with lifecore.Device(EMULATED, graphs="hardware") as other:
        s = other.stream()
        with lifecore.Device(EMULATED, graphs="hardware") as dev:
            a, a2 = dev.stream(), dev.stream()
            x = ones(a)
            begin_doubling(a, x)
            a2.graph_prepare()
            refused(a2.begin_capture, a)
            s.sync()
            s.graph_prepare()
            s.begin_capture()  # another device: allowed
            s.abort_capture()
        s.sync()
        s.graph_prepare()
        s.begin_capture()
        s.end_capture()


@contextlib.contextmanager
def recording_on_another_thread(a, x):
    """Another thread begins a doubling of ``x`` on ``a``, and seals and replays it once the block
    ends (it must succeed): yields that thread's ident."""
    began, release, problems, ident = threading.Event(), threading.Event(), [], []

    def other_thread() -> None:
        ident.append(threading.get_ident())
        try:
            begin_doubling(a, x)
            began.set()
            release.wait(30)
            seal_and_replay(a, x)
        except Exception as error:  # noqa: BLE001 - reported below
            problems.append(error)
            began.set()

    t = threading.Thread(target=other_thread)
    t.start()
    assert began.wait(30) and not problems, problems
    try:
        yield ident[0]
    finally:
        release.set()
        t.join(30)
    assert not problems and not t.is_alive(), problems


def test_a_thread_local_capture_on_another_thread_does_not_block_this_one() -> None:
    with lifecore.Device(EMULATED, graphs="hardware", capture_mode="thread_local") as dev:
        a, b, c = dev.stream(), dev.stream(), dev.stream()
        x, y = ones(a), ones(b)
        with recording_on_another_thread(a, x):
            b.sync()
            begin_doubling(b, y)
            # This thread's own recording is what forbids it a third one, not the other thread's.
            c.graph_prepare()
            refused(c.begin_capture, b, "thread_local")
            c.abort_capture()
            seal_and_replay(b, y)


def test_a_global_capture_on_another_thread_blocks_this_one_until_it_ends() -> None:
    with lifecore.Device(EMULATED, graphs="hardware", capture_mode="global") as dev:
        a, b = dev.stream(), dev.stream()
        with recording_on_another_thread(a, ones(a)) as ident:
            b.graph_prepare()
            error = refused(b.begin_capture, a, "global", this_thread=False)
            assert error.recording_thread == str(ident)
            refused(b.sync, a, "global", op="sync", this_thread=False)
            assert b.capture_state.variant is CaptureVariant.PREPARE
        b.begin_capture()
        b.abort_capture()


def test_a_global_capture_blocks_every_thread_until_the_thread_that_began_it_exits() -> None:
    # Nobody else can end it (the driver lets only that thread), so while it records the driver
    # forbids every thread's unsafe calls: so does lifecore, up front. The thread ends it as it
    # exits (nobody could after), and then nothing is forbidden.
    with lifecore.Device(EMULATED, graphs="hardware", capture_mode="global") as dev:
        a, b = dev.stream(), dev.stream()
        x = ones(a)
        a.sync()
        b.sync()
        t, leave = recording_on_a_thread_that_waits(a, x)
        assert a.capture_state.variant is CaptureVariant.CAPTURE
        refused(b.sync, a, "global", op="sync", this_thread=False)
        leave.set()
        t.join(30)
        assert a.capture_state.variant is CaptureVariant.NO_CAPTURE and not a.driver_capturing
        b.sync()
        stats = dev.memory_stats()
        assert stats["windows_active"] == 0 and stats["graphs_alive"] == 0 and stats["slices_retained"] == 0, stats
        begin_doubling(a, x)  # the stream records again, on this thread
        seal_and_replay(a, x, before=4.0)


@pytest.mark.parametrize("graphs", ["hardware", "software"])
@pytest.mark.parametrize("mode", ["thread_local", "global"])
def test_a_thread_that_exits_recording_ends_its_capture_for_any_thread_after_it(graphs: str, mode: str) -> None:
    # The capturing thread exits without ending its recording (a worker that raised, say): it
    # ends the capture as it goes, its graph discarded, so the stream is not left recording a
    # capture no thread could end. The next threads (the operating system often hands one of
    # them the exited thread's id) find it re-capturable, and the recorded doubling never ran.
    with lifecore.Device(EMULATED, graphs=graphs, capture_mode=mode) as dev:
        a = dev.stream()
        x = ones(a)
        a.sync()
        t = threading.Thread(target=begin_doubling, args=(a, x))
        t.start()
        t.join(30)
        assert a.capture_state.variant is CaptureVariant.NO_CAPTURE and not a.driver_capturing
        assert dev.abandoned_captures == 0
        np.testing.assert_array_equal(f32(a, x), np.full(N, 2.0, np.float32))  # the warmup's doubling only
        outcomes = []

        def capture_and_seal() -> None:
            try:
                begin_doubling(a, x)
                seal_and_replay(a, x, before=float(2 ** (2 * len(outcomes) + 2)))
                outcomes.append("sealed")
            except Exception as error:  # reported below, with the thread's other outcomes
                outcomes.append(repr(error))

        for _ in range(4):
            u = threading.Thread(target=capture_and_seal)
            u.start()
            u.join(30)
        assert outcomes == ["sealed"] * 4
        assert a.capture_state.variant is CaptureVariant.NO_CAPTURE


@pytest.mark.parametrize("mode", ["thread_local", "global"])
def test_on_cuda_a_thread_that_exits_recording_ends_the_driver_capture_there(fake_libcuda, mode: str) -> None:
    # The fake driver, like CUDA, ends a capture outside relaxed mode only on the thread that
    # began it: the exiting thread's own end reaches it; one from here would be refused.
    from driver_scenarios import run_with_fake_cuda

    body = f"""
    import ctypes, os, threading
    lib = ctypes.CDLL(os.environ["LIFECORE_LIBCUDA"])
    lib.fake_cuda_live_captures.restype = ctypes.c_long
    dev = lifecore.Device("cuda", capture_mode="{mode}")
    s = dev.stream()
    buf = s.alloc(64)

    def record():
        s.graph_prepare()
        s.begin_capture()
        s.fill(buf, 7)
        result["during"] = lib.fake_cuda_live_captures()

    t = threading.Thread(target=record)
    t.start()
    t.join(30)
    result["after"] = [lib.fake_cuda_live_captures(), s.capture_state.variant.name, s.driver_capturing]
    graph = s.capture(lambda st: st.fill(buf, 3))
    graph.replay()
    s.sync()
    graph.destroy()
    result["again"] = lib.fake_cuda_live_captures()
    dev.close()
    result["abandoned"] = dev.abandoned_captures
    """
    result = run_with_fake_cuda(fake_libcuda, body)
    assert result["during"] == 1
    assert result["after"] == [0, "NO_CAPTURE", False]
    assert result["again"] == 0 and result["abandoned"] == 0


@pytest.mark.parametrize("end_it", [True, False], ids=["ended-by-its-thread", "left-open"])
def test_a_thread_python_did_not_start_keeps_its_recording_between_calls_into_python(tmp_path_factory,
                                                                                      end_it: bool) -> None:
    # A native thread calls into Python twice, each call in a thread state of its own that is
    # cleared when the call returns (an embedder's worker; here ctypes callbacks). Clearing the
    # first must not end the recording it began: the thread lives on and ends it in the second
    # call. Left open when the thread exits, it is the documented leak: nobody can end it, and
    # a close from here leaves it (counted in abandoned_captures), never hangs.
    import ctypes

    from driver_scenarios import build_fake_library

    library = ctypes.CDLL(str(build_fake_library(tmp_path_factory, "native_thread.c", "native thread helper")))
    callback = ctypes.CFUNCTYPE(None)
    with lifecore.Device(EMULATED, graphs="hardware", capture_mode="thread_local") as dev:
        s = dev.stream()
        x = ones(s)
        s.sync()
        seen: dict = {}

        def first() -> None:
            begin_doubling(s, x)

        def second() -> None:
            seen["between"] = s.capture_state.variant.name
            if end_it:
                graph = s.end_capture()
                seen["nodes"] = graph.node_count
                graph.destroy()

        calls = (callback(first), callback(second))
        assert library.run_twice_on_a_native_thread(*calls) == 0
        assert seen["between"] == "CAPTURE"
        if not end_it:
            assert s.capture_state.variant is CaptureVariant.CAPTURE and s.driver_capturing
            dev.close()
            assert dev.abandoned_captures == 1
            return
        assert seen["nodes"] == 1
        assert s.capture_state.variant is CaptureVariant.NO_CAPTURE and not s.driver_capturing
        assert dev.memory_stats()["windows_active"] == 0
        begin_doubling(s, x)
        seal_and_replay(s, x, before=4.0)


def test_on_cuda_a_recording_forbids_calls_on_every_device_of_the_process(fake_libcuda) -> None:
    # CUDA keeps one capture state per process: a recording on one device forbids this thread's
    # begin on another device's stream (the fake driver, in a fresh interpreter).
    from driver_scenarios import run_with_fake_cuda

    body = """
    first, second = lifecore.Device("cuda"), lifecore.Device("cuda")
    a, b = first.stream(), second.stream()
    a.graph_prepare()
    a.begin_capture()
    b.graph_prepare()
    try:
        b.begin_capture()
        result["second"] = "began"
    except lifecore.CaptureStateError as error:
        result["second"] = [error.cause, error.recording_stream == a.handle]
    a.end_capture().destroy()
    b.begin_capture()
    b.end_capture().destroy()
    result["after"] = "sealed"
    """
    result = run_with_fake_cuda(fake_libcuda, body)
    assert result["second"] == ["recording_on_this_thread", True]
    assert result["after"] == "sealed"


def test_a_recording_left_open_on_a_device_that_is_gone_forbids_nothing_after_it() -> None:
    # A capture another thread holds open stays listed while its device lives (nobody else can
    # end it); once the device is gone, so are its captures, though its memory may now hold a new
    # device: nothing is refused there, while that thread still lives and after it exits. Its
    # exit ends the capture its device's close left to it.
    waiting: list = []

    def leave_a_global_capture_open() -> None:
        dev = lifecore.Device(EMULATED, graphs="hardware", capture_mode="global")
        a = dev.stream()
        t, leave = recording_on_a_thread_that_waits(a, ones(a))
        assert a.capture_state.variant is CaptureVariant.CAPTURE
        dev.close()
        assert dev.abandoned_captures == 1
        waiting.append((t, leave, dev, a))

    for _ in range(3):
        leave_a_global_capture_open()
        gc.collect()
        with lifecore.Device(EMULATED, graphs="hardware", capture_mode="global") as dev:
            b = dev.stream()
            b.sync()
            begin_doubling(b, ones(b))
            b.abort_capture()
    for t, leave, dev, a in waiting:
        leave.set()
        t.join(30)
        assert dev.abandoned_captures == 0 and not a.driver_capturing
    with lifecore.Device(EMULATED, graphs="hardware", capture_mode="global") as dev:
        b = dev.stream()
        b.sync()


PAGE = 4096


def kv_coordinator(dev, pages: int = 8, maximum: int = 32):
    from lifecore.sequence import AdmissionCoordinator

    return AdmissionCoordinator(dev, domains={"kv": (pages * PAGE, maximum * PAGE)}, page_bytes=PAGE,
                                tokens_per_page=16, max_active_sequences=4)


@pytest.mark.parametrize("graphs", ["hardware", "software"])
@pytest.mark.parametrize("mode", FORBIDDING)
def test_a_kv_arena_allocation_is_refused_while_another_stream_records(mode, graphs) -> None:
    """A coordinator's arena and its growth are driver allocations: refused up front, the
    recording goes on, and both work once it has ended."""
    with a_records(mode, graphs) as (dev, a, b, x, y):
        before = dev.memory_stats()
        error = refused(lambda: kv_coordinator(dev), a, mode, op="AdmissionCoordinator")
        assert "KV arena" in str(error)
        assert dev.memory_stats() == before  # no arena was made, none leaked
        seal_and_replay(a, x)
        c = kv_coordinator(dev)
        assert dev.memory_stats()["arenas"] == 1
        begin_doubling(a, x)
        refused(lambda: c.grow_domain("kv", 16 * PAGE), a, mode, op="AdmissionCoordinator")
        assert c.num_blocks("kv") == 8 and dev.memory_stats()["arena_bytes"] == 8 * PAGE  # nothing grew
        seal_and_replay(a, x, before=8.0)
        c.grow_domain("kv", 16 * PAGE)
        assert c.num_blocks("kv") == 16 and dev.memory_stats()["arena_bytes"] == 16 * PAGE


@pytest.mark.parametrize("mode", FORBIDDING)
def test_a_coordinator_dropped_while_another_stream_records_frees_its_arena(mode) -> None:
    """A drop cannot be refused: the arena's free is made in relaxed mode, so the recording
    survives (the mock, as CUDA, invalidates it on a free it forbids). That the driver gets the
    memory back is counted on the mock's live allocations by sequence_session_test."""
    with lifecore.Device(EMULATED, graphs="hardware", capture_mode=mode) as dev:
        a = dev.stream()
        x = ones(a)
        a.sync()
        c = kv_coordinator(dev)
        admitted = c.admit("r", 16, 64)
        session = admitted.resources.open_session()
        session.step(40)
        assert dev.memory_stats()["arenas"] == 1
        begin_doubling(a, x)
        session.close()
        admitted.resources.close()
        del c, admitted, session
        gc.collect()
        stats = dev.memory_stats()
        assert (stats["arenas"], stats["arena_bytes"]) == (0, 0)
        seal_and_replay(a, x)
