"""A counting mock backend for tests: tensors are shapes without data, every call is
recorded, and failures can be injected (a raising call, an unknown estimate, an
underestimated encoding, an intervention that changes shape or dtype)."""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np

from ..._core.capture import CapturePayload, CaptureUsage, TransformKind, TransformRequest
from ...errors import LifecoreTypeError
from .arguments import require, require_intervention, require_transform
from .cost import NUMPY_REDUCTION_BYTES, native_peak, payload_cost


@dataclass(frozen=True)
class MockTensor:
    """A tensor with a shape and a dtype class but no data."""

    shape: tuple[int, ...]
    """The dimensions (a tuple of counts)."""
    dtype: str = "floating"
    """The dtype class the backend reports: "floating", "integer", "boolean", ..."""
    itemsize: int = 4
    """Bytes per element: what payloads are charged and kept at."""
    generation: int = 0
    """How many interventions produced this tensor (each returns one higher), so a
    replacement is told from its source."""

    def __post_init__(self) -> None:
        if not isinstance(self.shape, tuple) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                        for d in self.shape):
            raise LifecoreTypeError(f"MockTensor: argument 'shape' must be a tuple of counts, got {self.shape!r}")
        require(self.dtype, str, "MockTensor", "dtype")
        for name in ("itemsize", "generation"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise LifecoreTypeError(f"MockTensor: argument '{name}' must be a count, got {value!r}")


_DTYPES = {1: np.int8, 2: np.float16, 4: np.float32, 8: np.float64}


def _filled(shape: tuple[int, ...], itemsize: int) -> CapturePayload:
    """A tensor payload of the mock's element size (0.5 where it is floating), so it is
    charged and kept at the size the mock reports."""
    dtype = _DTYPES.get(itemsize)
    if dtype is None:  # no array type of that size: numbers, as before
        return CapturePayload.tensor(list(shape), [0.5] * prod(shape))
    return CapturePayload.from_array(np.full(shape, 0 if itemsize == 1 else 0.5, dtype=dtype))


@dataclass
class CountingBackend:
    """Records every call as ``(method, tensor shape)`` in ``calls``; the other fields inject
    failures. Its tensors are :class:`MockTensor`s; a payload holds placeholder values (0.5)
    at the size a real backend's would have."""

    fail_on: set[str] = field(default_factory=set)
    """Method names ("shape", "dtype", "estimate", "native_bytes", "transform", "intervene")
    that raise RuntimeError after being recorded."""
    unknown_estimate: bool = False
    """When true, ``estimate`` answers None: an unknown cost, which fails the observe (the
    record FAILED), never charged as zero."""
    underestimate: bool = False
    """When true, ``estimate`` claims 0 encoded bytes: a backend that lies about its cost."""
    change_dtype: bool = False
    """When true, ``intervene`` returns an integer tensor: a replacement of another dtype."""
    calls: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    """Every call so far, in order, as (method name, the tensor's shape)."""

    def __post_init__(self) -> None:
        require(self.fail_on, (set, frozenset), "CountingBackend", "fail_on")
        for name in ("unknown_estimate", "underestimate", "change_dtype"):
            require(getattr(self, name), bool, "CountingBackend", name)
        require(self.calls, list, "CountingBackend", "calls")
        for call in self.calls:  # count() reads each entry as a (method, shape) pair
            if not (isinstance(call, tuple) and len(call) == 2 and isinstance(call[0], str)):
                raise LifecoreTypeError(
                    f"CountingBackend: argument 'calls' must hold (method, shape) pairs, got {call!r}")

    def _call(self, method: str, tensor: MockTensor, request: Any = None) -> None:
        require(tensor, MockTensor, f"CountingBackend.{method}", "tensor")
        if method in ("estimate", "native_bytes", "transform"):
            require_transform(tensor, MockTensor, request, f"CountingBackend.{method}")
        elif method == "intervene":
            require_intervention(tensor, MockTensor, request, f"CountingBackend.{method}")
        self.calls.append((method, tensor.shape))
        if method in self.fail_on:
            raise RuntimeError(f"injected {method} failure")

    def count(self, method: str) -> int:
        """How many calls of ``method`` were recorded."""
        require(method, str, "CountingBackend.count", "method")
        return sum(1 for name, _ in self.calls if name == method)

    def shape(self, tensor: MockTensor) -> tuple[int, ...]:
        """The mock tensor's shape (recorded)."""
        self._call("shape", tensor)
        return tensor.shape

    def dtype(self, tensor: MockTensor) -> str:
        """The mock tensor's dtype class (recorded)."""
        self._call("dtype", tensor)
        return tensor.dtype

    def estimate(self, tensor: MockTensor, request: TransformRequest) -> CaptureUsage | None:
        """:func:`payload_cost` of the request at the tensor's itemsize (recorded); None under
        ``unknown_estimate``, 0 encoded bytes under ``underestimate``."""
        self._call("estimate", tensor, request)
        if self.unknown_estimate:
            return None
        cost = payload_cost(request.kind, request.selected_shape, tensor.itemsize,
                            max_elements=request.max_elements, edges=request.edges, count=request.count)
        if self.underestimate:
            cost.encoded_bytes = 0
        return cost

    def native_bytes(self, tensor: MockTensor, request: TransformRequest) -> int:
        """What the NumPy backend answers for the same request (:func:`native_peak`; recorded)."""
        self._call("native_bytes", tensor, request)
        return native_peak(request.kind, request.selected_shape, tensor.itemsize, NUMPY_REDUCTION_BYTES,
                           request.max_elements)

    def transform(self, tensor: MockTensor, request: TransformRequest) -> CapturePayload:
        """A payload of the request's kind and size filled with placeholders (recorded): a
        preview of min(elements, ``max_elements``), a slice or full tensor of the selected
        shape at the mock's itemsize, a summary of 0.5s, zero histogram counts, candidates
        0..count-1. Raises ValueError for another transform kind."""
        self._call("transform", tensor, request)
        n = prod(request.selected_shape)
        kind = request.kind
        if kind == TransformKind.PREVIEW:
            return _filled((min(n, request.max_elements),), tensor.itemsize)
        if kind in (TransformKind.SLICE, TransformKind.FULL_TENSOR):
            return _filled(tuple(request.selected_shape), tensor.itemsize)
        if kind == TransformKind.SUMMARY:
            return CapturePayload.summary(n, 0, 0.5, 0.5, 0.5, 0.0)
        if kind == TransformKind.HISTOGRAM:
            counts = [0] * (len(request.edges) - 1)
            return CapturePayload.histogram(list(request.edges), counts)
        if kind == TransformKind.TOP_CANDIDATES:
            return CapturePayload.candidates(list(range(request.count)), [0.5] * request.count)
        raise ValueError(f"unsupported transform {kind}")

    def intervene(self, tensor: MockTensor, request: Any) -> MockTensor:
        """A new mock tensor of the same shape with ``generation`` one higher (recorded); its
        dtype is "integer" under ``change_dtype``."""
        self._call("intervene", tensor, request)
        dtype = "integer" if self.change_dtype else tensor.dtype
        return MockTensor(tensor.shape, dtype, tensor.itemsize, tensor.generation + 1)
