"""A backend's ``native_bytes`` bounds what its transform holds at once: the session refuses a
capture under ``physical_native_bytes`` from that answer, so an answer below the real peak
would let a capture past the limit. Measured here with tracemalloc around the NumPy backend's
own transforms, for every transform kind, float32 and float64, finite and not."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from lifecore.capture import (Axis, CaptureDiscovery, CapturePhase, CaptureRequest, CaptureSelection,
                              CaptureSlice, CaptureTransform, NumpyBackend, ObservationPoint, TransformKind)

from capture_builders import session_for


class _Measured:
    """NumpyBackend, measuring the peak of each transform (and summary short form) it runs
    beside what its native_bytes answers for the same request."""

    def __init__(self):
        self.inner, self.seen = NumpyBackend(), []

    def _measure(self, method, tensor, request):
        answered = self.inner.native_bytes(tensor, request)
        tracemalloc.start()
        try:
            result = getattr(self.inner, method)(tensor, request)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        self.seen.append((request.kind, peak, answered))
        return result

    def transform(self, tensor, request):
        return self._measure("transform", tensor, request)

    def summary_statistics(self, tensor, request):
        return self._measure("summary_statistics", tensor, request)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _captured(transform, tensor, path="h", slices=()):
    discovery = CaptureDiscovery("m", [
        ObservationPoint("h", [Axis(f"a{i}", None) for i in range(3)]),
        ObservationPoint("logits", [Axis("batch", "batch"), Axis("seq", "sequence"), Axis("vocab", None)],
                         meaning="logits"),
    ])
    backend = _Measured()
    session = session_for(CaptureSelection("s", path, transform, slices=list(slices)), discovery=discovery,
                          request=CaptureRequest(1, tensor.shape[1], 1))
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(backend, path, tensor)
    session.take_step()
    return backend.seen


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("finite", [True, False])
@pytest.mark.parametrize("kind", ["summary", "histogram", "full_tensor", "slice", "preview", "top_candidates"])
def test_native_bytes_bound_the_numpy_backends_peak(kind, dtype, finite):
    rng = np.random.default_rng(0)
    x = (rng.random((1, 200, 500)) * 10).astype(dtype)
    if not finite:
        x.ravel()[::7] = np.nan
    path, transform, slices = "h", None, ()
    if kind == "summary":
        transform = CaptureTransform.summary()
    elif kind == "histogram":
        transform = CaptureTransform.histogram([0.0, 1.0, 2.5, 5.0, 10.0])
    elif kind == "full_tensor":
        transform = CaptureTransform.full_tensor()
    elif kind == "slice":
        transform, slices = CaptureTransform.slice(), (CaptureSlice("a2", 1, 400, 3),)  # strided: copied
    elif kind == "preview":
        transform = CaptureTransform.preview(1000)
        x = x[:, :, ::2]  # flattening copies it first
    else:
        transform, path = CaptureTransform.top_candidates(8), "logits"
        x = x.reshape(1, 4, 25_000)
    seen = _captured(transform, x, path, slices)
    assert seen, "the backend ran no transform"
    for seen_kind, peak, answered in seen:
        assert peak <= answered, (seen_kind, peak, answered)
        # and not wildly above: a bound, not a refusal of everything
        assert answered <= 4 * max(peak, x.nbytes), (seen_kind, peak, answered)
