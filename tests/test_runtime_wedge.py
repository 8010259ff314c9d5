"""A stream can never be wedged: the capturing thread's rule per capture mode, a driver end
that fails more than once, close() from another thread, and sticky statuses (the emulated device only).

The first two tests are the reported repros: before the fix the stream said NO_CAPTURE while
the driver still captured, and every later capture failed with 900 for ever."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import lifecore
from lifecore import kernels as K
from lifecore import (
    CaptureRefusedError,
    CaptureStateError,
    CaptureVariant,
    ClosedError,
    DeviceLostError,
    DriverError,
    InvalidArgumentError,
)
from lifecore.testing import offers_fault_injection

from backend_roles import EMULATED

N = 256
RECOVERABLE = (2, 801, 999)  # out of memory, not supported, unknown: none of them sticky
STICKY = (700, 719)  # illegal address, launch failed: the context is unusable afterwards


def run_in_thread(fn):
    """Runs fn on a new thread and returns what it returned or raised."""
    out: dict[str, object] = {}

    def body() -> None:
        try:
            out["value"] = fn()
        except BaseException as error:  # noqa: BLE001 - handed back to the test
            out["error"] = error

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the call hung"
    return out


def read_u32(stream, buf) -> np.ndarray:
    return np.frombuffer(stream.read(buf), np.uint32)


def assert_recapturable(dev, stream) -> None:
    """Out of capture, nothing left in a window, and a new capture replays exactly."""
    if offers_fault_injection(dev):
        dev.clear_faults()
    assert stream.capture_state.variant is CaptureVariant.NO_CAPTURE
    assert not stream.driver_capturing
    stream.sync()
    assert dev.memory_stats()["windows_active"] == 0
    buf = stream.alloc(4 * N)
    stream.fill(buf, 0)
    graph = stream.capture(lambda st: st.fill(buf, 7))
    stream.fill(buf, 0)
    graph.replay()
    np.testing.assert_array_equal(read_u32(stream, buf), np.full(N, 7, np.uint32))
    graph.destroy()


def open_recording(dev):
    s = dev.stream()
    buf = s.alloc(4 * N)
    s.graph_prepare()
    s.begin_capture()
    s.fill(buf, 1)
    return s, buf


def open_device(backend: str, graphs: str, mode: str) -> lifecore.Device:
    """A device of `backend` (the backend_name fixture has skipped the unavailable ones)."""
    return lifecore.Device(backend, graphs=graphs, capture_mode=mode)


@pytest.mark.parametrize("graphs", ["hardware", "software"])
@pytest.mark.parametrize("mode", ["thread_local", "global"])
@pytest.mark.parametrize("call", ["abort_capture", "end_capture"])
def test_an_end_or_abort_from_another_thread_is_refused_and_changes_nothing(backend_name, graphs, mode, call) -> None:
    with open_device(backend_name, graphs, mode) as dev:
        s, buf = open_recording(dev)
        before = dev.memory_stats()
        out = run_in_thread(getattr(s, call))
        error = out.get("error")
        assert isinstance(error, CaptureStateError), out
        # Both threads are named, and the rule's mode.
        assert str(threading.get_ident()) in str(error) and mode in str(error)
        assert s.capture_thread == str(threading.get_ident())
        assert s.capture_state.variant is CaptureVariant.CAPTURE
        assert s.driver_capturing is (graphs == "hardware")
        assert dev.memory_stats() == before
        # The capturing thread still owns a live window: it seals it and the graph is exact.
        s.fill(buf, 3)
        graph = s.end_capture()
        s.fill(buf, 0)
        graph.replay()
        np.testing.assert_array_equal(read_u32(s, buf), np.full(N, 3, np.uint32))
        assert_recapturable(dev, s)


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_in_relaxed_mode_any_thread_may_end_or_abort(backend_name, graphs) -> None:
    with open_device(backend_name, graphs, "relaxed") as dev:
        s, buf = open_recording(dev)
        s.fill(buf, 5)
        out = run_in_thread(s.end_capture)
        assert "error" not in out, out
        graph = out["value"]
        s.fill(buf, 0)
        graph.replay()
        np.testing.assert_array_equal(read_u32(s, buf), np.full(N, 5, np.uint32))
        s2, _ = open_recording(dev)
        assert "error" not in run_in_thread(s2.abort_capture)
        assert s2.capture_state.variant is CaptureVariant.NO_CAPTURE and not s2.driver_capturing
        assert_recapturable(dev, s)
        assert_recapturable(dev, s2)


@pytest.mark.parametrize("code", RECOVERABLE)
@pytest.mark.parametrize("times", [2, 3, 4, 10**6])
def test_an_end_that_fails_twice_leaves_the_stream_capturing_and_recoverable(mock_hardware_device, code, times) -> None:
    dev = mock_hardware_device
    s = dev.stream()
    buf = s.alloc(4 * N)
    dev.inject_fault("stream_end_capture", code, times=times)
    with pytest.raises(CaptureRefusedError, match="ending the driver capture failed") as raised:
        s.capture(lambda st: st.fill(buf, 1))
    assert raised.value.code == code
    if times <= 3:
        # capture()'s own abort ended it: its end (or the one retry) was the first the driver
        # accepted. The error says so: it said "stays in CAPTURE ... call end_capture or
        # abort_capture again", a call that had nothing left to end.
        assert s.capture_state.variant is CaptureVariant.NO_CAPTURE
        assert raised.value.cause == "driver" and "stays in CAPTURE" not in str(raised.value)
        assert "capture aborted the capture after it, which ended the driver capture" in str(raised.value)
        assert "stream is in NO_CAPTURE" in str(raised.value)
    else:
        assert raised.value.cause == "driver_still_capturing" and "stays in CAPTURE" in str(raised.value)
        # Never NO_CAPTURE while the driver captures, and the window is already discarded.
        assert s.capture_state.variant is CaptureVariant.CAPTURE and s.driver_capturing
        assert dev.memory_stats()["windows_active"] == 0
        with pytest.raises(CaptureStateError, match="already recording"):
            s.graph_prepare()
        dev.clear_faults()
        s.abort_capture()
    assert_recapturable(dev, s)


def test_after_a_failed_end_the_next_end_ends_the_driver_capture(mock_hardware_device) -> None:
    dev = mock_hardware_device
    s, buf = open_recording(dev)
    dev.inject_fault("stream_end_capture", 999, times=2)
    with pytest.raises(CaptureRefusedError, match="still captures"):
        s.end_capture()
    assert s.capture_state.variant is CaptureVariant.CAPTURE and s.driver_capturing
    # The next end from the capturing thread ends the driver capture; nothing is sealed.
    with pytest.raises(CaptureRefusedError, match="already discarded") as raised:
        s.end_capture()
    assert raised.value.cause == "discarded"
    assert_recapturable(dev, s)


@pytest.mark.parametrize("ending", ["end_capture", "abort_capture"])
def test_work_issued_into_the_discarded_capture_leaves_nothing_behind(mock_hardware_device, ending) -> None:
    # Launches with info words recorded into the dead capture pin their cache entries under
    # that capture; ending it drops the pins and the entries made inside, as for any window.
    dev = mock_hardware_device
    s = dev.stream()
    x, y = s.alloc(4 * N), s.alloc(4 * N)
    two = lifecore.float_bits(2.0)
    s.launch(K.axpy_info_f32, 1, N, [x, y], info=[N, two])  # one shared entry, not pinned
    s.sync()
    s.graph_prepare()
    s.begin_capture()
    dev.inject_fault("stream_end_capture", 999, times=2)
    with pytest.raises(CaptureRefusedError, match="still captures"):
        s.end_capture()
    s.launch(K.axpy_info_f32, 1, N, [x, y], info=[N, two])  # the shared entry
    s.launch(K.axpy_info_f32, 1, N, [x, y], info=[N // 2, two])  # a new one, made inside
    assert dev.memory_stats()["info_pinned"] == 2
    if ending == "end_capture":
        with pytest.raises(CaptureRefusedError, match="already discarded"):
            s.end_capture()
    else:
        s.abort_capture()
    s.sync()
    dev.cleanup()
    after = dev.memory_stats()  # the cleanup drops every entry nothing pins
    assert (after["info_entries"], after["info_pinned"]) == (0, 0)
    assert_recapturable(dev, s)


def test_a_failed_abort_keeps_the_stream_capturing_until_an_abort_succeeds(mock_hardware_device) -> None:
    dev = mock_hardware_device
    s, _ = open_recording(dev)
    dev.inject_fault("stream_end_capture", 2, times=2)
    with pytest.raises(DriverError, match="still captures") as raised:
        s.abort_capture()
    assert not isinstance(raised.value, DeviceLostError)
    assert s.capture_state.variant is CaptureVariant.CAPTURE and s.driver_capturing
    s.abort_capture()
    assert_recapturable(dev, s)


def test_an_abort_of_a_discarded_window_that_cannot_end_it_is_a_driver_error(mock_hardware_device) -> None:
    # Before: an abort after an end that left the driver capturing, whose own end failed too,
    # raised CaptureRefusedError (no DriverError, no operation), though abort_capture says a
    # DriverError while the driver still captures.
    dev = mock_hardware_device
    s, _ = open_recording(dev)
    dev.inject_fault("stream_end_capture", 999, times=2)
    with pytest.raises(CaptureRefusedError, match="still captures"):
        s.end_capture()
    dev.inject_fault("stream_end_capture", 999, times=2)
    with pytest.raises(DriverError, match="^Stream.abort_capture: .*still captures") as raised:
        s.abort_capture()
    assert raised.value.cause == "driver_still_capturing" and raised.value.operation
    assert s.capture_state.variant is CaptureVariant.CAPTURE and s.driver_capturing
    s.abort_capture()
    assert_recapturable(dev, s)


def test_an_invalidated_end_ends_the_capture_sequence_at_once(mock_hardware_device) -> None:
    # The driver documentation: an end that reports 901 has ended the capture (null graph).
    dev = mock_hardware_device
    s, _ = open_recording(dev)
    dev.inject_fault("stream_end_capture", 901, times=10**6)
    with pytest.raises(CaptureRefusedError, match="invalidated") as raised:
        s.end_capture()
    assert raised.value.cause == "invalidated"
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE and not s.driver_capturing
    assert_recapturable(dev, s)


@pytest.mark.parametrize("mode", ["thread_local", "global"])
def test_close_from_another_thread_leaves_the_capture_to_its_thread(mode) -> None:
    dev = lifecore.Device(EMULATED, graphs="hardware", capture_mode=mode)
    s, buf = open_recording(dev)
    started = time.monotonic()
    out = run_in_thread(dev.close)
    assert "error" not in out, out
    assert time.monotonic() - started < 10
    assert dev.closed and dev.abandoned_captures == 1
    # The capturing thread's next call on the stream ends the driver capture.
    with pytest.raises(ClosedError, match="now ended"):
        s.fill(buf, 2)
    assert dev.abandoned_captures == 0
    assert not s.driver_capturing
    with pytest.raises(ClosedError):
        s.sync()


@pytest.mark.parametrize("graphs", ["hardware", "software"])
@pytest.mark.parametrize("mode", ["thread_local", "global"])
def test_a_thread_that_exits_recording_ends_its_capture_before_its_join_returns(backend_name, graphs, mode) -> None:
    # Nobody else could end it (the driver lets only that thread): the thread ends it as it
    # goes, its graph discarded, and a close from here has nothing left to abandon.
    dev = open_device(backend_name, graphs, mode)
    s = dev.stream()
    buf = s.alloc(4 * N)
    s.fill(buf, 5)
    s.sync()

    def record() -> None:
        s.graph_prepare()
        s.begin_capture()
        s.fill(buf, 1)

    assert "error" not in run_in_thread(record)
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE and not s.driver_capturing
    np.testing.assert_array_equal(read_u32(s, buf), np.full(N, 5, np.uint32))  # the recorded fill never ran
    assert dev.memory_stats()["windows_active"] == 0
    assert_recapturable(dev, s)
    dev.close()
    assert dev.abandoned_captures == 0
    with pytest.raises(ClosedError):
        s.sync()


def test_close_from_another_thread_in_relaxed_mode_ends_the_capture() -> None:
    dev = lifecore.Device(EMULATED, graphs="hardware", capture_mode="relaxed")
    s, buf = open_recording(dev)
    assert "error" not in run_in_thread(dev.close)
    assert dev.abandoned_captures == 0 and not s.driver_capturing
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE
    with pytest.raises(ClosedError):
        s.fill(buf, 1)


@pytest.mark.parametrize("mode", ["thread_local", "global"])
def test_a_recording_stream_dropped_on_another_thread_leaves_its_capture_to_the_recording_thread(mode) -> None:
    # Before: nothing held the stream any more, so nothing could end its capture, and the
    # recording thread was refused on every other stream for as long as it lived.
    dev = lifecore.Device(EMULATED, graphs="hardware", capture_mode=mode)
    box = {"s": dev.stream()}
    box["s"].graph_prepare()
    box["s"].begin_capture()

    def drop() -> None:
        del box["s"]  # the last reference goes on this thread

    assert "error" not in run_in_thread(drop)
    assert dev.abandoned_captures == 1
    other = dev.stream()
    buf = other.alloc(4 * N)
    other.sync()  # ends the left capture first (refused before), then synchronizes
    assert dev.abandoned_captures == 0
    assert other.capture_state.variant is CaptureVariant.NO_CAPTURE
    graph = other.capture(lambda st: st.fill(buf, 3))  # the thread records again
    graph.replay()
    other.sync()
    assert (read_u32(other, buf) == 3).all()
    dev.close()
    assert dev.abandoned_captures == 0


def test_a_left_capture_whose_thread_exits_without_a_call_is_ended_as_it_exits() -> None:
    dev = lifecore.Device(EMULATED, graphs="hardware", capture_mode="thread_local")
    box: dict = {}
    began, dropped = threading.Event(), threading.Event()

    def recording_thread() -> None:
        box["s"] = dev.stream()
        box["s"].graph_prepare()
        box["s"].begin_capture()
        began.set()
        dropped.wait(30)  # then it exits without another call

    thread = threading.Thread(target=recording_thread)
    thread.start()
    assert began.wait(30)
    del box["s"]  # the last reference, on this thread
    assert dev.abandoned_captures == 1  # left to its thread, which alone may end it
    dropped.set()
    thread.join(30)
    assert not thread.is_alive()
    assert dev.abandoned_captures == 0  # the thread ended it as it went
    s = dev.stream()  # this thread records nothing: it is refused nothing
    buf = s.alloc(4 * N)
    s.sync()
    graph = s.capture(lambda st: st.fill(buf, 4))
    graph.replay()
    assert (read_u32(s, buf) == 4).all()
    dev.close()


def test_a_left_capture_whose_device_went_is_forgotten_by_its_thread() -> None:
    box = {"dev": lifecore.Device(EMULATED, graphs="hardware")}
    box["s"] = box["dev"].stream()
    box["s"].graph_prepare()
    box["s"].begin_capture()

    def drop() -> None:
        del box["s"]
        box["dev"].close()
        del box["dev"]

    assert "error" not in run_in_thread(drop)
    with lifecore.Device(EMULATED, graphs="hardware") as dev:  # the thread's calls go on
        s = dev.stream()
        buf = s.alloc(4 * N)
        s.sync()
        graph = s.capture(lambda st: st.fill(buf, 5))
        graph.replay()
        assert (read_u32(s, buf) == 5).all()


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_a_device_lost_through_another_call_takes_the_recording_with_it(graphs) -> None:
    # Before: the stream read CAPTURE (and driver_capturing, on hardware graphs) for a capture
    # that went with the context, every end_capture raised again, and the window stayed counted.
    dev = lifecore.Device(EMULATED, graphs=graphs)
    s, _ = open_recording(dev)
    other = dev.stream()
    dev.inject_fault("mem_alloc", 700, times=3)
    out = run_in_thread(lambda: other.alloc(1 << 22))  # another thread: this one may not allocate while it records
    assert isinstance(out.get("error"), DeviceLostError), out
    assert dev.lost
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE and not s.driver_capturing
    with pytest.raises(DeviceLostError):
        s.end_capture()  # its window goes now
    assert dev.memory_stats()["windows_active"] == 0
    s.abort_capture()  # nothing left to end
    dev.close()


def test_a_capture_whose_abort_cannot_end_the_driver_capture_says_so() -> None:
    dev = lifecore.Device(EMULATED, graphs="hardware")
    s = dev.stream()
    buf = s.alloc(4 * N)

    def failing(stream) -> None:
        stream.fill(buf, 1)
        if stream.capture_state.variant is CaptureVariant.CAPTURE:
            dev.inject_fault("stream_end_capture", 999, times=2)  # the abort's end, and its retry
            raise ValueError("the pass failed")

    with pytest.raises(ValueError, match="the pass failed") as raised:  # the first failure, unchanged
        s.capture(failing)
    assert any("could not end the driver capture either" in note for note in raised.value.__notes__)
    assert s.capture_state.variant is CaptureVariant.CAPTURE and s.driver_capturing
    s.abort_capture()
    assert_recapturable(dev, s)
    # A failure of lifecore's own (the seal's end failing twice), then the abort's: its type kept.
    dev.inject_fault("stream_end_capture", 999, times=4)
    with pytest.raises(CaptureRefusedError) as refused:
        s.capture(lambda stream: stream.fill(buf, 2))
    assert any("could not end the driver capture either" in note for note in refused.value.__notes__)
    assert s.driver_capturing
    s.abort_capture()
    assert_recapturable(dev, s)
    # An abort that ends it: no note.
    with pytest.raises(ValueError) as plain:
        s.capture(lambda stream: (_ for _ in ()).throw(ValueError("warmup failed")))
    assert not getattr(plain.value, "__notes__", []) and not s.driver_capturing
    dev.close()


def test_a_capture_refused_before_its_window_says_nothing_of_an_abort() -> None:
    """capture() on a stream another recording holds is refused at its graph_prepare, and a bad
    warmup before it: no abort ran, and the recording there is not capture()'s. The note that
    its abort could not end the driver capture was added all the same (the stream was driver-
    capturing), telling the caller to abort a healthy recording of its own, or another thread's."""
    dev = lifecore.Device(EMULATED, graphs="hardware")
    s = dev.stream()
    buf = s.alloc(4 * N)
    s.graph_prepare()
    s.fill(buf, 1)
    s.begin_capture()
    s.fill(buf, 2)  # a healthy recording

    def refusals():
        with pytest.raises(CaptureStateError, match="already recording") as busy:
            s.capture(lambda stream: stream.fill(buf, 3))
        with pytest.raises(InvalidArgumentError, match="warmup must be >= 0") as bad:
            s.capture(lambda stream: None, warmup=-1)
        return busy.value, bad.value

    elsewhere = run_in_thread(refusals)
    assert "error" not in elsewhere, elsewhere
    for refused in (*refusals(), *elsewhere["value"]):
        assert not getattr(refused, "__notes__", []), refused.__notes__
    assert s.capture_state.variant is CaptureVariant.CAPTURE and s.driver_capturing  # untouched
    graph = s.end_capture()  # the recording seals as if nothing had happened
    assert graph.node_count == 1
    graph.destroy()
    assert_recapturable(dev, s)
    dev.close()


@pytest.mark.parametrize("code", STICKY)
def test_a_sticky_status_loses_the_device_and_every_later_call_is_refused(mock_device, code) -> None:
    dev = mock_device
    s = dev.stream()
    buf = s.alloc(4 * N)
    other = dev.stream()
    dev.inject_fault("stream_synchronize", code)
    with pytest.raises(DeviceLostError, match="lost") as raised:
        s.sync()
    assert isinstance(raised.value, DriverError) and raised.value.code == code
    assert dev.lost
    for call in (
        lambda: s.sync(),
        lambda: other.fill(buf, 1),
        lambda: s.alloc(16),
        lambda: s.graph_prepare(),
        lambda: dev.stream(),
        lambda: dev.inject_fault("launch_kernel", 999),
        lambda: dev.cleanup(),
    ):
        with pytest.raises(DeviceLostError, match=str(code)):
            call()
    dev.close()  # never hangs, never raises
    with lifecore.Device(EMULATED, graphs=dev.graphs) as fresh:  # another device is unaffected
        assert not fresh.lost
        assert_recapturable(fresh, fresh.stream())


# Every status CUDA's documentation calls sticky (the context is unusable, or the process must
# restart); the mock follows CUDA's list and names, so a program sees the mock lose the device
# where CUDA would.
CUDA_STICKY = {226: "CUDA_ERROR_CONTAINED", 700: "CUDA_ERROR_ILLEGAL_ADDRESS", 702: "CUDA_ERROR_LAUNCH_TIMEOUT",
               710: "CUDA_ERROR_ASSERT", 714: "CUDA_ERROR_HARDWARE_STACK_ERROR", 715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
               716: "CUDA_ERROR_MISALIGNED_ADDRESS", 717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
               718: "CUDA_ERROR_INVALID_PC", 719: "CUDA_ERROR_LAUNCH_FAILED", 721: "CUDA_ERROR_TENSOR_MEMORY_LEAK",
               810: "CUDA_ERROR_MPS_CLIENT_TERMINATED", 911: "CUDA_ERROR_EXTERNAL_DEVICE"}


@pytest.mark.parametrize("code", sorted(CUDA_STICKY))
def test_the_mock_loses_the_device_on_every_status_cuda_calls_sticky(code) -> None:
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        dev.inject_fault("stream_synchronize", code)
        with pytest.raises(DeviceLostError) as raised:
            s.sync()
        assert raised.value.code == code and CUDA_STICKY[code] in str(raised.value)
        assert dev.lost


def test_a_status_cuda_does_not_call_sticky_leaves_the_device_usable() -> None:
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        dev.inject_fault("stream_synchronize", 999)
        with pytest.raises(DriverError) as raised:
            s.sync()
        assert not isinstance(raised.value, DeviceLostError) and not dev.lost
        assert "CUDA_ERROR_UNKNOWN" in str(raised.value)
        s.sync()


def test_a_sticky_status_at_the_end_of_a_capture_loses_the_device_not_the_stream_state(mock_hardware_device) -> None:
    dev = mock_hardware_device
    s, _ = open_recording(dev)
    dev.inject_fault("stream_end_capture", 719)
    with pytest.raises(DeviceLostError):
        s.end_capture()
    assert dev.lost
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE and not s.driver_capturing
    s.abort_capture()  # nothing left to end; never raises on a lost device
    with pytest.raises(DeviceLostError):
        s.graph_prepare()


@pytest.mark.parametrize("call", ["end_capture", "abort_capture"])
@pytest.mark.parametrize("sticky_in", ["stream_end_capture", "stream_capture_info"])
def test_a_sticky_status_while_recovering_a_failed_end_loses_the_device(mock_hardware_device, sticky_in, call) -> None:
    # The end fails (recoverably), then the driver is asked whether it still captures, then the
    # end is retried: a sticky status in the query or the retry took the context, and its
    # capture, with it. It used to be reported as "the driver still captures" (the stream kept
    # in CAPTURE and the device not marked lost).
    dev = mock_hardware_device
    s, _ = open_recording(dev)
    dev.inject_fault("stream_end_capture", 999)
    dev.inject_fault(sticky_in, 700, after=1 if sticky_in == "stream_end_capture" else 0)
    with pytest.raises(DeviceLostError) as raised:
        getattr(s, call)()
    assert raised.value.code == 700
    assert dev.lost
    assert s.capture_state.variant is CaptureVariant.NO_CAPTURE and not s.driver_capturing
    assert dev.memory_stats()["windows_active"] == 0


@pytest.mark.parametrize("sticky_in, call", [("graph_upload", "mockGraphUpload"), ("graph_destroy", "mockGraphDestroy"),
                                             ("thread_exchange_capture_mode", "mockThreadExchangeCaptureMode")])
def test_a_sticky_status_in_the_seal_raises_from_end_capture(mock_hardware_device, sticky_in, call) -> None:
    """The seal's upload, its destroy of the captured graph and the capture-mode switch back
    drop their statuses (nothing can be undone there): a sticky one had let end_capture return
    a graph on a dead context, the device not lost until a later call failed, naming that call."""
    dev = mock_hardware_device
    s, _ = open_recording(dev)
    dev.inject_fault(sticky_in, 700)
    with pytest.raises(DeviceLostError, match=call) as raised:
        s.end_capture()
    assert raised.value.code == 700 and raised.value.call == call
    assert dev.lost and s.capture_state.variant is CaptureVariant.NO_CAPTURE
    with pytest.raises(DeviceLostError, match=call):
        s.graph_prepare()


def test_a_sticky_status_met_while_releasing_loses_the_device_at_once(mock_device) -> None:
    """Releases never raise, and dropped their driver statuses: a sticky one in a graph's wait
    for its replays, a pool's free at cleanup() or an abort's capture-mode switch left the device
    working on a dead context until some later call failed (naming that call)."""
    dev = mock_device
    s = dev.stream()
    buf = s.alloc(4 * N)
    graph = s.capture(lambda st: st.fill(buf, 2))
    graph.replay()
    dev.inject_fault("stream_synchronize", 719)
    graph.destroy()
    assert dev.lost
    with pytest.raises(DeviceLostError, match="719"):
        s.sync()
    with lifecore.Device(EMULATED, graphs=dev.graphs) as other:
        other.stream().alloc(64).free()
        other.stream().sync()
        other.inject_fault("mem_free", 700)
        other.cleanup()  # the pool's free slices go back to the driver
        assert other.lost
    with lifecore.Device(EMULATED, graphs=dev.graphs) as third:
        t, _ = open_recording(third)
        third.inject_fault("thread_exchange_capture_mode", 700)
        t.abort_capture()
        assert third.lost and t.capture_state.variant is CaptureVariant.NO_CAPTURE


def test_a_sticky_status_recorded_asynchronously_surfaces_as_device_lost(mock_device) -> None:
    dev = mock_device
    s = dev.stream()
    buf = s.alloc(4 * N)
    dev.inject_fault("memset_d32_async", 719)
    s.fill(buf, 1)  # queued
    with pytest.raises(DeviceLostError):
        s.sync()
    assert dev.lost
