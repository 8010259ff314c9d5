"""Capture's value types compare, hash, copy and pickle by their fields.

A plan, a discovery, a selection and what they are built of are read-only values: two built
alike are equal and hash alike (a set or a dict key keeps one), ``copy``/``deepcopy`` give an
equal value, and a pickle (to another process, to disk) is rebuilt through the public
constructor, so an altered pickle is checked as any other argument is. Each type's fields are
its constructor's keywords, read back from its properties: one table below says which.

The objects bound to a session (records, payloads, steps, observers) are views of state that
lives in one process; pickling or copying one raises LifecoreTypeError saying what to send
instead. Admitted plans refuse copies and pickles in the core already (a pickle cannot forge an
admission); a checkpoint copies within the process but refuses a pickle (it belongs to its run,
which is never serialized).

``CaptureUsage`` (mutable: a ledger's running totals) and ``CaptureRequest``/``RoutingPolicy``
keep the equality and hashing the core gives them; all three pickle here.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from .. import _core
from .._copy_protocol import _refusal

_capture: Any = _core.capture

# Type name -> its constructor's keywords, each also a read-only property of the same name.
_FIELDS: dict[str, tuple[str, ...]] = {
    "Axis": ("name", "size"),
    "RoutingPolicy": ("num_experts", "top_k", "scoring", "groups", "topk_groups", "epsilon", "scale",
                      "learned_coefficient_scale"),
    "ObservationPoint": ("path", "axes", "node_id", "meaning", "dtype", "prefill", "decode", "position",
                         "prefill_support", "decode_support", "routing", "itemsize"),
    "BackendCapabilities": ("transforms", "max_histogram_bins", "physical_native_limit"),
    "CaptureDiscovery": ("artifact_identity", "catalog", "capabilities"),
    "CaptureRequest": ("batch", "prompt_tokens", "max_predictions"),
    "CaptureSchedule": ("prefill", "decode", "first_prediction", "end_prediction", "every"),
    "CaptureSlice": ("axis", "start", "end", "stride"),
    "CaptureSelection": ("id", "path", "transform", "schedule", "slices"),
    "CaptureUsage": ("captures", "retained_bytes", "host_bytes", "encoded_bytes"),
    "CaptureLimits": ("per_step", "cumulative", "on_limit", "physical_native_bytes"),
    "CapturePlan": ("selections", "limits", "schema_version"),
    "InterventionOperation": ("id", "target", "action", "schedule", "slices", "factor", "payload_shape", "payload",
                              "ids", "evidence", "evidence_elements"),
    "InterventionPlan": ("operations",),
}
# Compared and hashed by the core already (CaptureUsage is mutable: never hashable).
_CORE_EQUALITY = ("RoutingPolicy", "CaptureRequest", "CaptureUsage")

# A transform has no constructor: each kind is built by its factory, from the field it keeps.
_TRANSFORM_ARGUMENT: dict[str, Optional[str]] = {
    "preview": "max_elements", "slice": None, "full_tensor": None, "summary": None, "histogram": "edges",
    "top_candidates": "count",
}

# Views of one process's state: what to send instead.
_BOUND: dict[str, str] = {
    "CaptureRecord": "send its to_json(), or its payload's arrays",
    "InterventionRecord": "send its to_json()",
    "CapturePayload": "send its arrays (tensor, summary, histogram, candidates) or the record's to_json()",
    "CapturedStep": "send its records' to_json()",
    "CaptureSession": "send its plan and discovery, and admit them again there",
    "PreparedCaptureRestore": "a prepared restore holds its session until committed or released",
    "CaptureObserver": "an observer serves its session's step",
    "TransformRequest": "a request serves the backend call it was made for",
    "InterventionRequest": "a request serves the backend call it was made for",
    "GroupSelectionControl": "a control serves the routing call it was made for",
    "ResolvedSlice": "send the CaptureSlice it was resolved from",
}


def _rebuild(cls: Any, factory: str, args: tuple[Any, ...], kwargs: dict[Any, Any]) -> Any:
    """What a pickle of a capture value calls: the public constructor (or, for a transform, its
    factory), so a value read back is checked as any argument is."""
    build: Callable[..., Any] = getattr(cls, factory) if factory else cls
    return build(*args, **kwargs)


def _arguments(value: Any) -> tuple[str, tuple[Any, ...], dict[Any, Any]]:
    """How ``value`` is built again: its factory ("" for the constructor), the positional and
    the keyword arguments. Its fields, compared and hashed, are the same arguments."""
    if type(value).__name__ == "CaptureTransform":
        factory = value.kind.name.lower()
        name = _TRANSFORM_ARGUMENT[factory]
        return factory, (getattr(value, name),) if name else (), {}
    return "", (), {f: getattr(value, f) for f in _FIELDS[type(value).__name__]}


def _fields(value: Any) -> tuple[Any, ...]:
    factory, args, kwargs = _arguments(value)
    return (factory, *args, *kwargs.values())


_NAN = ("nan",)  # what a NaN field hashes as: Python hashes each NaN object by its identity


def _hashable(item: Any) -> Any:
    """A field as a hashable value: its lists as tuples (the values in them hash themselves), a
    usage (a limit's, fixed once in the limits) as its values, a NaN as one value."""
    if isinstance(item, list):
        return tuple(_hashable(x) for x in item)
    if type(item).__name__ == "CaptureUsage":
        return item.as_tuple()
    if isinstance(item, float) and item != item:
        return _NAN
    return item


def _same(a: Any, b: Any) -> bool:
    """Field equality where a NaN equals a NaN (a factor or payload value the constructors take):
    a value read back from a pickle or a copy is then equal to the original."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _equal(self: Any, other: Any) -> Any:
    if type(other) is not type(self):
        return NotImplemented
    return _same(list(_fields(self)), list(_fields(other)))


def _hash(self: Any) -> int:
    return hash((type(self).__name__,) + tuple(_hashable(f) for f in _fields(self)))


def _reduce(self: Any) -> tuple[Any, ...]:
    return (_rebuild, (type(self), *_arguments(self)))


def install() -> None:
    """Gives capture's value types field equality, hashing, copying and pickling, and its bound
    types a refusal that says what to send instead (idempotent)."""
    for name in list(_FIELDS) + ["CaptureTransform"]:
        cls = getattr(_capture, name)
        if name not in _CORE_EQUALITY:
            cls.__eq__ = _equal
            cls.__hash__ = _hash
        cls.__reduce__ = _reduce
    for name, instead in _BOUND.items():
        cls = getattr(_capture, name)
        cls.__reduce__ = cls.__reduce_ex__ = cls.__copy__ = cls.__deepcopy__ = _refusal(
            "it is a view of state that lives in this process", instead)
