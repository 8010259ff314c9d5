"""Capture sessions under hostile input: arithmetic that would wrap, plans that must not
change once admitted, arguments of the wrong type or size, exceptions that keep their cause,
reference cycles through the binding, and the exact limits of the capture rules."""

from __future__ import annotations

import enum
import gc
import weakref

import numpy as np
import pytest

from lifecore.capture import (
    Axis,
    CaptureDiscovery,
    CaptureLimits,
    CaptureOutcome,
    CapturePhase,
    CapturePlan,
    CaptureRequest,
    CaptureSchedule,
    CaptureSelection,
    CaptureSession,
    CaptureSlice,
    CaptureTransform,
    CaptureUsage,
    InterventionOutcome,
    InterventionPlan,
    NumpyBackend,
    ObservationPoint,
    OnLimit,
    PhaseSupport,
    RoutingPolicy,
    interventions as iv,
    limits as make_limits,
    unlimited,
)
from lifecore.errors import (
    LifecoreError,
    AdmissionError,
    BudgetExceededError,
    CaptureSessionError,
    InvalidArgumentError,
    LifecoreOverflowError,
    LifecoreTypeError,
)
from lifecore.models.capture_session import operation_envelope
from lifecore.testing.capture_session import ROUTER, sample_discovery

from capture_builders import REQUEST, admit, session_for

PREFILL, DECODE = CapturePhase.PREFILL, CapturePhase.DECODE
HIDDEN = [Axis("batch", "batch"), Axis("seq", "sequence"), Axis("d", 8)]
BIG = 2**62


def hidden(rows=4):
    return np.arange(rows * 8, dtype=np.float32).reshape(1, rows, 8)


def with_interventions(ops, *, limits=None, estimator=None, discovery=None, request=REQUEST, selections=()):
    discovery = discovery or sample_discovery()
    session = session_for(*selections, limits=limits, discovery=discovery, request=request)
    admitted = InterventionPlan(list(ops)).admit(discovery, session)
    session.enable_interventions(admitted, estimator or NumpyBackend())
    return session


class FixedEstimator:
    """An intervention estimator that answers one fixed cost."""

    def __init__(self, usage):
        self.usage = usage

    def estimate(self, tensor, request):
        return self.usage


# -- Section 2: arithmetic never wraps ---------------------------------------------------------

# The metadata envelope of operation "s" at blocks.0.mlp, charged every step whatever happens.
SCALE_ENVELOPE = CaptureUsage(*operation_envelope("s", "blocks.0.mlp").astuple())


@pytest.mark.parametrize("on_limit", [OnLimit.FAIL, OnLimit.SKIP])
@pytest.mark.parametrize("bytes_", [2**63, 2**64 - 1])
def test_an_evidence_charge_past_64_bits_is_refused_never_applied_with_a_wrapped_charge(on_limit, bytes_):
    # Before and after are reserved together: 2 x 2**63 does not fit in 64 bits.
    session = with_interventions([iv.scale("s", "blocks.0.mlp", 2.0, evidence="summary")],
                                 limits=unlimited(on_limit), estimator=FixedEstimator(CaptureUsage(1, bytes_, bytes_, bytes_)))
    session.begin_step(PREFILL, 0)
    before = session.cumulative_usage()
    session.observe(NumpyBackend(), "blocks.0.mlp", hidden())  # the hook observes first
    out = session.intervene(NumpyBackend(), "blocks.0.mlp", hidden())
    step = session.take_step()
    record = step.interventions[0]
    assert session.cumulative_usage() == before  # nothing charged, nothing wrapped
    assert record.charged == SCALE_ENVELOPE  # its metadata envelope alone, reserved at begin_step
    assert record.evidence == []
    if on_limit == OnLimit.FAIL:
        assert out is None and record.outcome == InterventionOutcome.FAILED
        assert "exceeds the capture limit" in record.message
    else:  # skip: applied without evidence, as for any other limit
        assert record.outcome == InterventionOutcome.APPLIED
        np.testing.assert_array_equal(out, hidden() * 2)


def test_an_evidence_charge_at_2_32_is_charged_exactly():
    session = with_interventions([iv.scale("s", "blocks.0.mlp", 2.0, evidence="summary")],
                                 estimator=FixedEstimator(CaptureUsage(1, 2**32, 2**32, 2**32)))
    session.begin_step(PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0.mlp", hidden())  # the hook observes first
    session.intervene(NumpyBackend(), "blocks.0.mlp", hidden())
    record = session.take_step().interventions[0]
    assert record.outcome == InterventionOutcome.APPLIED
    assert record.charged == CaptureUsage(2, 2**33, 2**33 + SCALE_ENVELOPE.host_bytes,
                                          2**33 + SCALE_ENVELOPE.encoded_bytes)  # on top of the envelope


class HugeEstimates(NumpyBackend):
    """A backend whose every estimate is `each` bytes (routing evidence sums four of them)."""

    def __init__(self, each):
        super().__init__()
        self.each = each

    def estimate(self, tensor, request):
        return CaptureUsage(0, self.each, self.each, 0)


def decision(rows, top_k=2):
    return np.array([[0, 1]] * rows, dtype=np.int64), np.full((rows, top_k), 0.5, np.float32)


@pytest.mark.parametrize("each", [2**62, 2**63, 2**64 - 1])
def test_routing_evidence_estimates_that_sum_past_64_bits_are_refused(each):
    session = with_interventions([iv.exclude_experts("x", ROUTER, [3], evidence=8)])
    session.begin_step(PREFILL, 0)
    session.routing_control(ROUTER, 4)
    before = session.cumulative_usage()
    with pytest.raises(BudgetExceededError):
        session.routing_applied(HugeEstimates(each), ROUTER, decision(4), decision(4))
    assert session.cumulative_usage() == before
    record = session.take_step().interventions[0]
    assert record.outcome == InterventionOutcome.FAILED and record.evidence == []


def test_routing_evidence_at_2_32_is_charged_exactly():
    session = with_interventions([iv.exclude_experts("x", ROUTER, [3], evidence=8)])
    session.begin_step(PREFILL, 0)
    session.routing_control(ROUTER, 4)
    session.routing_applied(HugeEstimates(2**32), ROUTER, decision(4), decision(4))
    record = session.take_step().interventions[0]
    original = 4 * 2 * 16  # token_rows x top_k x 16, reserved by routing_control
    envelope = operation_envelope("x", ROUTER)  # reserved at begin_step, the evidence on top
    assert record.charged == CaptureUsage(0, original + 4 * 2**32, original + 4 * 2**32 + envelope.host_bytes,
                                          envelope.encoded_bytes)


@pytest.mark.parametrize("rows", [5, 2**32, 2**63, 2**64 - 1])
def test_routing_control_refuses_more_token_rows_than_the_request_routes_and_changes_nothing(rows):
    session = with_interventions([iv.exclude_experts("x", ROUTER, [3], evidence=8)])
    session.begin_step(PREFILL, 0)  # the request routes 1 x 4 rows in prefill
    with pytest.raises(InvalidArgumentError, match="token rows exceed"):
        session.routing_control(ROUTER, rows)
    assert session.cumulative_usage() == session.step_usage()  # only the envelopes
    control = session.routing_control(ROUTER, 4)  # still due: a correct call follows
    assert control.token_rows == 4
    session.routing_applied(NumpyBackend(), ROUTER, decision(4), decision(4))
    assert session.take_step().interventions[0].outcome == InterventionOutcome.APPLIED


def test_routing_control_in_decode_routes_one_row_per_sequence():
    session = with_interventions([iv.exclude_experts("x", ROUTER, [3])])
    session.begin_step(PREFILL, 0)
    session.routing_control(ROUTER, 4)
    session.routing_applied(NumpyBackend(), ROUTER, None, decision(4))
    session.take_step()
    session.begin_step(DECODE, 1)
    with pytest.raises(InvalidArgumentError, match="token rows exceed the 1"):
        session.routing_control(ROUTER, 2)
    assert session.routing_control(ROUTER, 1).token_rows == 1


def test_routing_control_token_rows_of_2_64_is_an_overflow_error():
    session = with_interventions([iv.exclude_experts("x", ROUTER, [3])])
    session.begin_step(PREFILL, 0)
    with pytest.raises(LifecoreOverflowError, match="token_rows"):
        session.routing_control(ROUTER, 2**64)
    with pytest.raises(LifecoreTypeError, match="token_rows"):
        session.routing_control(ROUTER, True)


@pytest.mark.parametrize("rows", [2**60, 2**62])
def test_the_original_route_reservation_never_wraps_to_zero(rows):
    # token_rows x top_k x 16 = 2**65 or more: reserved as "too large", never as 0 bytes.
    request = CaptureRequest(1, rows, 1)
    session = with_interventions([iv.exclude_experts("x", ROUTER, [3], evidence=8)], request=request)
    session.begin_step(PREFILL, 0)
    before = session.cumulative_usage()
    with pytest.raises(BudgetExceededError):
        session.routing_control(ROUTER, rows)
    assert session.cumulative_usage() == before
    assert session.take_step().interventions[0].outcome == InterventionOutcome.FAILED


def test_the_original_route_reservation_at_2_32_rows_is_exact():
    rows = 2**32
    request = CaptureRequest(1, rows, 1)
    session = with_interventions([iv.exclude_experts("x", ROUTER, [3], evidence=8)], request=request)
    session.begin_step(PREFILL, 0)
    envelopes = session.cumulative_usage()
    session.routing_control(ROUTER, rows)
    reserved = rows * 2 * 16
    assert session.cumulative_usage() == CaptureUsage(envelopes.captures, reserved, envelopes.host_bytes + reserved,
                                                      envelopes.encoded_bytes)


@pytest.mark.parametrize("stride", [2**32, 2**63, 2**64 - 1])
def test_a_huge_slice_stride_selects_the_first_element_and_charges_it(stride):
    sel = CaptureSelection("s", "blocks.0.mlp", CaptureTransform.slice(), slices=[CaptureSlice("d", 0, None, stride)])
    session = session_for(sel)
    session.begin_step(PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0.mlp", hidden())
    record = session.take_step().record("s")
    assert record.outcome == CaptureOutcome.CAPTURED
    assert record.selected_shape == [1, 4, 1]  # ceil(8 / stride) == 1, never a wrapped 0
    assert record.payload.shape == [1, 4, 1] and record.payload.tensor.ravel().tolist() == [0.0, 8.0, 16.0, 24.0]
    assert record.charged.host_bytes > 4 * 4  # the value is charged, not only the envelope


@pytest.mark.parametrize("stride", [2**32, 2**63, 2**64 - 1])
def test_a_huge_slice_stride_on_an_intervention_payload_is_one_element(stride):
    discovery = sample_discovery()
    session = session_for(discovery=discovery)
    prefill = CaptureSchedule(decode=False)
    good = iv.replace("r", "blocks.0.mlp", np.ones((1, 4, 1)), slices=[CaptureSlice("d", 0, None, stride)],
                      schedule=prefill)
    InterventionPlan([good]).admit(discovery, session)
    wrapped = iv.replace("r", "blocks.0.mlp", np.ones((1, 4, 0)), slices=[CaptureSlice("d", 0, None, stride)],
                         schedule=prefill)
    with pytest.raises(AdmissionError, match="payload"):
        InterventionPlan([wrapped]).admit(discovery, session)


def test_a_stride_of_2_64_is_an_overflow_error():
    with pytest.raises(LifecoreOverflowError, match="stride"):
        CaptureSlice("d", 0, None, 2**64)


@pytest.mark.parametrize("value", [2**32, 2**63, 2**64 - 1])
def test_usage_fields_take_any_64_bit_count(value):
    usage = CaptureUsage(value, value, value, value)
    usage.captures = value
    assert usage.as_tuple() == (value,) * 4


@pytest.mark.parametrize("field", ["captures", "retained_bytes", "host_bytes", "encoded_bytes"])
def test_usage_beyond_64_bits_or_negative_or_bool_is_refused_naming_the_field(field):
    with pytest.raises(LifecoreOverflowError, match=field):
        CaptureUsage(**{field: 2**64})
    with pytest.raises(InvalidArgumentError, match=field):
        CaptureUsage(**{field: -1})
    with pytest.raises(LifecoreTypeError, match=field):
        CaptureUsage(**{field: True})
    usage = CaptureUsage(1, 2, 3, 4)
    with pytest.raises(LifecoreOverflowError, match=field):
        setattr(usage, field, 2**64)
    with pytest.raises(LifecoreTypeError, match=field):
        setattr(usage, field, "7")
    assert usage.as_tuple() == (1, 2, 3, 4)


@pytest.mark.parametrize("limit", [2**32, 2**63, 2**64 - 1])
def test_limits_up_to_2_64_are_enforced_without_wrapping(limit):
    limits = CaptureLimits(per_step=CaptureUsage(1, limit, limit, limit), cumulative=CaptureUsage(2**64 - 1, limit, limit, limit),
                           on_limit=OnLimit.SKIP)
    session = session_for(CaptureSelection("a", "blocks.0.mlp", CaptureTransform.summary()),
                          CaptureSelection("b", "blocks.0.mlp", CaptureTransform.summary()), limits=limits)
    session.begin_step(PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0.mlp", hidden())
    step = session.take_step()
    assert [r.outcome for r in step.records] == [CaptureOutcome.CAPTURED, CaptureOutcome.SKIPPED]
    assert step.record("b").budget == "captures"


@pytest.mark.parametrize("args", [(2**32, 2**32, 1), (2**63, 2, 1), (1, 2**64 - 1, 1), (1, 1, 2**64 - 1)])
def test_request_products_past_64_bits_are_refused_at_admission(args):
    with pytest.raises(AdmissionError, match="overflow"):
        admit(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()), request=CaptureRequest(*args))


@pytest.mark.parametrize("name", ["batch", "prompt_tokens", "max_predictions"])
def test_request_numbers_of_2_64_are_overflow_errors(name):
    with pytest.raises(LifecoreOverflowError, match=name):
        CaptureRequest(**{name: 2**64})
    with pytest.raises(LifecoreTypeError, match=name):
        CaptureRequest(**{name: 1.0})


@pytest.mark.parametrize("every", [2**32, 2**63, 2**64 - 1])
def test_a_huge_schedule_step_fires_once_and_never_wraps(every):
    sel = CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary(),
                           schedule=CaptureSchedule(first_prediction=1, every=every))
    session = session_for(sel)
    for prediction in range(3):
        session.begin_step(PREFILL if prediction == 0 else DECODE, prediction)
        session.observe(NumpyBackend(), "blocks.0.mlp", hidden(4 if prediction == 0 else 1))
        record = session.take_step().record("s")
        assert (record.outcome == CaptureOutcome.CAPTURED) == (prediction == 1)


@pytest.mark.parametrize("first", [2**32, 2**63, 2**64 - 1])
def test_a_schedule_starting_beyond_the_run_never_fires(first):
    sel = CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary(),
                           schedule=CaptureSchedule(first_prediction=first, every=3))
    session = session_for(sel)
    session.begin_step(PREFILL, 0)
    assert session.take_step().record("s").outcome == CaptureOutcome.SKIPPED


def test_schedule_numbers_of_2_64_are_overflow_errors():
    for name in ["first_prediction", "end_prediction", "every"]:
        with pytest.raises(LifecoreOverflowError, match=name):
            CaptureSchedule(**{name: 2**64})
    with pytest.raises(LifecoreTypeError, match="prefill"):
        CaptureSchedule(prefill=1)


@pytest.mark.parametrize("size", [2**32, 2**63, 2**64 - 1])
def test_known_axis_sizes_up_to_2_64_are_exact_and_checked_against_slices(size):
    point = ObservationPoint("p", [Axis("d", size)], itemsize=4)
    assert point.axes[0].size == size
    discovery = CaptureDiscovery("m", [point])
    # A slice that ends past the extent is refused; the widest one fitting is admitted.
    admit(CaptureSelection("s", "p", CaptureTransform.summary(), slices=[CaptureSlice("d", size - 1, size)]),
          discovery=discovery)
    with pytest.raises(AdmissionError, match="extent"):
        admit(CaptureSelection("s", "p", CaptureTransform.summary(), slices=[CaptureSlice("d", size, None)]),
              discovery=discovery)


@pytest.mark.parametrize("size", [2**32, 2**63])
def test_a_full_tensor_of_a_huge_known_extent_is_refused_under_fail(size):
    # Under on_limit=fail the value floor (size x itemsize) joins the preflight, never wrapped.
    point = ObservationPoint("p", [Axis("d", size), Axis("e", size)], itemsize=8)
    discovery = CaptureDiscovery("m", [point])
    with pytest.raises(AdmissionError):
        admit(CaptureSelection("s", "p", CaptureTransform.full_tensor()), discovery=discovery)


@pytest.mark.parametrize("count", [2**32, 2**63, 2**64 - 1])
def test_top_candidate_counts_beyond_the_vocabulary_are_refused(count):
    with pytest.raises(AdmissionError, match="vocabulary"):
        admit(CaptureSelection("s", "logits", CaptureTransform.top_candidates(count)))


def test_transform_numbers_of_2_64_are_overflow_errors():
    with pytest.raises(LifecoreOverflowError, match="max_elements"):
        CaptureTransform.preview(2**64)
    with pytest.raises(LifecoreOverflowError, match="count"):
        CaptureTransform.top_candidates(2**64)


@pytest.mark.parametrize("experts", [2**32, 2**63])
def test_routing_policies_with_huge_expert_counts_stay_exact(experts):
    policy = RoutingPolicy(experts, 2, groups=2, topk_groups=1)
    assert (policy.num_experts, policy.top_k) == (experts, 2)
    with pytest.raises(LifecoreOverflowError, match="num_experts"):
        RoutingPolicy(2**64, 2)
    with pytest.raises(LifecoreTypeError, match="learned_coefficient_scale"):
        RoutingPolicy(4, 2, learned_coefficient_scale=1)


# -- Section 3: an admitted plan cannot change ------------------------------------------------

def _attributes(obj):
    for name in dir(obj):
        if name.startswith("_"):
            continue
        try:
            value = getattr(obj, name)
        except Exception:
            continue
        if callable(value) and not isinstance(value, enum.Enum):
            continue
        yield name, value


def _snapshot(obj, depth=0):
    """Every value reachable through attributes and containers, as plain data."""
    if depth > 12 or obj is None or isinstance(obj, (bool, int, float, str, enum.Enum)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [_snapshot(v, depth + 1) for v in obj]
    return (type(obj).__name__, [(name, _snapshot(value, depth + 1)) for name, value in _attributes(obj)])


def _replacement(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return 10**6
    if isinstance(value, float):
        return 123.5
    if isinstance(value, str):
        return "changed"
    return None


def _try_to_mutate(obj, attempts, depth=0):
    """Tries to set every attribute reachable from `obj` and to mutate every container handed
    out; counts the attempts. Whatever succeeds may only ever change a copy."""
    if depth > 12 or obj is None or isinstance(obj, (bool, int, float, str, enum.Enum)):
        return
    if isinstance(obj, list):
        for item in list(obj):
            _try_to_mutate(item, attempts, depth + 1)
        attempts.append("list")
        obj.append(None)
        obj.clear()
        return
    for name, value in _attributes(obj):
        for new in (_replacement(value), None, value):
            attempts.append(name)
            try:
                setattr(obj, name, new)
            except (AttributeError, TypeError, ValueError):
                pass
        _try_to_mutate(value, attempts, depth + 1)


def _enforcing_session():
    limits = CaptureLimits(per_step=CaptureUsage(1, BIG, BIG, BIG), cumulative=CaptureUsage(10, BIG, BIG, BIG),
                           on_limit=OnLimit.SKIP)
    discovery = sample_discovery()
    session = session_for(CaptureSelection("a", "blocks.0.mlp", CaptureTransform.summary()),
                          CaptureSelection("b", "blocks.1.mlp", CaptureTransform.preview(4),
                                           slices=[CaptureSlice("d", 0, 4, 2)]),
                          limits=limits, discovery=discovery)
    ops = [iv.scale("s", "blocks.0.mlp", 2.0, evidence="summary", slices=[CaptureSlice("d", 0, 4)]),
           iv.exclude_experts("x", ROUTER, [3], schedule=CaptureSchedule(decode=False))]
    admitted = InterventionPlan(ops).admit(discovery, session)
    session.enable_interventions(admitted, NumpyBackend())
    return session, admitted, discovery


def _run_prefill(session):
    backend = NumpyBackend()
    session.begin_step(PREFILL, 0)
    session.observe(backend, "blocks.0.mlp", hidden())
    session.intervene(backend, "blocks.0.mlp", hidden())
    session.observe(backend, "blocks.1.mlp", hidden())
    session.routing_control(ROUTER, 4)
    session.routing_applied(backend, ROUTER, None, decision(4))
    session.finish_interventions()
    return session.take_step()


def test_nothing_reachable_from_an_admitted_or_session_plan_can_be_mutated():
    session, admitted, discovery = _enforcing_session()
    capture_plan = session.plan
    roots = {"capture admitted": capture_plan, "session.plan": session.plan,
             "intervention admitted": admitted, "session.intervention_plan": session.intervention_plan}
    before = {name: _snapshot(root) for name, root in roots.items()}
    identities = (session.plan.identity, session.intervention_plan.identity)
    # The repro, literally, and then every attribute and container.
    capture_plan.plan.limits.per_step.captures = 10**6
    session.plan.plan.limits.per_step.captures = 10**6
    session.plan.plan.limits.cumulative.captures = 10**6
    attempts = []
    for root in roots.values():
        _try_to_mutate(root, attempts)
    assert len(attempts) > 200  # the walk reached deep into plans, points, limits and operations
    for name, root in roots.items():
        assert _snapshot(root) == before[name], name
    assert _snapshot(session.plan) == before["session.plan"]
    assert (session.plan.identity, session.intervention_plan.identity) == identities
    assert session.plan.plan.limits.per_step.captures == 1

    # The session still enforces the original: one capture per step, the second skipped.
    step = _run_prefill(session)
    assert [r.outcome for r in step.records] == [CaptureOutcome.CAPTURED, CaptureOutcome.SKIPPED]
    assert step.record("b").budget == "captures"
    assert [r.outcome for r in step.interventions] == [InterventionOutcome.APPLIED, InterventionOutcome.APPLIED]
    # Checkpoints and forks still re-admit to the same identity.
    checkpoint = session.checkpoint(discovery)
    assert checkpoint.plan_identity == identities[0]
    child = session.fork(discovery)
    assert child.plan.plan.limits.per_step.captures == 1
    session.restore(checkpoint)


def test_handed_out_limits_records_and_checkpoints_are_copies():
    session, _, discovery = _enforcing_session()
    limits = session.plan.plan.limits
    limits.per_step.captures = 10**6
    assert session.plan.plan.limits.per_step.captures == 1
    step = _run_prefill(session)
    step.step_usage.captures = 10**6
    step.records[0].charged.captures = 10**6
    assert step.step_usage.captures != 10**6 and step.records[0].charged.captures != 10**6
    checkpoint = session.checkpoint(discovery)
    checkpoint.usage.captures = 10**6
    assert checkpoint.usage == session.cumulative_usage()


# -- Section 6: clear errors ------------------------------------------------------------------

def test_axis_sizes_of_the_wrong_type_or_range_name_the_argument():
    with pytest.raises(LifecoreOverflowError, match="Axis: argument 'size'"):
        Axis("d", 2**64)
    with pytest.raises(InvalidArgumentError, match="Axis: argument 'size'"):
        Axis("d", -1)
    for bad in (1.5, True, [3], b"batch"):
        with pytest.raises(LifecoreTypeError, match="Axis: argument 'size'"):
            Axis("d", bad)
    with pytest.raises(InvalidArgumentError, match="unknown symbolic axis size"):
        Axis("d", "galaxies")
    with pytest.raises(LifecoreTypeError, match="Axis: argument 'name'"):
        Axis(None, 3)


def test_routing_applied_with_decisions_that_are_not_pairs_names_the_argument():
    session = with_interventions([iv.exclude_experts("x", ROUTER, [3])])
    session.begin_step(PREFILL, 0)
    session.routing_control(ROUTER, 4)
    backend = NumpyBackend()
    with pytest.raises(LifecoreTypeError, match="argument 'original'"):
        session.routing_applied(backend, ROUTER, "str", "str")
    with pytest.raises(LifecoreTypeError, match="argument 'effective'"):
        session.routing_applied(backend, ROUTER, None, "str")
    with pytest.raises(LifecoreTypeError, match="argument 'effective'"):
        session.routing_applied(backend, ROUTER, None, (1, 2, 3))
    with pytest.raises(LifecoreTypeError, match="argument 'path'"):
        session.routing_applied(backend, 5, None, decision(4))
    # Refused before anything changed: the control is still pending and completes.
    session.routing_applied(backend, ROUTER, None, list(decision(4)))
    assert session.take_step().interventions[0].outcome == InterventionOutcome.APPLIED


def test_limits_with_an_unknown_policy_lists_the_accepted_values():
    with pytest.raises(InvalidArgumentError, match="'fail', 'skip'"):
        make_limits(per_step=(1, 1, 1, 1), cumulative=(1, 1, 1, 1), on_limit="drop")
    with pytest.raises(LifecoreTypeError, match="per_step"):
        make_limits(per_step=5, cumulative=(1, 1, 1, 1))
    with pytest.raises(LifecoreTypeError, match="on_limit"):
        CaptureLimits(CaptureUsage(), CaptureUsage(), "skip")
    assert make_limits(per_step=(1, 1, 1, 1), cumulative=(1, 1, 1, 1), on_limit="skip").on_limit == OnLimit.SKIP


def test_session_calls_with_wrong_types_name_the_argument_and_change_nothing():
    session = session_for(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()))
    with pytest.raises(LifecoreTypeError, match="phase"):
        session.begin_step("prefill", 0)
    with pytest.raises(LifecoreOverflowError, match="prediction"):
        session.begin_step(PREFILL, 2**64)
    with pytest.raises(LifecoreTypeError, match="prediction"):
        session.begin_step(PREFILL, None)
    assert not session.step_pending and session.next_prediction == 0
    session.begin_step(PREFILL, 0)
    with pytest.raises(LifecoreTypeError, match="path"):
        session.observe(NumpyBackend(), None, hidden())
    with pytest.raises(LifecoreTypeError, match="path"):
        session.intervene(NumpyBackend(), b"blocks.0.mlp", hidden())
    with pytest.raises(LifecoreTypeError, match="message"):
        session.routing_failed(ROUTER, 7)
    session.observe(NumpyBackend(), "blocks.0.mlp", hidden())
    assert session.take_step().record("s").outcome == CaptureOutcome.CAPTURED
    with pytest.raises(LifecoreOverflowError, match="max_predictions"):
        session.fork(sample_discovery(), max_predictions=2**64)


class RaisingBackend(NumpyBackend):
    def describe(self, tensor):  # the session prices a describing backend from these facts
        raise KeyError("the native estimate broke")

    def estimate(self, tensor, request):
        raise KeyError("the native estimate broke")


def test_a_backend_exception_is_the_cause_of_the_capture_session_error():
    session = session_for(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()))
    session.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match="native estimate broke") as raised:
        session.observe(RaisingBackend(), "blocks.0.mlp", hidden())
    assert isinstance(raised.value.__cause__, KeyError)
    assert raised.value.__cause__.args == ("the native estimate broke",)
    assert session.take_step().record("s").outcome == CaptureOutcome.FAILED


def test_a_backend_exception_during_routing_evidence_is_the_cause():
    session = with_interventions([iv.exclude_experts("x", ROUTER, [3], evidence=8)])
    session.begin_step(PREFILL, 0)
    session.routing_control(ROUTER, 4)
    with pytest.raises(CaptureSessionError, match="native estimate broke") as raised:
        session.routing_applied(RaisingBackend(), ROUTER, decision(4), decision(4))
    assert isinstance(raised.value.__cause__, KeyError)


def test_an_error_not_caused_by_the_backend_has_no_cause():
    limits = CaptureLimits(per_step=CaptureUsage(0, BIG, BIG, BIG), cumulative=CaptureUsage(BIG, BIG, BIG, BIG))
    session = session_for(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()), limits=limits)
    session.begin_step(PREFILL, 0)
    with pytest.raises(BudgetExceededError) as raised:
        session.observe(NumpyBackend(), "blocks.0.mlp", hidden())
    assert raised.value.__cause__ is None
    # The message names the call, the limit, the selection and the point.
    assert str(raised.value) == ("CaptureSession.observe: capture per-step limit exceeded: captures "
                                 "(selection 's' at blocks.0.mlp)")


class SessionKeepingEstimator:
    """An estimator that refers to the session it estimates for (a cycle through the binding)."""

    session = None

    def estimate(self, tensor, request):
        return CaptureUsage(1, 64, 64, 4096)


def test_an_estimator_that_refers_to_its_session_is_collected():
    discovery = sample_discovery()
    session = session_for(discovery=discovery)
    estimator = SessionKeepingEstimator()
    estimator.session = session
    admitted = InterventionPlan([iv.scale("s", "blocks.0.mlp", 2.0)]).admit(discovery, session)
    session.enable_interventions(admitted, estimator)
    estimator_ref = weakref.ref(estimator)
    del estimator, session, admitted
    gc.collect()
    assert estimator_ref() is None  # the cycle estimator -> session -> estimator was collected


def test_a_live_session_keeps_its_estimator_through_collections():
    discovery = sample_discovery()
    session = session_for(discovery=discovery)
    estimator = SessionKeepingEstimator()
    estimator.session = session
    admitted = InterventionPlan([iv.scale("s", "blocks.0.mlp", 2.0, evidence="summary")]).admit(discovery, session)
    session.enable_interventions(admitted, estimator)
    estimator_ref = weakref.ref(estimator)
    del estimator
    gc.collect()
    assert estimator_ref() is not None
    session.begin_step(PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0.mlp", hidden())  # the hook observes first
    session.intervene(NumpyBackend(), "blocks.0.mlp", hidden())
    record = session.take_step().interventions[0]
    assert record.outcome == InterventionOutcome.APPLIED and record.charged == CaptureUsage(
        2, 128, 128 + SCALE_ENVELOPE.host_bytes, 8192 + SCALE_ENVELOPE.encoded_bytes)


# -- Section 7: rules at their exact limits ---------------------------------------------------

def test_interventions_cannot_be_enabled_after_the_first_step_even_once_it_is_drained():
    discovery = sample_discovery()
    session = session_for(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()), discovery=discovery)
    admitted = InterventionPlan([iv.scale("s", "blocks.0.mlp", 2.0)]).admit(discovery, session)
    session.begin_step(PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0.mlp", hidden())
    session.take_step()
    assert not session.step_pending
    with pytest.raises(CaptureSessionError, match="before the first step"):
        session.enable_interventions(admitted, NumpyBackend())
    assert session.intervention_plan is None


def test_a_point_offered_only_in_prefill_cannot_be_scheduled_in_decode():
    prefill_only = ObservationPoint("p", HIDDEN, decode=False)
    unsupported = ObservationPoint("u", HIDDEN, decode_support=PhaseSupport.UNSUPPORTED)
    discovery = CaptureDiscovery("m", [prefill_only, unsupported])
    for path in ("p", "u"):
        with pytest.raises(AdmissionError, match=f"schedules {path} in decode"):
            admit(CaptureSelection("s", path, CaptureTransform.summary()), discovery=discovery)
        admit(CaptureSelection("s", path, CaptureTransform.summary(), schedule=CaptureSchedule(decode=False)),
              discovery=discovery)
    session = session_for(discovery=discovery)
    with pytest.raises(AdmissionError, match="schedules p in decode"):
        InterventionPlan([iv.scale("s", "p", 2.0)]).admit(discovery, session)
    InterventionPlan([iv.scale("s", "p", 2.0, schedule=CaptureSchedule(decode=False))]).admit(discovery, session)
    # A run with a single prediction never reaches decode: nothing is scheduled there.
    admit(CaptureSelection("s", "p", CaptureTransform.summary()), discovery=discovery,
          request=CaptureRequest(1, 4, 1))


def test_an_intervention_plan_holds_at_most_64_operations():
    discovery = sample_discovery()
    session = session_for(discovery=discovery)
    ops = [iv.scale(f"op{i}", "blocks.0.mlp", 1.0) for i in range(65)]
    assert len(InterventionPlan(ops[:64]).admit(discovery, session).plan.operations) == 64
    with pytest.raises(AdmissionError, match="more than 64 operations"):
        InterventionPlan(ops).admit(discovery, session)


def grouped_discovery(policy):
    return CaptureDiscovery("m", [ObservationPoint("router", [Axis("rows", "token_rows"), Axis("experts", 8)],
                                                   meaning="routing", routing=policy)])


def test_grouped_top_k_reachable_exactly_is_a_valid_policy_and_one_more_is_not():
    assert RoutingPolicy(8, 4, groups=4, topk_groups=2).top_k == 4  # 2 groups x 2 experts == top_k
    with pytest.raises(InvalidArgumentError, match="cannot be reached"):
        RoutingPolicy(8, 5, groups=4, topk_groups=2)


def test_exclusion_leaving_exactly_top_k_reachable_is_admitted_and_one_less_is_refused():
    # 8 experts in 4 groups of 2, the best 2 groups kept, top 3: the least-stocked two groups count.
    policy = RoutingPolicy(8, 3, groups=4, topk_groups=2)
    discovery = grouped_discovery(policy)
    session = session_for(discovery=discovery)
    exact = InterventionPlan([iv.exclude_experts("x", "router", [0])])  # groups [1, 2, 2, 2]: 1 + 2 == 3
    exact.admit(discovery, session)
    short = InterventionPlan([iv.exclude_experts("x", "router", [0, 2])])  # groups [1, 1, 2, 2]: 2 < 3
    with pytest.raises(AdmissionError, match="fewer than top_k"):
        short.admit(discovery, session)
    emptied = InterventionPlan([iv.exclude_experts("x", "router", [0, 1, 2, 3, 4, 5])])  # 1 stocked group < 2
    with pytest.raises(AdmissionError, match="fewer than top_k"):
        emptied.admit(discovery, session)


# -- Section 6: a sweep of the capture entry points -------------------------------------------

BAD_VALUES = [None, True, -1, 2**64, 1.5, float("nan"), "str", b"bytes", [1], (1, 2), {}, object()]


def _entry_points(admitted, discovery):
    """(name, callable, good arguments) for the public capture constructors and helpers."""
    usage = CaptureUsage()
    return [
        ("CaptureUsage", CaptureUsage, (1, 1, 1, 1)),
        ("Axis", Axis, ("d", 3)),
        ("RoutingPolicy", RoutingPolicy, (4, 2)),
        ("ObservationPoint", ObservationPoint, ("p", [])),
        ("CaptureDiscovery", CaptureDiscovery, ("m", [])),
        ("CaptureRequest", CaptureRequest, (1, 1, 1)),
        ("CaptureSlice", CaptureSlice, ("d", 0, 1, 1)),
        ("CaptureSelection", CaptureSelection, ("s", "p")),
        ("CaptureLimits", CaptureLimits, (usage, usage)),
        ("CapturePlan", CapturePlan, ([], unlimited())),
        ("InterventionPlan", InterventionPlan, ([],)),
        ("CaptureSession", CaptureSession, (admitted,)),
        ("CaptureTransform.preview", CaptureTransform.preview, (3,)),
        ("CaptureTransform.histogram", CaptureTransform.histogram, ([0.0, 1.0],)),
        ("CaptureTransform.top_candidates", CaptureTransform.top_candidates, (2,)),
        ("CapturePlan.admit", CapturePlan([], unlimited()).admit, (discovery, REQUEST)),
        ("CaptureDiscovery.point", discovery.point, ("blocks.0.mlp",)),
        ("CaptureSchedule.scheduled", CaptureSchedule().scheduled, (PREFILL, 0)),
        ("iv.scale", iv.scale, ("a", "blocks.0.mlp", 2.0)),
        ("iv.replace", iv.replace, ("a", "blocks.0.mlp", [1.0])),
        ("iv.exclude_experts", iv.exclude_experts, ("a", ROUTER, [1])),
        ("iv.bias_routing_scores", iv.bias_routing_scores, ("a", ROUTER, [1], [0.5])),
        ("iv.force_experts", iv.force_experts, ("a", ROUTER, [[0, 1]])),
    ]


def test_capture_entry_points_answer_every_bad_argument_with_a_lifecore_error():
    discovery = sample_discovery()
    admitted = admit(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()), discovery=discovery)
    calls = 0
    for name, fn, good in _entry_points(admitted, discovery):
        fn(*good)  # the good call works: the refusals below are about the argument
        for position in range(len(good)):
            for bad in BAD_VALUES:
                args = list(good)
                args[position] = bad
                calls += 1
                try:
                    fn(*args)
                except LifecoreError as error:
                    assert isinstance(error, (TypeError, ValueError)), (name, position, bad, error)
                except Exception as error:  # pragma: no cover - the failure message names the call
                    pytest.fail(f"{name} argument {position} = {bad!r} raised {type(error).__name__}: {error}")
    assert calls > 600


def test_session_methods_refuse_bad_arguments_and_change_nothing():
    discovery = sample_discovery()
    session = session_for(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()), discovery=discovery)
    admitted = InterventionPlan([iv.scale("x", "blocks.0.mlp", 2.0)]).admit(discovery, session)
    methods = [
        ("checkpoint", session.checkpoint, (discovery,)),
        ("checkpoint_storage_bytes", session.checkpoint_storage_bytes, (discovery,)),
        ("fork", session.fork, (discovery,)),
        ("begin_step", session.begin_step, (PREFILL, 0)),
        ("enable_interventions", session.enable_interventions, (admitted, NumpyBackend())),
        ("restore", session.restore, (session.checkpoint(discovery),)),
        ("validate_restore", session.validate_restore, (session.checkpoint(discovery),)),
        ("InterventionPlan.admit", InterventionPlan([]).admit, (discovery, session)),
    ]
    for name, fn, good in methods:
        for position in range(len(good)):
            for bad in BAD_VALUES:
                if name == "enable_interventions" and position == 1 and bad is not None:
                    continue  # any object may be an estimator; it is asked only when evidence is due
                args = list(good)
                args[position] = bad
                with pytest.raises(LifecoreError):
                    fn(*args)
                assert not session.step_pending and session.next_prediction == 0, name
                assert session.cumulative_usage() == CaptureUsage() and session.intervention_plan is None
    session.enable_interventions(admitted, NumpyBackend())  # still usable: nothing was changed
    assert session.intervention_plan is not None


def test_capture_step_needs_a_session():
    from lifecore.capture import capture_step
    with pytest.raises(LifecoreTypeError, match="session"):
        with capture_step(None, 0):
            pass


@pytest.mark.parametrize("backend_type", ["numpy", "counting"])
def test_bundled_backends_refuse_what_is_not_their_tensor_or_a_request(backend_type):
    from lifecore.capture import CountingBackend, MockTensor
    backend = NumpyBackend() if backend_type == "numpy" else CountingBackend()
    for bad in (None, 5, "tensor", [1, 2], object()):
        for method in ("shape", "dtype"):
            with pytest.raises(LifecoreTypeError, match="tensor"):
                getattr(backend, method)(bad)
        for method in ("estimate", "native_bytes", "transform", "intervene"):
            with pytest.raises(LifecoreTypeError, match="tensor"):
                getattr(backend, method)(bad, None)
    tensor = hidden() if backend_type == "numpy" else MockTensor((1, 4, 8))
    for method in ("estimate", "native_bytes", "transform", "intervene"):
        with pytest.raises(LifecoreTypeError, match="request"):
            getattr(backend, method)(tensor, "request")


def test_the_counting_mock_refuses_malformed_fields():
    from lifecore.capture import CountingBackend, MockTensor
    with pytest.raises(LifecoreTypeError, match="calls"):
        CountingBackend(calls=5)
    with pytest.raises(LifecoreTypeError, match="fail_on"):
        CountingBackend(fail_on="shape")
    with pytest.raises(LifecoreTypeError, match="shape"):
        MockTensor([1, 2])
    with pytest.raises(LifecoreTypeError, match="itemsize"):
        MockTensor((1,), itemsize=True)


def _overlap_by_enumeration(a, b, max_predictions):
    return any(a.scheduled(PREFILL if p == 0 else DECODE, p) and b.scheduled(PREFILL if p == 0 else DECODE, p)
               for p in range(max_predictions))


def test_overlapping_routing_schedules_are_found_exactly_as_by_enumeration():
    import itertools
    discovery = sample_discovery()
    request = CaptureRequest(1, 4, 13)
    session = session_for(discovery=discovery, request=request)
    schedules = [CaptureSchedule(prefill=pre, first_prediction=first, every=every, end_prediction=end)
                 for pre, first, every, end in itertools.product([True, False], [0, 1, 3, 6], [1, 2, 4, 6],
                                                                 [None, 9])]
    checked = 0
    for a, b in itertools.product(schedules, repeat=2):
        plan = InterventionPlan([iv.exclude_experts("a", ROUTER, [3], schedule=a),
                                 iv.exclude_experts("b", ROUTER, [2], schedule=b)])
        expected = _overlap_by_enumeration(a, b, 13)
        try:
            plan.admit(discovery, session)
            refused = False
        except AdmissionError as error:
            assert "overlap" in str(error)
            refused = True
        assert refused == expected, (a.prefill, a.first_prediction, a.every, a.end_prediction,
                                     b.prefill, b.first_prediction, b.every, b.end_prediction)
        checked += 1
    assert checked == len(schedules) ** 2


@pytest.mark.time_limit(10)
@pytest.mark.parametrize("predictions", [2**32, 2**62])
def test_routing_schedules_of_a_huge_run_are_checked_without_a_loop(predictions):
    discovery = sample_discovery()
    session = session_for(discovery=discovery, request=CaptureRequest(1, 4, predictions))
    even = CaptureSchedule(prefill=False, first_prediction=2, every=2)
    odd = CaptureSchedule(prefill=False, first_prediction=1, every=2)
    InterventionPlan([iv.exclude_experts("a", ROUTER, [3], schedule=even),
                      iv.exclude_experts("b", ROUTER, [2], schedule=odd)]).admit(discovery, session)
    late = CaptureSchedule(prefill=False, first_prediction=predictions - 1, every=predictions)
    with pytest.raises(AdmissionError, match="overlap"):
        InterventionPlan([iv.exclude_experts("a", ROUTER, [3], schedule=odd),
                          iv.exclude_experts("b", ROUTER, [2], schedule=late)]).admit(discovery, session)


@pytest.mark.time_limit(10)
def test_exclusion_feasibility_with_2_40_groups_needs_no_table_per_group():
    policy = RoutingPolicy(2**41, 2, groups=2**40, topk_groups=2)  # two experts per group
    discovery = grouped_discovery(policy)
    session = session_for(discovery=discovery)
    InterventionPlan([iv.exclude_experts("x", "router", [0, 2])]).admit(discovery, session)
    # One group kept: group 0 left with one expert can be the one the scores pick.
    single = grouped_discovery(RoutingPolicy(2**41, 2, groups=2**40, topk_groups=1))
    with pytest.raises(AdmissionError, match="fewer than top_k"):
        InterventionPlan([iv.exclude_experts("x", "router", [0])]).admit(single, session_for(discovery=single))


def test_the_torch_entry_points_refuse_what_is_not_a_model_or_a_session():
    torch_module = pytest.importorskip("lifecore.torch", reason="PyTorch is not installed")
    from torch import nn
    model = nn.Linear(2, 2)
    for bad in (None, 5, "model", object()):
        with pytest.raises(LifecoreTypeError, match="model"):
            torch_module.discover(bad)
        with pytest.raises(LifecoreTypeError, match="model"):
            torch_module.artifact_identity(bad)
        with pytest.raises(LifecoreTypeError, match="session"):
            torch_module.attach(bad, model)
    with pytest.raises(LifecoreTypeError, match="model"):
        torch_module.attach(session_for(), None)


# -- Section 2: observed geometry at the 64-bit edges -----------------------------------------

def _unranked_session(transform, slices=()):
    discovery = CaptureDiscovery("m", [ObservationPoint("u", [])])  # rank and extents known at run time
    return session_for(CaptureSelection("s", "u", transform, slices=list(slices)), discovery=discovery)


def _small_cost_backend():
    from lifecore.capture import CountingBackend

    class SmallCost(CountingBackend):
        """Estimates a small fixed cost whatever the shape (a preview keeps four numbers)."""

        def estimate(self, tensor, request):
            return CaptureUsage(1, 64, 64, 4096)

    return SmallCost()


@pytest.mark.parametrize("shape, available", [((2**32, 2**31), 2**63), ((2**63,), 2**63), ((2**64 - 1,), 2**64 - 1),
                                              ((2**32, 2**32), 2**64 - 1)])
def test_huge_observed_shapes_are_counted_exactly_or_saturated_never_wrapped(shape, available):
    from lifecore.capture import MockTensor
    session = _unranked_session(CaptureTransform.preview(4))
    session.begin_step(PREFILL, 0)
    session.observe(_small_cost_backend(), "u", MockTensor(shape))
    record = session.take_step().record("s")
    assert record.source_shape == list(shape) and record.selected_shape == list(shape)
    assert record.outcome == CaptureOutcome.TRUNCATED
    assert (record.available, record.emitted) == (available, 4)  # 2**64 elements saturate at 2**64 - 1


def test_a_backend_count_past_64_bits_is_refused_as_a_limit():
    # Once a native failure (payload_cost raised, the overflow as cause), whatever on_limit
    # said: a usage past 64 bits saturates and is refused like any other limit, as the README says.
    from lifecore.capture import CountingBackend, MockTensor
    session = _unranked_session(CaptureTransform.summary())
    session.begin_step(PREFILL, 0)
    # The emulated device charges the whole region to the host: 2**64 elements x 4 bytes cannot be a usage.
    with pytest.raises(BudgetExceededError, match="host"):
        session.observe(CountingBackend(), "u", MockTensor((2**32, 2**32)))
    record = session.take_step().record("s")
    assert record.outcome == CaptureOutcome.FAILED and record.budget == "host_bytes"


@pytest.mark.parametrize("start", [2**32, 2**63, 2**64 - 1])
def test_slices_starting_at_the_64_bit_edges_are_out_of_range_at_run_time(start):
    from lifecore.capture import CountingBackend, MockTensor
    discovery = CaptureDiscovery("m", [ObservationPoint("u", [Axis("a", "unknown")])])
    session = session_for(CaptureSelection("s", "u", CaptureTransform.slice(), slices=[CaptureSlice("a", start)]),
                          discovery=discovery)
    session.begin_step(PREFILL, 0)
    with pytest.raises(InvalidArgumentError, match="out of range"):
        session.observe(CountingBackend(), "u", MockTensor((8,)))
    assert session.take_step().record("s").outcome == CaptureOutcome.FAILED


@pytest.mark.parametrize("end", [2**32, 2**63, 2**64 - 1])
def test_slices_ending_at_the_64_bit_edges_of_a_huge_extent_select_exactly(end):
    from lifecore.capture import CountingBackend, MockTensor
    discovery = CaptureDiscovery("m", [ObservationPoint("u", [Axis("a", "unknown")])])
    session = session_for(CaptureSelection("s", "u", CaptureTransform.preview(1),
                                           slices=[CaptureSlice("a", 1, end, 2**31)]), discovery=discovery)
    session.begin_step(PREFILL, 0)
    session.observe(_small_cost_backend(), "u", MockTensor((2**64 - 1,)))
    record = session.take_step().record("s")
    assert record.selected_shape == [(end - 2) // 2**31 + 1]  # ceil((end - 1) / 2**31)
    assert record.outcome == CaptureOutcome.TRUNCATED


def test_slice_bounds_of_2_64_are_overflow_errors():
    with pytest.raises(LifecoreOverflowError, match="start"):
        CaptureSlice("a", 2**64)
    with pytest.raises(LifecoreOverflowError, match="end"):
        CaptureSlice("a", 0, 2**64)


@pytest.mark.parametrize("top_k", [2**31, 2**32])
def test_the_original_route_reservation_with_a_huge_top_k_is_refused(top_k):
    # 2**32 rows x top_k x 16 bytes is past 64 bits.
    policy = RoutingPolicy(2**33, top_k)
    discovery = CaptureDiscovery("m", [ObservationPoint("router", [Axis("rows", "token_rows"), Axis("e", 2**33)],
                                                        meaning="routing", routing=policy)])
    request = CaptureRequest(1, 2**32, 1)
    session = with_interventions([iv.exclude_experts("x", "router", [0], evidence=8)], discovery=discovery,
                                 request=request)
    session.begin_step(PREFILL, 0)
    before = session.cumulative_usage()
    with pytest.raises(BudgetExceededError):
        session.routing_control("router", 2**32)
    assert session.cumulative_usage() == before


def test_numpy_integers_are_counts_where_ints_are():
    assert Axis("d", np.int64(8)).size == 8
    assert CaptureSlice("d", np.uint64(1), np.int32(3), np.int64(2)).end == 3
    assert CaptureRequest(np.int64(1), np.int64(4), np.int64(2)).prompt_tokens == 4
    with pytest.raises(LifecoreTypeError, match="stride"):
        CaptureSlice("d", 0, None, np.float64(2.0))
    with pytest.raises(InvalidArgumentError, match="start"):
        CaptureSlice("d", np.int64(-1))


def test_a_masked_array_is_refused_by_the_numpy_backend() -> None:
    # Before: its masked elements were read as values (a summary counted all 12, max 1.0).
    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("batch", "batch"), Axis("seq", "sequence"),
                                                              Axis("d", 6)])])
    plan = CapturePlan([CaptureSelection("s", "p", CaptureTransform.summary())], unlimited())
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 2, 1)))
    a = np.linspace(-1, 1, 12).reshape(1, 2, 6)
    masked = np.ma.masked_array(a, mask=a > 0.5)
    backend = NumpyBackend()
    with pytest.raises(LifecoreTypeError, match=r"NumpyBackend.shape: argument 'tensor' is a NumPy masked array"):
        backend.shape(masked)
    session.begin_step(CapturePhase.PREFILL, 0)
    with pytest.raises(LifecoreTypeError, match=r"^observe at p: NumpyBackend.describe: argument 'tensor' is a NumPy "
                                                r"masked array.*\(nothing was changed\)$"):
        session.observe(backend, "p", masked)
    session.observe(backend, "p", masked.filled(0.0))  # the point is still open: the array filled, as the message says
    summary = session.take_step().records[-1].payload.summary
    assert summary.count == 12 and summary.max == pytest.approx(5 / 11)


class DescribeRaising(NumpyBackend):
    """A fresh exception per call: one kept across tests would keep each raise's traceback,
    its frames and their sessions, to the end of the run."""

    def __init__(self, error: type[BaseException], message: str) -> None:
        self.error, self.message = error, message

    def describe(self, tensor):
        raise self.error(self.message)


def _two_selection_session() -> CaptureSession:
    discovery = CaptureDiscovery("m", [ObservationPoint("h", [Axis("batch", "batch"), Axis("seq", "sequence"),
                                                              Axis("d", 8)])])
    plan = CapturePlan([CaptureSelection("full", "h", CaptureTransform.full_tensor()),
                        CaptureSelection("mean", "h", CaptureTransform.summary())], unlimited())
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 4, 4)))
    session.begin_step(CapturePhase.PREFILL, 0)
    return session


@pytest.mark.parametrize("wrong", [None, object(), "x", [[[0.0] * 8] * 4]])
@pytest.mark.parametrize("through", ["observe", "observer"])
def test_observing_what_is_no_tensor_of_the_backend_is_refused_and_changes_nothing(wrong, through):
    # Before: the backend's type refusal failed both records (charged their reservations) and
    # used the point up, so the right tensor was then refused as a second observation.
    session = _two_selection_session()
    backend = NumpyBackend()
    observe = session.observer("h", backend).observe if through == "observer" else \
        (lambda tensor: session.observe(backend, "h", tensor))
    usage = session.step_usage().as_tuple(), session.cumulative_usage().as_tuple()
    with pytest.raises(LifecoreTypeError, match=r"^observe at h: NumpyBackend.describe: argument 'tensor' must be a "
                                                r"ndarray, got \w+ \(nothing was changed\)$") as refused:
        observe(wrong)
    assert isinstance(refused.value.__cause__, LifecoreTypeError)  # the backend's own refusal
    assert (session.step_usage().as_tuple(), session.cumulative_usage().as_tuple()) == usage
    x = np.arange(32, dtype=np.float32).reshape(1, 4, 8)
    observe(x)  # the point is still open
    records = session.take_step().records
    assert [r.outcome for r in records] == [CaptureOutcome.CAPTURED] * 2
    np.testing.assert_array_equal(records[0].payload.tensor, x)


@pytest.mark.parametrize("error, message", [(TypeError, "describe() takes 1 positional argument"),
                                            (ValueError, "broken")])
def test_a_describe_refusal_is_the_callers_but_a_backend_failure_fails_the_records(error, message):
    session = _two_selection_session()
    x = np.zeros((1, 4, 8), np.float32)
    with pytest.raises(LifecoreTypeError, match=r"^observe at h: Mine.describe: argument 'tensor' is not mine \(nothing "
                                                r"was changed\)$"):
        session.observe(DescribeRaising(LifecoreTypeError, "Mine.describe: argument 'tensor' is not mine"), "h", x)
    # Any other error, a plain TypeError of a bug in describe included, is the backend's.
    with pytest.raises(CaptureSessionError, match=rf"native capture failed: backend.describe: {error.__name__}: "):
        session.observe(DescribeRaising(error, message), "h", x)
    records = session.take_step().records
    assert [r.outcome for r in records] == [CaptureOutcome.FAILED] * 2  # a failure of the backend is recorded
    assert all(message in r.message for r in records)


def test_an_intervention_on_what_is_no_tensor_fails_its_operation_as_before():
    discovery = sample_discovery()
    session = session_for(discovery=discovery)
    session.enable_interventions(InterventionPlan([iv.zero("z", "blocks.0.mlp")]).admit(discovery, session),
                                 NumpyBackend())
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0.mlp", None)  # the hook observes first
    assert session.intervene(NumpyBackend(), "blocks.0.mlp", None) is None
    record = session.take_step().interventions[0]
    assert record.outcome == InterventionOutcome.FAILED
    assert "argument 'tensor' must be a ndarray, got NoneType" in record.message


def test_the_last_backend_class_used_is_not_kept_alive():
    # Before: the check that a backend has a transform remembered the last backend class by a
    # strong reference, so a class made per request kept all it reached (a 64 MiB array, a
    # session) until another class was used, and the exit leak report named them.
    class Held:
        pass

    held = Held()
    watch = weakref.ref(held)

    def make_backend(reached: Held) -> NumpyBackend:
        class PerRequest(NumpyBackend):
            def transform(self, tensor, request):
                assert reached is not None  # the class reaches what it was made with
                return super().transform(tensor, request)

        return PerRequest()

    session = _two_selection_session()
    session.observe(make_backend(held), "h", np.zeros((1, 4, 8), np.float32))
    assert [r.outcome for r in session.take_step().records] == [CaptureOutcome.CAPTURED] * 2
    del held
    gc.collect()
    assert watch() is None
    session.begin_step(CapturePhase.DECODE, 1)  # a new class at the same address is checked anew
    with pytest.raises(LifecoreTypeError, match=r"must be a capture backend"):
        session.observe(type("NoTransform", (), {})(), "h", np.zeros((1, 1, 8), np.float32))
