"""Admission: every refused rule, identities, and admitted plans that cannot be forged."""

from __future__ import annotations

import copy
import pickle

import pytest

from lifecore.capture import (
    AdmittedCapturePlan,
    Axis,
    BackendCapabilities,
    CaptureDiscovery,
    CaptureLimits,
    CapturePlan,
    CaptureRequest,
    CaptureSchedule,
    CaptureSelection,
    CaptureSession,
    CaptureSlice,
    CaptureTransform,
    CaptureUsage,
    ObservationPoint,
    PhaseSupport,
    TransformKind,
    unlimited,
)
from lifecore.errors import AdmissionError, InvalidArgumentError, LifecoreTypeError
from lifecore.testing.capture_session import sample_discovery

from capture_builders import REQUEST, admit


def test_a_valid_plan_is_admitted_with_a_stable_sha256_identity():
    a = admit(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()))
    b = admit(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()))
    c = admit(CaptureSelection("s", "blocks.1.mlp", CaptureTransform.summary()))
    assert len(a.identity) == 64 and int(a.identity, 16) >= 0
    assert a.identity == b.identity != c.identity
    assert [p.path for p in a.points] == ["blocks.0.mlp"]


def test_identity_depends_on_the_request_and_the_artifact():
    sel = CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary())
    base = admit(sel).identity
    assert admit(sel, request=CaptureRequest(1, 4, 4)).identity != base
    assert admit(sel, discovery=sample_discovery("other-model")).identity != base


def _refused_selections():
    """Built per test, so no bound object outlives the run."""
    return [
        (CaptureSelection("s", "no.such.point", CaptureTransform.summary()),
         "selection 's' names unknown observation path 'no.such.point'"),
        (CaptureSelection("", "blocks.0.mlp", CaptureTransform.summary()), "empty"),
        (CaptureSelection("s", "blocks.0.mlp", CaptureTransform.slice()), "no slices"),
        (CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary(), slices=[CaptureSlice("nope", 0, 1)]),
         "unknown slice axis 'nope' at blocks.0.mlp \\(its axes: 'batch', 'seq', 'd'\\)"),
        (CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary(),
                          slices=[CaptureSlice("d", 0, 2), CaptureSlice("d", 2, 4)]), "repeated slice axis"),
        (CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary(), slices=[CaptureSlice("d", 0, 9)]),
         "exceeds its extent"),
        (CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary(), slices=[CaptureSlice("d", 0, 4, 0)]),
         "stride"),
        (CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary(), slices=[CaptureSlice("d", 4, 4)]),
         "empty slice"),
        (CaptureSelection("s", "blocks.0.mlp", CaptureTransform.histogram([0.0, 0.0, 1.0])), "strictly increasing"),
        (CaptureSelection("s", "blocks.0.mlp", CaptureTransform.histogram([0.0, float("inf")])), "finite"),
        (CaptureSelection("s", "blocks.0.mlp", CaptureTransform.histogram([0.0])), "two edges"),
        (CaptureSelection("s", "blocks.0.mlp", CaptureTransform.preview(0)), "max_elements"),
        (CaptureSelection("s", "blocks.0.mlp", CaptureTransform.top_candidates(3)), "logits"),
        (CaptureSelection("s", "logits", CaptureTransform.top_candidates(17)),
         "exceed the vocabulary: 17 asked, but the last axis 'vocab' holds 16"),
        (CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary(), schedule=CaptureSchedule(every=0)),
         "every"),
        (CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary(),
                          schedule=CaptureSchedule(first_prediction=2, end_prediction=2)), "ends before"),
    ]


@pytest.mark.parametrize("case", range(16))
def test_refused_selections_name_the_rule(case):
    selection, fragment = _refused_selections()[case]
    with pytest.raises(AdmissionError, match=fragment):
        admit(selection)


def test_duplicate_ids_are_refused():
    sel = CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary())
    with pytest.raises(AdmissionError, match="duplicate"):
        admit(sel, sel)


def test_top_candidates_need_batch_one():
    with pytest.raises(AdmissionError, match="batch 1"):
        admit(CaptureSelection("s", "logits", CaptureTransform.top_candidates(3)), request=CaptureRequest(2, 4, 3))


@pytest.mark.parametrize("support", [PhaseSupport.UNVERIFIED, PhaseSupport.CONDITIONAL, PhaseSupport.UNSUPPORTED])
def test_a_phase_that_is_not_supported_is_refused(support):
    point = ObservationPoint("p", [Axis("d", 4)], decode_support=support)
    discovery = CaptureDiscovery("m", [point])
    with pytest.raises(AdmissionError, match="decode"):
        admit(CaptureSelection("s", "p", CaptureTransform.summary()), discovery=discovery)
    # Prefill only is fine.
    admit(CaptureSelection("s", "p", CaptureTransform.summary(), schedule=CaptureSchedule(decode=False)),
          discovery=discovery)


def test_a_transform_the_backend_cannot_do_is_refused():
    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("d", 4)])],
                                 BackendCapabilities(transforms=[TransformKind.SUMMARY]))
    with pytest.raises(AdmissionError, match="unsupported"):
        admit(CaptureSelection("s", "p", CaptureTransform.preview(2)), discovery=discovery)


def test_too_many_histogram_bins_are_refused():
    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("d", 4)])], BackendCapabilities(max_histogram_bins=2))
    with pytest.raises(AdmissionError, match="too many bins"):
        admit(CaptureSelection("s", "p", CaptureTransform.histogram([0.0, 1.0, 2.0, 3.0])), discovery=discovery)


def test_known_extents_are_checked_at_the_last_scheduled_prediction():
    # context = prompt_tokens + prediction: a slice up to 6 fits at prediction 2, not at prediction 1.
    point = ObservationPoint("kv", [Axis("ctx", "context")])
    discovery = CaptureDiscovery("m", [point])
    sel = CaptureSelection("s", "kv", CaptureTransform.summary(), slices=[CaptureSlice("ctx", 0, 6)],
                           schedule=CaptureSchedule(prefill=False, first_prediction=2))
    admit(sel, discovery=discovery)
    early = CaptureSelection("s", "kv", CaptureTransform.summary(), slices=[CaptureSlice("ctx", 0, 6)],
                             schedule=CaptureSchedule(prefill=False, first_prediction=1))
    with pytest.raises(AdmissionError, match="extent"):
        admit(early, discovery=discovery)


def test_unknown_extents_are_left_to_run_time_not_treated_as_zero():
    point = ObservationPoint("img", [Axis("media", "media_positions")])
    discovery = CaptureDiscovery("m", [point])
    admit(CaptureSelection("s", "img", CaptureTransform.summary(), slices=[CaptureSlice("media", 0, 1000)]),
          discovery=discovery)


@pytest.mark.parametrize("request_args", [(0, 4, 3), (1, 0, 3), (1, 4, 0), (2**63, 2**62, 1)])
def test_bad_requests_are_refused(request_args):
    with pytest.raises(AdmissionError):
        admit(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()), request=CaptureRequest(*request_args))


def test_schema_mismatch_and_physical_limit_without_capability_are_refused():
    sel = CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary())
    with pytest.raises(AdmissionError, match="schema"):
        CapturePlan([sel], unlimited(), schema_version=2).admit(sample_discovery(), REQUEST)
    big = CaptureUsage(10**9, 10**9, 10**9, 10**9)
    limits = CaptureLimits(per_step=big, cumulative=big, physical_native_bytes=1 << 20)
    with pytest.raises(AdmissionError, match="physical"):
        admit(sel, limits=limits)


def test_static_preflight_refuses_envelopes_that_cannot_fit():
    sel = CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary())
    tiny = CaptureUsage(10, 10**6, 100, 100)
    with pytest.raises(AdmissionError, match="per-step"):
        admit(sel, limits=CaptureLimits(per_step=tiny, cumulative=CaptureUsage(10, 10**6, 10**6, 10**6)))
    step = CaptureUsage(10, 10**6, 10**6, 10**6)
    with pytest.raises(AdmissionError, match="cumulative"):
        admit(sel, limits=CaptureLimits(per_step=step, cumulative=CaptureUsage(10, 10**6, 1000, 3000)))


def test_the_none_plan_admits_with_zero_budgets():
    plan = CapturePlan.none()
    assert plan.selections == [] and plan.limits.cumulative == CaptureUsage()
    admitted = plan.admit(sample_discovery(), REQUEST)
    assert admitted.points == []


def test_admitted_plans_cannot_be_constructed_or_unpickled():
    admitted = admit(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()))
    with pytest.raises(TypeError):
        AdmittedCapturePlan()
    with pytest.raises(LifecoreTypeError, match="forge"):
        pickle.dumps(admitted)
    with pytest.raises(LifecoreTypeError):
        copy.deepcopy(admitted)
    forged = AdmittedCapturePlan.__new__(AdmittedCapturePlan)
    with pytest.warns(RuntimeWarning), pytest.raises(TypeError):
        CaptureSession(forged)


def test_bad_axis_sizes_and_duplicate_catalog_paths_are_invalid_arguments():
    with pytest.raises(InvalidArgumentError):
        Axis("d", "weird")
    with pytest.raises(InvalidArgumentError):
        Axis("d", -1)
    with pytest.raises(InvalidArgumentError, match="duplicate"):
        CaptureDiscovery("m", [ObservationPoint("p"), ObservationPoint("p")])


def test_a_session_readmits_its_plan_against_its_own_discovery():
    admitted = admit(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()))
    CaptureSession(admitted, sample_discovery())
    with pytest.raises(AdmissionError, match="does not match this session's catalog"):
        CaptureSession(admitted, sample_discovery("another-model"))


# -- known value costs in the preflight under "fail" -------------------------------------------
def _sized_discovery(itemsize=4, media=False):
    axes = [Axis("batch", "batch"), Axis("seq", "sequence"), Axis("d", 8)]
    if media:
        axes = [Axis("batch", "batch"), Axis("media", "media_positions"), Axis("d", 8)]
    return CaptureDiscovery("sized", [ObservationPoint("h", axes, itemsize=itemsize)])


def _limits(on_limit, per_step_captures=10, host=10**6, cumulative_captures=10**6):
    from lifecore.capture import OnLimit

    return CaptureLimits(per_step=CaptureUsage(per_step_captures, 10**6, host, 10**6),
                         cumulative=CaptureUsage(cumulative_captures, 10**7, 10**7, 10**7),
                         on_limit=OnLimit.FAIL if on_limit == "fail" else OnLimit.SKIP)


def test_known_value_costs_that_can_never_fit_under_fail_are_refused_at_admission():
    full = CaptureSelection("full", "h", CaptureTransform.full_tensor())
    # Prefill holds [1, 4, 8] float32: at least 128 host bytes; envelopes alone fit in 10**4.
    envelope_host = 512 + len("full") + 2 * len("h") + 128 * 3
    host = envelope_host + 100
    with pytest.raises(AdmissionError, match="on_limit=fail.*'full'.*host_bytes"):
        admit(full, limits=_limits("fail", host=host), discovery=_sized_discovery(), request=CaptureRequest(1, 4, 1))
    # The same plan under skip is admitted (a skip is recorded at run time instead).
    admit(full, limits=_limits("skip", host=host), discovery=_sized_discovery(), request=CaptureRequest(1, 4, 1))
    # Zero captures per step: no scheduled capture can ever succeed under fail.
    summary = CaptureSelection("s", "h", CaptureTransform.summary())
    with pytest.raises(AdmissionError, match="captures"):
        admit(summary, limits=_limits("fail", per_step_captures=0), discovery=_sized_discovery())
    # Two summaries fit one step each, but not together in the prefill step.
    twice = [summary, CaptureSelection("t", "h", CaptureTransform.summary())]
    with pytest.raises(AdmissionError, match="prefill"):
        admit(*twice, limits=_limits("fail", per_step_captures=1), discovery=_sized_discovery())
    # Every firing counts against the cumulative limit: 3 predictions, 2 captures allowed.
    with pytest.raises(AdmissionError, match="cumulative"):
        admit(summary, limits=_limits("fail", cumulative_captures=2), discovery=_sized_discovery(),
              request=CaptureRequest(1, 4, 3))
    admit(summary, limits=_limits("fail", cumulative_captures=3), discovery=_sized_discovery(),
          request=CaptureRequest(1, 4, 3))


def test_unknown_value_costs_are_left_to_run_time():
    full = CaptureSelection("full", "h", CaptureTransform.full_tensor())
    # Unknown itemsize, or an extent known only at run time: the preflight cannot know the cost.
    host = 512 + len("full") + 2 * len("h") + 128 * 3 + 100  # the envelope and 100 bytes
    admit(full, limits=_limits("fail", host=host), discovery=_sized_discovery(itemsize=0),
          request=CaptureRequest(1, 4, 1))
    admit(full, limits=_limits("fail", host=host), discovery=_sized_discovery(media=True),
          request=CaptureRequest(1, 4, 1))
    assert _sized_discovery(itemsize=2).catalog[0].itemsize == 2
