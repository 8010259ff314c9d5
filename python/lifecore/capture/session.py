"""Python conveniences around :class:`CaptureSession` (the session itself is the C++ type)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

from .._core.capture import CapturedStep, CapturePhase, CaptureSession
from ..errors import LifecoreError, LifecoreTypeError


class StepResult:
    """Filled when the ``capture_step`` block ends: the drained step (``None`` only if
    ``begin_step`` itself failed)."""

    step: Optional[CapturedStep] = None
    """The drained step, set when the block ends; None until then, or if ``begin_step`` failed."""


@contextmanager
def capture_step(session: CaptureSession, prediction: int, phase: Optional[CapturePhase] = None,
                 finish_interventions: bool = True) -> Iterator[StepResult]:
    """Begins a step, runs the block, checks interventions, and always drains the records
    (a step left undrained would block the next one)::

        with capture_step(session, 0) as result:
            model(tokens)
        assert result.step is not None  # None only if begin_step failed (then the block raised)
        records = result.step.records
    """
    if not isinstance(session, CaptureSession):
        raise LifecoreTypeError(f"capture_step: argument 'session' must be a CaptureSession, got {type(session).__name__}")
    if phase is None:
        phase = CapturePhase.PREFILL if prediction == 0 else CapturePhase.DECODE
    result = StepResult()
    began = True
    try:
        try:
            session.begin_step(phase, prediction)
        except LifecoreError:
            # Refused: a pending step is not this one's to drain (another thread may have begun
            # it since a check made here). A Ctrl-C is no refusal: it may land as begin returns.
            began = False
            raise
        yield result
        if finish_interventions:
            session.finish_interventions()
    finally:
        # Whatever ended the block, a Ctrl-C as begin_step returned included: a step begun here
        # is drained, or the next could not begin.
        if began and session.step_pending:
            result.step = session.take_step()
