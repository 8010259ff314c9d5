"""The graph-capture reference model itself (models/stream_capture.py): the executable
specification has to be right before the state machine can trust it."""

from __future__ import annotations

import copy
import itertools

import pytest
from hypothesis import given, strategies as st

from lifecore.models.stream_capture import (
    KERNELS,
    TRANSITION_DRIVER_OPERATIONS,
    CacheMode,
    CaptureVariant,
    DeviceModel,
    HostArray,
    Messages,
    ModelError,
    RECORDING_ELSEWHERE,
    Ref,
    StreamCaptureState,
    f32,
    f32_bits,
    f32_from_bits,
)

NO, PREP, CAP = CaptureVariant.NO_CAPTURE, CaptureVariant.PREPARE, CaptureVariant.CAPTURE


def state_in(variant: CaptureVariant, owner: int = 0) -> StreamCaptureState:
    state = StreamCaptureState()
    if variant is not NO:
        state.prepare(owner)
    if variant is CAP:
        state.begin()
    return state


# ------------------------------------------------------------------ the state type


def test_full_cycle_and_queries():
    state = StreamCaptureState()
    assert (state.variant, state.owner, state.is_active(), state.is_recording()) == (NO, None, False, False)
    assert state.cache_mode() is CacheMode.NORMAL
    state.prepare(7)
    assert (state.variant, state.owner, state.is_active(), state.is_recording()) == (PREP, 7, True, False)
    assert state.cache_mode() is CacheMode.CAPTURE
    state.begin()
    assert (state.variant, state.owner, state.is_recording()) == (CAP, 7, True)
    assert state.cache_mode() is CacheMode.CAPTURE
    end = state.end(7)
    assert (end.owner, end.caller, end.abandoned) == (7, 7, False)
    assert state == StreamCaptureState()


REJECTIONS = [
    (PREP, "prepare", Messages.PREPARE_WHILE_PREPARED),
    (CAP, "prepare", Messages.PREPARE_WHILE_RECORDING),
    (NO, "begin", Messages.BEGIN_UNPREPARED),
    (CAP, "begin", Messages.BEGIN_WHILE_RECORDING),
    (NO, "end", Messages.END_NOT_RECORDING),
    (PREP, "end", Messages.END_NOT_RECORDING),
]


@pytest.mark.parametrize("variant, call, message", REJECTIONS)
def test_rejections_have_the_exact_message_and_change_nothing(variant, call, message):
    state = state_in(variant, owner=3)
    before = copy.copy(state)
    with pytest.raises(ModelError) as info:
        getattr(state, call)()
    assert info.value.kind == "CaptureState"
    assert info.value.message == message == str(info.value)
    assert state == before and state.owner == before.owner


def test_abandoned_end_closes_the_window():
    state = state_in(CAP, owner=1)
    end = state.end(2)
    assert (end.owner, end.caller, end.abandoned) == (1, 2, True)
    assert state.variant is NO and state.owner is None
    assert Messages.ABANDONED.format(owner=1, caller=2) == (
        "end_capture: the capture belongs to owner 1, not to 2; it is discarded rather than left "
        "recording on a stream both share")


@pytest.mark.parametrize("variant", [NO, PREP, CAP])
def test_abort_never_fails_and_leaves_a_recapturable_stream(variant):
    state = state_in(variant)
    state.abort()
    assert state.variant is NO
    state.prepare()  # accepted


def test_copy_is_independent_and_equality_includes_the_owner():
    a = state_in(PREP, owner=1)
    b = copy.copy(a)
    b.begin()
    assert a.variant is PREP and b.variant is CAP
    assert state_in(PREP, 1) != state_in(PREP, 2)
    assert repr(state_in(CAP, 4)) == "StreamCaptureState(CAPTURE, owner=4)"


@given(st.lists(st.sampled_from(["prepare", "begin", "end", "abort"]), max_size=30))
def test_only_the_three_transitions_move_the_state(calls):
    state = StreamCaptureState()
    legal = {(NO, "prepare"): PREP, (PREP, "begin"): CAP, (CAP, "end"): NO}
    for call in calls:
        before = state.variant
        try:
            getattr(state, call)()
        except ModelError:
            assert (before, call) not in legal and call != "abort"
            assert state.variant is before
        else:
            assert state.variant is (NO if call == "abort" else legal[(before, call)])


# ------------------------------------------------------------------ float helpers


def test_float32_helpers():
    assert f32(0.1) != 0.1 and f32(f32(0.1)) == f32(0.1)
    assert f32(1e39) == float("inf")
    assert f32_from_bits(f32_bits(1.5)) == 1.5
    assert f32_bits(1.0) == 0x3F800000


# ------------------------------------------------------------------ the device model


def device_with(graphs="hardware", n=4, count=3):
    model = DeviceModel(graphs)
    stream = model.new_stream()
    bufs = [model.alloc(stream, 4 * n) for _ in range(count)]
    for i, b in enumerate(bufs):
        model.write(stream, b, [float(i + 1)] * n)
    return model, stream, bufs


def test_eager_kernels_compute_float32_elementwise():
    model, s, (x, y, out) = device_with()
    model.launch(s, "axpy_f32", [4, 2.0, Ref(x), Ref(y)])  # y = 2*1 + 2
    assert model.read(s, y) == [4.0] * 4
    model.launch(s, "scale_f32", [4, 0.5, Ref(y), Ref(out)])
    assert model.read(s, out) == [2.0] * 4
    model.launch(s, "add_f32", [2, Ref(x), Ref(out), Ref(out)])  # only the first 2 elements
    assert model.read(s, out) == [3.0, 3.0, 2.0, 2.0]
    model.launch(s, "axpy_info_f32", [Ref(x), Ref(y)], info=[4, f32_bits(-1.0)])
    assert model.read(s, y) == [3.0] * 4
    model.fill(s, x, f32_bits(0.25))
    model.copy(s, out, x)
    assert model.read(s, out) == [0.25] * 4


def test_fresh_memory_is_undefined_until_written():
    model = DeviceModel()
    s = model.new_stream()
    a, b = model.alloc(s, 8), model.alloc(s, 8)
    model.write(s, a, [1.0, 2.0])
    model.launch(s, "add_f32", [2, Ref(a), Ref(b), Ref(b)])
    assert model.read(s, b) == [None, None]


def test_launch_checks_argument_count_and_bounds():
    model, s, (x, y, _) = device_with()
    with pytest.raises(ModelError) as info:
        model.launch(s, "axpy_f32", [4, 2.0, Ref(x)])
    assert info.value.kind == "TypeMismatch"
    with pytest.raises(ModelError):
        model.launch(s, "axpy_f32", [5, 2.0, Ref(x), Ref(y)])
    assert model.read(s, y) == [2.0] * 4


def capture(model, s, work, owner=0):
    model.graph_prepare(s, owner)
    work()
    model.begin_capture(s)
    work()
    return model.end_capture(s, owner)


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_recording_does_not_execute_and_replay_reexecutes(graphs):
    model, s, (x, y, _) = device_with(graphs)
    g = capture(model, s, lambda: model.launch(s, "axpy_f32", [4, 1.0, Ref(x), Ref(y)]))
    assert model.read(s, y) == [3.0] * 4  # warmup ran once, the recording did not run
    model.replay(g, s)
    model.replay(g, s)
    assert model.read(s, y) == [5.0] * 4
    assert model.graphs_by_id[g].node_count == 1 and model.graphs_alive() == 1
    model.destroy(g)
    with pytest.raises(ModelError) as info:
        model.replay(g, s)
    assert (info.value.kind, info.value.message) == ("Closed", Messages.REPLAY_DESTROYED)
    assert model.graphs_alive() == 0 and not model.retained_slots()


def test_graph_retains_freed_buffers_it_touches():
    model, s, (x, y, _) = device_with()
    tmp = model.alloc(s, 16)

    def step():
        model.launch(s, "scale_f32", [4, 2.0, Ref(x), Ref(tmp)])
        model.launch(s, "add_f32", [4, Ref(tmp), Ref(y), Ref(y)])

    g = capture(model, s, step)
    model.free(tmp)
    assert model.graphs_by_id[g].retained >= {model.buffers[tmp].slot.id}
    assert model.buffers[tmp].slot.id in model.retained_slots()
    model.write(s, x, [10.0] * 4)
    model.replay(g, s)
    assert model.read(s, y) == [2.0 + 2.0 + 20.0] * 4
    with pytest.raises(ModelError) as info:
        model.read(s, tmp)
    assert info.value.kind == "Closed"


def test_hardware_host_waits_while_recording_are_refused_and_the_capture_seals():
    """The driver would refuse the wait and invalidate the capture: it never sees it."""
    model, s, (x, _, _) = device_with("hardware")
    model.graph_prepare(s)
    assert model.read(s, x) == [1.0] * 4  # warmup is eager
    model.begin_capture(s)
    for op, wait in (("sync", lambda: model.sync(s)), ("read", lambda: model.read(s, x))):
        with pytest.raises(ModelError) as info:
            wait()
        assert (info.value.kind, info.value.message) == (
            "CaptureState", Messages.HOST_WAIT_WHILE_RECORDING.format(op=op))
    assert model.state(s).variant is CAP
    model.end_capture(s)
    assert model.state(s).variant is NO and model.graphs_alive() == 1


def test_a_profile_in_a_hardware_recording_is_refused_and_the_recording_seals():
    model, s, _ = device_with("hardware")
    model.graph_prepare(s)
    model.begin_capture(s)
    with pytest.raises(ModelError) as info:
        model.profile(s)
    assert (info.value.kind, info.value.message) == ("CaptureState", Messages.PROFILE_WHILE_RECORDING)
    assert model.state(s).variant is CAP
    model.end_capture(s)
    assert model.state(s).variant is NO and model.graphs_alive() == 1


def test_software_refuses_reads_on_the_spot_and_writes_lazily():
    model, s, (x, y, _) = device_with("software")
    model.graph_prepare(s)
    model.begin_capture(s)
    with pytest.raises(ModelError) as info:
        model.read(s, x)
    assert (info.value.kind, info.value.message) == (
        "CaptureState", Messages.SOFTWARE_REFUSED.format(op="read"))
    model.write(s, y, [9.0] * 4)  # accepted for now
    model.launch(s, "axpy_f32", [4, 1.0, Ref(x), Ref(y)])
    with pytest.raises(ModelError) as info:
        model.end_capture(s)
    assert info.value.kind == "CaptureRefused"
    assert model.state(s).variant is NO
    assert model.read(s, y) == [2.0] * 4  # neither the write nor the launch ran


def test_hardware_records_writes_and_replays_the_same_data():
    model, s, (x, _, _) = device_with("hardware")
    model.graph_prepare(s)
    model.begin_capture(s)
    model.write(s, x, [7.0] * 4)
    g = model.end_capture(s)
    assert model.read(s, x) == [1.0] * 4
    model.replay(g, s)
    assert model.read(s, x) == [7.0] * 4


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_allocation_the_pool_cannot_serve_refuses_the_graph(graphs):
    # Software graphs too: a step they sealed would fail on a driver's graphs.
    model, s, _ = device_with(graphs)
    model.graph_prepare(s)
    model.begin_capture(s)
    b = model.alloc(s, 64, new_slice=True)
    assert model.buffers[b].memory_node  # software: real memory, under a memory node's rules
    with pytest.raises(ModelError) as info:
        model.end_capture(s)
    assert (info.value.kind, info.value.contains) == ("CaptureRefused", "memory node")


def test_abandoned_end_is_refused_and_discards_the_window():
    model, s, (x, y, _) = device_with()
    model.graph_prepare(s, 1)
    model.launch(s, "axpy_info_f32", [Ref(x), Ref(y)], info=[4, f32_bits(1.0)])
    assert len(model.pinned_info()) == 1
    model.begin_capture(s)
    with pytest.raises(ModelError) as info:
        model.end_capture(s, 2)
    assert info.value.message == Messages.ABANDONED.format(owner=1, caller=2)
    assert model.state(s).variant is NO and not model.pinned_info() and model.graphs_alive() == 0


def test_info_pins_move_to_the_graph_and_cleanup_keeps_them():
    model, s, (x, y, _) = device_with()
    model.launch(s, "axpy_info_f32", [Ref(x), Ref(y)], info=[4, f32_bits(3.0)])
    g = capture(model, s, lambda: model.launch(s, "axpy_info_f32", [Ref(x), Ref(y)], info=[4, f32_bits(1.0)]))
    assert model.pinned_info() == {(4, f32_bits(1.0))}
    assert len(model.info_entries) == 2
    assert model.cleanup()
    assert model.info_entries == {(4, f32_bits(1.0))}
    model.destroy(g)
    assert not model.pinned_info()


def test_cleanup_is_skipped_while_a_window_is_active():
    model, s, (x, y, _) = device_with()
    model.launch(s, "axpy_info_f32", [Ref(x), Ref(y)], info=[4, f32_bits(3.0)])
    model.graph_prepare(s)
    assert not model.cleanup() and len(model.info_entries) == 1


@pytest.mark.parametrize("graphs", ["hardware", "software"])
@pytest.mark.parametrize("transition", ["graph_prepare", "begin_capture", "end_capture"])
def test_a_fault_in_a_transition_leaves_the_stream_recapturable(graphs, transition):
    for fault, kind in TRANSITION_DRIVER_OPERATIONS[(transition, graphs)].items():
        model, s, (x, y, _) = device_with(graphs)
        if transition != "graph_prepare":
            model.graph_prepare(s)
        if transition == "end_capture":
            model.begin_capture(s)
        model.launch(s, "axpy_f32", [4, 1.0, Ref(x), Ref(y)])
        call = getattr(model, transition)
        if kind is None:
            call(s, fault=fault)
            continue
        with pytest.raises(ModelError) as info:
            call(s, fault=fault)
        assert info.value.error_class == kind  # the table names the exception class
        assert model.state(s).variant is NO and model.windows_active() == 0 and model.graphs_alive() == 0
        capture(model, s, lambda: None)  # re-capturable


def test_an_unused_driver_operation_does_not_affect_a_transition():
    model, s, _ = device_with()
    model.graph_prepare(s, fault="memcpy_dtoh")
    model.begin_capture(s, fault="memcpy_dtoh")
    model.end_capture(s, fault="memcpy_dtoh")
    assert model.graphs_alive() == 1


def test_kernel_table_matches_the_contract():
    assert set(KERNELS) == {"axpy_f32", "scale_f32", "add_f32", "axpy_info_f32"}
    assert KERNELS["axpy_f32"].params == ("u32", "f32", "ptr", "ptr")


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_windows_on_two_streams_are_independent(graphs):
    model = DeviceModel(graphs)
    s1, s2 = model.new_stream(), model.new_stream()
    model.graph_prepare(s1, 1)
    model.graph_prepare(s2, 2)
    model.begin_capture(s1)
    assert model.windows_active() == 2
    model.abort_capture(s2)
    assert [model.state(s).variant for s in (s1, s2)] == [CAP, NO]
    g = model.end_capture(s1, 1)
    assert model.windows_active() == 0 and model.graphs_alive() == 1 and g in model.graphs_by_id


def test_bad_graphs_kind_is_rejected():
    with pytest.raises(ValueError):
        DeviceModel("virtual")  # type: ignore[arg-type]
    assert list(itertools.islice(iter(KERNELS), 1))


def test_software_records_fill_and_copy_and_refuses_a_replay_into_the_recording_at_once():
    model, s, (x, y, _) = device_with("software")
    g = capture(model, s, lambda: model.launch(s, "axpy_f32", [4, 1.0, Ref(x), Ref(y)]))
    model.graph_prepare(s)
    model.begin_capture(s)
    model.fill(s, x, f32_bits(5.0))
    model.copy(s, y, x)
    g2 = model.end_capture(s)
    assert model.graphs_by_id[g2].node_count == 2 and model.read(s, y) == [3.0] * 4
    model.replay(g2, s)
    assert model.read(s, y) == [5.0] * 4
    model.graph_prepare(s)
    model.begin_capture(s)
    with pytest.raises(ModelError) as info:
        model.replay(g, s)
    assert (info.value.kind, info.value.contains) == ("CaptureState", "replay")
    assert model.graphs_by_id[model.end_capture(s)].node_count == 0  # the recording went on and sealed


def test_an_info_cache_miss_while_recording_refuses_the_window_on_both_kinds_of_graphs():
    # Software graphs sealed it: a step that sealed there failed on a driver's graphs. The
    # entry is private to a hardware window, and real, shared memory on software graphs.
    for graphs in ("hardware", "software"):
        model, s, (x, y, _) = device_with(graphs)
        model.graph_prepare(s)
        model.begin_capture(s)
        model.launch(s, "axpy_info_f32", [Ref(x), Ref(y)], info=[4, f32_bits(2.0)])
        with pytest.raises(ModelError) as info:
            model.end_capture(s)
        assert info.value.contains == "memory node"
        assert ((4, f32_bits(2.0)) in model.shared_info) == (graphs == "software")


def test_freeing_twice_is_refused():
    model, s, (x, _, _) = device_with()
    model.free(x)
    with pytest.raises(ModelError) as info:
        model.free(x)
    assert info.value.kind == "Closed"


def test_abandoned_end_wins_over_a_failing_driver_end():
    model, s, _ = device_with()
    model.graph_prepare(s, 1)
    model.begin_capture(s)
    with pytest.raises(ModelError) as info:
        model.end_capture(s, 0, fault="stream_end_capture")
    assert info.value.message == Messages.ABANDONED.format(owner=1, caller=0)


def test_destroying_a_graph_replayed_elsewhere_leaves_a_live_capture_alone():
    # The wait for the replay runs in relaxed mode, chosen up front: it used to invalidate a
    # thread_local capture of this thread, which end_capture then refused.
    for mode in ("thread_local", "global", "relaxed"):
        model = DeviceModel("hardware", capture_mode=mode)
        s1, s2 = model.new_stream(), model.new_stream()
        x = model.alloc(s1, 16)
        model.write(s1, x, [1.0] * 4)
        g = capture(model, s1, lambda: model.launch(s1, "axpy_f32", [4, 1.0, Ref(x), Ref(x)]))
        model.replay(g, s2)
        model.graph_prepare(s1)
        model.begin_capture(s1)
        model.destroy(g)
        model.end_capture(s1)


@pytest.mark.parametrize("graphs", ["hardware", "software"])
@pytest.mark.parametrize("mode", ["thread_local", "global", "relaxed"])
def test_a_thread_records_on_one_stream_at_a_time_outside_relaxed_mode(graphs, mode):
    model = DeviceModel(graphs, capture_mode=mode)
    a, b = model.new_stream(), model.new_stream()
    x, y = model.alloc(a, 16), model.alloc(b, 16)
    model.write(a, x, [1.0] * 4)
    model.write(b, y, [2.0] * 4)
    model.graph_prepare(a)
    model.begin_capture(a)
    model.launch(a, "scale_f32", [4, 2.0, Ref(x), Ref(x)])
    model.graph_prepare(b)
    refused = mode != "relaxed"
    assert model.recording_elsewhere(b) == (a if refused else None)
    calls = {
        "begin_capture": lambda: model.begin_capture(b),
        "sync": lambda: model.sync(b),
        "read": lambda: model.read(b, y),
        "profile": lambda: model.profile(b),
        "alloc (a new slice)": lambda: model.alloc(b, 16, new_slice=True),
    }
    if refused:
        for what, call in calls.items():
            with pytest.raises(ModelError) as info:
                call()
            assert (info.value.kind, info.value.contains) == ("CaptureState", RECORDING_ELSEWHERE), what
        # Nothing changed: b is still prepared, a still records and seals what it recorded.
        assert model.state(b).variant is PREP and model.state(a).variant is CAP
        model.alloc(b, 16)  # the pool serves it: no driver call, nothing to refuse
    g = model.end_capture(a)
    assert model.graphs_by_id[g].node_count == 1
    model.replay(g, a)
    assert model.contents(x) == [2.0] * 4
    model.begin_capture(b)  # once a has ended (or at once in relaxed mode)
    model.end_capture(b)


def test_a_refused_info_upload_elsewhere_changes_nothing():
    model = DeviceModel("hardware", capture_mode="thread_local")
    a, b = model.new_stream(), model.new_stream()
    x, y = model.alloc(a, 16), model.alloc(b, 16)
    model.graph_prepare(a)
    model.begin_capture(a)
    words = (4, f32_bits(2.0))
    with pytest.raises(ModelError) as info:
        model.launch(b, "axpy_info_f32", [Ref(y), Ref(y)], info=words)
    assert info.value.contains == RECORDING_ELSEWHERE
    assert words not in model.info_entries
    model.end_capture(a)
    model.launch(b, "axpy_info_f32", [Ref(y), Ref(y)], info=words)
    assert words in model.info_entries


@pytest.mark.parametrize("close", ["abort", "end"])
def test_a_buffer_allocated_as_a_memory_node_is_unusable_once_the_window_closes(close):
    model, s, _ = device_with("hardware")
    model.graph_prepare(s)
    model.begin_capture(s)
    b = model.alloc(s, 16, new_slice=True)
    model.fill(s, b, 0)  # recorded: fine while the window is open
    if close == "abort":
        model.abort_capture(s)
    else:
        with pytest.raises(ModelError):
            model.end_capture(s)
    with pytest.raises(ModelError) as info:
        model.fill(s, b, 0)
    assert info.value.kind == "Closed"
    model.free(b)  # freeing it is still accepted


def test_an_eager_failure_is_queued_and_surfaces_at_the_next_sync():
    model, s, (x, y, _) = device_with()
    model.launch(s, "axpy_f32", [4, 1.0, Ref(x), Ref(y)], fault="launch_kernel")
    model.launch(s, "axpy_f32", [4, 1.0, Ref(x), Ref(y)], fault="memcpy_htod_async")  # not issued by a launch
    with pytest.raises(ModelError) as info:
        model.sync(s)
    assert info.value.kind == "Driver"
    assert model.read(s, y) == [3.0] * 4  # only the second launch ran; the queue is clear


def test_a_queued_failure_refuses_prepare_and_a_warmup_failure_refuses_begin():
    model, s, (x, y, _) = device_with()
    model.fill(s, x, 0, fault="memset_d32_async")
    with pytest.raises(ModelError):
        model.graph_prepare(s)
    assert model.state(s).variant is NO
    model.graph_prepare(s)
    model.copy(s, x, y, fault="memcpy_dtod_async")
    with pytest.raises(ModelError) as info:
        model.begin_capture(s)
    assert info.value.kind == "Driver" and model.state(s).variant is NO
    model.graph_prepare(s)
    model.write(s, x, [0.0] * 4, fault="memcpy_htod_async")
    model.abort_capture(s)  # the window takes its failures with it
    model.sync(s)


@pytest.mark.parametrize("graphs", ["hardware", "software"])
def test_a_failure_inside_a_recording(graphs):
    model, s, (x, y, _) = device_with(graphs)
    model.graph_prepare(s)
    model.begin_capture(s)
    model.launch(s, "axpy_f32", [4, 1.0, Ref(x), Ref(y)], fault="launch_kernel")
    if graphs == "hardware":
        with pytest.raises(ModelError) as info:
            model.end_capture(s)
        assert info.value.kind == "CaptureRefused"
    else:  # a software recording issues nothing to the driver
        assert model.graphs_by_id[model.end_capture(s)].node_count == 1


def test_a_failed_software_replay_stops_at_the_failing_operation():
    model, s, (x, y, _) = device_with("software")

    def step():
        model.fill(s, x, f32_bits(5.0))
        model.launch(s, "axpy_f32", [4, 1.0, Ref(x), Ref(y)])

    g = capture(model, s, step)
    model.fill(s, x, f32_bits(0.0))
    model.replay(g, s, fault="launch_kernel")
    with pytest.raises(ModelError):
        model.read(s, x)
    assert model.read(s, x) == [5.0] * 4 and model.read(s, y) == [7.0] * 4


def test_an_info_entry_made_inside_a_discarded_recording_leaves_the_cache():
    model, s, (x, y, _) = device_with("hardware")
    model.graph_prepare(s)
    model.begin_capture(s)
    words = [4, f32_bits(2.0)]
    assert model.info_miss_records_memory_node(s, words)
    model.launch(s, "axpy_info_f32", [Ref(x), Ref(y)], info=words)
    assert len(model.info_entries) == 1
    model.abort_capture(s)
    assert not model.info_entries and not model.info_miss_records_memory_node(s, words)


# ------------------------------------------------------------------ host arrays


def test_a_host_array_is_read_never_written_and_never_pool_memory() -> None:
    m = DeviceModel("hardware")
    s = m.new_stream()
    dst = m.alloc(s, 16)
    m.copy(s, dst, HostArray((1.0, 2.0, 3.0, 4.0)))
    assert m.read(s, dst) == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(ModelError) as refused:
        m.copy(s, dst, HostArray((1.0, 2.0)))  # sizes differ
    assert refused.value.kind == "InvalidArgument"
    out = m.alloc(s, 16)
    m.graph_prepare(s, 0)
    m.begin_capture(s)
    m.launch(s, "scale_f32", [4, 2.0, HostArray((1.0, 1.0, 1.0, 1.0)), Ref(out)])
    for kernel, args in (("scale_f32", [4, 2.0, Ref(out), HostArray((0.0,) * 4)]),
                         ("add_f32", [4, Ref(out), Ref(out), HostArray((0.0,) * 4)])):
        with pytest.raises(ModelError) as refused:
            m.launch(s, kernel, args)
        assert refused.value.kind == "InvalidArgument" and "is read-only" in (refused.value.contains or "")
    gid = m.end_capture(s, 0)
    # The graph retains the buffer it wrote, not the host array it read.
    assert m.graphs_by_id[gid].retained == frozenset({m.buffers[out].slot.id})
    m.replay(gid, s)
    assert m.read(s, out) == [2.0] * 4


def test_the_models_read_only_parameters_are_the_kernels() -> None:
    import lifecore

    for name, spec in KERNELS.items():
        kernel = getattr(lifecore.kernels, name)
        assert [kernel.param_names[i] for i in spec.read_only] == kernel.read_only, name
