"""Dropping the last reference to a Graph, a Stream or a Device never waits for the device with
the interpreter lock held: another Python thread keeps running while the drop waits for the work."""

from __future__ import annotations

import threading
import time

import pytest

import lifecore

from backend_roles import EMULATED

# Seconds the emulated device holds the streams' queued work. A drop that held the interpreter lock would
# stall the other thread for all of it; the bound (three quarters of it) leaves ample room for a
# busy machine's scheduling without letting a held lock pass.
PAUSE = 1.5
STALL_BOUND = PAUSE * 0.75


def longest_stall_while_dropping(holder: list) -> tuple[float, float]:
    """Drops the last reference in ``holder`` from a second thread; returns the longest gap
    between two ticks of this thread from the drop's start to its end, and how long it took."""
    dropping = threading.Thread(target=holder.clear)  # the destructor waits for the paused work
    start = last = time.monotonic()
    longest = 0.0
    dropping.start()
    while dropping.is_alive():
        time.sleep(0.002)
        now = time.monotonic()
        longest, last = max(longest, now - last), now
    dropping.join()
    return longest, time.monotonic() - start


@pytest.mark.time_limit(60)
@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_dropping_the_last_graph_reference_lets_other_threads_run(graphs: str) -> None:
    with lifecore.Device(EMULATED, graphs=graphs) as dev:
        s = dev.stream()
        b = s.alloc(4096)
        holder = [s.capture(lambda st: st.fill(b, 1))]
        dev._pause_streams_for(PAUSE)  # work queued from now on stays queued for PAUSE seconds
        holder[0].replay()
        stats = dev.memory_stats()
        assert stats["graphs_alive"] == 1
        stall, took = longest_stall_while_dropping(holder)
        # The drop did wait for the work (its slices are released only after it) ...
        assert took >= PAUSE * 0.5
        assert dev.memory_stats()["graphs_alive"] == 0
        # ... but never held this thread up: with the lock held it would stall for the whole pause.
        assert stall < STALL_BOUND, f"this thread stalled {stall:.2f} s while a graph was dropped"
        assert s.read(b) == (1).to_bytes(4, "little") * 1024


@pytest.mark.time_limit(60)
def test_dropping_the_last_stream_and_device_references_lets_other_threads_run() -> None:
    dev = lifecore.Device(EMULATED)
    s = dev.stream()
    b = s.alloc(4096)
    dev._pause_streams_for(PAUSE)
    s.fill(b, 7)
    holder = [b, s, dev]
    del dev, s, b
    stall, took = longest_stall_while_dropping(holder)  # the stream synchronizes, the device closes
    assert took >= PAUSE * 0.5  # it did wait for the work
    assert stall < STALL_BOUND, f"this thread stalled {stall:.2f} s while a stream and its device were dropped"


def test_the_pause_knob_is_emulated_only_and_bounded() -> None:
    with lifecore.Device(EMULATED) as dev:
        for bad in (-1.0, 61.0, float("nan")):
            with pytest.raises(lifecore.InvalidArgumentError):
                dev._pause_streams_for(bad)
