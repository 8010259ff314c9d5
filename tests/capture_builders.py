"""Builders the capture-session tests share: admitted plans and sessions over the sample catalog
of ``lifecore.testing.capture_session`` unless a test passes its own discovery."""

from __future__ import annotations

from typing import Optional

from lifecore.capture import (
    AdmittedCapturePlan,
    CaptureDiscovery,
    CaptureLimits,
    CapturePlan,
    CaptureRequest,
    CaptureSelection,
    CaptureSession,
    unlimited,
)
from lifecore.testing.capture_session import sample_discovery

# One sequence of four prompt tokens with three predictions: the request most tests admit against.
REQUEST = CaptureRequest(1, 4, 3)


def admit(*selections: CaptureSelection, limits: Optional[CaptureLimits] = None,
          discovery: Optional[CaptureDiscovery] = None, request: CaptureRequest = REQUEST) -> AdmittedCapturePlan:
    """Admits a plan of ``selections`` (unlimited unless ``limits``) against ``discovery``
    (the sample catalog unless given) for ``request``."""
    plan = CapturePlan(list(selections), limits or unlimited())
    return plan.admit(discovery or sample_discovery(), request)


def session_for(*selections: CaptureSelection, limits: Optional[CaptureLimits] = None,
                discovery: Optional[CaptureDiscovery] = None, request: CaptureRequest = REQUEST) -> CaptureSession:
    """A capture session over the plan that :func:`admit` admits from the same arguments."""
    return CaptureSession(admit(*selections, limits=limits, discovery=discovery, request=request))
