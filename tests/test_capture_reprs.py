"""The capture area's value types print what they hold: a user printing a plan, a discovery or
a step sees its fields, not ``<lifecore._core.capture.Axis object at 0x...>``."""

from __future__ import annotations

import numpy as np
import pytest

from lifecore.capture import (Axis, CaptureDiscovery, CapturePhase, CapturePlan, CaptureRequest, CaptureSchedule,
                              CaptureSelection, CaptureSession, CaptureSlice, CaptureTransform, InterventionPlan,
                              NumpyBackend, ObservationPoint, interventions as iv, limits)
from lifecore.errors import CaptureSessionError
from lifecore.testing.capture_session import sample_discovery

from capture_builders import session_for


def test_value_types_print_their_fields():
    assert repr([Axis("batch", "batch"), Axis("d", 8)]) == "[Axis('batch', 'batch'), Axis('d', 8)]"
    assert repr(CaptureTransform.summary()) == "CaptureTransform.summary()"
    assert repr(CaptureTransform.preview(16)) == "CaptureTransform.preview(16)"
    assert repr(CaptureTransform.top_candidates(3)) == "CaptureTransform.top_candidates(3)"
    assert repr(CaptureTransform.histogram([0.0, 1.0, 2.0])) == "CaptureTransform.histogram(<3 edges>)"
    assert repr(CaptureSlice("seq", 1, 3)) == "CaptureSlice('seq', 1, 3, 1)"
    assert repr(CaptureSchedule(decode=False)) == ("CaptureSchedule(prefill=True, decode=False, first_prediction=0, "
                                                   "end_prediction=None, every=1)")
    assert repr(CaptureRequest(1, 4, 3)) == "CaptureRequest(batch=1, prompt_tokens=4, max_predictions=3)"
    budget = limits(per_step=(8, 64, 64, 64), cumulative=(4, 128, 128, 128), on_limit="skip")
    assert repr(budget) == ("CaptureLimits(per_step=CaptureUsage(captures=8, retained_bytes=64, host_bytes=64, "
                            "encoded_bytes=64), cumulative=CaptureUsage(captures=4, retained_bytes=128, "
                            "host_bytes=128, encoded_bytes=128), on_limit=SKIP)")
    selection = CaptureSelection("mlp", "blocks.0.mlp", CaptureTransform.summary())
    assert repr(selection) == "CaptureSelection('mlp', 'blocks.0.mlp', CaptureTransform.summary())"
    plan = CapturePlan([selection], budget)
    assert repr(plan) == "CapturePlan(1 selections, on_limit=SKIP)"
    operation = iv.scale("halve", "blocks.0.mlp", 0.5)
    assert repr(operation) == "InterventionOperation('halve', scale at 'blocks.0.mlp')"
    assert repr(InterventionPlan([operation])) == "InterventionPlan(1 operations)"


def test_a_discovery_and_a_step_print_what_they_hold():
    discovery = CaptureDiscovery("my-model-v1", [ObservationPoint("blocks.0.mlp", [Axis("batch", "batch"),
                                                                                    Axis("d", 8)])])
    assert repr(discovery) == "CaptureDiscovery('my-model-v1', 1 points)"
    plan = CapturePlan([CaptureSelection("mlp", "blocks.0.mlp", CaptureTransform.summary())],
                       limits(per_step=(8, 1 << 20, 1 << 20, 1 << 20), cumulative=(8, 1 << 20, 1 << 20, 1 << 20)))
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 1, 2)))
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0.mlp", np.zeros((1, 8), np.float32))
    step = session.take_step()
    assert repr(step) == "CapturedStep(PREFILL, prediction=0, 1 records, 0 interventions)"


def test_a_session_an_observer_and_a_backend_print_their_state():
    discovery = CaptureDiscovery("my-model-v1", [ObservationPoint("blocks.0.mlp", [Axis("batch", "batch"),
                                                                                    Axis("d", 8)])])
    plan = CapturePlan([CaptureSelection("mlp", "blocks.0.mlp", CaptureTransform.summary())],
                       limits(per_step=(8, 1 << 20, 1 << 20, 1 << 20), cumulative=(8, 1 << 20, 1 << 20, 1 << 20)))
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 1, 2)))
    backend = NumpyBackend()
    assert repr(backend) == "NumpyBackend()"
    observer = session.observer("blocks.0.mlp", backend)
    assert repr(observer) == "CaptureObserver('blocks.0.mlp', selections=1)"
    expected = "CaptureSession(id={}, selections=1, next_prediction={}, step_pending={}, interventions=False)"
    assert repr(session) == expected.format(session.id, 0, False)
    session.begin_step(CapturePhase.PREFILL, 0)
    assert repr(session) == expected.format(session.id, 1, True)  # the prediction the next step begins
    observer.observe(np.zeros((1, 8), np.float32))
    session.take_step()
    assert repr(session) == expected.format(session.id, 1, False)


def test_ids_and_paths_print_as_python_writes_them():
    # Before: a newline or a NUL in an id or a path went into the repr as it was.
    point = ObservationPoint("blocks.0\nmlp", [Axis("d", 8)])
    assert repr(point) == "ObservationPoint('blocks.0\\nmlp')"
    assert repr(ObservationPoint("it's", [Axis("d", 8)])) == 'ObservationPoint("it\'s")'
    selection = CaptureSelection("s\x00t", "blocks.0\nmlp", CaptureTransform.summary())
    assert repr(selection) == "CaptureSelection('s\\x00t', 'blocks.0\\nmlp', CaptureTransform.summary())"
    discovery = CaptureDiscovery("m", [point])
    plan = CapturePlan([selection], limits(per_step=(8, 1 << 20, 1 << 20, 1 << 20),
                                           cumulative=(8, 1 << 20, 1 << 20, 1 << 20)))
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 1, 2)))
    writable = sample_discovery()
    admitted = InterventionPlan([iv.scale("half", "blocks.0.mlp", 0.5)]).admit(
        writable, session_for(discovery=writable))
    assert repr(admitted) == f"AdmittedInterventionPlan({admitted.identity})"  # before: <... object at 0x...>
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0\nmlp", np.zeros(8, np.float32))
    record = session.take_step().records[0]
    assert repr(record) == "CaptureRecord('s\\x00t', CAPTURED)"


def test_a_record_says_why_it_holds_no_payload():
    # Before: "CaptureRecord('t', SKIPPED)", the reason a separate attribute away.
    from lifecore.capture import OnLimit

    point = ObservationPoint("p", [Axis("d", 8)])
    plan = CapturePlan([CaptureSelection("s", "p", CaptureTransform.full_tensor()),
                        CaptureSelection("t", "p", CaptureTransform.preview(4))],
                       limits(per_step=(8, 40, 1 << 20, 1 << 20), cumulative=(8, 1 << 20, 1 << 20, 1 << 20),
                              on_limit=OnLimit.SKIP))
    session = CaptureSession(plan.admit(CaptureDiscovery("m", [point]), CaptureRequest(1, 1, 2)))
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(NumpyBackend(), "p", np.zeros(8, np.float32))
    captured, skipped = session.take_step().records
    assert repr(captured) == "CaptureRecord('s', CAPTURED)"
    assert repr(skipped) == "CaptureRecord('t', SKIPPED, limit retained_bytes (per step))"
    session.begin_step(CapturePhase.DECODE, 1)
    with pytest.raises(CaptureSessionError, match="native capture failed"):
        session.observe(NumpyBackend(), "p", np.zeros(8, np.complex64))
    failed = session.take_step().records[1]
    assert repr(failed).startswith("CaptureRecord('t', FAILED, native: \"native capture failed: ")
