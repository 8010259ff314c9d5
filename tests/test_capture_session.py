"""Capture-session behaviours: schedule, budgets, records, the step slot, checkpoints, forks."""

from __future__ import annotations

import functools
import json
import threading

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
    MockTensor,
    NumpyBackend,
    ObservationPoint,
    OnLimit,
    unlimited,
)
from lifecore.capture.backends import payload_cost
from lifecore.errors import AdmissionError, BudgetExceededError, CaptureSessionError, InvalidArgumentError
from lifecore.testing.capture_session import sample_discovery

import capture_builders

PREFILL, DECODE = CapturePhase.PREFILL, CapturePhase.DECODE
HIDDEN = (1, 4, 8)
BIG = 10**9


# These sessions default to four predictions rather than the shared request's three.
session_for = functools.partial(capture_builders.session_for, request=CaptureRequest(1, 4, 4))


def summary(id="s", path="blocks.0.mlp", **kw):
    return CaptureSelection(id, path, CaptureTransform.summary(), **kw)


def envelope_of(session):
    """Usage of one step's envelopes (what begin_step alone charges)."""
    session.begin_step(PREFILL, 0) if session.next_prediction == 0 else session.begin_step(DECODE, session.next_prediction)
    usage = session.step_usage()
    return usage


# -- the none plan and the basic step ----------------------------------------------------------
def test_the_none_plan_captures_nothing_and_copies_nothing():
    session = CaptureSession(CapturePlan.none().admit(sample_discovery(), CaptureRequest(1, 4, 2)))
    backend = CountingBackend()
    session.begin_step(PREFILL, 0)
    for path in ("blocks.0.mlp", "blocks.1.mlp", "logits"):
        session.observe(backend, path, MockTensor(HIDDEN))
    step = session.take_step()
    assert step.records == [] and backend.calls == []
    assert session.cumulative_usage() == CaptureUsage()


def test_a_captured_summary_holds_the_values_and_its_charge():
    session = session_for(summary())
    x = np.arange(32, dtype=np.float32).reshape(HIDDEN)
    session.begin_step(PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0.mlp", x)
    step = session.take_step()
    (record,) = step.records
    assert record.outcome == CaptureOutcome.CAPTURED
    assert record.source_shape == [1, 4, 8] and record.selected_shape == [1, 4, 8]
    p = record.payload
    assert (p.kind, p.count, p.min, p.max) == ("summary", 32, 0.0, 31.0)
    assert p.mean == pytest.approx(15.5) and p.std == pytest.approx(float(np.std(x)))
    assert record.charged.captures == 1 and step.cumulative_usage == session.cumulative_usage()
    decoded = json.loads(record.to_json())
    assert decoded["outcome"]["kind"] == "CAPTURED" and decoded["payload"]["count"] == 32
    assert len(record.to_json().encode()) <= record.charged.encoded_bytes


def test_slices_histograms_and_top_candidates():
    session = session_for(
        CaptureSelection("rows", "blocks.0.mlp", CaptureTransform.slice(), schedule=CaptureSchedule(decode=False),
                         slices=[CaptureSlice("seq", 1, 3), CaptureSlice("d", 0, 8, 4)]),
        CaptureSelection("hist", "blocks.0.mlp", CaptureTransform.histogram([-10.0, 0.0, 10.0, 100.0])),
        CaptureSelection("top", "logits", CaptureTransform.top_candidates(2)),
    )
    x = np.arange(32, dtype=np.float32).reshape(HIDDEN) - 5
    logits = np.zeros((1, 4, 16))
    logits[0, -1, [3, 9]] = [2.0, 5.0]
    backend = NumpyBackend()
    session.begin_step(PREFILL, 0)
    session.observe(backend, "blocks.0.mlp", x)
    session.observe(backend, "logits", logits)
    step = session.take_step()
    rows, hist, top = step.records
    assert rows.selected_shape == [1, 2, 2]
    # A slice is an array in the source dtype and the selected shape; small results are
    # arrays under names that say what they hold.
    assert rows.payload.tensor.dtype == np.float32 and rows.payload.tensor.shape == (1, 2, 2)
    assert np.array_equal(rows.payload.tensor, x[:, 1:3, 0:8:4])
    assert hist.payload.counts.tolist() == [5, 10, 17] and hist.payload.bin_edges.tolist() == [-10.0, 0.0, 10.0, 100.0]
    assert hist.payload.histogram.counts.tolist() == [5, 10, 17]
    assert top.payload.candidate_ids.tolist() == [9, 3] and top.payload.scores.tolist() == [5.0, 2.0]
    assert top.payload.candidates.ids.tolist() == [9, 3]
    assert rows.payload.summary is None and rows.payload.histogram is None and top.payload.tensor is None


def test_a_preview_that_cuts_is_truncated():
    session = session_for(CaptureSelection("p", "blocks.0.mlp", CaptureTransform.preview(5)))
    session.begin_step(PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0.mlp", np.ones(HIDDEN, np.float32))
    (record,) = session.take_step().records
    assert record.outcome == CaptureOutcome.TRUNCATED
    assert (record.available, record.emitted) == (32, 5) and record.payload.tensor.shape == (5,)


def test_schedule_skip_and_missing():
    session = session_for(summary("every2", schedule=CaptureSchedule(every=2)), summary("late", "blocks.1.mlp"))
    backend = CountingBackend()
    session.begin_step(PREFILL, 0)
    step = session.take_step()  # nothing observed
    assert [r.outcome for r in step.records] == [CaptureOutcome.MISSING, CaptureOutcome.MISSING]
    session.begin_step(DECODE, 1)
    session.observe(backend, "blocks.0.mlp", MockTensor((1, 1, 8)))
    step = session.take_step()
    assert step.records[0].outcome == CaptureOutcome.SKIPPED and step.records[0].skip_reason == "schedule"
    outcome = json.loads(step.records[0].to_json())["outcome"]
    assert outcome["reason"] == "schedule" and "budget" not in outcome, outcome  # only a limit names a budget
    assert backend.calls == []  # a skipped point never calls the backend


def test_the_next_step_waits_until_the_records_are_taken():
    session = session_for(summary())
    session.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match="not been consumed"):
        session.begin_step(DECODE, 1)
    assert session.take_step() is not None
    assert session.take_step() is None  # one slot, no queue
    session.begin_step(DECODE, 1)


def test_observe_needs_a_step_and_fires_once():
    session = session_for(summary())
    backend = CountingBackend()
    with pytest.raises(CaptureSessionError, match="no capture step"):
        session.observe(backend, "blocks.0.mlp", MockTensor(HIDDEN))
    session.begin_step(PREFILL, 0)
    session.observe(backend, "blocks.0.mlp", MockTensor(HIDDEN))
    calls = len(backend.calls)
    with pytest.raises(CaptureSessionError, match="twice"):
        session.observe(backend, "blocks.0.mlp", MockTensor(HIDDEN))
    assert len(backend.calls) == calls
    assert session.take_step().records[0].outcome == CaptureOutcome.CAPTURED


def test_begin_step_checks_the_prediction():
    session = session_for(summary(), request=CaptureRequest(1, 4, 2))
    with pytest.raises(InvalidArgumentError):
        session.begin_step(DECODE, 0)
    with pytest.raises(InvalidArgumentError):
        session.begin_step(DECODE, 2)
    assert session.cumulative_usage() == CaptureUsage()


# -- budgets ---------------------------------------------------------------------------------
COST = payload_cost(CaptureTransform.summary().kind, list(HIDDEN), 4)


def _limits_short_of(budget: str, on_limit: OnLimit, cumulative: bool) -> CaptureLimits:
    env = CaptureUsage(0, 0, 512 + len("s") + 2 * len("blocks.0.mlp") + 3 * 128,
                       2048 + 6 * (1 + 2 * len("blocks.0.mlp")) + 3 * 64)
    room = [BIG] * 4
    index = ["captures", "retained_bytes", "host_bytes", "encoded_bytes"].index(budget)
    need = [COST.captures, COST.retained_bytes, COST.host_bytes, COST.encoded_bytes][index]
    room[index] = need - 1
    tight = CaptureUsage(*(e + r for e, r in zip(env.as_tuple(), room)))
    plenty = CaptureUsage(*(e * 4 + BIG for e in env.as_tuple()))
    if cumulative:  # used with max_predictions = 1, so the preflight reserves one step of envelopes
        return CaptureLimits(per_step=plenty, cumulative=tight, on_limit=on_limit)
    return CaptureLimits(per_step=tight, cumulative=plenty, on_limit=on_limit)


@pytest.mark.parametrize("budget", ["captures", "retained_bytes", "host_bytes", "encoded_bytes"])
@pytest.mark.parametrize("on_limit", [OnLimit.FAIL, OnLimit.SKIP])
@pytest.mark.parametrize("cumulative", [False, True])
def test_a_budget_failure_or_skip_never_materializes_a_value(budget, on_limit, cumulative):
    session = session_for(summary(), limits=_limits_short_of(budget, on_limit, cumulative),
                          request=CaptureRequest(1, 4, 1 if cumulative else 4))
    backend = CountingBackend()
    session.begin_step(PREFILL, 0)
    before = session.cumulative_usage()
    if on_limit == OnLimit.FAIL:
        with pytest.raises(BudgetExceededError) as caught:
            session.observe(backend, "blocks.0.mlp", MockTensor(HIDDEN))
        assert (caught.value.budget, caught.value.cumulative) == (budget, cumulative)
    else:
        session.observe(backend, "blocks.0.mlp", MockTensor(HIDDEN))
    assert backend.count("transform") == 0  # nothing materialized
    assert session.cumulative_usage() == before  # nothing charged
    (record,) = session.take_step().records
    assert record.payload is None and record.budget == budget and record.cumulative == cumulative
    if on_limit == OnLimit.FAIL:
        assert (record.outcome, record.fail_reason) == (CaptureOutcome.FAILED, "limit")
    else:
        assert (record.outcome, record.skip_reason) == (CaptureOutcome.SKIPPED, "limit")
    # The record's JSON names the budget too, for a failure as for a skip.
    outcome = json.loads(record.to_json())["outcome"]
    assert (outcome["reason"], outcome["budget"], outcome["cumulative"]) == ("limit", budget, cumulative), outcome


def test_a_cumulative_limit_skips_later_steps_but_keeps_recording_metadata():
    env_host = 512 + 1 + 24 + 3 * 128
    env_enc = 2048 + 6 * 25 + 3 * 64
    decode_cost = payload_cost(CaptureTransform.summary().kind, [1, 1, 8], 4)
    limits = CaptureLimits(per_step=CaptureUsage(BIG, BIG, BIG, BIG),
                           cumulative=CaptureUsage(1, BIG, BIG, 4 * env_enc + decode_cost.encoded_bytes),
                           on_limit=OnLimit.SKIP)
    session = session_for(summary(schedule=CaptureSchedule(prefill=False)), limits=limits)
    backend = CountingBackend()
    outcomes = []
    session.begin_step(PREFILL, 0)
    session.take_step()
    for p in (1, 2, 3):
        session.begin_step(DECODE, p)
        session.observe(backend, "blocks.0.mlp", MockTensor((1, 1, 8)))
        outcomes.append(session.take_step().records[0].skip_reason)
    assert outcomes == [None, "limit", "limit"]
    assert backend.count("transform") == 1
    assert session.cumulative_usage().captures == 1
    assert session.cumulative_usage().host_bytes == 4 * env_host + decode_cost.host_bytes


def _decode_once_then_restore(session):
    """Prefill, a checkpoint, one decode step, then back to the checkpoint (the cumulative usage
    keeps both steps' charges: a restore refunds nothing)."""
    session.begin_step(PREFILL, 0)
    session.take_step()
    cp = session.checkpoint(sample_discovery())
    session.begin_step(DECODE, 1)
    session.take_step()
    session.restore(cp)


def test_envelope_exhaustion_fails_begin_step_and_installs_no_records():
    # Room for exactly two steps of envelopes; the third fails even under the skip policy.
    probe = session_for(summary(), request=CaptureRequest(1, 4, 2))
    env = envelope_of(probe)
    limits = CaptureLimits(per_step=env, cumulative=CaptureUsage(*(2 * v for v in env.as_tuple())), on_limit=OnLimit.SKIP)
    session = session_for(summary(), limits=limits, request=CaptureRequest(1, 4, 2))
    _decode_once_then_restore(session)
    with pytest.raises(BudgetExceededError):
        session.begin_step(DECODE, 1)
    assert session.take_step() is None
    assert not session.checkpoint_ready
    with pytest.raises(CaptureSessionError, match="did not complete"):
        session.checkpoint(sample_discovery())  # a failed reservation never becomes a checkpoint


def test_a_refused_begin_step_charges_none_of_the_envelopes():
    # Room for two steps of envelopes and half of a third (after a restore): the third step's
    # first envelope alone would fit, the two together do not.
    selections = (summary("a"), summary("b"))
    probe = session_for(*selections, request=CaptureRequest(1, 4, 2))
    env = envelope_of(probe)
    cumulative = CaptureUsage(*(2 * v + v // 2 for v in env.as_tuple()))
    limits = CaptureLimits(per_step=env, cumulative=cumulative, on_limit=OnLimit.SKIP)
    session = session_for(*selections, limits=limits, request=CaptureRequest(1, 4, 2))
    _decode_once_then_restore(session)
    charged = session.cumulative_usage()
    for _ in range(2):  # a refusal repeated charges nothing either
        with pytest.raises(BudgetExceededError, match="cumulative"):
            session.begin_step(DECODE, 1)
        assert session.cumulative_usage() == charged
        assert session.take_step() is None


def test_an_unknown_estimate_is_a_failure_never_zero():
    session = session_for(summary())
    backend = CountingBackend(unknown_estimate=True)
    session.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match="unknown estimate"):
        session.observe(backend, "blocks.0.mlp", MockTensor(HIDDEN))
    assert backend.count("transform") == 0
    record = session.take_step().records[0]
    assert (record.outcome, record.fail_reason) == (CaptureOutcome.FAILED, "native")
    assert record.charged.captures == 0
    outcome = json.loads(record.to_json())["outcome"]
    assert outcome["reason"] == "native" and "budget" not in outcome, outcome  # only a limit names a budget


def test_an_underestimated_encoding_is_caught_before_publication():
    discovery = CaptureDiscovery("m", [ObservationPoint("big", [Axis("n", "unknown")])])
    session = session_for(CaptureSelection("f", "big", CaptureTransform.full_tensor()), discovery=discovery)
    backend = CountingBackend(underestimate=True)
    session.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match="underestimated"):
        session.observe(backend, "big", MockTensor((4000,)))
    record = session.take_step().records[0]
    assert record.outcome == CaptureOutcome.FAILED and record.payload is None
    assert len(record.to_json().encode()) <= record.charged.encoded_bytes


def test_a_backend_failure_is_a_bounded_failed_record():
    class Exploding(CountingBackend):
        def transform(self, tensor, request):
            raise RuntimeError("é" * 400)

    session = session_for(summary())
    session.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match="native capture failed"):
        session.observe(Exploding(), "blocks.0.mlp", MockTensor(HIDDEN))
    record = session.take_step().records[0]
    assert record.outcome == CaptureOutcome.FAILED
    encoded = record.message.encode()
    assert len(encoded) <= 256
    encoded.decode("utf-8")  # cut on a UTF-8 boundary
    assert record.charged.captures == 1  # the reservation is never refunded


class Interrupted(NumpyBackend):
    """Raises ``error`` (a BaseException that is not an Exception) from every transform."""

    def __init__(self, error):
        self.error, self.transforms = error, 0

    def transform(self, tensor, request):
        self.transforms += 1
        raise self.error


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit], ids=lambda e: e.__name__)
def test_an_interrupt_in_a_backend_propagates_unchanged_after_failing_its_records(error):
    session = session_for(CaptureSelection("a", "blocks.0.mlp", CaptureTransform.full_tensor()),
                          CaptureSelection("b", "blocks.0.mlp", CaptureTransform.preview(4)))
    backend = Interrupted(error("stop"))
    session.begin_step(PREFILL, 0)
    with pytest.raises(error) as raised:
        session.observe(backend, "blocks.0.mlp", np.ones(HIDDEN, np.float32))
    assert raised.value is backend.error
    assert backend.transforms == 1  # nothing more is asked of the backend once interrupted
    records = session.take_step().records
    assert [r.outcome for r in records] == [CaptureOutcome.FAILED] * 2
    # The session goes on, and the next call is not refused for the interrupt before it.
    session.begin_step(DECODE, 1)
    session.observe(NumpyBackend(), "blocks.0.mlp", np.ones((1, 1, 8), np.float32))
    assert [r.outcome for r in session.take_step().records] == [CaptureOutcome.CAPTURED, CaptureOutcome.TRUNCATED]


def test_a_mis_shaped_tensor_fails_the_record_and_charges_nothing_more():
    session = session_for(summary())
    backend = CountingBackend()
    session.begin_step(PREFILL, 0)
    before = session.cumulative_usage()
    with pytest.raises(InvalidArgumentError, match="extent"):
        session.observe(backend, "blocks.0.mlp", MockTensor((1, 4, 9)))
    assert session.cumulative_usage() == before and backend.count("estimate") == 0
    record = session.take_step().records[0]
    assert (record.outcome, record.fail_reason) == (CaptureOutcome.FAILED, "invalid")


def test_a_refused_shape_is_not_published_by_its_failed_record():
    # A backend describing a shape of the wrong rank: the record's JSON stays inside its
    # envelope, which prices the point's own rank.
    class WrongRank(NumpyBackend):
        def describe(self, tensor):
            return (2**64 - 1,) * 2000, 4, True

    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("d", 4)])])
    session = session_for(summary(path="p"), discovery=discovery)
    session.begin_step(PREFILL, 0)
    with pytest.raises(InvalidArgumentError, match="rank 2000"):
        session.observe(WrongRank(), "p", np.zeros(4, np.float32))
    record = session.take_step().records[0]
    assert record.outcome == CaptureOutcome.FAILED and record.source_shape == []
    assert len(record.to_json().encode()) <= record.charged.encoded_bytes


def test_unknown_dynamic_extents_are_checked_at_run_time():
    discovery = CaptureDiscovery("m", [ObservationPoint("img", [Axis("media", "media_positions"), Axis("d", 2)])])
    session = session_for(summary(path="img", slices=[CaptureSlice("media", 0, 3)]), discovery=discovery)
    session.begin_step(PREFILL, 0)
    with pytest.raises(InvalidArgumentError, match="out of range"):
        session.observe(NumpyBackend(), "img", np.zeros((2, 2), np.float32))
    session.take_step()
    session.begin_step(DECODE, 1)
    session.observe(NumpyBackend(), "img", np.zeros((5, 2), np.float32))
    assert session.take_step().records[0].selected_shape == [3, 2]


# -- checkpoints, restore, forks ---------------------------------------------------------------
def _run(session, prediction, backend=None):
    session.begin_step(PREFILL if prediction == 0 else DECODE, prediction)
    session.observe(backend or CountingBackend(), "blocks.0.mlp", MockTensor((1, 4 if prediction == 0 else 1, 8)))
    return session.take_step()


def test_restore_rewinds_the_position_without_refund_or_republication():
    session = session_for(summary())
    discovery = sample_discovery()
    assert session.checkpoint_storage_bytes(discovery) > 0
    initial = session.checkpoint(discovery)  # the fresh run is a valid boundary
    _run(session, 0)
    cp = session.checkpoint(discovery)
    assert (cp.prediction, cp.has_step) == (0, True)
    _run(session, 1)
    spent = session.cumulative_usage()
    session.restore(cp)
    assert session.take_step() is None
    assert session.cumulative_usage() == spent
    assert session.next_prediction == 1
    _run(session, 1)  # a repeated step adds to the usage
    assert session.cumulative_usage().captures == spent.captures + 1
    session.restore(initial)
    assert session.next_prediction == 0


def test_records_gate_checkpoint_and_restore():
    session = session_for(summary())
    discovery = sample_discovery()
    cp = session.checkpoint(discovery)
    session.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match="undelivered"):
        session.checkpoint(discovery)
    with pytest.raises(CaptureSessionError, match="undelivered"):
        session.validate_restore(cp)
    with pytest.raises(CaptureSessionError, match="undelivered"):
        session.restore(cp)
    session.take_step()
    session.validate_restore(cp)


def test_a_failed_step_must_still_be_drained_and_cannot_be_a_checkpoint():
    session = session_for(summary())
    session.begin_step(PREFILL, 0)
    with pytest.raises(InvalidArgumentError):
        session.observe(CountingBackend(), "blocks.0.mlp", MockTensor((2, 2)))
    cp_before = None
    with pytest.raises(CaptureSessionError):
        session.checkpoint(sample_discovery())
    session.take_step()
    with pytest.raises(CaptureSessionError, match="did not complete"):
        session.checkpoint(sample_discovery())
    assert cp_before is None


def test_source_identity_gates_checkpoint_and_restore():
    session = session_for(summary())
    other = session_for(summary())
    with pytest.raises(CaptureSessionError, match="mismatch"):
        session.checkpoint(sample_discovery("another-model"))
    shrunk = CaptureDiscovery("machine-artifact", [ObservationPoint("blocks.1.mlp", [Axis("d", 8)])])
    with pytest.raises(CaptureSessionError, match="mismatch"):
        session.checkpoint(shrunk)
    with pytest.raises(CaptureSessionError, match="another capture session"):
        session.restore(other.checkpoint(sample_discovery()))


def test_prepare_restore_holds_the_session_and_dropping_it_changes_nothing():
    session = session_for(summary())
    discovery = sample_discovery()
    cp = session.checkpoint(discovery)
    _run(session, 0)
    prepared = session.prepare_restore(cp)
    with pytest.raises(CaptureSessionError, match="prepared restore"):
        session.begin_step(DECODE, 1)
    del prepared
    assert session.next_prediction == 1
    with session.prepare_restore(cp) as held:
        assert held.holding
    assert not held.holding and not held.committed  # leaving without commit changes nothing
    assert session.next_prediction == 1
    prepared = session.prepare_restore(cp)
    prepared.commit()
    prepared.commit()  # cannot fail
    assert prepared.committed and session.next_prediction == 0


def test_forks_inherit_usage_and_recheck_future_geometry():
    discovery = CaptureDiscovery("m", [ObservationPoint("kv", [Axis("ctx", "context")])])
    sel = CaptureSelection("s", "kv", CaptureTransform.summary(), slices=[CaptureSlice("ctx", 0, 5)],
                           schedule=CaptureSchedule(prefill=False, first_prediction=1))
    session = session_for(sel, discovery=discovery, request=CaptureRequest(1, 4, 3))
    session.begin_step(PREFILL, 0)
    session.take_step()
    session.begin_step(DECODE, 1)
    session.observe(NumpyBackend(), "kv", np.zeros(5, np.float32))
    session.take_step()
    child = session.fork(discovery)
    assert child.cumulative_usage() == session.cumulative_usage()
    assert child.next_prediction == 2 and child.plan.identity != ""
    child.begin_step(DECODE, 2)
    child.observe(NumpyBackend(), "kv", np.zeros(6, np.float32))
    child.take_step()
    assert child.cumulative_usage().captures == 2 and session.cumulative_usage().captures == 1
    with pytest.raises(AdmissionError):
        session.fork(sample_discovery())  # another artifact
    # Tighter child limits that the inherited usage already exceeds are refused.
    small = CaptureUsage(0, BIG, BIG, BIG)
    # Named as the inherited usage (before: "capture envelopes exceed the cumulative limit").
    with pytest.raises(AdmissionError, match=r"the usage the run inherits \(1\) already exceeds the cumulative "
                                             r"limit \(0\): captures"):
        session.fork(discovery, limits=CaptureLimits(per_step=CaptureUsage(BIG, BIG, BIG, BIG), cumulative=small))
    with pytest.raises(AdmissionError):
        session.fork(discovery, limits=CaptureLimits(per_step=small, cumulative=small))
    # A max_predictions that leaves the fork no prediction to take is refused at the fork (it
    # was accepted, and the fork's first begin_step refused it).
    for ceiling in (1, 2):
        with pytest.raises(AdmissionError, match=f"max_predictions {ceiling} leaves no prediction to take"):
            session.fork(discovery, max_predictions=ceiling)
    assert session.fork(discovery, max_predictions=3).next_prediction == 2


def test_concurrent_use_is_refused_not_deadlocked():
    session = session_for(summary())
    errors = []

    class Reentrant(CountingBackend):
        def shape(self, tensor):
            try:
                session.take_step()
            except CaptureSessionError as e:
                errors.append(str(e))
            return super().shape(tensor)

    session.begin_step(PREFILL, 0)
    session.observe(Reentrant(), "blocks.0.mlp", MockTensor(HIDDEN))
    assert errors and "in use" in errors[0]
    assert session.take_step().records[0].outcome == CaptureOutcome.CAPTURED

    results = []

    def worker():
        s = session_for(summary())
        for p in range(4):
            _run(s, p)
        results.append(s.cumulative_usage().captures)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [4, 4, 4, 4]


def test_summaries_skip_non_finite_values_and_count_them():
    session = session_for(summary())
    x = np.arange(32, dtype=np.float32).reshape(HIDDEN)
    x[0, 0, :3] = [np.nan, np.inf, -np.inf]
    session.begin_step(PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0.mlp", x)
    payload = session.take_step().records[0].payload
    assert (payload.count, payload.nonfinite, payload.min, payload.max) == (32, 3, 3.0, 31.0)


def test_non_finite_payload_values_encode_as_strings_that_tell_them_apart():
    # JSON has no NaN or infinity: each is written as the string of its name, so an overflow
    # and an invalid operation stay apart (both were null), within the charged bytes.
    session = session_for(CaptureSelection("f", "blocks.0.mlp", CaptureTransform.full_tensor(),
                                           schedule=CaptureSchedule(decode=False)))
    x = np.zeros(HIDDEN, np.float32)
    x[0, 0, :3] = [np.nan, np.inf, -np.inf]
    session.begin_step(PREFILL, 0)
    session.observe(NumpyBackend(), "blocks.0.mlp", x)
    record = session.take_step().records[0]
    decoded = json.loads(record.to_json())  # standard JSON: no bare NaN or Infinity tokens
    assert decoded["payload"]["values"][:4] == ["NaN", "Infinity", "-Infinity", 0]
    assert len(record.to_json()) <= record.charged.encoded_bytes
    strict = json.loads(record.to_json(), parse_constant=lambda name: pytest.fail(f"bare {name} in the JSON"))
    assert strict == decoded


def test_capture_step_always_drains_the_records():
    from lifecore.capture import capture_step

    session = session_for(summary())
    with capture_step(session, 0) as result:
        session.observe(CountingBackend(), "blocks.0.mlp", MockTensor(HIDDEN))
    assert result.step.records[0].outcome == CaptureOutcome.CAPTURED
    with pytest.raises(RuntimeError):
        with capture_step(session, 1) as result:
            raise RuntimeError("the forward failed")
    assert result.step.records[0].outcome == CaptureOutcome.MISSING
    assert not session.step_pending


# -- the physical native byte limit at run time ------------------------------------------------
@pytest.mark.parametrize("on_limit", [OnLimit.FAIL, OnLimit.SKIP])
def test_the_physical_native_limit_refuses_a_capture_at_run_time_and_charges_nothing(on_limit):
    from lifecore.capture import BackendCapabilities

    discovery = CaptureDiscovery("artifact", sample_discovery().catalog, BackendCapabilities(physical_native_limit=True))
    # A full tensor holds its copy and NATIVE_OVERHEAD: [1, 4, 8] in prefill is 32 elements (128
    # native bytes at 4 per element, and the overhead); decode is 8 (32, and the overhead).
    from lifecore.capture.backends.cost import NATIVE_OVERHEAD
    limits = CaptureLimits(per_step=CaptureUsage(BIG, BIG, BIG, BIG), cumulative=CaptureUsage(BIG, BIG, BIG, BIG),
                           on_limit=on_limit, physical_native_bytes=NATIVE_OVERHEAD + 64)
    session = session_for(CaptureSelection("full", "blocks.0.mlp", CaptureTransform.full_tensor()), limits=limits,
                          discovery=discovery)
    backend = CountingBackend()
    session.begin_step(PREFILL, 0)
    envelope = session.step_usage()
    if on_limit == OnLimit.FAIL:
        with pytest.raises(BudgetExceededError, match="physical native") as raised:
            session.observe(backend, "blocks.0.mlp", MockTensor(HIDDEN))
        assert raised.value.budget == "physical_native_bytes" and raised.value.cumulative is False
    else:
        session.observe(backend, "blocks.0.mlp", MockTensor(HIDDEN))
    assert backend.count("transform") == 0 and session.step_usage() == envelope  # nothing beyond the envelope
    record = session.take_step().record("full")
    want = CaptureOutcome.FAILED if on_limit == OnLimit.FAIL else CaptureOutcome.SKIPPED
    assert record.outcome == want and record.budget == "physical_native_bytes" and record.payload is None
    # A region under the limit is captured.
    session.begin_step(DECODE, 1)
    session.observe(backend, "blocks.0.mlp", MockTensor((1, 1, 8)))
    assert session.take_step().record("full").outcome == CaptureOutcome.CAPTURED


def test_a_backend_that_cannot_report_native_bytes_fails_under_a_physical_limit():
    from lifecore.capture import BackendCapabilities

    class NoNative(CountingBackend):
        native_bytes = None

    discovery = CaptureDiscovery("artifact", sample_discovery().catalog, BackendCapabilities(physical_native_limit=True))
    limits = CaptureLimits(per_step=CaptureUsage(BIG, BIG, BIG, BIG), cumulative=CaptureUsage(BIG, BIG, BIG, BIG),
                           physical_native_bytes=10**6)
    session = session_for(summary(), limits=limits, discovery=discovery)
    backend = NoNative()
    session.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match="native"):
        session.observe(backend, "blocks.0.mlp", MockTensor(HIDDEN))
    assert backend.count("transform") == 0
    assert session.take_step().record("s").fail_reason == "native"


def test_a_wrongly_shaped_observation_says_its_record_failed_and_a_retry_is_a_second_observation():
    session = session_for(summary())
    session.begin_step(PREFILL, 0)
    with pytest.raises(InvalidArgumentError, match=r"has extent 5, expected 8 at blocks\.0\.mlp \(the record of "
                                                   r"selection 's' is FAILED for this step"):
        session.observe(NumpyBackend(), "blocks.0.mlp", np.zeros((1, 4, 5), np.float32))
    with pytest.raises(CaptureSessionError, match=r"emitted twice at blocks\.0\.mlp \(selection 's' is already "
                                                  r"FAILED this step\)"):
        session.observe(NumpyBackend(), "blocks.0.mlp", np.zeros(HIDDEN, np.float32))
    assert session.take_step().record("s").outcome == CaptureOutcome.FAILED


def test_a_wrongly_shaped_observation_names_every_record_it_failed():
    # Before: "the record of selection 's' is FAILED", with 't' FAILED too.
    session = session_for(summary(), CaptureSelection("t", "blocks.0.mlp", CaptureTransform.full_tensor()),
                          CaptureSelection("u", "blocks.0.mlp", CaptureTransform.preview(4)))
    session.begin_step(PREFILL, 0)
    with pytest.raises(InvalidArgumentError, match=r"expected 8 at blocks\.0\.mlp \(the records of selections 's', "
                                                   r"'t' and 'u' are FAILED for this step"):
        session.observe(NumpyBackend(), "blocks.0.mlp", np.zeros((1, 4, 5), np.float32))
    assert [r.outcome for r in session.take_step().records] == [CaptureOutcome.FAILED] * 3


def test_a_refusal_names_a_record_failed_by_a_limit_beside_one_failed_by_the_tensor():
    # Before: a limit's failure said nothing of the invalid record failed in the same call, and
    # an invalid one named only itself.
    limits = CaptureLimits(per_step=CaptureUsage(BIG, 16, BIG, BIG), cumulative=CaptureUsage(BIG, BIG, BIG, BIG))
    for first, second, error, words in (
            ("t", "s", BudgetExceededError, r"per-step limit exceeded: retained_bytes \(selection 't' at blocks\.0\.mlp\) "
                                            r"\(the records of selections 't' and 's' are FAILED"),
            ("s", "t", InvalidArgumentError, r"\(the records of selections 's' and 't' are FAILED")):
        discovery = CaptureDiscovery("m", [ObservationPoint("blocks.0.mlp", [Axis("a", "unknown")])])
        selections = {"s": CaptureSelection("s", "blocks.0.mlp", CaptureTransform.slice(),
                                            slices=[CaptureSlice("a", 0, 12)]),
                      "t": CaptureSelection("t", "blocks.0.mlp", CaptureTransform.full_tensor())}
        session = session_for(selections[first], selections[second], limits=limits, discovery=discovery)
        session.begin_step(PREFILL, 0)
        with pytest.raises(error, match=words):
            session.observe(NumpyBackend(), "blocks.0.mlp", np.zeros(8, np.float32))  # 32 bytes, 8 < 12
        assert [r.outcome for r in session.take_step().records] == [CaptureOutcome.FAILED] * 2


def test_an_axis_name_repeated_at_a_point_is_refused():
    # Before: accepted; admission checked a slice against both axes and the capture sliced one.
    with pytest.raises(InvalidArgumentError, match=r"^ObservationPoint: axis name 'a' appears twice at p \(axes 0 "
                                                   r"and 2; a slice names its axis\)$"):
        ObservationPoint("p", [Axis("a", 3), Axis("b", 2), Axis("a", 3)])


@pytest.mark.parametrize("on_limit", [OnLimit.SKIP, OnLimit.FAIL])
def test_an_estimate_past_64_bits_is_refused_as_a_limit(on_limit):
    # Before: payload_cost raised LifecoreOverflowError, which failed the record as a native
    # failure whatever on_limit said; the README says a size past 64 bits is refused like any
    # other limit (skipped under "skip").
    usage = payload_cost(CaptureTransform.summary().kind, [2**62, 4], 4)
    assert usage.host_bytes == 2**64 - 1 and usage.retained_bytes == 48
    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("a", "unknown"), Axis("b", "unknown")])])
    plan = CapturePlan([CaptureSelection("s", "p", CaptureTransform.summary())], unlimited(on_limit))
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 1, 1)))
    session.begin_step(PREFILL, 0)
    if on_limit == OnLimit.SKIP:
        session.observe(CountingBackend(), "p", MockTensor((2**62, 4)))
    else:
        with pytest.raises(BudgetExceededError, match="host"):
            session.observe(CountingBackend(), "p", MockTensor((2**62, 4)))
    record = session.take_step().record("s")
    assert record.outcome == (CaptureOutcome.SKIPPED if on_limit == OnLimit.SKIP else CaptureOutcome.FAILED)
    assert record.budget == "host_bytes"


def test_a_capture_refusal_names_the_call_that_refused():
    """The core's capture refusals are the seed's sentences, which name no call: the message
    starts with the lifecore call the caller made."""
    session = session_for(summary())
    session.begin_step(PREFILL, 0)
    with pytest.raises(CaptureSessionError, match=r"^CaptureSession\.begin_step: previous capture step has not been "
                                                  r"consumed$"):
        session.begin_step(DECODE, 1)
    step = session.take_step()
    with pytest.raises(InvalidArgumentError, match=r"^CapturedStep\.record: no record for selection 'zz'"):
        step.record("zz")
    with pytest.raises(InvalidArgumentError, match=r"^CaptureSession\.begin_step: prediction 9 is beyond"):
        session.begin_step(DECODE, 9)
    with pytest.raises(InvalidArgumentError, match=r"^Axis: unknown symbolic axis size 'nope'"):
        Axis("b", "nope")
    with pytest.raises(InvalidArgumentError, match=r"^CaptureDiscovery: duplicate observation path a$"):
        CaptureDiscovery("m", [ObservationPoint("a"), ObservationPoint("a")])
    with pytest.raises(AdmissionError, match=r"^CapturePlan\.admit: selection 's' names unknown observation path"):
        CapturePlan([summary(path="zz")], unlimited()).admit(sample_discovery(), CaptureRequest(1, 4, 4))
    # One already named keeps its name.
    with pytest.raises(CaptureSessionError, match=r"^observe at blocks\.0\.mlp: no capture step is open"):
        session.observe(NumpyBackend(), "blocks.0.mlp", np.zeros(HIDDEN, np.float32))
