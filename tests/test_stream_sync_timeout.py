"""Stream.sync(timeout): a bounded wait for the device that yields to Ctrl-C.

Without a timeout the driver's blocking wait runs as before. With one, the wait polls the
driver in slices without the GIL: it returns False once the timeout passes with work still
queued (and nothing changed), True once the stream is idle, and a signal handler runs between
slices. The mock holds every stream's work on request (`Device._pause_streams_for`), so work
stays queued for as long as a test needs without timing tricks on the device's side."""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest

import lifecore
from lifecore import CaptureStateError, ClosedError, DriverError, InvalidArgumentError, LifecoreTypeError

from backend_roles import EMULATED
from signal_timer import Stop, python_handles_ctrl_c, stop_after

N = 1024
HELD_S = 2.0  # how long the mock holds queued work in a test
INTERRUPT_BOUND = 1.0  # a handler runs within one slice (0.05 s); the bound leaves room for a busy machine


@pytest.fixture
def held():
    """A device whose stream has a fill queued behind held work (for HELD_S seconds)."""
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        buf = s.alloc(4 * N)
        s.fill(buf, 1)
        s.sync()
        dev._pause_streams_for(HELD_S)
        s.fill(buf, 7)
        yield dev, s, buf


def values(s, buf) -> np.ndarray:
    return np.frombuffer(s.read(buf), np.uint32)


def test_an_idle_stream_syncs_at_once_with_any_timeout() -> None:
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        for timeout in (None, 0, 0.0, 1, 2.5, float("inf"), np.float64(1.0), np.int64(3)):
            assert s.sync(timeout) is True
        assert s.sync() is True


@pytest.mark.time_limit(30)
@pytest.mark.parametrize("timeout", [0, 0.05, 0.2])
def test_a_timeout_with_work_still_queued_returns_false_and_changes_nothing(held, timeout) -> None:
    dev, s, buf = held
    start = time.monotonic()
    assert s.sync(timeout) is False
    waited = time.monotonic() - start
    assert timeout <= waited < HELD_S / 2  # it waited its timeout, not for the work
    assert s.capture_state.variant is lifecore.CaptureVariant.NO_CAPTURE
    # Still queued, still whole: a later sync sees the fill land.
    assert s.sync(timeout=30) is True
    assert (values(s, buf) == 7).all()


@pytest.mark.time_limit(30)
def test_a_timeout_longer_than_the_work_returns_true_once_idle(held) -> None:
    dev, s, buf = held
    start = time.monotonic()
    assert s.sync(timeout=30) is True
    assert time.monotonic() - start < 15  # it returned once the work ran, not at its deadline
    assert (values(s, buf) == 7).all()


@pytest.mark.time_limit(30)
@pytest.mark.parametrize("timeout", [float("inf"), 10**30, 1e300, 30.0])
def test_a_signal_handler_that_raises_stops_a_bounded_sync_and_the_stream_stays_usable(held, timeout) -> None:
    dev, s, buf = held

    with stop_after(0.2) as fired:
        with pytest.raises(Stop):
            s.sync(timeout)
        assert time.monotonic() - fired[0] < INTERRUPT_BOUND
    # Interrupted, not broken: the queued fill still lands, and the stream takes new work.
    assert s.sync() is True
    assert (values(s, buf) == 7).all()
    s.fill(buf, 9)
    assert s.sync(5) is True and (values(s, buf) == 9).all()


@pytest.mark.time_limit(30)
def test_ctrl_c_raises_keyboard_interrupt_from_a_bounded_sync(held) -> None:
    dev, s, buf = held
    with python_handles_ctrl_c():
        timer = threading.Timer(0.2, lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT))
        timer.start()
        start = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                s.sync(float("inf"))
            assert time.monotonic() - start < 0.2 + INTERRUPT_BOUND
        finally:
            timer.join()
    assert s.sync() is True and (values(s, buf) == 7).all()


@pytest.mark.time_limit(30)
def test_a_bounded_sync_lets_other_python_threads_run(held) -> None:
    dev, s, buf = held
    ticks = []
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    other = threading.Thread(target=count)
    other.start()
    try:
        assert s.sync(0.5) is False
        during = len(ticks)
    finally:
        stop.set()
        other.join()
    assert during > 10  # the other thread kept running while this one waited


@pytest.fixture
def blocked_in_sync(held):
    """The held device, with another thread blocked in a sync() of the held work (it holds the
    stream's lock until the work runs)."""
    dev, s, buf = held
    other = threading.Thread(target=s.sync)
    other.start()
    time.sleep(0.2)  # time for it to take the stream's lock and block in the driver
    yield dev, s, buf
    other.join()


@pytest.mark.time_limit(30)
def test_a_bounded_sync_ends_at_its_timeout_while_another_thread_blocks_in_sync(blocked_in_sync) -> None:
    dev, s, buf = blocked_in_sync
    start = time.monotonic()
    assert s.sync(0.2) is False  # at its timeout, not once the other thread's sync returns
    assert time.monotonic() - start < HELD_S / 2
    assert s.sync(timeout=30) is True and (values(s, buf) == 7).all()


@pytest.mark.time_limit(30)
def test_a_bounded_sync_yields_to_a_signal_while_another_thread_blocks_in_sync(blocked_in_sync) -> None:
    dev, s, buf = blocked_in_sync
    with stop_after(0.2) as fired:
        with pytest.raises(Stop):
            s.sync(float("inf"))
        assert time.monotonic() - fired[0] < INTERRUPT_BOUND
    assert s.sync(timeout=30) is True and (values(s, buf) == 7).all()


@pytest.mark.parametrize(
    "timeout, error, message",
    [
        (-1, InvalidArgumentError, "sync: timeout must not be negative, got -1$"),
        (-0.5, InvalidArgumentError, r"sync: timeout must not be negative, got -0\.5$"),
        (-2**1024, InvalidArgumentError, r"sync: timeout must not be negative, got -1797693\d{302}$"),  # was -inf
        (-2**63 - 1, InvalidArgumentError, r"sync: timeout must not be negative, got -9223372036854775809$"),
        (float("nan"), InvalidArgumentError, "timeout. must be a number, not NaN"),
        ("1", LifecoreTypeError, "timeout"),
        (True, LifecoreTypeError, "timeout"),
        ([1], LifecoreTypeError, "timeout"),
    ],
)
def test_a_bad_timeout_is_refused_before_any_wait(held, timeout, error, message) -> None:
    dev, s, buf = held
    start = time.monotonic()
    with pytest.raises(error, match=message):
        s.sync(timeout)
    assert time.monotonic() - start < HELD_S / 2
    assert s.sync(timeout=30) is True and (values(s, buf) == 7).all()


def test_a_queued_failure_surfaces_at_a_bounded_sync_once() -> None:
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        buf = s.alloc(4 * N)
        dev.inject_fault("memset_d32_async", 999)
        s.fill(buf, 3)  # refused by the driver, queued as the stream's failure
        with pytest.raises(DriverError):
            s.sync(timeout=10)
        assert s.sync(timeout=10) is True  # reported once; the stream goes on
        s.fill(buf, 4)
        assert s.sync(10) is True and (values(s, buf) == 4).all()


def test_a_failed_poll_raises_the_driver_error_and_leaves_the_stream_usable() -> None:
    with lifecore.Device(EMULATED) as dev:
        s = dev.stream()
        buf = s.alloc(4 * N)
        s.fill(buf, 5)
        dev.inject_fault("stream_query", 999)
        with pytest.raises(DriverError) as raised:
            s.sync(timeout=10)
        assert raised.value.code == 999 and raised.value.call == "mockStreamQuery"
        assert s.sync(timeout=10) is True and (values(s, buf) == 5).all()


@pytest.mark.parametrize("graphs", ["software", "hardware"])
def test_a_bounded_sync_is_refused_inside_a_software_window_like_sync(graphs) -> None:
    with lifecore.Device(EMULATED, graphs=graphs) as dev:
        s = dev.stream()
        buf = s.alloc(4 * N)
        s.graph_prepare()
        s.begin_capture()
        outcomes = []
        for call in (lambda: s.sync(), lambda: s.sync(timeout=10)):
            try:
                call()
                outcomes.append(None)
            except lifecore.LifecoreError as error:
                outcomes.append(type(error))
        if graphs == "software":  # refused on the spot, the recording whole
            assert outcomes == [CaptureStateError, CaptureStateError]
            assert s.capture_state.is_recording()
            s.end_capture()
        else:  # the driver refuses a host wait in a capture: both fail alike
            assert outcomes[0] is outcomes[1] and outcomes[0] is not None
            s.abort_capture()
        assert s.capture_state.variant is lifecore.CaptureVariant.NO_CAPTURE
        s.fill(buf, 2)
        assert s.sync(10) is True and (values(s, buf) == 2).all()


def test_a_bounded_sync_on_a_closed_device_is_closed_error() -> None:
    dev = lifecore.Device(EMULATED)
    s = dev.stream()
    dev.close()
    with pytest.raises(ClosedError):
        s.sync(timeout=1)
