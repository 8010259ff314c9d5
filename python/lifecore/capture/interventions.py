"""Builders for intervention operations (activation, logits and routing actions).

Payloads are given as arrays (anything ``numpy.asarray`` accepts); admission checks that
they are finite and exactly shaped like the selected region (no broadcasting).
"""

from __future__ import annotations

import math
import operator
from numbers import Real
from typing import Any, Sequence

import numpy as np

from .. import _python_guard
from .._core.capture import CaptureSchedule, CaptureSlice, EvidenceKind, InterventionAction, InterventionOperation
from ..errors import InvalidArgumentError, LifecoreOverflowError, LifecoreTypeError
from .backends.arguments import as_index, is_bool_like

__all__ = [
    "zero", "scale", "mask", "replace", "add", "mask_logits", "exclude_experts", "zero_expert_contribution",
    "bias_routing_scores", "force_experts",
]


def _evidence(evidence: None | str | int) -> dict[str, Any]:
    if evidence is None:
        return {"evidence": EvidenceKind.NONE}
    if isinstance(evidence, str) and evidence == "summary":
        return {"evidence": EvidenceKind.SUMMARY}
    if (elements := as_index(evidence)) is not None:  # a NumPy or torch integer is a preview size too
        return {"evidence": EvidenceKind.PREVIEW, "evidence_elements": elements}
    message = f"argument 'evidence' is None, 'summary' or a preview size (int), got {evidence!r}"
    raise (InvalidArgumentError if isinstance(evidence, str) else LifecoreTypeError)(message)


def _sequence(values: Any, name: str) -> list[Any]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise LifecoreTypeError(f"argument '{name}' must be a sequence, got {type(values).__name__}")
    return list(values)


def _op(id: str, target: str, action: InterventionAction, schedule: CaptureSchedule | None,
        slices: Sequence[CaptureSlice], evidence: None | str | int, **fields: Any) -> InterventionOperation:
    return InterventionOperation(id, target, action, schedule=schedule, slices=_sequence(slices, "slices"),
                                 **_evidence(evidence), **fields)


def _host(values: Any) -> Any:
    """A torch tensor as NumPy can read it: detached, on the host, and (unless complex) in
    float64, which holds every value of every real dtype exactly (NumPy has no bfloat16, and
    reads no device tensor and no tensor that requires grad); anything else as it is. torch is
    never imported here: a torch tensor comes from a program that already has."""
    if type(values).__module__.partition(".")[0] == "torch" and callable(getattr(values, "detach", None)):
        values = values.detach().cpu()
        if not values.is_complex():
            values = values.double()
    return values


def _holds_masked(values: Any) -> bool:
    """Whether ``values`` is a masked array, or a sequence holding one (or numpy.ma.masked) at
    any depth: NumPy reads the values beneath a mask as if there were none. Walked without
    recursion: a list that holds itself, or nests thousands deep, is left to NumPy's refusal."""
    pending, seen = [values], set()
    while pending:
        value = pending.pop()
        if isinstance(value, np.ma.MaskedArray) or value is np.ma.masked:
            return True
        if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray, memoryview)):
            if id(value) in seen:
                continue  # looked at already (a sublist held twice, or a list that holds itself)
            seen.add(id(value))
            pending.extend(value)
    return False


def _array(values: Any, name: str) -> tuple[list[int], list[float]]:
    try:
        values = _host(values)
    except Exception as error:  # torch's own refusal: a meta, quantized or nested tensor has no values here
        raise LifecoreTypeError(f"argument '{name}' must be an array of numbers: {type(values).__name__} "
                                f"({type(error).__name__}: {error})") from error
    if _holds_masked(values):  # its masked values would be applied as if they were not
        raise InvalidArgumentError(f"argument '{name}' is or holds a masked array: pass its .filled(value) (or .data)")
    try:
        given = np.asarray(values)
    except (TypeError, ValueError) as error:
        raise LifecoreTypeError(f"argument '{name}' must be an array of numbers: {error}") from error
    if given.dtype.kind in "USVmM":  # NumPy would parse "1" as the number 1, a date as its count of days
        raise LifecoreTypeError(f"argument '{name}' must be an array of numbers, got {type(values).__name__} "
                                f"holding {given.dtype.name} values")
    if given.dtype.kind == "O":  # NumPy would read None as NaN, and an int past a double as inf
        for value in given.ravel().tolist():
            if not isinstance(value, (Real, np.number)):
                raise LifecoreTypeError(f"argument '{name}' must be an array of numbers, got "
                                        f"{type(values).__name__} holding {type(value).__name__}")
            try:
                float(value)
            except OverflowError:
                raise LifecoreOverflowError(f"argument '{name}' holds an int too large for a float: {value}") from None
    if np.iscomplexobj(given):  # a float64 conversion would drop the imaginary part
        raise LifecoreTypeError(f"argument '{name}' holds complex values ({given.dtype}); a payload is real: pass "
                                f"its .real (or the real and imaginary parts as an extra axis)")
    try:
        array = given.astype(np.float64)
    except (TypeError, ValueError) as error:
        raise LifecoreTypeError(f"argument '{name}' must be an array of numbers: {error}") from error
    return list(array.shape), array.ravel().tolist()


def _ids(values: Any, name: str) -> list[int]:
    """Integer ids (ints or NumPy integers, never floats or bools)."""
    if is_bool_like(values):  # a bool mask is no list of ids: its True positions would read as ids 0 and 1
        raise LifecoreTypeError(f"argument '{name}' must hold ints, got an array of bools (pass the ids, "
                                f"numpy.flatnonzero(mask) for a mask)")
    if _holds_masked(values):  # the ids beneath its mask would be taken as if there were none
        raise InvalidArgumentError(f"argument '{name}' is or holds a masked array: pass the ids to use "
                                   f"(.compressed(), or .data)")
    ids = []
    for value in _sequence(values, name):
        # Python's and NumPy's integers first (no bool among them): a long list of ids pays
        # the bool check only for what else it holds.
        if type(value) is int or isinstance(value, np.integer):
            ids.append(operator.index(value))
            continue
        if is_bool_like(value):
            raise LifecoreTypeError(f"argument '{name}' must hold ints, got a bool")
        try:
            ids.append(operator.index(value))
        except TypeError as error:
            raise LifecoreTypeError(f"argument '{name}' must hold ints, got {type(value).__name__}") from error
    return ids


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (Real, np.floating, np.integer)):
        raise LifecoreTypeError(f"argument '{name}' must be a number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:  # an int past a double's range
        raise LifecoreOverflowError(f"argument '{name}' is too large for a float, got {value}") from None


def zero(id: str, target: str, *, schedule: CaptureSchedule | None = None, slices: Sequence[CaptureSlice] = (),
         evidence: None | str | int = None) -> InterventionOperation:
    """Sets the selected region to zero."""
    return _op(id, target, InterventionAction.ZERO, schedule, slices, evidence)


def scale(id: str, target: str, factor: float, *, schedule: CaptureSchedule | None = None,
          slices: Sequence[CaptureSlice] = (), evidence: None | str | int = None) -> InterventionOperation:
    """Multiplies the selected region by ``factor``."""
    return _op(id, target, InterventionAction.SCALE, schedule, slices, evidence, factor=_number(factor, "factor"))


def mask(id: str, target: str, keep: Any, *, schedule: CaptureSchedule | None = None,
         slices: Sequence[CaptureSlice] = (), evidence: None | str | int = None) -> InterventionOperation:
    """Keeps the selected elements where ``keep`` is true and zeroes the others."""
    shape, values = _array(keep, "keep")
    if not all(math.isfinite(v) for v in values):  # NaN != 0 would read as "keep"
        raise InvalidArgumentError(f"mask '{id}': argument 'keep' holds a value that is not finite; a mask holds "
                                   f"booleans, or numbers (non-zero keeps)")
    values = [float(v != 0) for v in values]
    return _op(id, target, InterventionAction.MASK, schedule, slices, evidence, payload_shape=shape, payload=values)


def replace(id: str, target: str, tensor: Any, *, schedule: CaptureSchedule | None = None,
            slices: Sequence[CaptureSlice] = (), evidence: None | str | int = None) -> InterventionOperation:
    """Replaces the selected region (activation patching is replace + slices). ``tensor``: an
    array of numbers (NumPy, a list, or a torch tensor of any real dtype on any device: bfloat16
    and float16 are read exactly)."""
    shape, values = _array(tensor, "tensor")
    return _op(id, target, InterventionAction.REPLACE, schedule, slices, evidence, payload_shape=shape, payload=values)


def add(id: str, target: str, tensor: Any, *, schedule: CaptureSchedule | None = None,
        slices: Sequence[CaptureSlice] = (), evidence: None | str | int = None) -> InterventionOperation:
    """Adds ``tensor`` to the selected region (e.g. a steering vector); ``tensor`` as for
    :func:`replace`."""
    shape, values = _array(tensor, "tensor")
    return _op(id, target, InterventionAction.ADD, schedule, slices, evidence, payload_shape=shape, payload=values)


def mask_logits(id: str, target: str, token_ids: Sequence[int], *, schedule: CaptureSchedule | None = None,
                slices: Sequence[CaptureSlice] = (), evidence: None | str | int = None) -> InterventionOperation:
    """Sets the logits of ``token_ids`` to -inf before sampling (the full vocabulary axis)."""
    return _op(id, target, InterventionAction.MASK_LOGITS, schedule, slices, evidence, ids=_ids(token_ids, "token_ids"))


def exclude_experts(id: str, target: str, expert_ids: Sequence[int], *, schedule: CaptureSchedule | None = None,
                    slices: Sequence[CaptureSlice] = (), evidence: None | int = None) -> InterventionOperation:
    """Removes experts from the routing choice of the selected token rows."""
    return _op(id, target, InterventionAction.EXCLUDE_EXPERTS, schedule, slices, evidence,
               ids=_ids(expert_ids, "expert_ids"))


def zero_expert_contribution(id: str, target: str, expert_ids: Sequence[int], *,
                             schedule: CaptureSchedule | None = None, slices: Sequence[CaptureSlice] = (),
                             evidence: None | int = None) -> InterventionOperation:
    """Keeps the routing choice but zeroes the coefficients of these experts."""
    return _op(id, target, InterventionAction.ZERO_EXPERT_CONTRIBUTION, schedule, slices, evidence,
               ids=_ids(expert_ids, "expert_ids"))


def bias_routing_scores(id: str, target: str, expert_ids: Sequence[int], biases: Sequence[float], *,
                        schedule: CaptureSchedule | None = None, slices: Sequence[CaptureSlice] = (),
                        evidence: None | int = None) -> InterventionOperation:
    """Adds a bias to the routing scores of these experts before top-k selection."""
    if _holds_masked(biases):  # a masked bias would be read as a number (or as numpy.ma.masked)
        raise InvalidArgumentError("argument 'biases' is or holds a masked array: pass the biases to add (.data)")
    return _op(id, target, InterventionAction.BIAS_ROUTING_SCORES, schedule, slices, evidence,
               ids=_ids(expert_ids, "expert_ids"), payload=[_number(b, "biases") for b in _sequence(biases, "biases")])


def force_experts(id: str, target: str, expert_ids: Any, *, schedule: CaptureSchedule | None = None,
                  slices: Sequence[CaptureSlice] = (), evidence: None | int = None) -> InterventionOperation:
    """Forces the experts of each selected row; ``expert_ids`` is shaped [rows, top_k]."""
    if _holds_masked(expert_ids):  # np.asarray would read the ids beneath the mask
        raise InvalidArgumentError("argument 'expert_ids' is or holds a masked array: pass the ids to force (.data)")
    try:
        ids = np.asarray(expert_ids)
    except (TypeError, ValueError) as error:
        raise LifecoreTypeError(f"argument 'expert_ids' must be an array of ints: {error}") from error
    if ids.ndim != 2:
        if ids.ndim == 0 and not isinstance(expert_ids, (Real, np.number)):  # None, an object
            raise LifecoreTypeError(f"argument 'expert_ids' must be an array of ints shaped [rows, top_k], got "
                                    f"{type(expert_ids).__name__}")
        raise InvalidArgumentError(f"argument 'expert_ids' must be shaped [rows, top_k], got {ids.ndim} "
                                   f"dimension(s)")
    return _op(id, target, InterventionAction.FORCE_EXPERTS, schedule, slices, evidence,
               payload_shape=list(ids.shape), ids=_ids(ids.ravel().tolist(), "expert_ids"))


# Last: what this module exports answers a call it cannot bind with LifecoreTypeError.
_python_guard.install(__name__)
