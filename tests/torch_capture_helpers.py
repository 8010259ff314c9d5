"""Steps the lifecore.torch capture tests share: a session with intervention operations enabled
through a TorchBackend, and one prefill step of a model with a session attached. For test files
that have already skipped where torch is not installed."""

from __future__ import annotations

from typing import Any, Iterable

from torch import nn

from lifecore.capture import (
    CapturedStep,
    CaptureDiscovery,
    CapturePhase,
    CaptureRequest,
    CaptureSelection,
    CaptureSession,
    InterventionOperation,
    InterventionPlan,
)
from lifecore.torch import TorchBackend, attach

from capture_builders import session_for


def intervening_session(discovery: CaptureDiscovery, request: CaptureRequest,
                        ops: Iterable[InterventionOperation], *selections: CaptureSelection) -> CaptureSession:
    """A session capturing ``selections`` over ``discovery`` for ``request``, with the plan of
    ``ops`` admitted against it and enabled through a TorchBackend."""
    session = session_for(*selections, discovery=discovery, request=request)
    session.enable_interventions(InterventionPlan(list(ops)).admit(discovery, session), TorchBackend())
    return session


def prefill_step(session: CaptureSession, model: nn.Module, *inputs: Any,
                 **attach_options: Any) -> tuple[CapturedStep, Any]:
    """``(step, output)`` of one forward ``model(*inputs)`` as the PREFILL step of prediction 0,
    with ``session`` attached for it (``attach_options`` go to attach: output_index, calls, ...)
    and detached after. The step's interventions are checked (finish_interventions, which raises
    for one scheduled that did not complete) before the step is taken. Grad mode is the caller's."""
    with attach(session, model, **attach_options):
        session.begin_step(CapturePhase.PREFILL, 0)
        output = model(*inputs)
        session.finish_interventions()
        step = session.take_step()
    return step, output
