"""Interventions and MoE routing control through a capture session."""

from __future__ import annotations

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
    CountingBackend,
    InterventionOutcome,
    InterventionPlan,
    MockTensor,
    NumpyBackend,
    ObservationPoint,
    OnLimit,
    interventions as iv,
    unlimited,
)
from lifecore.errors import AdmissionError, BudgetExceededError, CaptureSessionError, InvalidArgumentError, LifecoreTypeError
from lifecore.testing.capture_session import ROUTER, sample_discovery

from capture_builders import session_for

PREFILL, DECODE = CapturePhase.PREFILL, CapturePhase.DECODE


# How a shared argument check names its call (the builder's module path).
IV = r"^lifecore\.capture\.interventions\."


def session_with(ops, selections=(), limits=None, discovery=None):
    discovery = discovery or sample_discovery()
    session = session_for(*selections, limits=limits, discovery=discovery)
    admitted = InterventionPlan(list(ops)).admit(discovery, session)
    assert admitted.identity.startswith("intervention-v1-")
    session.enable_interventions(admitted, NumpyBackend())
    return session


def hidden(seed=0, rows=4):
    return np.random.default_rng(seed).standard_normal((1, rows, 8)).astype(np.float32)


def test_operations_apply_in_plan_order_and_downstream_consumes_the_result():
    backend = NumpyBackend()
    session = session_with([iv.add("plus", "blocks.0.mlp", np.ones((1, 4, 8)), schedule=CaptureSchedule(decode=False)),
                            iv.scale("twice", "blocks.0.mlp", 2.0)])
    x = hidden()
    session.begin_step(PREFILL, 0)
    session.observe(backend, "blocks.0.mlp", x)
    out = session.intervene(backend, "blocks.0.mlp", x)
    np.testing.assert_allclose(out, (x + 1) * 2)  # add first, then scale: plan order
    np.testing.assert_array_equal(x, hidden())  # the source is never modified
    # A downstream point sees the replacement (what a model would feed forward).
    session.finish_interventions()
    step = session.take_step()
    assert [r.outcome for r in step.interventions] == [InterventionOutcome.APPLIED] * 2
    assert session.checkpoint_ready


def test_no_active_operation_returns_none_without_calling_the_backend():
    backend = CountingBackend()
    session = session_with([iv.zero("z", "blocks.1.mlp", schedule=CaptureSchedule(prefill=False))])
    session.begin_step(PREFILL, 0)
    session.observe(backend, "blocks.1.mlp", MockTensor((1, 4, 8)))  # the hook observes first
    assert session.intervene(backend, "blocks.1.mlp", MockTensor((1, 4, 8))) is None
    assert session.intervene(backend, "blocks.0.mlp", MockTensor((1, 4, 8))) is None
    # Only the shape, where an operation is inactive: a recompute of that shape applies nothing.
    assert backend.calls == [("shape", (1, 4, 8))]
    session.finish_interventions()  # inactive operations are complete


def test_prefill_row_patching_leaves_other_rows_unchanged():
    backend = NumpyBackend()
    patch = np.full((1, 2, 8), 7.0)
    session = session_with([iv.replace("patch", "blocks.0.mlp", patch, slices=[CaptureSlice("seq", 1, 3)],
                                       schedule=CaptureSchedule(decode=False))])
    x = hidden()
    session.begin_step(PREFILL, 0)
    session.observe(backend, "blocks.0.mlp", x)  # the hook observes first
    out = session.intervene(backend, "blocks.0.mlp", x)
    np.testing.assert_array_equal(out[:, 1:3], patch)
    np.testing.assert_array_equal(out[:, [0, 3]], x[:, [0, 3]])


def test_mask_and_mask_logits():
    backend = NumpyBackend()
    keep = np.zeros((1, 4, 8), bool)
    keep[..., :2] = True
    session = session_with([iv.mask("m", "blocks.0.mlp", keep, schedule=CaptureSchedule(decode=False)),
                            iv.mask_logits("ban", "logits", [3, 5])])
    x = hidden()
    session.begin_step(PREFILL, 0)
    session.observe(backend, "blocks.0.mlp", x)  # the hook observes first
    out = session.intervene(backend, "blocks.0.mlp", x)
    np.testing.assert_array_equal(out, np.where(keep, x, 0))
    session.observe(backend, "logits", np.zeros((1, 4, 16)))
    logits = session.intervene(backend, "logits", np.zeros((1, 4, 16)))
    assert np.isneginf(logits[..., [3, 5]]).all() and (logits[..., [0, 1, 2, 4]] == 0).all()


def test_a_token_id_past_a_symbolic_vocabulary_fails_its_operation_at_the_step():
    """Admission checks token ids against a known vocabulary; where discovery left it symbolic
    ("unknown": one artifact, several vocabulary sizes), each step checks them against the logits it is
    given: an id past the last one fails that operation and leaves the logits as they were."""
    points = [ObservationPoint("logits", [Axis("batch", "batch"), Axis("seq", "sequence"),
                                          Axis("vocab", "unknown")], meaning="logits")]
    discovery = CaptureDiscovery("symbolic-vocabulary", points)
    for ids, outcome in (([3, 15], InterventionOutcome.APPLIED), ([3, 16], InterventionOutcome.FAILED)):
        session = session_with([iv.mask_logits("ban", "logits", ids)], discovery=discovery)
        session.begin_step(PREFILL, 0)
        session.observe(NumpyBackend(), "logits", np.zeros((1, 4, 16)))  # the hook observes first
        logits = session.intervene(NumpyBackend(), "logits", np.zeros((1, 4, 16)))
        record = session.take_step().interventions[0]
        assert record.outcome == outcome, (ids, record.message)
        if outcome == InterventionOutcome.FAILED:
            assert "token id out of range in 'ban': 16, but the logits' last axis holds 16 ids" in record.message
            assert logits is None or not np.isneginf(logits).any()
        else:
            assert np.isneginf(logits[..., ids]).all()


def test_missing_duplicate_and_failed_operations_stay_distinct():
    backend = CountingBackend(change_dtype=True)
    session = session_with([iv.zero("changes_dtype", "blocks.0.mlp"), iv.zero("never_reached", "blocks.1.mlp")])
    session.begin_step(PREFILL, 0)
    session.observe(backend, "blocks.0.mlp", MockTensor((1, 4, 8)))  # the hook observes first
    assert session.intervene(backend, "blocks.0.mlp", MockTensor((1, 4, 8))) is None
    with pytest.raises(CaptureSessionError, match="more than once"):
        session.intervene(backend, "blocks.0.mlp", MockTensor((1, 4, 8)))
    with pytest.raises(CaptureSessionError, match="changes_dtype at blocks.0.mlp did not complete"):
        session.finish_interventions()
    step = session.take_step()
    failed, missing = step.interventions
    assert failed.outcome == InterventionOutcome.FAILED and "dtype" in failed.message
    assert missing.outcome == InterventionOutcome.MISSING
    assert not session.checkpoint_ready
    with pytest.raises(CaptureSessionError):
        session.checkpoint(sample_discovery())


def test_observe_must_precede_intervene_at_the_same_hook():
    backend = NumpyBackend()
    session = session_with([iv.zero("z", "blocks.0.mlp")],
                           selections=[CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary())])
    session.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match="observe must precede"):
        session.intervene(backend, "blocks.0.mlp", hidden())
    session.observe(backend, "blocks.0.mlp", hidden())
    assert session.intervene(backend, "blocks.0.mlp", hidden()) is not None


def test_observe_must_precede_intervene_where_nothing_is_captured_too():
    """The rule is the hook's order, not the capture's: at a point no selection captures (or
    whose selection the schedule skips this step) intervene still follows observe, in each step."""
    backend = NumpyBackend()
    session = session_with([iv.zero("z", "blocks.0.mlp"), iv.zero("w", "blocks.1.mlp")],
                           selections=[CaptureSelection("s", "blocks.1.mlp", CaptureTransform.summary(),
                                                        schedule=CaptureSchedule(prefill=False))])
    for phase, prediction in ((PREFILL, 0), (DECODE, 1)):
        session.begin_step(phase, prediction)
        x = hidden(rows=4 if phase == PREFILL else 1)
        for path in ("blocks.0.mlp", "blocks.1.mlp"):
            with pytest.raises(CaptureSessionError, match=f"observe must precede intervene at {path}"):
                session.intervene(backend, path, x)
            session.observe(backend, path, x)
            assert session.intervene(backend, path, x) is not None
        session.finish_interventions()
        step = session.take_step()
        assert [r.outcome for r in step.interventions] == [InterventionOutcome.APPLIED] * 2


def test_evidence_is_charged_to_the_capture_limits():
    backend = NumpyBackend()
    session = session_with([iv.scale("s", "blocks.0.mlp", 3.0, evidence="summary")])
    session.begin_step(PREFILL, 0)
    before = session.cumulative_usage()
    x = hidden()
    session.observe(backend, "blocks.0.mlp", x)  # the hook observes first
    session.intervene(backend, "blocks.0.mlp", x)
    record = session.take_step().interventions[0]
    before_evidence, after_evidence = record.evidence
    assert after_evidence.max == pytest.approx(3 * before_evidence.max, rel=1e-5)
    assert record.charged.captures == 2
    assert session.cumulative_usage().captures == before.captures + 2


@pytest.mark.parametrize("on_limit", [OnLimit.FAIL, OnLimit.SKIP])
def test_evidence_over_the_limit(on_limit):
    limits = CaptureLimits(per_step=CaptureUsage(1, 10**9, 10**9, 10**9),
                           cumulative=CaptureUsage(10, 10**9, 10**9, 10**9), on_limit=on_limit)
    session = session_with([iv.scale("s", "blocks.0.mlp", 3.0, evidence=4)], limits=limits)
    session.begin_step(PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0.mlp", hidden())  # the hook observes first
    out = session.intervene(NumpyBackend(), "blocks.0.mlp", hidden())
    record = session.take_step().interventions[0]
    assert session.cumulative_usage().captures == 0
    if on_limit == OnLimit.FAIL:
        assert out is None and record.outcome == InterventionOutcome.FAILED
    else:
        assert out is not None and record.outcome == InterventionOutcome.APPLIED and record.evidence == []


def test_evidence_takes_a_numpy_integer_and_refuses_an_array_clearly():
    """A NumPy integer is a preview size as an int is (it was refused); an array was compared
    with "summary" element by element and raised NumPy's ValueError about truth values."""
    assert iv.scale("s", "blocks.0.mlp", 3.0, evidence=np.int64(4)) == iv.scale("s", "blocks.0.mlp", 3.0, evidence=4)
    for bad in (np.array([1, 2]), np.bool_(True), True, 4.0):
        with pytest.raises(LifecoreTypeError, match="argument 'evidence'"):
            iv.scale("s", "blocks.0.mlp", 3.0, evidence=bad)


class _NothingKept:
    """An estimator that claims evidence keeps no bytes (it keeps 8 float32 per row)."""

    def estimate(self, tensor, request):
        return CaptureUsage(1, 0, 0, 10**6)


def test_evidence_kept_past_its_charge_fails_the_operation():
    discovery = sample_discovery()
    session = session_for(discovery=discovery)
    session.enable_interventions(
        InterventionPlan([iv.scale("s", "blocks.0.mlp", 3.0, evidence=32)]).admit(discovery, session),
        _NothingKept())
    session.begin_step(PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0.mlp", hidden())  # the hook observes first
    assert session.intervene(NumpyBackend(), "blocks.0.mlp", hidden()) is None  # not applied
    step = session.take_step()
    record = step.interventions[0]
    assert record.outcome == InterventionOutcome.FAILED and "underestimated retained" in record.message
    assert record.evidence == [] and record.charged.retained_bytes == 0
    # The ledger holds what was charged, and the session goes on.
    assert step.step_usage.retained_bytes == 0 and step.step_usage.captures == 2
    session.begin_step(DECODE, 1)
    assert session.take_step().interventions[0].outcome == InterventionOutcome.MISSING


def test_an_interrupt_in_the_evidence_estimator_propagates_unchanged():
    class Interrupting:
        def estimate(self, tensor, request):
            raise KeyboardInterrupt

    discovery = sample_discovery()
    session = session_for(discovery=discovery)
    ops = [iv.scale("s", "blocks.0.mlp", 3.0, evidence="summary"), iv.zero("z", "blocks.0.mlp")]
    session.enable_interventions(InterventionPlan(ops).admit(discovery, session), Interrupting())
    session.begin_step(PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0.mlp", hidden())
    with pytest.raises(KeyboardInterrupt):
        session.intervene(NumpyBackend(), "blocks.0.mlp", hidden())
    scaled, zeroed = session.take_step().interventions
    assert scaled.outcome == InterventionOutcome.FAILED and "KeyboardInterrupt" in scaled.message
    assert zeroed.outcome == InterventionOutcome.FAILED and "interrupted" in zeroed.message
    session.begin_step(DECODE, 1)  # the session goes on
    session.take_step()


def _bad_operations():
    """Built per test, so no bound object outlives the run."""
    return [
        (iv.add("a", "blocks.0.mlp", np.ones((1, 4, 7))), "extent"),
        (iv.add("a", "blocks.0.mlp", np.ones((8,))), "rank"),
        (iv.add("a", "blocks.0.mlp", np.full((1, 4, 8), np.nan), schedule=CaptureSchedule(decode=False)), "finite"),
        (iv.scale("a", "blocks.0.mlp", float("inf")), "finite"),
        (iv.zero("a", "nowhere"), "intervention 'a' names unknown observation path 'nowhere'"),
        (iv.zero("x" * 129, "blocks.0.mlp"), "128"),
        (iv.zero("a", ROUTER), "routing point"),
        (iv.mask_logits("a", "blocks.0.mlp", [1]), "not logits"),
        (iv.mask_logits("a", "logits", [16]), "out of range"),
        (iv.exclude_experts("a", ROUTER, [1, 1]), "repeated"),
        (iv.exclude_experts("a", ROUTER, [0, 1, 2]), "fewer than top_k"),
        (iv.exclude_experts("a", ROUTER, [9]), "out of range"),
        (iv.exclude_experts("a", ROUTER, [1], evidence=None, slices=[CaptureSlice("experts", 0, 2)]), "token axis"),
        (iv.bias_routing_scores("a", ROUTER, [1], [1.0, 2.0]), "biases"),
        (iv.force_experts("a", ROUTER, [[1, 2, 3]]), "top_k"),
        (iv.zero_expert_contribution("a", "blocks.0.mlp", [1]), "no routing policy"),
    ]


@pytest.mark.parametrize("case", range(16))
def test_bad_operations_are_refused_at_admission(case):
    op, fragment = _bad_operations()[case]
    session = session_for()
    with pytest.raises(AdmissionError, match=fragment):
        InterventionPlan([op]).admit(sample_discovery(), session)


def test_routing_operations_may_not_overlap_and_ids_must_be_unique():
    session = session_for()
    with pytest.raises(AdmissionError, match="overlap"):
        InterventionPlan([iv.exclude_experts("a", ROUTER, [1]), iv.exclude_experts("b", ROUTER, [2])]).admit(
            sample_discovery(), session)
    with pytest.raises(AdmissionError, match="duplicate"):
        InterventionPlan([iv.zero("a", "blocks.0.mlp"), iv.zero("a", "blocks.1.mlp")]).admit(sample_discovery(), session)


def test_enable_interventions_rules():
    discovery = sample_discovery()
    session = session_for(discovery=discovery)
    other = session_for(discovery=discovery)
    plan = InterventionPlan([iv.zero("z", "blocks.0.mlp")])
    with pytest.raises(CaptureSessionError, match="another capture session"):
        session.enable_interventions(plan.admit(discovery, other), NumpyBackend())
    with pytest.raises(InvalidArgumentError):
        session.enable_interventions(plan.admit(discovery, session), None)
    session.enable_interventions(InterventionPlan([]).admit(discovery, session), NumpyBackend())
    assert session.intervention_plan is None  # an empty plan is not installed
    session.enable_interventions(plan.admit(discovery, session), NumpyBackend())
    assert session.intervention_plan.plan.operations[0].id == "z"
    with pytest.raises(CaptureSessionError, match="already"):
        session.enable_interventions(plan.admit(discovery, session), NumpyBackend())
    late = session_for(discovery=discovery)
    late.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match="before the first step"):
        late.enable_interventions(plan.admit(discovery, late), NumpyBackend())


def test_the_checkpoint_storage_estimate_counts_the_intervention_plan_declarations():
    # The estimate covers every admitted plan's declarations, the intervention plan's included:
    # the point an operation targets (its meaning here) and the operation's slices.
    def estimate(meaning: str, slices=()) -> int:
        hidden_axes = [Axis("batch", "batch"), Axis("seq", "sequence"), Axis("d", 8)]
        discovery = CaptureDiscovery("m", [ObservationPoint("blocks.9.mlp", hidden_axes, meaning=meaning)])
        session = session_for(discovery=discovery)
        op = iv.zero("z", "blocks.9.mlp", slices=list(slices))
        session.enable_interventions(InterventionPlan([op]).admit(discovery, session), NumpyBackend())
        return session.checkpoint_storage_bytes(discovery)

    short = estimate("m")
    assert estimate("m" * 1001) - short >= 1000
    assert estimate("m", [CaptureSlice("d", 0, 4, 1)]) > short


def test_a_runtime_mis_shaped_payload_fails_the_operation():
    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("n", "unknown")])])
    session = session_with([iv.add("a", "p", np.ones(3))], discovery=discovery)
    session.begin_step(PREFILL, 0)
    session.observe(NumpyBackend(), "p", np.zeros(4, np.float32))  # the hook observes first
    assert session.intervene(NumpyBackend(), "p", np.zeros(4, np.float32)) is None
    record = session.take_step().interventions[0]
    assert record.outcome == InterventionOutcome.FAILED and "exactly" in record.message


@pytest.mark.parametrize("action", ["replace", "add"])
@pytest.mark.parametrize("backend, dtype", [("numpy", "float16"), ("torch", "float16"), ("torch", "bfloat16")])
def test_a_payload_that_the_target_dtype_cannot_hold_fails_the_operation(backend, dtype, action):
    """Admission sees only that the payload is finite: 1e6 is, but not in float16, where it
    would become inf. The operation fails, naming it, and the tensor passes unchanged."""
    if backend == "numpy":
        value, tensor, make = 1e6, np.ones(3, np.float16), NumpyBackend
    else:
        torch = pytest.importorskip("torch", reason="torch is not installed")
        from lifecore.torch import TorchBackend

        # 1e39 is finite as a float64 but past even bfloat16's (float32's) range.
        value = 1e6 if dtype == "float16" else 1e39
        tensor, make = torch.ones(3, dtype=getattr(torch, dtype)), TorchBackend
    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("n", 3)])])
    session = session_for(discovery=discovery)
    op = getattr(iv, action)("big", "p", np.full(3, value))
    session.enable_interventions(InterventionPlan([op]).admit(discovery, session), make())
    session.begin_step(PREFILL, 0)
    session.observe(make(), "p", tensor)  # the hook observes first
    assert session.intervene(make(), "p", tensor) is None  # nothing applied: the output stays as it was
    record = session.take_step().interventions[0]
    assert record.outcome == InterventionOutcome.FAILED
    assert "'big'" in record.message and dtype in record.message and "finite" in record.message


# -- routing -----------------------------------------------------------------------------------
def routed(ops, limits=None):
    return session_with(ops, limits=limits)


def decision(rows, top_k=2, ids=None):
    ids = np.array(ids if ids is not None else [[0, 1]] * rows, dtype=np.int64)
    return ids, np.full((rows, top_k), 0.5, np.float32)


def test_unsolicited_routing_results_fail():
    plain = session_for()
    plain.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match="unsolicited"):
        plain.routing_applied(NumpyBackend(), ROUTER, None, decision(4))
    session = routed([iv.exclude_experts("x", ROUTER, [3])])
    session.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match="no pending control"):
        session.routing_applied(NumpyBackend(), ROUTER, None, decision(4))


def test_routing_control_round_trip_with_original_evidence():
    session = routed([iv.exclude_experts("x", ROUTER, [3], evidence=8)])
    backend = NumpyBackend()
    session.begin_step(PREFILL, 0)
    control = session.routing_control(ROUTER, 4)
    assert (control.num_experts, control.top_k, control.expert_ids, control.capture_original) == (4, 2, [3], True)
    with pytest.raises(CaptureSessionError, match="already pending"):
        session.routing_control(ROUTER, 4)
    with pytest.raises(CaptureSessionError, match="pending"):
        session.finish_interventions()
    with pytest.raises(CaptureSessionError, match="does not match"):
        session.routing_applied(backend, "elsewhere", decision(4), decision(4))
    session.routing_applied(backend, ROUTER, decision(4, ids=[[3, 1]] * 4), decision(4))
    session.finish_interventions()
    record = session.take_step().interventions[0]
    assert record.outcome == InterventionOutcome.APPLIED and len(record.evidence) == 4
    assert record.evidence[0].tensor.ravel()[:2].tolist() == [3, 1]


def test_a_missing_requested_original_fails_the_operation():
    session = routed([iv.exclude_experts("x", ROUTER, [3], evidence=8)])
    session.begin_step(PREFILL, 0)
    session.routing_control(ROUTER, 4)
    with pytest.raises(InvalidArgumentError, match="original routing decision is missing"):
        session.routing_applied(NumpyBackend(), ROUTER, None, decision(4))
    assert session.take_step().interventions[0].outcome == InterventionOutcome.FAILED


def test_routing_evidence_kept_past_its_charge_fails_the_operation():
    class NothingKept(NumpyBackend):
        def estimate(self, tensor, request):
            return CaptureUsage(0, 0, 0, 10**6)

    session = routed([iv.exclude_experts("x", ROUTER, [3], evidence=8)])
    session.begin_step(PREFILL, 0)
    session.routing_control(ROUTER, 4)  # reserves 4 x 2 x 16 bytes for the original decision
    with pytest.raises(CaptureSessionError, match="underestimated retained routing evidence"):
        session.routing_applied(NothingKept(), ROUTER, decision(4), decision(4))
    step = session.take_step()
    record = step.interventions[0]
    assert record.outcome == InterventionOutcome.FAILED and record.evidence == []
    assert step.step_usage.retained_bytes == record.charged.retained_bytes == 4 * 2 * 16
    session.begin_step(DECODE, 1)  # the session goes on
    session.take_step()


def test_routing_windows_and_phases_are_checked():
    session = routed([iv.exclude_experts("x", ROUTER, [3], slices=[CaptureSlice("rows", 2, 4)],
                                         schedule=CaptureSchedule(decode=False))])
    session.begin_step(PREFILL, 0)
    with pytest.raises(InvalidArgumentError, match="window"):
        session.routing_control(ROUTER, 1)
    assert session.take_step().interventions[0].outcome == InterventionOutcome.FAILED
    session.begin_step(DECODE, 1)
    assert session.routing_control(ROUTER, 1) is None  # not scheduled in decode
    session.take_step()


def test_a_routing_window_that_starts_inside_the_rows_but_ends_past_them_is_refused():
    session = routed([iv.exclude_experts("x", ROUTER, [3], slices=[CaptureSlice("rows", 0, 4)],
                                         schedule=CaptureSchedule(decode=False))])
    session.begin_step(PREFILL, 0)
    with pytest.raises(InvalidArgumentError, match="window"):
        session.routing_control(ROUTER, 2)  # rows 0..4 of 2: the window's end is past them
    assert session.take_step().interventions[0].outcome == InterventionOutcome.FAILED


def test_routing_original_reservation_over_the_limit_is_an_error():
    limits = CaptureLimits(per_step=CaptureUsage(10, 10, 10**9, 10**9), cumulative=CaptureUsage(10, 10**9, 10**9, 10**9),
                           on_limit=OnLimit.SKIP)
    session = routed([iv.exclude_experts("x", ROUTER, [3], evidence=8)], limits=limits)
    session.begin_step(PREFILL, 0)
    with pytest.raises(BudgetExceededError):
        session.routing_control(ROUTER, 4)
    assert session.take_step().interventions[0].outcome == InterventionOutcome.FAILED


def test_routing_failed_leaves_the_record_failed_with_a_bounded_message():
    session = routed([iv.force_experts("f", ROUTER, [[0, 1]] * 4, schedule=CaptureSchedule(decode=False))])
    session.begin_step(PREFILL, 0)
    control = session.routing_control(ROUTER, 4)
    assert control.expert_ids == [0, 1] * 4
    session.routing_failed(ROUTER, "selector crashed: " + "ü" * 300)
    with pytest.raises(CaptureSessionError, match="did not complete"):
        session.finish_interventions()
    record = session.take_step().interventions[0]
    assert record.outcome == InterventionOutcome.FAILED
    assert len(record.message.encode()) <= 256 and record.message.startswith("selector crashed")


# -- the expected grouped top-k routing policy -------------------------------------------------
GROUPED = "moe.grouped#routing"


def grouped_discovery(top_k=3, topk_groups=2, scoring="sigmoid"):
    from lifecore.capture import RoutingPolicy

    policy = RoutingPolicy(8, top_k, scoring=scoring, groups=4, topk_groups=topk_groups, epsilon=1e-9, scale=2.5,
                           learned_coefficient_scale=True)
    point = ObservationPoint(GROUPED, [Axis("rows", "token_rows"), Axis("experts", 8)], meaning="routing",
                             routing=policy)
    return CaptureDiscovery("grouped", [point]), policy


def test_routing_policies_are_coherent_and_default_to_plain_top_k():
    from lifecore.capture import RoutingPolicy

    plain = RoutingPolicy(4, 2)
    assert (plain.scoring, plain.groups, plain.topk_groups, plain.epsilon, plain.scale,
            plain.learned_coefficient_scale) == ("softmax", 1, 1, 0.0, 1.0, False)
    assert RoutingPolicy(8, 2, groups=4).topk_groups == 4  # every group eligible unless told
    for kwargs, fragment in [(dict(groups=3), "evenly"), (dict(groups=4, topk_groups=5), "topk_groups"),
                             (dict(groups=4, topk_groups=1, top_k=3), "reached"), (dict(scale=0.0), "scale"),
                             (dict(epsilon=float("nan")), "epsilon"), (dict(epsilon=-1e-9), "epsilon"),
                             (dict(scoring="relu"), "scoring")]:
        top_k = kwargs.pop("top_k", 2)
        with pytest.raises(InvalidArgumentError, match=fragment):
            RoutingPolicy(8, top_k, **kwargs)


def test_grouped_feasibility_and_group_limits_are_checked_at_admission():
    discovery, _ = grouped_discovery()
    session = session_for(discovery=discovery)
    # 6 experts remain, but two groups are left with one each: those two groups give only 2 < 3.
    with pytest.raises(AdmissionError, match="fewer than top_k"):
        InterventionPlan([iv.exclude_experts("x", GROUPED, [0, 2])]).admit(discovery, session)
    InterventionPlan([iv.exclude_experts("x", GROUPED, [0, 1])]).admit(discovery, session)  # a whole group: fine
    narrow, _ = grouped_discovery(top_k=2, topk_groups=1)
    session = session_for(discovery=narrow)
    with pytest.raises(AdmissionError, match="groups"):  # experts 0 and 2 lie in two groups, one is allowed
        InterventionPlan([iv.force_experts("f", GROUPED, [[0, 2]] * 4)]).admit(narrow, session)
    with pytest.raises(AdmissionError, match="repeat"):
        InterventionPlan([iv.force_experts("f", GROUPED, [[0, 0]] * 4)]).admit(narrow, session)
    with pytest.raises(AdmissionError, match="finite"):
        InterventionPlan([iv.bias_routing_scores("b", GROUPED, [1], [float("inf")])]).admit(narrow, session)
    InterventionPlan([iv.force_experts("f", GROUPED, [[0, 1]] * 4)]).admit(narrow, session)


def test_the_control_carries_the_policy_and_validates_before_native_work():
    from lifecore.capture import RoutingPolicy

    discovery, policy = grouped_discovery()
    session = session_for(discovery=discovery)
    plan = InterventionPlan([iv.exclude_experts("x", GROUPED, [0, 1], slices=[CaptureSlice("rows", 1, 4, 2)],
                                                 schedule=CaptureSchedule(decode=False))])
    session.enable_interventions(plan.admit(discovery, session), NumpyBackend())
    session.begin_step(PREFILL, 0)
    control = session.routing_control(GROUPED, 4)
    assert control.policy == policy and (control.row_start, control.row_end, control.row_stride) == (1, 4, 2)
    assert control.selected_rows == 2
    control.validate(policy, 4)
    with pytest.raises(InvalidArgumentError, match="does not match"):
        control.validate(RoutingPolicy(8, 3, scoring="softmax", groups=4, topk_groups=2), 4)
    with pytest.raises(InvalidArgumentError, match="token rows"):
        control.validate(policy, 5)
    session.routing_failed(GROUPED, "selector refused the control")
    assert session.take_step().interventions[0].outcome == InterventionOutcome.FAILED


def test_a_mask_that_is_not_finite_is_refused_when_it_is_made() -> None:
    # Before: NaN != 0, so a NaN read as "keep", and the mask was admitted and applied.
    for bad in (np.nan, np.inf):
        with pytest.raises(InvalidArgumentError, match=r"mask 'm': argument 'keep' holds a value that is not finite"):
            iv.mask("m", "blocks.0.mlp", np.full((2, 3), bad))
    assert iv.mask("m", "blocks.0.mlp", np.ones((2, 3), bool)).payload == [1.0] * 6


def test_a_complex_payload_is_refused_rather_than_losing_its_imaginary_part() -> None:
    from lifecore.errors import LifecoreTypeError

    for make in (iv.add, iv.replace):
        with pytest.raises(LifecoreTypeError, match=r"argument 'tensor' holds complex values \(complex128\)"):
            make("op", "blocks.0.mlp", np.full((2, 3), 1 + 5j))
    assert iv.add("op", "blocks.0.mlp", np.full((2, 3), 1 + 0j).real).payload == [1.0] * 6


def test_a_scale_factor_past_the_arrays_dtype_fails_the_operation_and_finish_says_why() -> None:
    # Before: 1e39 (finite, so admitted) scaled a float32 region into infinities; and a failed
    # operation was reported only as "did not complete".
    backend = NumpyBackend()
    session = session_with([iv.scale("huge", "blocks.0.mlp", 1e39), iv.zero("never_reached", "blocks.1.mlp")])
    x = hidden()
    session.begin_step(PREFILL, 0)
    session.observe(backend, "blocks.0.mlp", x)  # the hook observes first
    assert session.intervene(backend, "blocks.0.mlp", x) is None  # failed: the activation is left as it was
    with pytest.raises(CaptureSessionError, match=r"huge at blocks.0.mlp did not complete: it failed \(.*scale "
                                                  r"factor of 'huge' is not finite in float32"):
        session.finish_interventions()
    step = session.take_step()
    assert step.interventions[0].outcome == InterventionOutcome.FAILED
    session2 = session_with([iv.zero("never_reached", "blocks.1.mlp")])
    session2.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match=r"never_reached at blocks.1.mlp did not complete: the step's "
                                                  r"forward never reached its target"):
        session2.finish_interventions()


def test_a_capture_nothing_plan_with_no_room_for_outcomes_is_refused_naming_the_fix():
    # Every step reserves each operation's outcome record beside the selections'; a plan that
    # captures nothing must still leave room for it. CapturePlan.none() has every budget zero.
    discovery = sample_discovery()
    request = CaptureRequest(1, 4, 2)
    session = CaptureSession(CapturePlan.none().admit(discovery, request))
    with pytest.raises(AdmissionError, match=r"per-step limit: .*CapturePlan\.none\(\) leaves none.*unlimited\(\)"):
        session.enable_interventions(InterventionPlan([iv.zero("z", "blocks.0.mlp")]).admit(discovery, session),
                                     NumpyBackend())
    assert session.intervention_plan is None
    roomy = CaptureSession(CapturePlan([], unlimited()).admit(discovery, request))
    roomy.enable_interventions(InterventionPlan([iv.zero("z", "blocks.0.mlp")]).admit(discovery, roomy), NumpyBackend())
    assert roomy.intervention_plan is not None


class ByteSwapping(NumpyBackend):
    """Returns the right values in the other byte order: same shape, class and element size."""

    def intervene(self, tensor, request):
        return super().intervene(tensor, request).astype(tensor.dtype.newbyteorder())


class Answering(NumpyBackend):
    def __init__(self, answer):
        self.answer = answer

    def intervene(self, tensor, request):
        return super().intervene(tensor, request)

    def replacement_mismatch(self, original, replacement):
        return self.answer


@pytest.mark.parametrize("backend, message", [
    (ByteSwapping(), r"'twice' changed blocks\.0\.mlp: dtype float32 became >f4 \(a replacement keeps"),
    (Answering("device 0 became 1"), r"'twice' changed blocks\.0\.mlp: device 0 became 1"),
    (Answering(b"bytes"), r"backend\.replacement_mismatch must return None or a str saying what differs, got bytes"),
])
def test_a_replacement_the_backend_calls_unfit_fails_its_operation_and_is_not_used(backend, message):
    # Before: only the element size and the host side were compared, so a replacement of the
    # same size in another dtype (or on another device) became the output, recorded APPLIED.
    session = session_with([iv.scale("twice", "blocks.0.mlp", 2.0)])
    x = hidden()
    session.begin_step(PREFILL, 0)
    session.observe(backend, "blocks.0.mlp", x)
    assert session.intervene(backend, "blocks.0.mlp", x) is None  # the original output stands
    with pytest.raises(CaptureSessionError, match=message):
        session.finish_interventions()
    record = session.take_step().interventions[0]
    assert record.outcome == InterventionOutcome.FAILED
    np.testing.assert_array_equal(x, hidden())


@pytest.mark.parametrize("answer", [None, ""])  # an empty phrase names no difference, as None does
def test_a_replacement_the_backend_accepts_is_applied(answer):
    backend = Answering(answer)
    session = session_with([iv.scale("twice", "blocks.0.mlp", 2.0)])
    x = hidden()
    session.begin_step(PREFILL, 0)
    session.observe(backend, "blocks.0.mlp", x)
    np.testing.assert_array_equal(session.intervene(backend, "blocks.0.mlp", x), x * 2)
    session.finish_interventions()
    assert session.take_step().interventions[0].outcome == InterventionOutcome.APPLIED


def test_the_numpy_backend_names_what_differs_in_a_replacement():
    backend = NumpyBackend()
    x = np.ones(3, np.float16)
    assert backend.replacement_mismatch(x, x.copy()) is None
    assert backend.replacement_mismatch(x, x.view(np.int16)) == "dtype float16 became int16"
    with pytest.raises(LifecoreTypeError, match=r"NumpyBackend\.replacement_mismatch: argument 'replacement'"):
        backend.replacement_mismatch(x, [1, 2, 3])


class _FailingInside(NumpyBackend):
    def intervene(self, tensor, request):
        return self._a_helper_of_the_backend(tensor)

    def _a_helper_of_the_backend(self, tensor):
        raise ValueError("the backend could not scale this")


def test_an_intervention_backend_exception_reads_failed_and_its_traceback_is_logged_at_debug(caplog):
    """An intervention's backend exception raises nothing: the operation reads FAILED with one
    line, and the 'lifecore.capture' log has the traceback at DEBUG."""
    session = session_with([iv.scale("s", "blocks.0.mlp", 3.0)])
    x = hidden()
    session.begin_step(PREFILL, 0)
    backend = _FailingInside()
    session.observe(backend, "blocks.0.mlp", x)
    with caplog.at_level("DEBUG", logger="lifecore.capture"):
        assert session.intervene(backend, "blocks.0.mlp", x) is None  # the original output stands
    with pytest.raises(CaptureSessionError, match="ValueError: the backend could not scale this"):
        session.finish_interventions()
    record = session.take_step().interventions[0]
    assert record.outcome == InterventionOutcome.FAILED and "backend.intervene: ValueError" in record.message
    logged = [r for r in caplog.records if r.name == "lifecore.capture"]
    assert len(logged) == 1 and logged[0].exc_info[0] is ValueError
    assert "_a_helper_of_the_backend" in caplog.text


def test_helper_payloads_that_are_not_numbers_are_refused_where_they_are_built() -> None:
    from fractions import Fraction

    from lifecore.capture import interventions as iv
    from lifecore.errors import LifecoreOverflowError

    # Before: None became a NaN payload (refused later as "not finite"), and an int past a
    # double raised Python's own OverflowError.
    with pytest.raises(LifecoreTypeError, match=IV + r"add: argument 'tensor' must be an array of numbers, got NoneType"):
        iv.add("a", "p", None)
    with pytest.raises(LifecoreTypeError, match=r"holding NoneType"):
        iv.replace("a", "p", [1.0, None])
    with pytest.raises(LifecoreOverflowError, match=IV + r"add: argument 'tensor' holds an int too large for a float"):
        iv.add("a", "p", [1, 10**400])
    with pytest.raises(LifecoreOverflowError, match=IV + r"scale: argument 'factor' is too large for a float"):
        iv.scale("s", "p", 10**400)
    with pytest.raises(LifecoreOverflowError, match=IV + r"bias_routing_scores: argument 'biases' is too large for a float"):
        iv.bias_routing_scores("b", "p", [0], [10**400])
    masked = np.ma.array([1.0, 2.0], mask=[True, False])
    import collections

    for given in (masked, [masked], (masked, masked), [1.0, np.ma.masked], collections.deque([masked])):
        with pytest.raises(InvalidArgumentError, match=IV + r"add: argument 'tensor' is or holds a masked array"):
            iv.add("a", "p", given)
    # Ids and biases too (before: force_experts forced the masked expert, the other ids passed
    # their masked values, a masked bias was "not a number").
    ids = np.ma.array([1, 2], mask=[False, True])
    for name, call in (("expert_ids", lambda: iv.force_experts("f", "p", np.ma.array([[1, 2]], mask=[[0, 1]]))),
                       ("expert_ids", lambda: iv.exclude_experts("e", "p", ids)),
                       ("expert_ids", lambda: iv.zero_expert_contribution("z", "p", [ids])),
                       ("token_ids", lambda: iv.mask_logits("m", "p", ids)),
                       ("biases", lambda: iv.bias_routing_scores("b", "p", [0, 1], np.ma.array([1.0, 2.0], mask=[0, 1])))):
        with pytest.raises(InvalidArgumentError, match=IV + rf"\w+: argument '{name}' is or holds a masked array"):
            call()
    with pytest.raises(LifecoreTypeError, match=IV + r"zero: argument 'evidence' is None, 'summary' or a preview size"):
        iv.zero("z", "p", evidence=np.ma.array(4, mask=True))  # before: taken as a preview of 4
    with pytest.raises(LifecoreTypeError, match=IV + r"replace: argument 'tensor' must be an array of numbers, got list holding "
                                                r"str"):
        iv.replace("r", "p", ["1"])
    with pytest.raises(LifecoreTypeError, match=r"datetime64"):
        iv.replace("r", "p", np.array(["2020-01-01"], dtype="datetime64[D]"))
    looped: list = [1.0]
    looped.append(looped)  # before: a RecursionError from the masked-array walk
    with pytest.raises(LifecoreTypeError, match=IV + r"replace: argument 'tensor' must be an array of numbers"):
        iv.replace("r", "p", looped)
    # Numbers of any kind a list may hold still go through, as floats.
    assert iv.add("a", "p", [Fraction(1, 2), 2, np.float32(0.25)]).payload == [0.5, 2.0, 0.25]


def test_every_builder_names_itself_and_the_argument_it_refuses():
    # Before: a check the builders share named the argument alone ("argument 'factor' must be a
    # number"), and force_experts(None) was an InvalidArgumentError naming neither.
    from lifecore.capture import interventions as iv

    for call, argument, build in (("scale", "factor", lambda: iv.scale("a", "p", "2")),
                                  ("mask_logits", "token_ids", lambda: iv.mask_logits("a", "p", "3")),
                                  ("add", "tensor", lambda: iv.add("a", "p", "x")),
                                  ("exclude_experts", "expert_ids", lambda: iv.exclude_experts("a", "p", [1.5])),
                                  ("force_experts", "expert_ids", lambda: iv.force_experts("a", "p", None))):
        with pytest.raises(LifecoreTypeError, match=IV + rf"{call}: argument '{argument}' "):
            build()
    with pytest.raises(InvalidArgumentError, match=IV + r"force_experts: argument 'expert_ids' must be shaped "
                                                        r"\[rows, top_k\], got 1 dimension"):
        iv.force_experts("a", "p", [1, 2])
