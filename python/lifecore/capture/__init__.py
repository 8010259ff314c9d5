"""Bounded activation capture with interventions and MoE routing control.

A :class:`CapturePlan` names what to capture; :meth:`CapturePlan.admit` checks it against a
:class:`CaptureDiscovery` (facts retained from the loaded model) and returns the only kind
of plan a :class:`CaptureSession` accepts. The session owns one monotone ledger and at most
one undrained step of records; tensors reach it through a backend (NumPy, PyTorch, or the
counting mock used in tests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _python_guard
from .._core.capture import (
    AdmittedCapturePlan,
    AdmittedInterventionPlan,
    Axis,
    BackendCapabilities,
    CaptureCheckpoint,
    CapturedStep,
    CaptureDiscovery,
    CaptureLimits,
    CaptureObserver,
    CaptureOutcome,
    CapturePayload,
    CapturePhase,
    CapturePlan,
    CaptureRecord,
    CaptureRequest,
    CaptureSchedule,
    CaptureSelection,
    CaptureSession,
    CaptureSlice,
    CaptureTransform,
    CaptureUsage,
    EvidenceKind,
    GroupSelectionControl,
    InterventionAction,
    InterventionOperation,
    InterventionOutcome,
    InterventionPlan,
    InterventionRecord,
    InterventionRequest,
    ObservationPoint,
    OnLimit,
    PhaseSupport,
    PointPosition,
    PreparedCaptureRestore,
    ResolvedSlice,
    RoutingPolicy,
    TransformKind,
    TransformRequest,
    ValueDtype,
)
from . import _value_protocol, interventions
from .payloads import Candidates, Histogram, Summary
from .backends import CountingBackend, MockTensor, NumpyBackend
from .plans import limits, unlimited
from .session import StepResult, capture_step

__all__ = [
    "AdmittedCapturePlan", "AdmittedInterventionPlan", "Axis", "BackendCapabilities", "CaptureCheckpoint",
    "CapturedStep", "CaptureDiscovery", "CaptureLimits", "CaptureOutcome", "CapturePayload", "CapturePhase",
    "CapturePlan", "CaptureRecord", "CaptureRequest", "CaptureSchedule", "CaptureSelection", "CaptureSession",
    "CaptureSlice", "CaptureTransform", "CaptureUsage", "EvidenceKind", "GroupSelectionControl",
    "InterventionAction", "InterventionOperation", "InterventionOutcome", "InterventionPlan", "InterventionRecord",
    "InterventionRequest", "ObservationPoint", "OnLimit", "PhaseSupport", "PointPosition", "PreparedCaptureRestore",
    "ResolvedSlice", "RoutingPolicy", "TransformKind", "TransformRequest", "ValueDtype", "interventions",
    "CountingBackend", "MockTensor", "NumpyBackend", "unlimited", "limits", "capture_step", "StepResult", "CaptureObserver",
    "Summary", "Histogram", "Candidates",
]
# Summary, Histogram and Candidates are the values of payload.summary / .histogram / .candidates:
# exported for annotations, built by the payload, not by callers. TorchBackend is importable
# here but not exported: a star import would import torch.

if TYPE_CHECKING:
    # A checker sees the lazy name as what it is, and a misspelled name as missing.
    from .backends.torch_backend import TorchBackend as TorchBackend
else:
    def __getattr__(name: str) -> Any:
        # The PyTorch backend imports torch; load it only when asked for.
        if name == "TorchBackend":
            from .backends.torch_backend import TorchBackend

            return TorchBackend
        raise AttributeError(f"module 'lifecore.capture' has no attribute {name!r}")


# Plans, discoveries and what they are built of compare, hash, copy and pickle by value.
_value_protocol.install()

# Last: what this module exports answers a call it cannot bind with LifecoreTypeError.
_python_guard.install(__name__)
