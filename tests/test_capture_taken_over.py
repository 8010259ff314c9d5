"""A capture() whose capture another thread aborted and replaced while its pass ran.

Any thread may abort a prepared capture, and in relaxed mode a recording one. capture() names
the capture it prepared in every later call, so the capture put in its place is never begun,
sealed or aborted in capture()'s name: capture() raises (its pass's own exception, or
CaptureStateError), and the other thread's capture goes on and seals what that thread recorded."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import lifecore
from lifecore import CaptureStateError, CaptureVariant

N = 256


class Worker:
    """One thread kept alive across calls: a recording it begins stays open until it ends it
    (a thread that exits with its recording open aborts it)."""

    def __init__(self) -> None:
        self._calls: queue.Queue[Callable[[], Any] | None] = queue.Queue()
        self._results: queue.Queue[tuple[bool, Any]] = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (fn := self._calls.get()) is not None:
            try:
                self._results.put((True, fn()))
            except BaseException as error:  # noqa: BLE001 - handed back to the caller
                self._results.put((False, error))

    def call(self, fn: Callable[[], Any]) -> Any:
        self._calls.put(fn)
        ok, value = self._results.get(timeout=30)
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        self._calls.put(None)
        self._thread.join(timeout=30)
        assert not self._thread.is_alive()


class PassFailed(Exception):
    pass


def read_u32(stream: lifecore.Stream, buf: lifecore.Buffer) -> np.ndarray:
    return np.frombuffer(stream.read(buf), np.uint32)


@pytest.mark.parametrize("graphs", ["hardware", "software"])
@pytest.mark.parametrize("mode", ["thread_local", "global", "relaxed"])
@pytest.mark.parametrize("other", ["prepared", "recording"])
@pytest.mark.parametrize("pass_fails", [False, True], ids=["pass_returns", "pass_raises"])
def test_a_capture_put_in_captures_place_is_left_to_its_thread(backend_name, graphs, mode, other, pass_fails) -> None:
    worker = Worker()
    try:
        with lifecore.Device(backend_name, graphs=graphs, capture_mode=mode) as dev:
            s = dev.stream()
            mine, theirs = s.alloc(4 * N), s.alloc(4 * N)
            s.fill(mine, 0)
            s.fill(theirs, 0)
            s.sync()

            def take_over() -> None:
                s.abort_capture()  # capture()'s, still in PREPARE: any thread may abort it
                s.graph_prepare()
                if other == "recording":
                    s.begin_capture()
                    s.fill(theirs, 9)

            calls = 0

            def fn(stream: lifecore.Stream) -> None:
                nonlocal calls
                calls += 1
                worker.call(take_over)  # during the warmup pass
                if pass_fails:
                    raise PassFailed

            if pass_fails:
                with pytest.raises(PassFailed) as raised:
                    s.capture(fn, warmup=1)
                assert not getattr(raised.value, "__notes__", None)  # no "still capturing" note: not its capture
            else:
                with pytest.raises(CaptureStateError, match="aborted by another call") as raised:
                    s.capture(fn, warmup=1)
                assert "another's, and was left as it is" in str(raised.value)
            assert calls == 1  # the warmup only: nothing was recorded in capture()'s name

            # The other capture is as its thread left it.
            expected = CaptureVariant.CAPTURE if other == "recording" else CaptureVariant.PREPARE
            assert s.capture_state.variant is expected
            assert dev.memory_stats()["windows_active"] == 1

            def finish() -> lifecore.Graph:
                if other == "prepared":
                    s.begin_capture()
                    s.fill(theirs, 9)
                return s.end_capture()

            graph = worker.call(finish)
            assert s.capture_state.variant is CaptureVariant.NO_CAPTURE and not s.driver_capturing
            np.testing.assert_array_equal(read_u32(s, theirs), np.zeros(N, np.uint32))  # recorded, not run
            graph.replay()
            np.testing.assert_array_equal(read_u32(s, theirs), np.full(N, 9, np.uint32))
            graph.destroy()

            # And capture() captures again.
            again = s.capture(lambda st: st.fill(mine, 7))
            again.replay()
            np.testing.assert_array_equal(read_u32(s, mine), np.full(N, 7, np.uint32))
            again.destroy()
            s.sync()
            assert dev.memory_stats()["windows_active"] == 0
    finally:
        worker.stop()


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_a_capture_aborted_and_not_replaced_is_refused_at_its_begin(backend_name, graphs) -> None:
    with lifecore.Device(backend_name, graphs=graphs) as dev:
        s = dev.stream()
        buf = s.alloc(4 * N)

        def fn(stream: lifecore.Stream) -> None:
            thread = threading.Thread(target=s.abort_capture)
            thread.start()
            thread.join(timeout=30)

        with pytest.raises(CaptureStateError, match="aborted by another call") as raised:
            s.capture(fn, warmup=1)
        assert "the stream is out of capture" in str(raised.value)
        assert s.capture_state.variant is CaptureVariant.NO_CAPTURE
        graph = s.capture(lambda st: st.fill(buf, 3))
        graph.replay()
        np.testing.assert_array_equal(read_u32(s, buf), np.full(N, 3, np.uint32))
