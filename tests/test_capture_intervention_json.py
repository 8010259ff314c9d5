"""Operation records carry a metadata envelope: every step reserves one per intervention or
routing operation beside the selections', so an operation record's JSON fits what it was
charged in every outcome, a step's records fit its encoded usage, and an intervention plan
whose envelopes cannot fit the run is refused when it is enabled."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lifecore.capture import (
    Axis,
    CaptureDiscovery,
    CapturePhase,
    CapturePlan,
    CaptureRequest,
    CaptureSchedule,
    CaptureSelection,
    CaptureSession,
    CaptureTransform,
    CaptureUsage,
    InterventionOutcome,
    InterventionPlan,
    NumpyBackend,
    ObservationPoint,
    RoutingPolicy,
    interventions as iv,
    limits,
)
from lifecore._core.capture import transform_floor
from lifecore.errors import AdmissionError, CaptureSessionError
from lifecore.models import capture_session as model

PREFILL, DECODE = CapturePhase.PREFILL, CapturePhase.DECODE
BIG = 1 << 40
# A point whose path escapes at every byte it can: quotes, backslashes and control bytes.
ESCAPED = 'blk"\\\x01' * 40
ROUTER = "moe\x02router"
HIDDEN = [Axis("b", "batch"), Axis("s", "sequence"), Axis("d", 8)]


def discovery(itemsize: int = 0) -> CaptureDiscovery:
    return CaptureDiscovery("json-artifact", [
        ObservationPoint("p", HIDDEN, itemsize=itemsize),
        ObservationPoint(ESCAPED, HIDDEN),
        ObservationPoint(ROUTER, [Axis("rows", "token_rows"), Axis("experts", 4)], meaning="routing",
                         routing=RoutingPolicy(4, 2)),
    ])


def envelope(op_id: str, target: str) -> CaptureUsage:
    return CaptureUsage(*model.operation_envelope(op_id, target).astuple())


def session(selections=(), per_step=(BIG, BIG, BIG, BIG), cumulative=(BIG, BIG, BIG, BIG), on_limit="fail",
            predictions=3, itemsize=0, prompt=4) -> CaptureSession:
    plan = CapturePlan(list(selections), limits(per_step=per_step, cumulative=cumulative, on_limit=on_limit))
    return CaptureSession(plan.admit(discovery(itemsize), CaptureRequest(1, prompt, predictions)))


def enable(s: CaptureSession, ops, itemsize: int = 0, estimator=None) -> None:
    s.enable_interventions(InterventionPlan(list(ops)).admit(discovery(itemsize), s), estimator or NumpyBackend())


class NoEncodedBytes(NumpyBackend):
    """Prices evidence as if its JSON took no bytes (its retained bytes are right)."""

    def estimate(self, tensor, request):
        cost = super().estimate(tensor, request)
        return CaptureUsage(cost.captures, cost.retained_bytes, cost.host_bytes, 0)


def assert_exported_within_charges(step) -> None:
    exported = 0
    for record in [*step.records, *step.interventions]:
        text = record.to_json()
        json.loads(text)
        assert len(text.encode()) <= record.charged.encoded_bytes, (record, len(text), record.charged)
        exported += len(text.encode())
    assert exported <= step.step_usage.encoded_bytes
    assert step.step_usage.encoded_bytes <= step.cumulative_usage.encoded_bytes


def test_an_operation_without_evidence_is_charged_its_envelope_and_its_json_fits() -> None:
    """Once charged nothing: a 128-byte control-character id exported 924 bytes against 0."""
    s = session()
    ops = [iv.scale("x" * 128, "p", 2.0, evidence=3), iv.zero("\x01" * 128, "p")]
    enable(s, ops)
    s.begin_step(PREFILL, 0)
    s.observe(NumpyBackend(), "p", np.ones((1, 4, 8)))  # the hook observes first
    s.intervene(NumpyBackend(), "p", np.ones((1, 4, 8)))
    step = s.take_step()
    with_evidence, plain = step.interventions
    assert plain.outcome == with_evidence.outcome == InterventionOutcome.APPLIED
    assert plain.charged == envelope("\x01" * 128, "p") == CaptureUsage(0, 0, 512 + 129, 2048 + 6 * 129)
    assert len(plain.to_json()) > 6 * 128  # every id byte escapes to \u0001
    # The evidence is charged on top of the envelope, as before.
    assert with_evidence.charged.encoded_bytes > envelope("x" * 128, "p").encoded_bytes
    assert step.step_usage == CaptureUsage(*(a + b for a, b in zip(with_evidence.charged.as_tuple(),
                                                                    plain.charged.as_tuple())))
    assert_exported_within_charges(step)


def test_a_plan_whose_envelopes_cannot_fit_a_step_is_refused_and_nothing_changes() -> None:
    """The original report's limits: 600 encoded bytes per step hold no operation's record."""
    s = session(per_step=(10, 1 << 20, 1 << 20, 600), cumulative=(10, 1 << 20, 1 << 20, 600))
    ops = [iv.scale("x" * 128, "p", 2.0, evidence=3), iv.zero("\x01" * 128, "p")]
    with pytest.raises(AdmissionError, match="envelopes exceed the per-step limit: encoded_bytes"):
        enable(s, ops)
    assert s.intervention_plan is None
    s.begin_step(PREFILL, 0)
    s.observe(NumpyBackend(), "p", np.ones((1, 4, 8)))  # the hook observes first
    assert s.intervene(NumpyBackend(), "p", np.ones((1, 4, 8))) is None
    step = s.take_step()
    assert step.interventions == [] and step.step_usage == CaptureUsage()


def test_envelopes_are_checked_beside_the_selections_per_step_and_over_the_run() -> None:
    selection = CaptureSelection("sel", "p", CaptureTransform.summary())
    one, two = envelope("one", "p"), envelope("two", "p")
    s = session([selection])
    s.begin_step(PREFILL, 0)
    sel_envelope = s.take_step().records[0].charged
    room = tuple(a + b for a, b in zip(sel_envelope.as_tuple(), one.as_tuple()))
    # Per step: one operation fits beside the selection, two do not; the refusal changes nothing.
    s = session([selection], per_step=room)
    with pytest.raises(AdmissionError, match="capture and intervention envelopes exceed the per-step limit"):
        enable(s, [iv.zero("one", "p"), iv.zero("two", "p")])
    assert s.intervention_plan is None
    enable(s, [iv.zero("one", "p")])
    s.begin_step(PREFILL, 0)
    step = s.take_step()
    assert step.step_usage == CaptureUsage(*room) and step.interventions[0].charged == one
    # Over the run: three predictions of both envelopes must fit the cumulative limit.
    run = tuple(3 * (a + b) for a, b in zip(sel_envelope.as_tuple(), two.as_tuple()))
    short = tuple(v - 1 if i == 3 else v for i, v in enumerate(run))
    with pytest.raises(AdmissionError, match="exceed the cumulative limit: encoded_bytes"):
        enable(session([selection], cumulative=short), [iv.zero("two", "p")])
    enable(session([selection], cumulative=run), [iv.zero("two", "p")])


def test_a_forked_run_is_checked_from_its_inherited_usage() -> None:
    selection = CaptureSelection("sel", "p", CaptureTransform.summary())  # never observed: envelopes only
    probe = session([selection])
    probe.begin_step(PREFILL, 0)
    e_sel = probe.take_step().records[0].charged.encoded_bytes
    e_op = envelope("op", ESCAPED).encoded_bytes
    # A fresh run of three predictions needs 3 x (e_sel + e_op); a child continuing after the
    # prefill step inherits e_sel and needs two more steps: 3 x e_sel + 2 x e_op.
    cumulative = (BIG, BIG, BIG, 3 * e_sel + 2 * e_op)
    parent = session([selection], cumulative=cumulative)
    with pytest.raises(AdmissionError, match="cumulative"):
        enable(parent, [iv.zero("op", ESCAPED)])
    parent.begin_step(PREFILL, 0)
    assert parent.take_step().step_usage.encoded_bytes == e_sel
    child = parent.fork(discovery())
    enable(child, [iv.zero("op", ESCAPED)])
    for prediction in (1, 2):
        child.begin_step(DECODE, prediction)
        child.observe(NumpyBackend(), ESCAPED, np.ones((1, 1, 8), dtype=np.float32))  # the hook observes first
        assert child.intervene(NumpyBackend(), ESCAPED, np.ones((1, 1, 8), dtype=np.float32)) is not None
        assert_exported_within_charges(child.take_step())
    assert child.cumulative_usage().encoded_bytes == cumulative[3]


def test_under_fail_known_value_costs_must_fit_beside_the_operation_envelopes() -> None:
    """The capture preflight again, with the operations' envelopes in each step."""
    selection = CaptureSelection("sel", "p", CaptureTransform.summary())
    probe = session([selection], itemsize=4)
    probe.begin_step(PREFILL, 0)
    sel_envelope = probe.take_step().records[0].charged
    floor = transform_floor(selection.transform, 4 * 8, 4)  # the least a summary of [1, 4, 8] costs
    op = envelope("op", "p")
    tight = tuple(a + b + c - (1 if i == 3 else 0)
                  for i, (a, b, c) in enumerate(zip(sel_envelope.as_tuple(), floor.as_tuple(), op.as_tuple())))
    s = session([selection], per_step=tight, itemsize=4)  # the selection alone fits
    with pytest.raises(AdmissionError, match="under on_limit=fail, 'sel' needs at least"):
        enable(s, [iv.zero("op", "p")], itemsize=4)
    assert s.intervention_plan is None
    # Under "skip" a capture over a limit is skipped, not failed: no value preflight.
    enable(session([selection], per_step=tight, on_limit="skip", itemsize=4), [iv.zero("op", "p")], itemsize=4)


def test_every_outcome_fits_its_charge_with_escaped_ids_targets_and_long_messages() -> None:
    """INACTIVE, MISSING, APPLIED and FAILED records, ids and targets that escape at every byte,
    and the longest failure message (256 bytes of control characters) all fit their charges."""
    s = session(per_step=(0, 1 << 20, 1 << 20, 1 << 20), cumulative=(0, BIG, BIG, BIG))
    nasty = '"\\\x03' * 42 + "\x04\x05"  # 128 bytes
    ops = [
        iv.zero(nasty, ESCAPED),                                          # fails: wrong shape
        iv.scale("later", ESCAPED, 2.0, schedule=CaptureSchedule(prefill=False)),  # INACTIVE at prefill
        iv.zero("\x06" * 128, "p"),                                       # MISSING: never run
        iv.exclude_experts("\x07" * 128, ROUTER, [3]),                    # fails with a long message
    ]
    enable(s, ops)
    s.begin_step(PREFILL, 0)
    s.observe(NumpyBackend(), ESCAPED, np.ones((1, 4, 9), dtype=np.float32))  # the hook observes first
    assert s.intervene(NumpyBackend(), ESCAPED, np.ones((1, 4, 9), dtype=np.float32)) is None
    s.routing_failed(ROUTER, "\x01" * 1000)
    step = s.take_step()
    failed, inactive, missing, routed = step.interventions
    assert failed.outcome == routed.outcome == InterventionOutcome.FAILED
    assert (inactive.outcome, missing.outcome) == (InterventionOutcome.INACTIVE, InterventionOutcome.MISSING)
    assert routed.message == "\x01" * 256 and len(routed.to_json()) > 6 * 256 + 6 * 128
    for record, op in zip(step.interventions, ops):
        assert record.charged == envelope(op.id, op.target)
    assert_exported_within_charges(step)
    # A decode step: the scheduled scale now applies to the escaped target, the rest fail or miss.
    s.begin_step(DECODE, 1)
    s.observe(NumpyBackend(), ESCAPED, np.ones((1, 1, 8), dtype=np.float32))  # the hook observes first
    assert s.intervene(NumpyBackend(), ESCAPED, np.ones((1, 1, 8), dtype=np.float32)) is not None
    s.routing_failed(ROUTER, "é" * 300)
    step = s.take_step()
    assert [r.outcome for r in step.interventions] == [InterventionOutcome.APPLIED, InterventionOutcome.APPLIED,
                                                       InterventionOutcome.MISSING, InterventionOutcome.FAILED]
    assert_exported_within_charges(step)


def test_routing_evidence_is_charged_on_top_of_the_envelope_and_fits() -> None:
    s = session()
    op = iv.exclude_experts("route", ROUTER, [3], evidence=4)
    enable(s, [op])
    s.begin_step(PREFILL, 0)
    control = s.routing_control(ROUTER, 4)
    assert control is not None
    ids = np.array([[0, 1]] * 4, dtype=np.int64)
    coefficients = np.full((4, 2), 0.5, dtype=np.float32)
    s.routing_applied(NumpyBackend(), ROUTER, (ids, coefficients), (ids, coefficients))
    step = s.take_step()
    record = step.interventions[0]
    assert record.outcome == InterventionOutcome.APPLIED and len(record.evidence) == 4
    base = envelope("route", ROUTER)
    assert record.charged.encoded_bytes > base.encoded_bytes
    assert record.charged.host_bytes >= base.host_bytes + 4 * 2 * 16  # the original decision's reservation
    assert_exported_within_charges(step)


def test_evidence_whose_json_outgrows_its_charge_fails_the_operation() -> None:
    """The record's JSON is checked against all it was charged before it is published: evidence a
    backend priced too low fails the operation (its evidence dropped) instead of passing the bound."""
    rows = 256
    s = session(prompt=rows)
    enable(s, [iv.scale("s", "p", 2.0, evidence=4096)], estimator=NoEncodedBytes())
    s.begin_step(PREFILL, 0)
    s.observe(NumpyBackend(), "p", np.ones((1, rows, 8), dtype=np.float32))  # the hook observes first
    assert s.intervene(NumpyBackend(), "p", np.ones((1, rows, 8), dtype=np.float32)) is None
    step = s.take_step()
    record = step.interventions[0]
    assert record.outcome == InterventionOutcome.FAILED and "underestimated encoded evidence" in record.message
    assert record.evidence == []
    assert_exported_within_charges(step)


def test_routing_evidence_whose_json_outgrows_its_charge_fails_the_operation() -> None:
    rows = 256
    s = session(prompt=rows)
    enable(s, [iv.exclude_experts("route", ROUTER, [3], evidence=4)])
    s.begin_step(PREFILL, 0)
    assert s.routing_control(ROUTER, rows) is not None
    ids = np.array([[0, 1]] * rows, dtype=np.int64)
    coefficients = np.full((rows, 2), 0.5, dtype=np.float32)
    with pytest.raises(CaptureSessionError, match="underestimated encoded routing evidence"):
        s.routing_applied(NoEncodedBytes(), ROUTER, (ids, coefficients), (ids, coefficients))
    step = s.take_step()
    record = step.interventions[0]
    assert record.outcome == InterventionOutcome.FAILED and record.evidence == []
    assert_exported_within_charges(step)
