"""Bounded activation capture with interventions and MoE routing control.

A :class:`CapturePlan` names what to capture; :meth:`CapturePlan.admit` checks it against a
:class:`CaptureDiscovery` (facts retained from the loaded model) and returns the only kind
of plan a :class:`CaptureSession` accepts. The session owns one monotone ledger and at most
one undrained step of records; tensors reach it through a backend (NumPy, PyTorch, or the
counting mock used in tests).
"""

from __future__ import annotations

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
    "RoutingPolicy", "TransformKind", "TransformRequest", "ValueDtype", "interventions", "CountingBackend",
    "MockTensor", "NumpyBackend", "unlimited", "limits", "capture_step", "StepResult", "CaptureObserver",
]
# Summary, Histogram and Candidates (the values of payload.summary / .histogram / .candidates)
# are importable here; they are plain value types, built by the payload, not by callers.


def __getattr__(name: str):
    # The PyTorch backend imports torch; load it only when asked for.
    if name == "TorchBackend":
        from .backends.torch_backend import TorchBackend

        return TorchBackend
    raise AttributeError(name)


# Plans, discoveries and what they are built of compare, hash, copy and pickle by value.
_value_protocol.install()

# Last: what this module exports answers a call it cannot bind with LifecoreTypeError.
_python_guard.install(__name__)
