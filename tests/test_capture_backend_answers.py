"""What a capture backend's transform returns is checked against what was asked before the
session records it: another kind, another shape or element size, or numbers no region could
give fail the record, naming what the backend got wrong, and nothing wrong is published."""

from __future__ import annotations

import re

import numpy as np
import pytest

from lifecore.capture import (
    CaptureOutcome,
    CapturePhase,
    CaptureRequest,
    CapturePayload,
    CaptureSelection,
    CaptureSlice,
    CaptureTransform,
    NumpyBackend,
    TransformKind,
)
from lifecore.errors import CaptureSessionError

from capture_builders import session_for
from test_capture_payloads import discovery

PREFILL, DECODE = CapturePhase.PREFILL, CapturePhase.DECODE

SHAPE = (1, 4, 8)  # 32 float32 values; a logits point for candidates (vocabulary 8)
VALUES = np.arange(32, dtype=np.float32).reshape(SHAPE) - 7.0


class Answering(NumpyBackend):
    """The NumPy backend, with the transform's answer replaced by ``answer(request)``."""

    def __init__(self, answer):
        self.answer = answer

    def transform(self, tensor, request):
        return self.answer(request)

    @property
    def summary_statistics(self):  # not offered: summaries are answered by transform too
        raise AttributeError("summary_statistics")


def _record(transform, backend, slices=()):
    meaning = "logits" if transform.kind == TransformKind.TOP_CANDIDATES else "activation"
    session = session_for(CaptureSelection("s", "p", transform, slices=list(slices)),
                          discovery=discovery(SHAPE, meaning=meaning), request=CaptureRequest(1, 1, 3))
    session.begin_step(PREFILL, 0)
    error = None
    try:
        session.observe(backend, "p", VALUES)
    except CaptureSessionError as raised:
        error = raised
    record = session.take_step().record("s")
    return record, error, session


EDGES = [-8.0, 0.0, 8.0, 16.0, 24.0]
WRONG_ANSWERS = {
    "a summary for a histogram": (lambda: CaptureTransform.histogram(EDGES),
                                  lambda r: CapturePayload.summary(32, 0, -7.0, 24.0, 8.5, 9.2),
                                  "a summary payload for a histogram request"),
    "a slice of the wrong shape": (CaptureTransform.slice,
                                   lambda r: CapturePayload.from_array(np.zeros((1, 4, 2), np.float32)),
                                   r"a tensor of shape \(1, 4, 2\) \(the region selected is \(1, 4, 4\)\)"),
    "a slice of another element size": (CaptureTransform.slice,
                                        lambda r: CapturePayload.from_array(np.zeros((1, 4, 4), np.float16)),
                                        r"float16 \(2 bytes per element\) for a source of 4"),
    "a longer preview": (lambda: CaptureTransform.preview(5),
                         lambda r: CapturePayload.from_array(np.zeros(6, np.float32)),
                         "a preview of 6 elements \\(the first 5"),
    "a histogram over other edges": (lambda: CaptureTransform.histogram(EDGES),
                                     lambda r: CapturePayload.histogram([-8.0, 0.0, 8.0, 16.0, 25.0], [1, 1, 1, 1]),
                                     "a histogram over other bin edges"),
    "a histogram of more values than the region": (lambda: CaptureTransform.histogram(EDGES),
                                                   lambda r: CapturePayload.histogram(EDGES, [10, 10, 10, 10]),
                                                   "counting more values than the region's 32"),
    "fewer candidates": (lambda: CaptureTransform.top_candidates(3),
                         lambda r: CapturePayload.candidates([7], [24.0]), r"1 candidate ids and 1 scores \(3 were"),
    "a candidate outside the vocabulary": (lambda: CaptureTransform.top_candidates(3),
                                           lambda r: CapturePayload.candidates([7, 6, 99], [24.0, 23.0, 22.0]),
                                           "candidate id 99 outside a vocabulary of 8"),
    "candidates not best first": (lambda: CaptureTransform.top_candidates(3),
                                  lambda r: CapturePayload.candidates([5, 6, 7], [22.0, 23.0, 24.0]),
                                  "not best first"),
    "a summary of another count": (CaptureTransform.summary,
                                   lambda r: CapturePayload.summary(999, 0, -7.0, 24.0, 8.5, 9.2),
                                   "a summary of 999 values for a region of 32"),
    "a summary with more not finite than values": (CaptureTransform.summary,
                                                   lambda r: CapturePayload.summary(32, 33, -7.0, 24.0, 8.5, 9.2),
                                                   "33 values not finite of 32"),
    "a summary whose min is above its max": (CaptureTransform.summary,
                                             lambda r: CapturePayload.summary(32, 0, 24.0, -7.0, 8.5, 9.2),
                                             "cannot bound finite values"),
    "a summary mean off by 1000": (CaptureTransform.summary,
                                   lambda r: CapturePayload.summary(32, 0, -7.0, 24.0, 1008.5, 9.2),
                                   "mean 1008.500000 outside its min and max"),
    "a negative std": (CaptureTransform.summary,
                       lambda r: CapturePayload.summary(32, 0, -7.0, 24.0, 8.5, -1.0), "std -1.000000"),
}


@pytest.mark.parametrize("case", list(WRONG_ANSWERS))
def test_a_wrong_answer_fails_its_record_and_names_what_is_wrong(case):
    transform, answer, says = WRONG_ANSWERS[case]
    slices = (CaptureSlice("a2", 2, 6),) if transform is CaptureTransform.slice else ()
    record, error, session = _record(transform(), Answering(answer), slices)
    assert error is not None and "backend.transform returned" in str(error)
    assert record.outcome == CaptureOutcome.FAILED and record.payload is None
    assert record.fail_reason == "native"
    assert re.search(says, record.message), record.message
    # The session goes on: the right answer is captured in the next step.
    session.begin_step(DECODE, 1)
    session.observe(NumpyBackend(), "p", VALUES)
    assert session.take_step().record("s").outcome in (CaptureOutcome.CAPTURED, CaptureOutcome.TRUNCATED)


@pytest.mark.parametrize("transform", [CaptureTransform.summary, lambda: CaptureTransform.histogram(EDGES),
                                       lambda: CaptureTransform.top_candidates(3), CaptureTransform.full_tensor,
                                       lambda: CaptureTransform.preview(5)])
def test_the_numpy_backends_answers_pass_the_same_checks(transform):
    record, error, _ = _record(transform(), NumpyBackend())
    assert error is None and record.outcome in (CaptureOutcome.CAPTURED, CaptureOutcome.TRUNCATED)


def test_a_summary_that_overflowed_the_source_precision_is_kept():
    # float16 values in [1, 5] whose variance a framework computes in float16 may overflow:
    # inf is what it computed, not a wrong answer.
    record, error, _ = _record(CaptureTransform.summary(),
                               Answering(lambda r: CapturePayload.summary(32, 0, -7.0, 24.0, 8.5, float("inf"))))
    assert error is None and record.outcome == CaptureOutcome.CAPTURED and record.payload.std == float("inf")


class InPlace(NumpyBackend):
    """An intervention that writes over the hook's output and returns it."""

    def intervene(self, tensor, request):
        tensor *= 2.0
        return tensor


def test_an_intervention_that_returns_the_source_itself_fails_its_operation():
    from lifecore.capture import InterventionOutcome, InterventionPlan
    from lifecore.capture import interventions as iv

    session = session_for(discovery=discovery(SHAPE))
    backend = InPlace()
    plan = InterventionPlan([iv.scale("twice", "p", 2.0)])
    session.enable_interventions(plan.admit(discovery(SHAPE), session), backend)
    session.begin_step(PREFILL, 0)
    x = VALUES.copy()
    session.observe(backend, "p", x)
    assert session.intervene(backend, "p", x) is None  # no replacement: the output it wrote over stands
    with pytest.raises(CaptureSessionError, match="returned the output of p itself"):
        session.finish_interventions()
    assert session.take_step().interventions[0].outcome == InterventionOutcome.FAILED


class InPlaceSecond(NumpyBackend):
    """The first operation a new tensor; the second writes over it and returns it."""

    def intervene(self, tensor, request):
        if request.operation_id == "second":
            tensor *= 10.0
            return tensor
        return super().intervene(tensor, request)


def test_a_later_operation_that_returns_the_tensor_it_was_given_fails_too():
    # Before: only the hook's own output was compared, so a second operation on the path could
    # write over the first's result and read APPLIED (and a recompute then refused it).
    from lifecore.capture import InterventionOutcome, InterventionPlan
    from lifecore.capture import interventions as iv

    session = session_for(discovery=discovery(SHAPE))
    backend = InPlaceSecond()
    plan = InterventionPlan([iv.scale("first", "p", 2.0), iv.scale("second", "p", 2.0)])
    session.enable_interventions(plan.admit(discovery(SHAPE), session), backend)
    session.begin_step(PREFILL, 0)
    x = VALUES.copy()
    session.observe(backend, "p", x)
    session.intervene(backend, "p", x)
    with pytest.raises(CaptureSessionError, match="'second' returned the output of p itself"):
        session.finish_interventions()
    outcomes = [(r.operation_id, r.outcome) for r in session.take_step().interventions]
    assert outcomes == [("first", InterventionOutcome.APPLIED), ("second", InterventionOutcome.FAILED)]
    assert np.array_equal(x, VALUES)  # the hook's own output was never written


def test_an_estimator_without_estimate_is_refused_when_interventions_are_enabled():
    from lifecore.capture import InterventionPlan
    from lifecore.capture import interventions as iv
    from lifecore.errors import LifecoreTypeError

    session = session_for(discovery=discovery(SHAPE))
    plan = InterventionPlan([iv.scale("twice", "p", 2.0, evidence="summary")]).admit(discovery(SHAPE), session)
    with pytest.raises(LifecoreTypeError, match="argument 'estimator' must offer estimate"):
        session.enable_interventions(plan, object())
    assert session.intervention_plan is None  # nothing installed: a right estimator is taken after
    session.enable_interventions(plan, NumpyBackend())
    assert session.intervention_plan is not None



def _fails_deep_inside(request):
    def a_helper_of_the_backend():
        raise ZeroDivisionError("the backend divided by zero")
    return a_helper_of_the_backend()


def test_a_backend_exception_is_the_errors_cause_and_its_traceback_is_logged_at_debug(caplog):
    """The record keeps one line and the error raised has the backend's exception as its
    __cause__; the 'lifecore.capture' log has its traceback at DEBUG, and nothing at the default
    level."""
    with caplog.at_level("WARNING", logger="lifecore.capture"):
        record, error, _ = _record(CaptureTransform.preview(4), Answering(_fails_deep_inside))
    assert record.outcome == CaptureOutcome.FAILED
    assert "backend.transform: ZeroDivisionError: the backend divided by zero" in record.message
    assert isinstance(error.__cause__, ZeroDivisionError)
    assert [r for r in caplog.records if r.name == "lifecore.capture"] == []
    with caplog.at_level("DEBUG", logger="lifecore.capture"):
        record, _, _ = _record(CaptureTransform.preview(4), Answering(_fails_deep_inside))
    logged = [r for r in caplog.records if r.name == "lifecore.capture"]
    assert len(logged) == 1 and logged[0].levelname == "DEBUG"
    assert logged[0].getMessage().startswith("backend.transform: ZeroDivisionError: the backend divided by zero")
    assert logged[0].exc_info[0] is ZeroDivisionError
    assert "a_helper_of_the_backend" in caplog.text  # the frame that raised, in the formatted traceback
