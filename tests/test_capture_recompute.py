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


def test_a_recompute_of_another_shape_is_refused_naming_both():
    session = session_with([iv.scale("twice", POINT, 2.0)])
    applied_once(session, hidden())
    with pytest.raises(CaptureSessionError, match=r"recompute of blocks\.0\.mlp .*intervention 'twice' was applied to "
                                                  r"a tensor of shape \[1, 4, 8\], the recompute gives \[1, 3, 8\]"):
        session.reintervene(NumpyBackend(), POINT, hidden(rows=3))
    np.testing.assert_array_equal(session.reintervene(NumpyBackend(), POINT, hidden()), hidden() * 2)  # usable


def test_a_restore_forgets_what_was_applied():
    discovery = sample_discovery()
    session = session_with([iv.scale("twice", POINT, 2.0)], discovery=discovery)
    checkpoint = session.checkpoint(discovery)
    applied_once(session, hidden())
    session.restore(checkpoint)
    assert session.reintervene(NumpyBackend(), POINT, hidden()) is None


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
