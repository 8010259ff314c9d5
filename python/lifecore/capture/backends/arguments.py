"""Argument checks for the bundled backends: a backend method called with something that is
not its tensor type or a request answers LifecoreTypeError naming the argument, never an
AttributeError from deep inside (when the session calls it, that error becomes the
``__cause__`` of the CaptureSessionError)."""

from __future__ import annotations

import operator
from typing import Any, Optional

import numpy as np

from ..._core.capture import InterventionRequest, TransformRequest
from ...errors import LifecoreTypeError


def is_bool_like(value: Any) -> bool:
    """Whether ``value`` is a bool of Python's or NumPy's, or an array of bool dtype (torch's
    ``__index__`` reads torch.tensor(True) as 1, so a bool is never taken for a count or an id).
    Without a Python call for NumPy's dtypes (their str is Python code, microseconds per value)."""
    if isinstance(value, (bool, np.bool_)):
        return True
    if isinstance(value, np.generic):  # NumPy's other scalars
        return False
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return False
    kind = getattr(dtype, "kind", None)  # NumPy's dtypes and their likes: 'b' is bool
    return kind == "b" if isinstance(kind, str) else str(dtype) == "torch.bool"


def as_index(value: Any) -> Optional[int]:
    """``value`` as an int when it is an integer (an int, or what converts through
    ``__index__``: a NumPy or torch integer), never for a bool of any library nor a NumPy
    masked array; else None. An
    error of the value's own ``__index__`` other than TypeError (which says it is no integer)
    propagates, as the core's counts pass it on."""
    if isinstance(value, int):
        return None if isinstance(value, bool) else int(value)
    if is_bool_like(value) or not hasattr(type(value), "__index__") or isinstance(value, np.ma.MaskedArray):
        return None  # a masked array's __index__ reads the value beneath its mask
    try:
        return operator.index(value)
    except TypeError:  # a many-element array, or an __index__ that says it is no integer
        return None


def require(value: Any, expected: type | tuple[type, ...], call: str, name: str) -> None:
    """Raises LifecoreTypeError unless ``value`` is an instance of ``expected``, and for a NumPy
    masked array (a backend would read its masked elements as values)."""
    if not isinstance(value, expected):
        names = " or ".join(t.__name__ for t in (expected if isinstance(expected, tuple) else (expected,)))
        raise LifecoreTypeError(f"{call}: argument '{name}' must be a {names}, got {type(value).__name__}")
    if type(value) is not expected and isinstance(value, np.ma.MaskedArray):
        raise LifecoreTypeError(f"{call}: argument '{name}' is a NumPy masked array, whose masked elements would be "
                                f"read as values; pass .filled(value) or .compressed()")


def require_transform(tensor: Any, tensor_type: type, request: Any, call: str) -> None:
    require(tensor, tensor_type, call, "tensor")
    require(request, TransformRequest, call, "request")


def require_intervention(tensor: Any, tensor_type: type, request: Any, call: str) -> None:
    require(tensor, tensor_type, call, "tensor")
    require(request, InterventionRequest, call, "request")


def require_backend(value: Any, call: str, name: str = "backend") -> None:
    """Raises LifecoreTypeError unless ``value`` can serve as a capture backend (has the
    ``transform`` method every observation calls): caught at the call that takes it, not at a
    forward much later."""
    # The rule of the bound calls that take a backend (CaptureSession.observe, .observer): a
    # class where an instance is meant has a function transform, yet is no backend.
    if isinstance(value, type):
        raise LifecoreTypeError(f"{call}: argument '{name}' must be a capture backend (a TorchBackend, or an object "
                                f"with the backend methods), got the class {value.__name__} itself: pass an instance")
    if not callable(getattr(value, "transform", None)):
        raise LifecoreTypeError(f"{call}: argument '{name}' must be a capture backend (a TorchBackend, or an object "
                                f"with the backend methods), got {type(value).__name__}")
