"""StreamCaptureState: every transition, every refusal message, and refusals change nothing."""

from __future__ import annotations

import copy

import pytest

import lifecore
from lifecore import CacheMode, CaptureStateError, CaptureVariant, StreamCaptureState

# The value type names its own methods; a Stream's refusals name the stream's (test_runtime_capture).
PREPARED = "StreamCaptureState.prepare: a graph capture is already prepared on this stream"
RECORDING_PREPARE = "StreamCaptureState.prepare: a graph capture is already recording on this stream"
UNPREPARED = "StreamCaptureState.begin: call StreamCaptureState.prepare before starting a capture"
RECORDING_BEGIN = "StreamCaptureState.begin: a graph capture is already recording on this stream"
NOT_RECORDING = "StreamCaptureState.end: no graph capture is recording on this stream"


def state_in(variant: CaptureVariant, owner: int = 0) -> StreamCaptureState:
    state = StreamCaptureState()
    if variant is not CaptureVariant.NO_CAPTURE:
        state.prepare(owner)
    if variant is CaptureVariant.CAPTURE:
        state.begin()
    return state


def test_starts_in_no_capture() -> None:
    state = StreamCaptureState()
    assert state.variant is CaptureVariant.NO_CAPTURE
    assert state.owner is None
    assert not state.is_recording() and not state.is_active()
    assert state.cache_mode() is CacheMode.NORMAL


def test_full_cycle_owned() -> None:
    state = StreamCaptureState()
    state.prepare(7)
    assert state.variant is CaptureVariant.PREPARE and state.owner == 7
    assert state.is_active() and not state.is_recording()
    assert state.cache_mode() is CacheMode.CAPTURE
    state.begin()
    assert state.variant is CaptureVariant.CAPTURE and state.owner == 7
    assert state.is_active() and state.is_recording()
    assert state.cache_mode() is CacheMode.CAPTURE
    end = state.end(7)
    assert (end.owner, end.caller, end.abandoned) == (7, 7, False)
    assert state == StreamCaptureState()


def test_default_owner_and_caller_are_zero() -> None:
    state = state_in(CaptureVariant.CAPTURE)
    assert state.owner == 0
    end = state.end()
    assert not end.abandoned and end.owner == 0 and end.caller == 0


def test_end_by_another_caller_is_abandoned_and_closes_the_window() -> None:
    state = state_in(CaptureVariant.CAPTURE, owner=1)
    end = state.end(2)
    assert end.abandoned and end.owner == 1 and end.caller == 2
    assert state.variant is CaptureVariant.NO_CAPTURE and state.owner is None
    state.prepare(2)  # the stream is free again
    assert state.owner == 2


@pytest.mark.parametrize(
    ("variant", "call", "message"),
    [
        (CaptureVariant.PREPARE, lambda s: s.prepare(), PREPARED),
        (CaptureVariant.CAPTURE, lambda s: s.prepare(), RECORDING_PREPARE),
        (CaptureVariant.NO_CAPTURE, lambda s: s.begin(), UNPREPARED),
        (CaptureVariant.CAPTURE, lambda s: s.begin(), RECORDING_BEGIN),
        (CaptureVariant.NO_CAPTURE, lambda s: s.end(), NOT_RECORDING),
        (CaptureVariant.PREPARE, lambda s: s.end(), NOT_RECORDING),
    ],
)
def test_rejected_transitions_raise_exact_messages_and_change_nothing(variant, call, message) -> None:
    state = state_in(variant, owner=5)
    before = copy.copy(state)
    with pytest.raises(CaptureStateError) as raised:
        call(state)
    assert str(raised.value) == message
    assert state == before
    assert state.variant is variant


@pytest.mark.parametrize("variant", list(CaptureVariant.__members__.values()))
def test_abort_from_anywhere_returns_to_no_capture(variant) -> None:
    state = state_in(variant, owner=3)
    state.abort()
    assert state == StreamCaptureState()
    state.abort()  # never fails, also when already idle
    state.prepare(4)
    assert state.owner == 4


def test_copy_is_independent_and_equal() -> None:
    state = state_in(CaptureVariant.PREPARE, owner=9)
    clone = copy.copy(state)
    deep = copy.deepcopy(state)
    assert clone == state == deep
    clone.begin()
    assert clone != state
    assert state.variant is CaptureVariant.PREPARE


def test_equality_includes_owner() -> None:
    assert state_in(CaptureVariant.PREPARE, 1) != state_in(CaptureVariant.PREPARE, 2)
    assert state_in(CaptureVariant.PREPARE, 1) == state_in(CaptureVariant.PREPARE, 1)


def test_equal_values_hash_alike() -> None:
    # As the reference model's: a state or an end is a usable set or dict key. They used to hash
    # by identity, so two equal states were two keys.
    assert len({state_in(CaptureVariant.PREPARE, 1), state_in(CaptureVariant.PREPARE, 1)}) == 1
    assert len({StreamCaptureState(), StreamCaptureState(), state_in(CaptureVariant.CAPTURE, 0)}) == 2
    ends = {state_in(CaptureVariant.CAPTURE, 3).end(4), state_in(CaptureVariant.CAPTURE, 3).end(4)}
    assert len(ends) == 1
    assert len(ends | {state_in(CaptureVariant.CAPTURE, 3).end(3)}) == 2


def test_repr_names_variant_and_owner() -> None:
    assert repr(StreamCaptureState()) == "StreamCaptureState(NO_CAPTURE)"
    assert repr(state_in(CaptureVariant.CAPTURE, 4)) == "StreamCaptureState(CAPTURE, owner=4)"
    assert "abandoned=True" in repr(state_in(CaptureVariant.CAPTURE, 4).end(5))


def test_enum_members() -> None:
    assert set(CacheMode.__members__) == {"NORMAL", "CAPTURE"}
    assert set(CaptureVariant.__members__) == {"NO_CAPTURE", "PREPARE", "CAPTURE"}
    assert lifecore.CaptureEnd is type(state_in(CaptureVariant.CAPTURE).end())


def test_negative_and_large_owners_round_trip() -> None:
    for owner in (-1, 2**62):
        state = state_in(CaptureVariant.CAPTURE, owner)
        assert state.owner == owner
        assert not state.end(owner).abandoned
