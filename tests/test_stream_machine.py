"""The graph-capture state machine (lifecore.testing) against every backend: the mock with
hardware and with software graphs always; CUDA and HIP where a device is present, else skipped
with the backend's own reason."""

from __future__ import annotations

import pytest
from hypothesis import settings

import lifecore
from lifecore.testing import STATS, StreamCaptureMachine, run_stream_capture_machine


def backend_reason(name: str) -> str | None:
    """None when the backend can open a device here, else why not."""
    for info in lifecore.backends():
        if info.name == name:
            return None if info.available else info.reason or "unavailable"
    return f"{name} is not a known backend"


BACKENDS = [
    pytest.param("mock", "hardware", "thread_local", id="mock-hardware"),
    pytest.param("mock", "software", "thread_local", id="mock-software"),
    pytest.param("mock", "hardware", "relaxed", id="mock-hardware-relaxed"),
    pytest.param("mock", "hardware", "global", id="mock-hardware-global"),
    pytest.param("cuda", "hardware", "thread_local", id="cuda-hardware"),
    pytest.param("cuda", "software", "thread_local", id="cuda-software"),
    pytest.param("hip", "hardware", "thread_local", id="hip-hardware"),
    pytest.param("hip", "software", "thread_local", id="hip-software"),
]


@pytest.mark.parametrize("backend, graphs, capture_mode", BACKENDS)
def test_stream_capture_machine(backend: str, graphs: str, capture_mode: str) -> None:
    reason = backend_reason(backend)
    if reason is not None:
        pytest.skip(f"{backend}: {reason}")
    steps_before = STATS.steps
    run_stream_capture_machine(lambda: lifecore.Device(backend, graphs=graphs, capture_mode=capture_mode),
                               settings=settings())
    assert STATS.steps > steps_before, "the machine ran no step"


# The same machine as a TestCase class, the way a user binds it to their own device.
TestMockSoftwareBound = StreamCaptureMachine.bind(
    lambda: lifecore.Device("mock", graphs="software"), name="MockSoftwareMachine").TestCase
TestMockSoftwareBound.settings = settings(settings(), max_examples=max(1, settings().max_examples // 3))


def test_machine_needs_a_factory() -> None:
    with pytest.raises(TypeError, match="device factory"):
        StreamCaptureMachine()


def test_a_buffer_allocated_as_a_memory_node_is_refused_after_the_window_closes() -> None:
    """Its memory was a memory node of a recording that was never sealed: it has none."""
    with lifecore.Device("mock", graphs="hardware") as device:
        stream = device.stream()
        stream.graph_prepare()
        stream.begin_capture()
        before = device.memory_stats()["driver_allocations"]
        orphan = stream.alloc(1 << 16)  # no free slice of that size: a memory node
        assert device.memory_stats()["driver_allocations"] > before
        stream.abort_capture()
        with pytest.raises(lifecore.ClosedError):
            stream.fill(orphan, 0)
        stream.sync()  # and the stream must not have been poisoned


def test_info_words_first_seen_inside_a_discarded_recording_are_uploaded_again() -> None:
    """The cache must not keep an entry whose memory existed only inside a discarded recording."""
    import struct

    with lifecore.Device("mock", graphs="hardware") as device:
        stream = device.stream()
        x, y = stream.alloc(16), stream.alloc(16)
        stream.write(x, struct.pack("<4f", 1, 2, 3, 4))
        stream.write(y, struct.pack("<4f", 0, 0, 0, 0))
        words = [4, lifecore.float_bits(2.0)]
        stream.graph_prepare()
        stream.begin_capture()
        stream.launch(lifecore.kernels.axpy_info_f32, 1, 64, [x, y], info=words)
        stream.abort_capture()
        stream.launch(lifecore.kernels.axpy_info_f32, 1, 64, [x, y], info=words)
        assert struct.unpack("<4f", stream.read(y)) == (2.0, 4.0, 6.0, 8.0)
