"""The graph-capture state machine (lifecore.testing) against every registered backend, with
hardware and software graphs and the three capture modes; a backend without a device here is
skipped with its own reason (the backend_name fixture)."""

from __future__ import annotations

import pytest
from hypothesis import settings

import lifecore
from lifecore.testing import STATS, StreamCaptureMachine, run_stream_capture_machine

from backend_roles import EMULATED

CONFIGURATIONS = [
    pytest.param("hardware", "thread_local", id="hardware"),
    pytest.param("software", "thread_local", id="software"),
    pytest.param("hardware", "relaxed", id="hardware-relaxed"),
    pytest.param("hardware", "global", id="hardware-global"),
]


@pytest.mark.parametrize("graphs, capture_mode", CONFIGURATIONS)
def test_stream_capture_machine(backend_name: str, graphs: str, capture_mode: str) -> None:
    steps_before = STATS.steps
    views, hosts = STATS.events["view_arguments"], STATS.events["host_arguments"]
    run_stream_capture_machine(lambda: lifecore.Device(backend_name, graphs=graphs, capture_mode=capture_mode),
                               settings=settings())
    assert STATS.steps > steps_before, "the machine ran no step"
    if backend_name == EMULATED:  # its memory is host memory: buffers' views and host arrays were passed
        assert STATS.events["view_arguments"] > views and STATS.events["host_arguments"] > hosts


# The same machine as a TestCase class, the way a user binds it to their own device.
TestAutoSoftwareBound = StreamCaptureMachine.bind(
    lambda: lifecore.Device("auto", graphs="software"), name="AutoSoftwareMachine").TestCase
TestAutoSoftwareBound.settings = settings(settings(), max_examples=max(1, settings().max_examples // 3))


def test_machine_needs_a_factory() -> None:
    with pytest.raises(TypeError, match="device factory"):
        StreamCaptureMachine()


def test_a_buffer_allocated_as_a_memory_node_is_refused_after_the_window_closes() -> None:
    """Its memory was a memory node of a recording that was never sealed: it has none."""
    with lifecore.Device(EMULATED, graphs="hardware") as device:
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

    with lifecore.Device(EMULATED, graphs="hardware") as device:
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
