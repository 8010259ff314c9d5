"""Capture's value types (plans, discoveries, selections and what they are built of) compare and
hash by their fields, copy, and pickle through their public constructors; the objects bound to a
session refuse to be copied or pickled, saying what to send instead."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from lifecore.capture import (
    Axis,
    BackendCapabilities,
    CaptureDiscovery,
    CaptureLimits,
    CapturePayload,
    CapturePhase,
    CapturePlan,
    CaptureRequest,
    CaptureSchedule,
    CaptureSelection,
    CaptureSession,
    CaptureSlice,
    CaptureTransform,
    CaptureUsage,
    InterventionAction,
    InterventionOperation,
    InterventionPlan,
    ObservationPoint,
    OnLimit,
    PhaseSupport,
    PointPosition,
    RoutingPolicy,
    TransformKind,
    ValueDtype,
    unlimited,
)
from lifecore.capture import interventions as iv
from lifecore.errors import CaptureSessionError, InvalidArgumentError, LifecoreTypeError
from lifecore.testing.capture_session import sample_discovery

import capture_builders

SCHEDULE = CaptureSchedule(prefill=False, first_prediction=1, end_prediction=9, every=2)
SLICES = [CaptureSlice("d", 1, 7, 2)]
POINT = ObservationPoint("blocks.0.mlp.router", [Axis("rows", "token_rows"), Axis("experts", 8)], node_id="n7",
                         meaning="routing", dtype=ValueDtype.FLOATING, decode=False,
                         position=PointPosition.BEFORE_INTERVENTION, decode_support=PhaseSupport.CONDITIONAL,
                         routing=RoutingPolicy(8, 2, scoring="sigmoid", groups=4, topk_groups=2, epsilon=1e-6),
                         itemsize=2)
CAPABILITIES = BackendCapabilities([TransformKind.SUMMARY, TransformKind.PREVIEW], max_histogram_bins=16,
                                   physical_native_limit=True)
LIMITS = CaptureLimits(CaptureUsage(4, 1 << 20, 1 << 20, 1 << 21), CaptureUsage(64, 1 << 24, 1 << 24, 1 << 25),
                       OnLimit.SKIP, physical_native_bytes=4096)

# Each value twice, built alike (never the same object), with one that differs by a field.
VALUES = {
    "Axis": (lambda: Axis("d", 8), lambda: Axis("d", "sequence")),
    "RoutingPolicy": (lambda: RoutingPolicy(8, 2, scoring="sigmoid", groups=4, topk_groups=2, epsilon=1e-6),
                      lambda: RoutingPolicy(8, 2)),
    "ObservationPoint": (lambda: ObservationPoint(POINT.path, POINT.axes, node_id="n7", meaning="routing",
                                                  decode=False, position=PointPosition.BEFORE_INTERVENTION,
                                                  decode_support=PhaseSupport.CONDITIONAL, routing=POINT.routing,
                                                  itemsize=2),
                         lambda: ObservationPoint(POINT.path, POINT.axes, node_id="n7", meaning="routing",
                                                  decode=False, position=PointPosition.BEFORE_INTERVENTION,
                                                  decode_support=PhaseSupport.CONDITIONAL, routing=POINT.routing,
                                                  itemsize=4)),
    "BackendCapabilities": (lambda: BackendCapabilities([TransformKind.SUMMARY, TransformKind.PREVIEW],
                                                        max_histogram_bins=16, physical_native_limit=True),
                            lambda: BackendCapabilities()),
    "CaptureDiscovery": (lambda: CaptureDiscovery("model-a", [POINT], CAPABILITIES),
                         lambda: CaptureDiscovery("model-b", [POINT], CAPABILITIES)),
    "CaptureRequest": (lambda: CaptureRequest(2, 16, 4), lambda: CaptureRequest(2, 16, 5)),
    "CaptureSchedule": (lambda: CaptureSchedule(prefill=False, first_prediction=1, end_prediction=9, every=2),
                        lambda: CaptureSchedule(prefill=False, first_prediction=1, every=2)),
    "CaptureSlice": (lambda: CaptureSlice("d", 1, 7, 2), lambda: CaptureSlice("d", 1, None, 2)),
    "CaptureTransform.preview": (lambda: CaptureTransform.preview(12), lambda: CaptureTransform.preview(13)),
    "CaptureTransform.histogram": (lambda: CaptureTransform.histogram([-1.0, 0.0, 2.5]),
                                   lambda: CaptureTransform.histogram([-1.0, 0.0, 2.0])),
    "CaptureTransform.top_candidates": (lambda: CaptureTransform.top_candidates(5), lambda: CaptureTransform.summary()),
    "CaptureTransform.slice": (lambda: CaptureTransform.slice(), lambda: CaptureTransform.full_tensor()),
    "CaptureSelection": (lambda: CaptureSelection("s", "blocks.0.mlp", CaptureTransform.preview(12),
                                                  schedule=SCHEDULE, slices=SLICES),
                         lambda: CaptureSelection("s", "blocks.0.mlp", CaptureTransform.preview(12), schedule=SCHEDULE)),
    "CaptureUsage": (lambda: CaptureUsage(1, 2, 3, 4), lambda: CaptureUsage(1, 2, 3, 5)),
    "CaptureLimits": (lambda: CaptureLimits(LIMITS.per_step, LIMITS.cumulative, OnLimit.SKIP, physical_native_bytes=4096),
                      lambda: CaptureLimits(LIMITS.per_step, LIMITS.cumulative, OnLimit.FAIL, physical_native_bytes=4096)),
    "CapturePlan": (lambda: CapturePlan([CaptureSelection("s", "blocks.0.mlp", schedule=SCHEDULE)], LIMITS),
                    lambda: CapturePlan([CaptureSelection("t", "blocks.0.mlp", schedule=SCHEDULE)], LIMITS)),
    "InterventionOperation": (lambda: InterventionOperation("a", "blocks.0.mlp", InterventionAction.ADD,
                                                            schedule=SCHEDULE, payload_shape=[2], payload=[0.5, -1.0]),
                              lambda: InterventionOperation("a", "blocks.0.mlp", InterventionAction.ADD,
                                                            schedule=SCHEDULE, payload_shape=[2], payload=[0.5, 1.0])),
    "InterventionPlan": (lambda: InterventionPlan([iv.scale("half", "blocks.0.mlp", 0.5)]),
                         lambda: InterventionPlan([iv.scale("half", "blocks.0.mlp", 0.25)])),
    "InterventionOperation.nan": (lambda: InterventionOperation("a", "blocks.0.mlp", InterventionAction.REPLACE,
                                                                payload_shape=[2], payload=[float("nan"), 1.0]),
                                  lambda: InterventionOperation("a", "blocks.0.mlp", InterventionAction.REPLACE,
                                                                payload_shape=[2], payload=[0.0, 1.0])),
    "CaptureTransform.histogram.nan": (lambda: CaptureTransform.histogram([0.0, float("nan")]),
                                       lambda: CaptureTransform.histogram([0.0, 1.0])),
}
UNHASHABLE = {"CaptureUsage"}  # a ledger's running totals: mutable


@pytest.mark.parametrize("name", sorted(VALUES))
def test_a_value_copies_and_pickles_to_an_equal_value(name):
    make, differing = VALUES[name]
    value = make()
    assert value == make() and value is not make()
    assert value != differing() and value != object() and not (value == differing())
    for other in (copy.copy(value), copy.deepcopy(value), pickle.loads(pickle.dumps(value)),
                  pickle.loads(pickle.dumps(value, protocol=2))):
        assert type(other) is type(value) and other == value and other is not value
        assert repr(other) == repr(value)
    if name not in UNHASHABLE:
        assert hash(value) == hash(make()) == hash(pickle.loads(pickle.dumps(value)))
        assert len({value, make(), differing()}) == 2


def test_a_pickled_plan_admits_in_another_session_as_the_original_does():
    discovery = sample_discovery()
    plan = CapturePlan([CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary())], unlimited())
    sent_plan, sent_discovery = pickle.loads(pickle.dumps((plan, discovery)))
    assert sent_discovery == discovery and hash(sent_discovery) == hash(discovery)
    request = CaptureRequest(1, 4, 3)
    original, received = plan.admit(discovery, request), sent_plan.admit(sent_discovery, request)
    assert received.identity == original.identity and received.plan == plan
    assert CaptureSession(received, sent_discovery).plan.identity == original.identity


class _Tampered:
    """Pickles as a CaptureRequest whose batch was altered to -1 (as an edited pickle would)."""

    def __reduce__(self):
        rebuild, (cls, factory, args, kwargs) = CaptureRequest(1, 4, 3).__reduce__()
        return rebuild, (cls, factory, args, dict(kwargs, batch=-1))


def test_a_pickle_is_rebuilt_through_the_constructor_so_a_bad_one_is_refused():
    with pytest.raises(InvalidArgumentError, match="^CaptureRequest: argument 'batch'"):
        pickle.loads(pickle.dumps(_Tampered()))


def test_objects_bound_to_a_session_refuse_copies_and_pickles_saying_what_to_send():
    session = capture_builders.session_for(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()))
    session.begin_step(CapturePhase.PREFILL, 0)
    step = session.take_step()
    record = step.record("s")
    payload = CapturePayload.from_array(np.zeros(3, np.float32))
    bound = [(session, "admit them again"), (step, "to_json"), (record, "to_json"), (payload, "arrays")]
    for obj, hint in bound:
        for attempt in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(LifecoreTypeError, match=f"{type(obj).__name__} cannot be copied or pickled.*{hint}"):
                attempt(obj)
    # The core's own refusals: an admission cannot be forged, a checkpoint belongs to its run
    # (which is never serialized: a checkpoint copies, within the process, but never pickles).
    for attempt in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(LifecoreTypeError, match="cannot forge admission"):
            attempt(session.plan)
    with pytest.raises(LifecoreTypeError, match="belongs to its run, which is never serialized"):
        pickle.dumps(session.checkpoint(sample_discovery()))


def test_a_checkpoint_is_a_portable_value_holding_its_admission_data() -> None:
    # The specification's checkpoint is copied, and clones the admission data its storage size
    # counts. Before, it held identities only and refused copy and deepcopy.
    session = capture_builders.session_for(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()))
    discovery = sample_discovery()
    session.begin_step(CapturePhase.PREFILL, 0)
    session.take_step()
    checkpoint = session.checkpoint(discovery)
    assert checkpoint.plan.identity == session.plan.identity == checkpoint.plan_identity
    assert [s.id for s in checkpoint.plan.plan.selections] == ["s"] and checkpoint.intervention_plan is None
    assert session.checkpoint_storage_bytes(discovery) >= len(checkpoint.plan_identity)
    for copied in (copy.copy(checkpoint), copy.deepcopy(checkpoint)):
        assert copied is not checkpoint and copied.plan.identity == checkpoint.plan.identity
        session.begin_step(CapturePhase.DECODE, 1)
        session.take_step()
        session.restore(copied)  # a copy restores the run it belongs to
        assert session.take_step() is None
    other = capture_builders.session_for(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()))
    with pytest.raises(CaptureSessionError, match="belongs to another capture session"):
        other.restore(copy.copy(checkpoint))
