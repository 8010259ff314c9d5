"""Builders for intervention operations (activation, logits and routing actions).

Payloads are given as arrays (anything ``numpy.asarray`` accepts); admission checks that
they are finite and exactly shaped like the selected region (no broadcasting).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .._core.capture import CaptureSchedule, CaptureSlice, EvidenceKind, InterventionAction, InterventionOperation

__all__ = [
    "zero", "scale", "mask", "replace", "add", "mask_logits", "exclude_experts", "zero_expert_contribution",
    "bias_routing_scores", "force_experts",
]


def _evidence(evidence: None | str | int) -> dict[str, Any]:
    if evidence is None:
        return {"evidence": EvidenceKind.NONE}
    if evidence == "summary":
        return {"evidence": EvidenceKind.SUMMARY}
    if isinstance(evidence, int) and not isinstance(evidence, bool):
        return {"evidence": EvidenceKind.PREVIEW, "evidence_elements": evidence}
    raise ValueError("evidence is None, 'summary' or a preview size (int)")


def _op(id: str, target: str, action: InterventionAction, schedule: CaptureSchedule | None,
        slices: Sequence[CaptureSlice], evidence: None | str | int, **fields: Any) -> InterventionOperation:
    return InterventionOperation(id, target, action, schedule=schedule, slices=list(slices), **_evidence(evidence),
                                 **fields)


def _array(values: Any) -> tuple[list[int], list[float]]:
    array = np.asarray(values, dtype=np.float64)
    return list(array.shape), array.ravel().tolist()


def zero(id: str, target: str, *, schedule: CaptureSchedule | None = None, slices: Sequence[CaptureSlice] = (),
         evidence: None | str | int = None) -> InterventionOperation:
    """Sets the selected region to zero."""
    return _op(id, target, InterventionAction.ZERO, schedule, slices, evidence)


def scale(id: str, target: str, factor: float, *, schedule: CaptureSchedule | None = None,
          slices: Sequence[CaptureSlice] = (), evidence: None | str | int = None) -> InterventionOperation:
    """Multiplies the selected region by ``factor``."""
    return _op(id, target, InterventionAction.SCALE, schedule, slices, evidence, factor=float(factor))


def mask(id: str, target: str, keep: Any, *, schedule: CaptureSchedule | None = None,
         slices: Sequence[CaptureSlice] = (), evidence: None | str | int = None) -> InterventionOperation:
    """Keeps the selected elements where ``keep`` is true and zeroes the others."""
    shape, values = _array(np.asarray(keep, dtype=bool))
    return _op(id, target, InterventionAction.MASK, schedule, slices, evidence, payload_shape=shape, payload=values)


def replace(id: str, target: str, tensor: Any, *, schedule: CaptureSchedule | None = None,
            slices: Sequence[CaptureSlice] = (), evidence: None | str | int = None) -> InterventionOperation:
    """Replaces the selected region (activation patching is replace + slices)."""
    shape, values = _array(tensor)
    return _op(id, target, InterventionAction.REPLACE, schedule, slices, evidence, payload_shape=shape, payload=values)


def add(id: str, target: str, tensor: Any, *, schedule: CaptureSchedule | None = None,
        slices: Sequence[CaptureSlice] = (), evidence: None | str | int = None) -> InterventionOperation:
    """Adds ``tensor`` to the selected region (e.g. a steering vector)."""
    shape, values = _array(tensor)
    return _op(id, target, InterventionAction.ADD, schedule, slices, evidence, payload_shape=shape, payload=values)


def mask_logits(id: str, target: str, token_ids: Sequence[int], *, schedule: CaptureSchedule | None = None,
                slices: Sequence[CaptureSlice] = (), evidence: None | str | int = None) -> InterventionOperation:
    """Sets the logits of ``token_ids`` to -inf before sampling (the full vocabulary axis)."""
    return _op(id, target, InterventionAction.MASK_LOGITS, schedule, slices, evidence, ids=[int(i) for i in token_ids])


def exclude_experts(id: str, target: str, expert_ids: Sequence[int], *, schedule: CaptureSchedule | None = None,
                    slices: Sequence[CaptureSlice] = (), evidence: None | int = None) -> InterventionOperation:
    """Removes experts from the routing choice of the selected token rows."""
    return _op(id, target, InterventionAction.EXCLUDE_EXPERTS, schedule, slices, evidence,
               ids=[int(i) for i in expert_ids])


def zero_expert_contribution(id: str, target: str, expert_ids: Sequence[int], *,
                             schedule: CaptureSchedule | None = None, slices: Sequence[CaptureSlice] = (),
                             evidence: None | int = None) -> InterventionOperation:
    """Keeps the routing choice but zeroes the coefficients of these experts."""
    return _op(id, target, InterventionAction.ZERO_EXPERT_CONTRIBUTION, schedule, slices, evidence,
               ids=[int(i) for i in expert_ids])


def bias_routing_scores(id: str, target: str, expert_ids: Sequence[int], biases: Sequence[float], *,
                        schedule: CaptureSchedule | None = None, slices: Sequence[CaptureSlice] = (),
                        evidence: None | int = None) -> InterventionOperation:
    """Adds a bias to the routing scores of these experts before top-k selection."""
    return _op(id, target, InterventionAction.BIAS_ROUTING_SCORES, schedule, slices, evidence,
               ids=[int(i) for i in expert_ids], payload=[float(b) for b in biases])


def force_experts(id: str, target: str, expert_ids: Any, *, schedule: CaptureSchedule | None = None,
                  slices: Sequence[CaptureSlice] = (), evidence: None | int = None) -> InterventionOperation:
    """Forces the experts of each selected row; ``expert_ids`` is shaped [rows, top_k]."""
    ids = np.asarray(expert_ids)
    if ids.ndim != 2:
        raise ValueError("forced expert ids must be shaped [rows, top_k]")
    return _op(id, target, InterventionAction.FORCE_EXPERTS, schedule, slices, evidence,
               payload_shape=list(ids.shape), ids=[int(i) for i in ids.ravel()])
