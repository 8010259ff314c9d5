"""``with`` on an object that has already ended (closed, destroyed, stopped, finalized, released)
is refused with ClosedError, as Python refuses ``with`` on a closed file: a block whose every call
would fail is never entered, and the refusal changes nothing. A live object enters and returns
itself, and leaving the block ends it as before."""

from __future__ import annotations

import functools

import pytest

import lifecore
import lifecore.sequence
from lifecore import ClosedError
from lifecore.capture import CaptureRequest, CaptureSelection, CaptureTransform
from lifecore.testing.capture_session import sample_discovery

import capture_builders
from backend_roles import EMULATED

PAGE = 4096


def coordinator() -> lifecore.sequence.AdmissionCoordinator:
    return lifecore.sequence.AdmissionCoordinator(domains={"kv": 16 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                         max_active_sequences=4)


def refused(obj, pattern: str) -> None:
    with pytest.raises(ClosedError, match="^" + pattern):
        with obj:
            raise AssertionError("the block of an ended object ran")


def test_an_ended_device_graph_and_profile_are_not_entered() -> None:
    device = lifecore.Device(EMULATED)
    with device as entered:
        assert entered is device
        stream = device.stream()
        buf = stream.alloc(64)
        with stream.capture(lambda st: st.fill(buf, 1)) as graph:
            assert graph.alive
        assert not graph.alive
        refused(graph, r"Graph.__enter__: the graph is destroyed")
        with stream.profile() as profile:
            stream.fill(buf, 2)
        assert profile.stopped and profile.elapsed_ms is not None
        refused(profile, r"Profile.__enter__: the profile is stopped")
        assert profile.elapsed_ms is not None  # the refusal changed nothing
    assert device.closed
    refused(device, r"Device.__enter__: the device is closed")


def test_ended_sequence_objects_are_not_entered() -> None:
    with coordinator() as c:
        decision = c.admit("r", 16, 64)
        with decision.resources as resources:
            session = resources.open_session()
            with session.acquire_frame() as frame:
                pass
            assert frame.finalized
            refused(frame, r"FrameHold.__enter__: the frame is finalized")
            with session:
                pass
            assert session.closed
            refused(session, r"SequenceSession.__enter__: the session is closed")
        assert resources.closed
        refused(resources, r"AdmittedSequenceResources.__enter__: the handle is closed")
        assert c.capacity().active_sequences == 0
    assert c.closed
    refused(c, r"AdmissionCoordinator.__enter__: the coordinator is closed")


def test_a_committed_restore_is_not_entered() -> None:
    session = capture_builders.session_for(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()),
                                           request=CaptureRequest(1, 4, 4))
    checkpoint = session.checkpoint(sample_discovery())
    prepared = session.prepare_restore(checkpoint)
    prepared.commit()
    refused(prepared, r"PreparedCaptureRestore.__enter__: it no longer holds its session")
    assert prepared.committed
