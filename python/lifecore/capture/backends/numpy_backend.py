"""The NumPy backend: slices, previews, summaries, histograms, top candidates, and the
activation interventions zero / scale / mask / replace / add / mask logits."""

from __future__ import annotations

from math import isfinite
from typing import Any

import numpy as np

from ..._core.capture import CapturePayload, CaptureUsage, InterventionAction, TransformKind, TransformRequest
from ...errors import InvalidArgumentError
from .arguments import require, require_intervention, require_transform
from .cost import NUMPY_REDUCTION_BYTES, native_peak, payload_cost
from .leading import first_elements


def dtype_class(dtype: np.dtype) -> str:
    """The session's dtype class of a NumPy dtype: "floating", "boolean", "integer" or "unknown"
    (by its kind: NumPy files timedelta64 under its integers, but its values are durations)."""
    return {"f": "floating", "b": "boolean", "i": "integer", "u": "integer"}.get(dtype.kind, "unknown")


def _numbers(values: np.ndarray, what: str) -> np.ndarray:
    """``values``, refused unless real numbers (bool, integer or floating): a reduction in
    float64 would keep only a complex value's real part (a tensor payload refuses complex
    values too), and would read strings as the numbers they spell and datetimes as counts."""
    if np.iscomplexobj(values):
        raise InvalidArgumentError(f"NumpyBackend: a {what} of complex values ({values.dtype}) would drop their "
                                   f"imaginary part; observe their real and imaginary parts (.real, .imag) instead")
    if dtype_class(values.dtype) == "unknown":
        raise InvalidArgumentError(f"NumpyBackend: a {what} of {values.dtype} values is not a {what} of numbers; "
                                   f"observe bool, integer or floating values")
    if values.dtype.kind == "f" and values.dtype.itemsize > 8:
        # Reduced in float64, a value past its range would read as inf (and be counted as not
        # finite): refused, as a tensor payload of it is.
        raise InvalidArgumentError(f"NumpyBackend: a {what} of {values.dtype} values would be read in float64, whose "
                                   f"range is smaller (values past 1.8e308 would read as inf); cast them to float64 "
                                   f"first")
    return values


def _integer_statistics(values: np.ndarray) -> list[float]:
    """[min, max, mean, population std] of integers (or bools), not empty, in float64: min and
    max read in integers (each then rounded once); the mean from the exact integer sum of the
    differences from an integer near it (each difference split in two 32-bit halves, whose
    sums fit int64 below 2**31 values), rounded once; the std of those differences in float64
    (float64 values past 2**53 round neighbours together: std 0 for 2**60 + i)."""
    # Widened first: int8's -128 less 127 wraps in int8.
    flat = values.ravel().astype(np.uint64 if values.dtype.kind == "u" else np.int64)
    low, high = int(flat.min()), int(flat.max())
    count = int(flat.size)
    if high - low >= 2**63 or count >= 2**31:  # float64's rounding is far below a spread past 2**63
        wide = flat.astype(np.float64)
        return [float(low), float(high), float(wide.mean()), float(wide.std())]
    centre = min(max(round(float(flat.astype(np.float64).mean())), low), high)
    # Differences from the minimum are below 2**63 (int64 even from uint64); then centred,
    # each within the spread of the centre, so nothing wraps.
    deviations = (flat - flat.dtype.type(low)).astype(np.int64) - np.int64(centre - low)
    total = int((deviations >> 32).sum()) * 2**32 + int((deviations & 0xFFFFFFFF).sum())
    return [float(low), float(high), (centre * count + total) / count, float(deviations.astype(np.float64).std())]


def summarize(values: np.ndarray) -> CapturePayload:
    """A summary payload: the count, how many values are not finite, and min, max, mean and
    population std of the finite ones in float64 (NaN for all four when none is finite);
    integers and bools reduced as integers (:func:`_integer_statistics`)."""
    if dtype_class(values.dtype) in ("integer", "boolean"):
        size = int(values.size)
        if size == 0:
            nan = float("nan")
            return CapturePayload.summary(0, 0, nan, nan, nan, nan)
        return CapturePayload.summary(size, 0, *_integer_statistics(values))
    flat = np.asarray(_numbers(values, "summary"), dtype=np.float64).ravel()
    finite = flat[np.isfinite(flat)]
    nonfinite = int(flat.size - finite.size)
    if finite.size == 0:
        nan = float("nan")
        return CapturePayload.summary(int(flat.size), nonfinite, nan, nan, nan, nan)
    low, high = float(finite.min()), float(finite.max())
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow (inf - inf) is answered below
        mean, std = float(finite.mean()), float(finite.std())
    if not (isfinite(mean) and isfinite(std)):
        # Finite values whose sum or squares overflow float64: the same statistics of the
        # values scaled into range, scaled back (the mean and std of finite values are finite).
        scale = max(abs(low), abs(high))
        scaled = finite / scale
        mean, std = float(scaled.mean()) * scale, float(scaled.std()) * scale
    return CapturePayload.summary(int(flat.size), nonfinite, low, high, mean, std)


def _finite_statistics(region: np.ndarray) -> list[float] | None:
    """[min, max, mean, population std] in float64 when all four are finite (then every value
    is), else None; its float64 copy is gone when it returns, before a fallback makes its own."""
    if dtype_class(region.dtype) in ("integer", "boolean"):
        return _integer_statistics(region) if region.size else None
    flat = np.asarray(_numbers(region, "summary"), dtype=np.float64).ravel()
    if not flat.size:
        return None
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is answered by summarize
        statistics = [float(flat.min()), float(flat.max()), float(flat.mean()), float(flat.std())]
    return statistics if all(isfinite(value) for value in statistics) else None


def _kept(values: np.ndarray) -> CapturePayload:
    """A tensor payload keeping a read-only, contiguous copy of ``values`` in their dtype, in
    native byte order (what a payload keeps; a view would change when the model reuses its
    buffer)."""
    if values.dtype.hasobject:
        # Its bytes are addresses of Python objects: from_array refuses it as every dtype a
        # payload cannot keep is refused (naming the dtype), where frombuffer would fail vaguely.
        return CapturePayload.from_array(np.ascontiguousarray(values))
    native = values if values.dtype.isnative else values.astype(values.dtype.newbyteorder("="))
    # Over immutable bytes: NumPy refuses to make such an array (or a view of it) writeable
    # again, where an array owning its memory lets anyone turn writing back on.
    kept = np.frombuffer(native.tobytes(order="C"), dtype=native.dtype).reshape(values.shape)
    return CapturePayload.from_array(kept)


class NumpyBackend:
    """Tensors are ``numpy.ndarray``s. Tensor payloads (preview, slice, full tensor) are
    read-only NumPy arrays in the source dtype. ``intervene`` returns a new array; the input
    is never modified in place."""

    def __repr__(self) -> str:
        return "NumpyBackend()"

    def describe(self, tensor: np.ndarray) -> tuple[tuple[int, ...], int, bool]:
        """(shape, itemsize, on_host): the facts the session prices a capture from."""
        if type(tensor) is not np.ndarray:
            require(tensor, np.ndarray, "NumpyBackend.describe", "tensor")
        return tensor.shape, tensor.dtype.itemsize, True

    def shape(self, tensor: np.ndarray) -> tuple[int, ...]:
        """The array's shape. Raises LifecoreTypeError for anything but a ``numpy.ndarray``."""
        require(tensor, np.ndarray, "NumpyBackend.shape", "tensor")
        return tensor.shape

    def dtype(self, tensor: np.ndarray) -> str:
        """The array's dtype class: "floating", "boolean", "integer" or "unknown" (an activation
        intervention needs "floating", and a replacement keeps its source's)."""
        require(tensor, np.ndarray, "NumpyBackend.dtype", "tensor")
        return dtype_class(tensor.dtype)

    def estimate(self, tensor: np.ndarray, request: TransformRequest) -> CaptureUsage:
        """What the transform of ``request`` would charge (:func:`payload_cost` at the array's
        itemsize, the whole region counted as copied to the host); computes nothing. Raises
        ValueError for a dtype of no known size, LifecoreTypeError for a wrong argument type."""
        require_transform(tensor, np.ndarray, request, "NumpyBackend.estimate")
        itemsize = tensor.dtype.itemsize
        if itemsize <= 0:
            raise ValueError(f"no size known for dtype {tensor.dtype}")
        return payload_cost(request.kind, request.selected_shape, itemsize, max_elements=request.max_elements,
                            edges=request.edges, count=request.count)

    def native_bytes(self, tensor: np.ndarray, request: TransformRequest) -> int:
        """Peak native bytes the transform holds at once (:func:`native_peak`): a tensor
        payload's copy, or a reduction's float64 working copies and temporaries."""
        require_transform(tensor, np.ndarray, request, "NumpyBackend.native_bytes")
        return native_peak(request.kind, request.selected_shape, tensor.dtype.itemsize, NUMPY_REDUCTION_BYTES,
                           request.max_elements)

    def transform(self, tensor: np.ndarray, request: TransformRequest) -> CapturePayload:
        """The payload of ``request`` over its selected region (the whole array when
        ``request.whole``): a preview (the first ``max_elements`` of the flattened region), a
        slice or full tensor (a read-only copy in the source dtype and shape), a summary, a
        histogram (counts per bin of ``edges``; values outside them are not counted), or top
        candidates (the ``count`` best ids and scores of the last row's last axis, ties in
        index order). The session calls it only after reserving the cost. Raises ValueError
        for another transform kind."""
        require_transform(tensor, np.ndarray, request, "NumpyBackend.transform")
        if type(tensor) is not np.ndarray:
            # A subclass's own indexing and ravel (np.matrix stays 2-D) are not the region's:
            # read the array it is (a view, no copy). Masked arrays were refused above.
            tensor = np.asarray(tensor)
        region = tensor if request.whole else tensor[request.index]
        kind = request.kind
        if kind == TransformKind.PREVIEW:
            return _kept(first_elements(region, request.max_elements))  # not the whole region flattened
        if kind in (TransformKind.SLICE, TransformKind.FULL_TENSOR):
            return _kept(region)
        if kind == TransformKind.SUMMARY:
            return summarize(region)
        if kind == TransformKind.HISTOGRAM:
            counts, _ = np.histogram(np.asarray(_numbers(region, "histogram"), dtype=np.float64).ravel(),
                                     bins=np.asarray(request.edges))
            return CapturePayload.histogram(list(request.edges), counts.astype(np.uint64).tolist())
        if kind == TransformKind.TOP_CANDIDATES:
            last = np.asarray(_numbers(region, "top candidates")).reshape(-1, region.shape[-1])[-1]
            if dtype_class(last.dtype) in ("integer", "boolean"):
                # Ranked in integers (float64 would merge neighbours past 2**53): ~x orders them
                # descending without the overflow of -x at the minimum; uint64 stays unsigned.
                wide = last if last.dtype == np.uint64 else last.astype(np.int64)
                ids = np.argsort(~wide, kind="stable")[: request.count]
            else:
                last = last.astype(np.float64)
                ids = np.argsort(-last, kind="stable")[: request.count]
            return CapturePayload.candidates(ids.tolist(), last[ids].astype(np.float64).tolist())
        raise ValueError(f"unsupported transform {kind}")

    def summary_statistics(self, tensor: np.ndarray, request: TransformRequest) -> list[float] | CapturePayload:
        """A SUMMARY request's result as the session asks for it on the per-point path: the
        short form ``[min, max, mean, population std]`` (float64) when the region's values and
        these four are all finite (the session adds the count), else the summary payload
        ``transform`` gives. Raises ValueError for another transform kind, LifecoreTypeError
        for a wrong argument type."""
        require_transform(tensor, np.ndarray, request, "NumpyBackend.summary_statistics")
        if request.kind != TransformKind.SUMMARY:
            raise ValueError(f"summary_statistics answers a SUMMARY request, not {request.kind}")
        if type(tensor) is not np.ndarray:
            tensor = np.asarray(tensor)  # as transform reads it
        region = tensor if request.whole else tensor[request.index]
        statistics = _finite_statistics(region)
        return statistics if statistics is not None else summarize(region)

    def intervene(self, tensor: np.ndarray, request: Any) -> np.ndarray:
        """A new array: a copy of ``tensor`` with the request's action applied to its region
        (zero, scale by ``factor``, mask by the payload, replace by it, add it, or set the
        logits of ``ids`` to -inf); the input is never modified. Raises ValueError for a routing
        action (those belong to the routing selector), and for a REPLACE or ADD payload or a
        SCALE factor that is not finite in the array's dtype (1e6 in float16), which fails the
        operation rather than writing inf."""
        require_intervention(tensor, np.ndarray, request, "NumpyBackend.intervene")
        out = np.array(tensor, copy=True)
        index = request.index
        action = request.action
        if action == InterventionAction.ZERO:
            out[index] = 0
        elif action == InterventionAction.SCALE:
            factor = _factor_as(out.dtype, request)  # refused where it is not finite in the dtype
            if out.dtype == np.float16:
                # Multiplied in float32 and rounded once, as torch computes half precision: a
                # factor rounded to float16 first (0.1 as 0.0999755859375) put a third of the
                # results one unit off.
                out[index] = (out[index].astype(np.float32) * np.float32(request.factor)).astype(np.float16)
            else:
                out[index] = out[index] * factor
        elif action == InterventionAction.MASK:
            keep = np.asarray(request.payload, dtype=bool).reshape(request.payload_shape)
            out[index] = np.where(keep, out[index], 0)
        elif action == InterventionAction.REPLACE:
            out[index] = _payload_as(out.dtype, request)
        elif action == InterventionAction.ADD:
            out[index] = out[index] + _payload_as(out.dtype, request)
        elif action == InterventionAction.MASK_LOGITS:
            region = out[index]
            region[..., list(request.ids)] = -np.inf
            out[index] = region
        else:
            raise ValueError(f"{action} is not an activation intervention")
        return out

    def replacement_mismatch(self, original: np.ndarray, replacement: np.ndarray) -> str | None:
        """What keeps ``replacement`` (an intervention's result) from standing for ``original``:
        another dtype (float16 against a 2-byte integer, or another byte order, too), as a
        phrase; None when it may. The session fails the operation on it and keeps the original."""
        require(original, np.ndarray, "NumpyBackend.replacement_mismatch", "original")
        require(replacement, np.ndarray, "NumpyBackend.replacement_mismatch", "replacement")
        if replacement.dtype != original.dtype:
            return f"dtype {original.dtype} became {replacement.dtype}"
        return None


def _factor_as(dtype: np.dtype, request: Any) -> Any:
    """A SCALE factor in the target's dtype: admission checked it is finite, but 1e39 is inf in
    float32, which would turn the whole region into infinities (and NaN where it held 0)."""
    with np.errstate(over="ignore", invalid="ignore"):
        factor = np.asarray(request.factor, dtype=np.float64).astype(dtype)
    if not np.isfinite(factor):
        raise ValueError(f"scale factor of '{request.operation_id}' is not finite in {dtype} "
                         f"(a value past the target dtype's range)")
    return factor


def _payload_as(dtype: np.dtype, request: Any) -> np.ndarray:
    """A REPLACE or ADD payload in the target's dtype. Admission checked it is finite, but it
    may not be in a narrower dtype (1e6 is inf in float16): that fails the operation rather
    than writing inf into the activation."""
    with np.errstate(over="ignore", invalid="ignore"):
        payload = np.asarray(request.payload, dtype=np.float64).astype(dtype).reshape(request.payload_shape)
    if not np.isfinite(payload).all():
        raise ValueError(f"payload of '{request.operation_id}' is not finite in {dtype} "
                         f"(a value past the target dtype's range)")
    return payload
