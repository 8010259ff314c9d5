"""A Ctrl-C that lands as one of lifecore's calls returns (where CPython raises a pending
KeyboardInterrupt) leaves every object usable. Each test makes the call do its work and then
raise, as a real signal delivered at that moment would."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

from lifecore.capture import (Axis, CaptureDiscovery, CapturePlan, CaptureRequest, CaptureSelection, CaptureSession,
                              CaptureTransform, NumpyBackend, ObservationPoint, capture_step, unlimited)
from lifecore.sequence import AdmissionCoordinator, AdmissionDeferred, Admitted, CapacityWaitRegistration

from interrupting import interrupting_after

PAGE = 4096


def test_capture_step_drains_a_step_whose_begin_was_interrupted(monkeypatch) -> None:
    # Before: begin_step ran before the try that drains, so the step stayed open and the next
    # capture_step was refused (previous capture step has not been consumed).
    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("batch", "batch"), Axis("seq", "sequence"),
                                                              Axis("d", 8)])])
    plan = CapturePlan([CaptureSelection("s", "p", CaptureTransform.summary())], unlimited())
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 4, 2)))
    interrupting_after(CaptureSession, "begin_step", monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        with capture_step(session, 0):
            pytest.fail("the block never runs")
    assert not session.step_pending
    with capture_step(session, 0) as result:
        session.observe(NumpyBackend(), "p", np.ones((1, 4, 8), np.float32))
    assert [r.outcome.name for r in result.step.records] == ["CAPTURED"]


def test_capture_step_leaves_a_step_it_did_not_begin_alone() -> None:
    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("d", 8)])])
    plan = CapturePlan([CaptureSelection("s", "p", CaptureTransform.summary())], unlimited())
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 4, 2)))
    from lifecore.capture import CapturePhase

    session.begin_step(CapturePhase.PREFILL, 0)
    with pytest.raises(Exception, match="not been consumed"):
        with capture_step(session, 1):
            pass
    assert session.step_pending  # the caller's own step, still theirs to take
    session.take_step()


def test_capture_step_leaves_a_step_another_thread_began_meanwhile_alone() -> None:
    # Before: capture_step checked step_pending, then began its step, and drained whatever was
    # pending when it ended. A step another thread began between the check and the begin got
    # the begin refused, and was then drained: that thread lost its records and its step. The
    # other thread is played here by a trace hook, run just before capture_step's begin.
    import sys

    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("d", 8)])])
    plan = CapturePlan([CaptureSelection("s", "p", CaptureTransform.summary())], unlimited())
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 4, 2)))
    from lifecore.capture import CapturePhase

    began_meanwhile = []

    def other_thread(frame, event, arg):
        if (event == "line" and frame.f_code.co_name == "capture_step" and not began_meanwhile
                and "session.begin_step(phase, prediction)" in linecache.getline(frame.f_code.co_filename,
                                                                                  frame.f_lineno)):
            session.begin_step(CapturePhase.PREFILL, 0)
            began_meanwhile.append(True)
        return other_thread

    import linecache

    sys.settrace(other_thread)
    try:
        with pytest.raises(Exception, match="not been consumed"):
            with capture_step(session, 1):
                pass
    finally:
        sys.settrace(None)
    assert began_meanwhile and session.step_pending  # the other thread's step, still its own
    assert session.take_step().prediction == 0


def test_an_interrupted_async_wait_never_writes_into_a_reused_descriptor(monkeypatch, tmp_path) -> None:
    # Before: the hook wrote to the pipe's number, which the wait closed without removing the
    # hook; the next release wrote a byte into whatever file got that number. Then the pipe
    # itself leaked when the Ctrl-C landed as it was made (2 descriptors per wait): the channel
    # is now one object whose end closes the pipe and removes the hook.
    coordinator = AdmissionCoordinator(None, domains={"kv": 2 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                       max_active_sequences=8)
    held = coordinator.admit("a", 32, 32)
    waiting = coordinator.admit("b", 16, 16)
    assert isinstance(held, Admitted) and isinstance(waiting, AdmissionDeferred)
    registration = coordinator.register_waiter(waiting)
    loop = asyncio.new_event_loop()
    descriptors = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for _ in range(20):
        interrupting_after(CapacityWaitRegistration, "_wake_channel", monkeypatch)
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(registration.wait_async(5.0))
    loop.close()
    if descriptors is not None:
        assert len(os.listdir("/proc/self/fd")) == descriptors - 3  # the loop's own three closed with it
    files = [open(tmp_path / f"f{i}", "wb") for i in range(8)]  # the lowest free numbers: the pipe's
    held.resources.close()  # a release signals the registration
    for f in files:
        f.close()
    assert all(os.path.getsize(tmp_path / f"f{i}") == 0 for i in range(8))
    assert registration.should_retry()  # the release signalled it all the same
    assert asyncio.run(registration.wait_async(1.0))
