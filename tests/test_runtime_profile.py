"""Stream.profile: device time measured with driver events, and what each capture state does
with it (the runtime on the emulated device, and the reference model)."""

from __future__ import annotations

import numpy as np
import pytest

import lifecore
from lifecore import CaptureStateError, CaptureVariant, ClosedError, DriverError
from lifecore import kernels as K
from lifecore.models.stream_capture import PROFILE_DRIVER_OPERATIONS, DeviceModel, Messages, ModelError

from backend_roles import EMULATED

N = 256
SOFTWARE_REFUSAL = ("profile: a software capture window records launches, fills and copies only, so this "
                    "operation cannot be part of a graph")


def upload(stream, values):
    arr = np.asarray(values, dtype=np.float32)
    buf = stream.alloc(arr.nbytes)
    stream.write(buf, arr.tobytes())
    return buf


def axpy(stream, x, y, a=2.0):
    stream.launch(K.axpy_f32, (N + 127) // 128, 128, [N, a, x, y])


def recording(device):
    """A stream of `device` recording, after a warmup of the axpy on x and y; (stream, x, y)."""
    s = device.stream()
    x, y = upload(s, np.arange(N)), upload(s, np.zeros(N))
    s.graph_prepare()
    axpy(s, x, y)
    s.begin_capture()
    return s, x, y


def recapture(stream, x, y):
    """A whole capture cycle succeeds: the stream was left usable and re-capturable."""
    graph = stream.capture(lambda s: axpy(s, x, y), warmup=1)
    assert graph.alive
    graph.destroy()


def test_profile_measures_the_work_inside_it(backend_name):
    with lifecore.Device(backend_name) as device:
        s = device.stream()
        x, y = upload(s, np.arange(N)), upload(s, np.zeros(N))
        with s.profile() as p:
            assert p.elapsed_ms is None and not p.stopped
            axpy(s, x, y)
        assert p.stopped and isinstance(p.elapsed_ms, float) and p.elapsed_ms >= 0.0
        np.testing.assert_array_equal(np.frombuffer(s.read(y), np.float32), 2.0 * np.arange(N, dtype=np.float32))
        q = s.profile()
        assert q.stop() == q.elapsed_ms >= 0.0
        with pytest.raises(ClosedError, match="^Profile.stop: this profile has already stopped$"):
            q.stop()


def test_profile_during_warmup_measures():
    with lifecore.Device(EMULATED) as device:
        s = device.stream()
        s.graph_prepare()
        with s.profile() as p:
            pass
        assert p.elapsed_ms is not None
        s.abort_capture()


def test_an_exception_inside_the_profile_propagates_and_leaves_the_stream_usable():
    with lifecore.Device(EMULATED) as device:
        s = device.stream()
        with pytest.raises(KeyError):
            with s.profile() as p:
                raise KeyError("the profiled work failed")
        assert p.stopped and p.elapsed_ms is None
        s.sync()


def test_a_software_recording_refuses_a_profile_on_the_spot():
    with lifecore.Device(EMULATED, graphs="software") as device:
        s, x, y = recording(device)
        with pytest.raises(CaptureStateError) as raised:
            s.profile()
        assert str(raised.value) == SOFTWARE_REFUSAL
        assert s.capture_state.variant == CaptureVariant.CAPTURE
        axpy(s, x, y)
        graph = s.end_capture()  # refused on the spot: the recording is not affected
        assert graph.node_count == 1
        graph.destroy()


def test_a_profile_ending_inside_a_software_recording_is_refused():
    with lifecore.Device(EMULATED, graphs="software") as device:
        s = device.stream()
        s.graph_prepare()
        p = s.profile()
        s.begin_capture()
        with pytest.raises(CaptureStateError) as raised:
            p.stop()
        # refused, named as the stop it is, and nothing changed
        assert str(raised.value) == "Profile.stop" + SOFTWARE_REFUSAL[len("profile"):] and not p.stopped
        s.abort_capture()
        assert p.stop() >= 0.0 and p.stopped


@pytest.mark.parametrize("mode", ["thread_local", "global", "relaxed"])
def test_a_hardware_recording_refuses_a_profile_on_the_spot_and_seals(mode):
    # It used to start: its start event became a node of the recording and its stop's host wait
    # went to the driver, which refused it (900, or 907 in relaxed mode) and lost the recording,
    # as it did when the profile was still running at end_capture. No profile there could measure.
    with lifecore.Device(EMULATED, graphs="hardware", capture_mode=mode) as device:
        s, x, y = recording(device)
        with pytest.raises(CaptureStateError) as raised:
            with s.profile():
                pass
        assert str(raised.value) == Messages.PROFILE_WHILE_RECORDING
        assert s.capture_state.variant == CaptureVariant.CAPTURE
        axpy(s, x, y)
        graph = s.end_capture()  # the recording went on
        assert graph.node_count == 1
        graph.replay()  # after the warmup's axpy, the recorded one
        np.testing.assert_array_equal(np.frombuffer(s.read(y), np.float32), 4.0 * np.arange(N, dtype=np.float32))
        graph.destroy()
        recapture(s, x, y)


@pytest.mark.parametrize("mode", ["thread_local", "relaxed"])
def test_a_profile_running_when_its_stream_begins_recording_stops_after_the_recording(mode):
    # Its stop waits on the host: inside the recording the driver would refuse the wait and
    # invalidate the capture, so it is refused up front, the profile left to stop later.
    with lifecore.Device(EMULATED, graphs="hardware", capture_mode=mode) as device:
        s = device.stream()
        x, y = upload(s, np.arange(N)), upload(s, np.zeros(N))
        s.graph_prepare()
        axpy(s, x, y)
        p = s.profile()
        s.begin_capture()
        axpy(s, x, y)
        with pytest.raises(CaptureStateError) as raised:
            p.stop()
        assert str(raised.value) == Messages.HOST_WAIT_WHILE_RECORDING.format(op="Profile.stop")
        assert not p.stopped and p.elapsed_ms is None
        graph = s.end_capture()
        assert graph.node_count == 1
        assert p.stop() >= 0.0 and p.stopped
        graph.destroy()
        recapture(s, x, y)


@pytest.mark.parametrize("op", PROFILE_DRIVER_OPERATIONS)
@pytest.mark.parametrize("code", [2, 999])
def test_a_failing_driver_operation_raises_and_leaves_the_stream_usable(op, code):
    with lifecore.Device(EMULATED) as device:
        s = device.stream()
        x, y = upload(s, np.arange(N)), upload(s, np.zeros(N))
        device.inject_fault(op, code)
        with pytest.raises(DriverError) as raised:
            with s.profile():
                axpy(s, x, y)
        assert raised.value.code == code
        device.clear_faults()
        with s.profile() as p:
            pass
        assert p.elapsed_ms is not None
        s.sync()  # nothing was queued on the stream
        # A failed start runs nothing inside the with; a failed stop comes after the work.
        ran = op in ("event_synchronize", "event_elapsed")
        expected = 2.0 * np.arange(N, dtype=np.float32) if ran else np.zeros(N, np.float32)
        np.testing.assert_array_equal(np.frombuffer(s.read(y), np.float32), expected)
        recapture(s, x, y)


def test_a_failing_event_destroy_loses_nothing():
    with lifecore.Device(EMULATED) as device:
        s = device.stream()
        device.inject_fault("event_destroy", 999, times=2)
        with s.profile() as p:
            pass
        assert p.elapsed_ms is not None


# ---- the model ---------------------------------------------------------------------------


def _recording(graphs, mode="thread_local"):
    model = DeviceModel(graphs, mode)
    s = model.new_stream()
    model.graph_prepare(s)
    model.begin_capture(s)
    return model, s


def test_model_profile_outside_a_recording_and_its_faults():
    model = DeviceModel("hardware")
    s = model.new_stream()
    model.profile(s)
    for op in PROFILE_DRIVER_OPERATIONS:
        with pytest.raises(ModelError) as raised:
            model.profile(s, fault=op)
        assert raised.value.kind == "Driver"
    model.profile(s, fault="event_destroy")
    assert not model.streams[s].queued


def test_model_profile_in_a_software_recording():
    model, s = _recording("software")
    with pytest.raises(ModelError) as raised:
        model.profile(s)
    assert (raised.value.kind, raised.value.message) == ("CaptureState", SOFTWARE_REFUSAL)
    model.end_capture(s)


@pytest.mark.parametrize("mode", ["thread_local", "global", "relaxed"])
def test_model_profile_in_a_hardware_recording(mode):
    model, s = _recording("hardware", mode)
    for fault in (None, *PROFILE_DRIVER_OPERATIONS):  # refused before any driver call
        with pytest.raises(ModelError) as raised:
            model.profile(s, fault=fault)
        assert (raised.value.kind, raised.value.message) == ("CaptureState", Messages.PROFILE_WHILE_RECORDING)
    assert model.graphs_by_id[model.end_capture(s)].node_count == 0


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_a_refused_stop_leaves_the_profile_to_stop_later(graphs) -> None:
    # Before: the refusal said "Nothing was changed" but used the profile up: stopped was True,
    # and the stop after the capture raised ClosedError, the measurement lost.
    with lifecore.Device(EMULATED, graphs=graphs) as device:
        s, other = device.stream(), device.stream()
        x = s.alloc(1 << 12)
        profile = other.profile()
        other.fill(x, 1)
        s.graph_prepare()
        s.begin_capture()
        with pytest.raises(CaptureStateError):
            profile.stop()  # its host wait, while this thread records on another stream
        assert not profile.stopped and profile.elapsed_ms is None
        s.abort_capture()
        elapsed = profile.stop()
        assert profile.stopped and elapsed >= 0.0 and profile.elapsed_ms == elapsed
