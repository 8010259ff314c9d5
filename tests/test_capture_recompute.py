"""A forward run again in backward (activation checkpointing): the session's side.

``CaptureSession.reintervene`` applies again what the operations at a point last applied,
recording, charging and observing nothing; an observer given ``recomputing`` observes nothing
while it answers true. NumPy-based, so these also run under the sanitizers; the torch side
(hooks under ``torch.utils.checkpoint``) is in test_capture_torch_recompute.py."""

from __future__ import annotations

import numpy as np
import pytest

from lifecore.capture import (
    CaptureOutcome,
    CapturePhase,
    CaptureSchedule,
    CaptureSelection,
    CaptureSlice,
    CaptureTransform,
    InterventionOutcome,
    NumpyBackend,
    interventions as iv,
)
from lifecore.errors import CaptureSessionError, LifecoreTypeError
from lifecore.testing.capture_session import sample_discovery

from test_capture_interventions import hidden, session_with

PREFILL = CapturePhase.PREFILL
PREFILL_ONLY = CaptureSchedule(decode=False)
POINT = "blocks.0.mlp"


def applied_once(session, ops_input):
    """One prefill step observing and intervening at POINT; returns (replacement, step)."""
    backend = NumpyBackend()
    session.begin_step(PREFILL, 0)
    session.observe(backend, POINT, ops_input)
    out = session.intervene(backend, POINT, ops_input)
    session.finish_interventions()
    return out, session.take_step()


def test_a_recompute_gets_what_the_forward_got_and_changes_nothing_the_session_counts():
    session = session_with([iv.add("plus", POINT, np.ones((1, 4, 8)), schedule=PREFILL_ONLY),
                            iv.scale("twice", POINT, 2.0)],
                           selections=[CaptureSelection("s", POINT, CaptureTransform.summary())])
    backend = NumpyBackend()
    assert session.reintervene(backend, POINT, hidden()) is None  # nothing applied yet
    x = hidden()
    out, step = applied_once(session, x)
    usage, prediction = session.cumulative_usage(), session.next_prediction
    # After the step was taken (a backward after the step), as inside it: the same tensor.
    again = session.reintervene(backend, POINT, hidden())
    np.testing.assert_array_equal(again, out)
    np.testing.assert_array_equal(again, (x + 1) * 2)  # plan order, as applied
    np.testing.assert_array_equal(x, hidden())  # the source is never modified
    assert session.cumulative_usage() == usage and session.next_prediction == prediction
    assert not session.step_pending and session.checkpoint_ready
    assert [r.outcome for r in step.interventions] == [InterventionOutcome.APPLIED] * 2
    assert session.reintervene(backend, "blocks.1.mlp", hidden()) is None  # no operation there


def test_a_recompute_inside_the_open_step_is_not_a_second_execution():
    session = session_with([iv.zero("z", POINT, slices=[CaptureSlice("seq", 1, 3)], schedule=PREFILL_ONLY)])
    backend = NumpyBackend()
    x = hidden()
    session.begin_step(PREFILL, 0)
    session.observe(backend, POINT, x)
    out = session.intervene(backend, POINT, x)
    np.testing.assert_array_equal(session.reintervene(backend, POINT, x), out)  # the same region zeroed
    assert not out[:, 1:3].any() and (out[:, [0, 3]] == x[:, [0, 3]]).all()
    with pytest.raises(CaptureSessionError, match="executed more than once"):
        session.intervene(backend, POINT, x)  # a second forward still is
    session.finish_interventions()
    step = session.take_step()
    assert [r.outcome for r in step.interventions] == [InterventionOutcome.APPLIED]


def test_a_failed_operation_is_not_applied_in_a_recompute():
    session = session_with([iv.scale("half", POINT, 0.5), iv.zero("z", POINT)])
    backend = NumpyBackend()
    session.begin_step(PREFILL, 0)
    x = hidden().astype(np.int32)  # no floating tensor: both fail
    session.observe(backend, POINT, x)
    assert session.intervene(backend, POINT, x) is None
    assert session.reintervene(backend, POINT, x) is None


def test_a_recompute_of_a_shape_no_forward_met_applies_nothing():
    """A forward of that shape ran without the session's hooks (or before the plan): nothing
    was applied in it, so nothing is applied again."""
    session = session_with([iv.scale("twice", POINT, 2.0)])
    applied_once(session, hidden())
    assert session.reintervene(NumpyBackend(), POINT, hidden(rows=3)) is None
    np.testing.assert_array_equal(session.reintervene(NumpyBackend(), POINT, hidden()), hidden() * 2)


def test_an_operation_that_met_too_many_shapes_refuses_one_it_let_go():
    """What the forwards did is kept for 64 shapes per operation, the oldest let go first: a
    shape not kept may have been met, and is refused rather than guessed."""
    from lifecore.capture import CaptureRequest, InterventionPlan

    from capture_builders import session_for

    discovery = sample_discovery()
    session = session_for(discovery=discovery, request=CaptureRequest(1, 4, 80))
    session.enable_interventions(InterventionPlan([iv.scale("twice", POINT, 2.0)]).admit(discovery, session),
                                 NumpyBackend())
    backend = NumpyBackend()
    applied_once(session, hidden())
    for prediction in range(1, 66):  # 65 decode forwards, each of a shape the point refuses
        session.begin_step(CapturePhase.DECODE, prediction)
        wrong = np.ones((1, 1, 8 + prediction), np.float32)
        session.observe(backend, POINT, wrong)
        assert session.intervene(backend, POINT, wrong) is None  # FAILED: reached, not applied
        session.take_step()
    with pytest.raises(CaptureSessionError, match=r"met more than 64 shapes, and \[1, 1, 9\] is not among those kept"):
        session.reintervene(backend, POINT, np.ones((1, 1, 9), np.float32))
    assert session.reintervene(backend, POINT, np.ones((1, 1, 73), np.float32)) is None  # kept: not applied
    np.testing.assert_array_equal(session.reintervene(backend, POINT, hidden()), hidden() * 2)


def test_a_restore_keeps_what_the_forwards_did():
    """A graph built before a restore may still be backpropagated: its recompute applies what
    its forward applied."""
    discovery = sample_discovery()
    session = session_with([iv.scale("twice", POINT, 2.0)], discovery=discovery)
    checkpoint = session.checkpoint(discovery)
    applied_once(session, hidden())
    session.restore(checkpoint)
    np.testing.assert_array_equal(session.reintervene(NumpyBackend(), POINT, hidden()), hidden() * 2)


def test_an_operation_inactive_in_a_later_step_of_another_shape_is_told_apart():
    """Prefill applies it, decode does not (its schedule): a recompute of the prefill's shape
    applies it, one of the decode's shape does not, whichever step came last."""
    session = session_with([iv.scale("twice", POINT, 2.0, schedule=PREFILL_ONLY)])
    backend = NumpyBackend()
    applied_once(session, hidden())
    session.begin_step(CapturePhase.DECODE, 1)
    session.observe(backend, POINT, hidden(rows=1))
    assert session.intervene(backend, POINT, hidden(rows=1)) is None  # inactive in decode
    session.take_step()
    assert session.reintervene(backend, POINT, hidden(rows=1)) is None
    np.testing.assert_array_equal(session.reintervene(backend, POINT, hidden()), hidden() * 2)


def test_forwards_of_one_shape_that_differed_are_refused_rather_than_guessed():
    """Decode step 1 applies it, decode step 2 does not (its schedule ends): both have the same
    shape, so which of them a recompute repeats is unknown, and it is refused."""
    session = session_with([iv.scale("twice", POINT, 2.0, schedule=CaptureSchedule(prefill=False, end_prediction=2))])
    backend = NumpyBackend()
    session.begin_step(PREFILL, 0)
    session.observe(backend, POINT, hidden())
    assert session.intervene(backend, POINT, hidden()) is None
    session.take_step()
    assert session.reintervene(backend, POINT, hidden()) is None  # only ever passed at this shape
    for prediction, applies in ((1, True), (2, False)):
        session.begin_step(CapturePhase.DECODE, prediction)
        session.observe(backend, POINT, hidden(rows=1))
        assert (session.intervene(backend, POINT, hidden(rows=1)) is not None) == applies
        session.take_step()
    with pytest.raises(CaptureSessionError, match=r"intervention 'twice' was applied in a forward of shape "
                                                  r"\[1, 1, 8\] and not in another"):
        session.reintervene(backend, POINT, hidden(rows=1))
    assert session.reintervene(backend, POINT, hidden()) is None  # the prefill's shape is still known


def test_a_backend_failing_in_a_recompute_is_the_cause_of_the_refusal():
    class Failing(NumpyBackend):
        fail = False

        def intervene(self, tensor, request):
            if self.fail:
                raise RuntimeError("the backend's own failure")
            return super().intervene(tensor, request)

    session = session_with([iv.scale("twice", POINT, 2.0)])
    applied_once(session, hidden())
    backend = Failing()
    backend.fail = True
    with pytest.raises(CaptureSessionError, match="intervention 'twice' failed") as raised:
        session.reintervene(backend, POINT, hidden())
    assert isinstance(raised.value.__cause__, RuntimeError)


def test_an_observer_told_it_is_recomputing_observes_nothing():
    session = session_with([], selections=[CaptureSelection("s", POINT, CaptureTransform.summary())])
    answer = [True]
    observer = session.observer(POINT, NumpyBackend(), recomputing=lambda: answer[0])
    session.begin_step(PREFILL, 0)
    observer(None, (), hidden())  # recomputing: passed over
    answer[0] = False
    observer(None, (), hidden())  # observed
    answer[0] = True
    observer(None, (), hidden())  # a second call, passed over rather than "emitted twice"
    step = session.take_step()
    assert [r.outcome for r in step.records] == [CaptureOutcome.CAPTURED]
    observer(None, (), hidden())  # no step open: passed over too
    with pytest.raises(LifecoreTypeError, match="argument 'recomputing' must be callable"):
        session.observer(POINT, NumpyBackend(), recomputing=3)
