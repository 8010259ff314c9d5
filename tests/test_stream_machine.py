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
                               settings=settings(), graphs=graphs, capture_mode=capture_mode)
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


def test_an_infinite_read_matches_only_the_same_infinity_or_a_value_as_huge() -> None:
    """The overflow tolerance loosens the check without turning it off: a device reading inf
    where the model holds -2.0 (or -inf for inf) is a wrong read."""
    from lifecore.testing.stream_capture import _close

    inf = float("inf")
    assert _close(inf, inf) and _close(-inf, -inf)
    assert _close(inf, 3.3e38) and _close(-3.3e38, -inf)  # one side rounded a*x first and overflowed
    # The least a*x + y can be when a*x rounds past float32's largest and y takes that away.
    assert _close(inf, 2.0**103) and not _close(inf, 1e30)
    assert not _close(-2.0, inf) and not _close(-2.0, -inf) and not _close(inf, 123.0)
    assert not _close(inf, -inf) and not _close(-inf, 3.3e38) and not _close(3.3e38, -inf)


def test_a_failed_step_is_reported_as_itself_and_every_device_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device refusing a buffer's NumPy view (a bug the machine must find): the failure is the
    refusal, not a teardown check about a view the failed step's traceback still held, and
    the device of every run is closed."""
    import numpy as np

    stream_type = type(lifecore.Device(EMULATED).stream())
    launch = stream_type.launch

    def refusing_views(self, kernel, grid, block, args, **options):  # type: ignore[no-untyped-def]
        if any(isinstance(a, np.ndarray) and a.flags.writeable for a in args):
            raise lifecore.InvalidArgumentError("launch: (a bug) a NumPy view is refused")
        return launch(self, kernel, grid, block, args, **options)

    monkeypatch.setattr(stream_type, "launch", refusing_views)
    opened: list[lifecore.Device] = []

    def factory() -> lifecore.Device:
        opened.append(lifecore.Device(EMULATED, graphs="hardware"))
        return opened[-1]

    with pytest.raises(AssertionError) as caught:
        StreamCaptureMachine.run(factory, settings=settings(max_examples=50, stateful_step_count=20, deadline=None,
                                                            report_multiple_bugs=False, print_blob=False), seed=0)
    assert "lifecore raised: InvalidArgumentError" in str(caught.value), caught.value
    assert opened and all(d.closed for d in opened), f"{sum(not d.closed for d in opened)} of {len(opened)} left open"


def test_a_driver_failure_must_carry_a_status_the_run_injected(monkeypatch: pytest.MonkeyPatch) -> None:
    """A recoverable injected status reported with another (a lost device's 700, say) is a
    disagreement, though the model expects a DriverError there."""
    stream_type = type(lifecore.Device(EMULATED).stream())
    profile = stream_type.profile

    def misreported(self, *args, **options):  # type: ignore[no-untyped-def]
        try:
            return profile(self, *args, **options)
        except lifecore.DriverError as error:
            error.code = 700  # a status no run injects
            raise

    monkeypatch.setattr(stream_type, "profile", misreported)
    with pytest.raises(AssertionError, match="reported driver status 700"):
        StreamCaptureMachine.run(lambda: lifecore.Device(EMULATED, graphs="hardware"),
                                 settings=settings(max_examples=60, stateful_step_count=40, deadline=None,
                                                   report_multiple_bugs=False, print_blob=False), seed=0)


def test_a_slice_a_window_holds_must_stay_out_of_the_free_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stats that balance but count a slot a graph or an open window holds as free (a pool that
    would hand it to a new buffer while a replay still writes it) disagree with the model's
    count of live buffers and held slots."""
    device_type = lifecore.Device
    memory_stats = device_type.memory_stats

    def early_free(self):  # type: ignore[no-untyped-def]
        stats = dict(memory_stats(self))
        if stats["slices_retained"] > 0 and stats["windows_active"] > 0:
            stats["slices_retained"] -= 1
            stats["slices_free"] += 1
        return stats

    monkeypatch.setattr(device_type, "memory_stats", early_free)
    with pytest.raises(AssertionError, match="fewer slices out of the free list"):
        StreamCaptureMachine.run(lambda: lifecore.Device(EMULATED, graphs="hardware"),
                                 settings=settings(max_examples=100, stateful_step_count=40, deadline=None,
                                                   report_multiple_bugs=False, print_blob=False), seed=1)


def test_a_device_that_is_not_what_the_machine_was_told_fails_the_run() -> None:
    """The model follows the configuration the machine is given, not the device's report of
    itself: a device reporting software graphs where hardware ones were asked for fails, and
    is closed; a configuration no device can have is refused before a device is made."""
    opened: list[lifecore.Device] = []

    def factory() -> lifecore.Device:
        opened.append(lifecore.Device(EMULATED, graphs="software"))
        return opened[-1]

    with pytest.raises(AssertionError, match="reports graphs='software', the machine was told 'hardware'"):
        StreamCaptureMachine(factory, graphs="hardware")
    assert opened and opened[-1].closed
    with pytest.raises(ValueError, match="capture_mode must be"):
        StreamCaptureMachine(factory, capture_mode="per_thread")
    assert len(opened) == 1
    machine = StreamCaptureMachine(lambda: lifecore.Device(EMULATED, capture_mode="relaxed"), capture_mode="relaxed")
    assert machine.model.capture_mode == "relaxed" and machine.model.graphs == "hardware"
    machine.teardown()
