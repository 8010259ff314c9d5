"""What capture records, against values computed here: the torch and NumPy backends give the
same top candidates, summaries and interventions for the same input (what a review of the
numbers found them to disagree on)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from lifecore.capture import (Axis, CaptureDiscovery, CapturePhase, CapturePlan, CaptureRequest,  # noqa: E402
                              CaptureSelection, CaptureSession, CaptureTransform, InterventionPlan, NumpyBackend,
                              ObservationPoint, interventions, unlimited)
from lifecore.capture.backends import torch_backend  # noqa: E402
from lifecore.torch import TorchBackend  # noqa: E402

NAN, INF = float("nan"), float("inf")


def captured(backend, values, transform, meaning="activation"):
    """The payload of ``transform`` over a 1-row region holding ``values``."""
    width = values.shape[-1]
    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("d", width)], meaning=meaning)])
    plan = CapturePlan([CaptureSelection("s", "p", transform)], unlimited())
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 1, 1)))
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(backend, "p", values)
    (record,) = session.take_step().records
    return record.payload


def intervened(backend, values, operation):
    discovery = CaptureDiscovery("m", [ObservationPoint("a", [Axis("d", values.shape[0])])])
    session = CaptureSession(CapturePlan([], unlimited()).admit(discovery, CaptureRequest(1, 1, 1)))
    session.enable_interventions(InterventionPlan([operation]).admit(discovery, session), backend)
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(backend, "a", values)  # the hook observes first
    out = session.intervene(backend, "a", values)
    session.finish_interventions()
    session.take_step()
    return out


@pytest.mark.parametrize("row, expected", [
    ([1, 3, 3, 2, 3, 3, -1, 3], [1, 2, 4]),  # ties in index order
    ([0.5] * 6, [0, 1, 2]),
    ([NAN, -INF, 1, NAN, -INF], [2, 1, 4]),  # a NaN below -inf
    ([NAN, NAN, NAN, 2.0], [3, 0, 1]),
])
def test_top_candidates_rank_ties_and_nan_alike_on_both_backends(row, expected) -> None:
    # torch.topk gave ties in no set order and let a NaN outrank -inf: [4, 7, 5] for the first row.
    transform = CaptureTransform.top_candidates(3)
    for dtype in ("float32", "float64"):
        numpy_payload = captured(NumpyBackend(), np.array(row, dtype=dtype), transform, "logits")
        torch_payload = captured(TorchBackend(), torch.tensor(row, dtype=getattr(torch, dtype)), transform, "logits")
        assert list(numpy_payload.candidate_ids) == list(torch_payload.candidate_ids) == expected
        np.testing.assert_array_equal(np.asarray(numpy_payload.scores), np.asarray(torch_payload.scores))


@pytest.mark.parametrize("dtype, values", [
    ("int32", [100_000_001, 100_000_003, 100_000_005, 100_000_007]),
    ("int32", [2**31 - 1, 5, -7, 16_777_217]),
    ("int64", [2**40 + 3, 2**40 + 1, 7, 123_456_789]),
])
def test_an_integer_tensor_is_summarized_exactly_on_torch(dtype, values) -> None:
    # Summarized in float32, 2**31 - 1 read as 2**31 and 1e8 + 1 as 1e8.
    exact = np.array(values, dtype=np.float64)
    torch_payload = captured(TorchBackend(), torch.tensor(values, dtype=getattr(torch, dtype)),
                             CaptureTransform.summary())
    numpy_payload = captured(NumpyBackend(), np.array(values, dtype=dtype), CaptureTransform.summary())
    for payload in (torch_payload, numpy_payload):
        summary = payload.summary
        assert (summary.min, summary.max) == (exact.min(), exact.max())
        assert summary.mean == pytest.approx(exact.mean(), rel=1e-15)
        assert summary.std == pytest.approx(exact.std(), rel=1e-12)


@pytest.mark.parametrize("factor", [0.1, 1 / 3, 7.25])
def test_a_float16_scale_is_rounded_once_alike_on_both_backends(factor) -> None:
    # NumPy's backend multiplied by the factor rounded to float16 first: one unit off on a third
    # of the values, where torch's was correctly rounded.
    x = (np.arange(1, 257, dtype=np.float64) * 0.37).astype(np.float16)
    expected = (x.astype(np.float32) * np.float32(factor)).astype(np.float16)
    operation = interventions.scale("s", "a", factor)
    np.testing.assert_array_equal(intervened(NumpyBackend(), x.copy(), operation), expected)
    np.testing.assert_array_equal(intervened(TorchBackend(), torch.from_numpy(x.copy()), operation).numpy(), expected)


def test_a_half_precision_payload_is_rounded_once_on_torch() -> None:
    # torch went float64 -> float32 -> float16: 1 + 2**-11 + 2**-40 became 1.0, and 65519.999
    # became inf (the operation failed where NumPy's backend wrote 65504).
    payload = [1 + 2**-11 + 2**-40, 65519.999]
    correct = np.asarray(payload, dtype=np.float64).astype(np.float16)
    operation = interventions.replace("r", "a", payload)
    out = intervened(TorchBackend(), torch.zeros(2, dtype=torch.float16), operation)
    np.testing.assert_array_equal(out.numpy(), correct)
    np.testing.assert_array_equal(intervened(NumpyBackend(), np.zeros(2, np.float16), operation), correct)
    # bfloat16 (7 fraction bits): just above the midpoint of 1 and 1 + 2**-7 rounds up; through
    # float32 it became the midpoint itself, which rounds to even: 1.0.
    out = intervened(TorchBackend(), torch.zeros(1, dtype=torch.bfloat16),
                     interventions.replace("b", "a", [1 + 2**-8 + 2**-30]))
    assert float(out[0]) == 1 + 2**-7


def _rows(seed: int, count: int = 200):
    """Rows full of ties, NaN and infinities: values drawn from a handful so most rows tie."""
    rng = np.random.default_rng(seed)
    pool = np.array([NAN, -INF, INF, -2.0, -0.5, 0.0, 0.5, 3.0])
    for _ in range(count):
        yield pool[rng.integers(0, len(pool), size=int(rng.integers(1, 12)))]


@pytest.mark.parametrize("path", ["host reads", "device only"])
def test_top_candidates_agree_with_a_stable_ranking_on_random_rows(path, monkeypatch) -> None:
    # On a device the torch backend ranks without reading anything back (masks, ranks and a
    # scatter); on the CPU it reads the k-th score and the masks' sizes. Both must give exactly
    # what a stable sort with NaN last gives; the device's way is run here on the CPU.
    if path == "device only":
        monkeypatch.setattr(torch_backend, "_chosen_reading_sizes",
                            lambda last, nan, key, kth, count: torch_backend._chosen_on_device(nan, key, kth, count))
    checked = 0
    for row in _rows(7):
        for count in {1, (len(row) + 1) // 2, len(row)}:
            ranked = sorted(range(len(row)), key=lambda i: (np.isnan(row[i]), 0 if np.isnan(row[i]) else -row[i], i))
            expected = ranked[:count]
            transform = CaptureTransform.top_candidates(count)
            torch_payload = captured(TorchBackend(), torch.from_numpy(row.copy()), transform, "logits")
            numpy_payload = captured(NumpyBackend(), row.copy(), transform, "logits")
            assert list(torch_payload.candidate_ids) == list(numpy_payload.candidate_ids) == expected, row
            np.testing.assert_array_equal(np.asarray(torch_payload.scores), row[expected])
            checked += 1
    assert checked > 400



@pytest.mark.parametrize("path", ["host reads", "device only"])
def test_top_candidates_keep_index_order_among_many_ties(path, monkeypatch) -> None:
    # torch's default sort keeps equal keys in order only while a row is short (16 values on the
    # CPU): rows of 40 from four values, cut at 20, 33 and 40, need the stable sorts.
    if path == "device only":
        monkeypatch.setattr(torch_backend, "_chosen_reading_sizes",
                            lambda last, nan, key, kth, count: torch_backend._chosen_on_device(nan, key, kth, count))
    rng = np.random.default_rng(3)
    pool = np.array([NAN, -INF, 0.5, 3.0])
    for _ in range(20):
        row = pool[rng.integers(0, len(pool), size=40)]
        ranked = sorted(range(len(row)), key=lambda i: (np.isnan(row[i]), 0 if np.isnan(row[i]) else -row[i], i))
        for count in (20, 33, 40):
            transform = CaptureTransform.top_candidates(count)
            torch_payload = captured(TorchBackend(), torch.from_numpy(row.copy()), transform, "logits")
            numpy_payload = captured(NumpyBackend(), row.copy(), transform, "logits")
            assert list(torch_payload.candidate_ids) == list(numpy_payload.candidate_ids) == ranked[:count], row


def test_top_candidates_on_the_cpu_read_the_masks_sizes(monkeypatch) -> None:
    # On the CPU the host-read path is the fast one (the device's way costs about 3x there).
    def forbidden(*args):
        raise AssertionError("the device's way ran on the CPU")

    monkeypatch.setattr(torch_backend, "_chosen_on_device", forbidden)
    payload = captured(TorchBackend(), torch.tensor([1.0, 3.0, 2.0]), CaptureTransform.top_candidates(2), "logits")
    assert list(payload.candidate_ids) == [1, 2]

def test_histograms_agree_with_counts_computed_here_on_random_rows() -> None:
    # Values outside the edges and NaN are not counted; the last bin is closed.
    edges = [-2.0, -0.5, 0.0, 0.5, 3.0]
    for row in _rows(11):
        expected = [0] * (len(edges) - 1)
        for v in row:
            if edges[0] <= v <= edges[-1]:
                expected[min(int(np.searchsorted(edges, v, side="right")) - 1, len(edges) - 2)] += 1
        transform = CaptureTransform.histogram(edges)
        for backend, values in ((TorchBackend(), torch.from_numpy(row.copy())), (NumpyBackend(), row.copy())):
            assert list(captured(backend, values, transform).histogram.counts) == expected, (backend, row)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_top_candidates_and_histograms_on_cuda_wait_for_the_device_once() -> None:
    # On a device the ranking and the counts stay there: only the result's copy to the host
    # waits (a histogram's edges may also go up from the host). Results match the CPU's.
    import warnings

    class Request:
        def __init__(self, **fields) -> None:
            self.__dict__.update(fields)

    top, histogram = Request(count=5), Request(edges=[-2.0, -0.5, 0.0, 0.5, 3.0])
    for row in _rows(5, count=40):
        if len(row) < top.count:
            continue
        on_cpu, on_cuda = torch.from_numpy(row.copy()), torch.from_numpy(row.copy()).cuda()
        torch.cuda.synchronize()
        for transform, request, limit, fields in ((torch_backend._top_candidates, top, 1, ("candidate_ids", "scores")),
                                                  (torch_backend._histogram, histogram, 2, ("counts",))):
            torch.cuda.set_sync_debug_mode("warn")
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    device_payload = transform(on_cuda, request)
            finally:
                torch.cuda.set_sync_debug_mode("default")
            waits = [w for w in caught if "synchroniz" in str(w.message)]
            assert len(waits) <= limit, (transform.__name__, [str(w.message) for w in waits])
            host_payload = transform(on_cpu, request)
            for field in fields:
                assert np.array_equal(np.asarray(getattr(device_payload, field)),
                                      np.asarray(getattr(host_payload, field)), equal_nan=field == "scores")


def exact_statistics(values: list[int]) -> tuple[float, float, float, float]:
    """min, max, mean and population std of integers, computed in fractions and rounded once."""
    from fractions import Fraction
    from math import sqrt

    mean = Fraction(sum(values), len(values))
    variance = sum((Fraction(v) - mean) ** 2 for v in values) / len(values)
    return float(min(values)), float(max(values)), float(mean), sqrt(variance)


INTEGER_ROWS = [
    (np.int64, [2**60 + i for i in range(20)]),  # past 2**53: float64 merged them (std 0)
    (np.int64, [-(2**63), 2**63 - 1, 0]),  # a spread past 2**63
    (np.int64, [-(10**12), 10**12, 7]),  # a mean near zero beside a far minimum: no cancellation
    (np.int32, [-(2**31), 2**31 - 1, 3]),
    (np.int64, [-(2**60), 3, 2**60, 5, 7]),  # differences past 2**53: their float64 sum lost the 3
    (np.int64, [-(2**62) + 1, 1, 2**62]),
    (np.int8, [-128, 127, 5, 5]),  # a difference past int8's own range
    (np.uint64, [2**64 - 1, 2**64 - 2, 2**63, 3]),
    (np.uint8, [255, 0, 255, 7]),
    (np.bool_, [True, False, True, True]),
]


@pytest.mark.parametrize("dtype, row", INTEGER_ROWS)
def test_integer_summaries_and_top_candidates_are_exact_past_float64s_integers(dtype, row) -> None:
    """Both backends reduced integers in float64: 2**60 + i for i < 20 gave std 0 and top
    candidates [0, 1, 2] (all ties) where the best are [19, 18, 17]."""
    values = np.array(row, dtype=dtype)
    as_ints = [int(v) for v in row]
    expected_ids = sorted(range(len(as_ints)), key=lambda i: (-as_ints[i], i))[:3]
    low, high, mean, std = exact_statistics(as_ints)
    torch_values = torch.tensor(as_ints, dtype=torch.uint64) if dtype is np.uint64 else torch.from_numpy(values.copy())
    for backend, given in ((NumpyBackend(), values), (TorchBackend(), torch_values)):
        summary = captured(backend, given, CaptureTransform.summary()).summary
        assert (summary.count, summary.nonfinite, summary.min, summary.max) == (len(row), 0, low, high), backend
        # The mean rounded once from the exact one; past a spread of 2**63 (the widest row, whose
        # mean of -1/3 is below float64's rounding of its values) to float64's rounding of it.
        if high - low < 2**63:
            assert summary.mean == mean, backend
        else:
            assert summary.mean == pytest.approx(mean, abs=1e-12 * (high - low)), backend
        assert summary.std == pytest.approx(std, rel=1e-12, abs=1e-12 * max(high - low, 1.0)), backend
        candidates = captured(backend, given, CaptureTransform.top_candidates(3), "logits").candidates
        assert candidates.ids.tolist() == expected_ids, backend
        assert candidates.scores.tolist() == [float(as_ints[i]) for i in expected_ids], backend
