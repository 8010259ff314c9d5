"""Activation capture on the engine's model through ``lifecore.torch``.

One capture session covers the engine's life: every forward of every ``generate`` (a prefill,
a decode iteration) is one capture step, and each layer's output (``layers.<i>``,
``[rows, d_model]``) is summarised under one cumulative byte budget (a second run adds to what
the first used, and to its skips); a step that would pass the budget is recorded as skipped
(``OnLimit.SKIP``), never as a failure, and only counted: the records the engine keeps are its
captures, so the budget bounds them however long it runs. An optional intervention scales one layer's output,
which changes the tokens the engine generates.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from ..capture import (Axis, CaptureDiscovery, CaptureOutcome, CapturePayload, CapturePhase, CapturePlan,
                       CaptureRequest, CaptureSelection, CaptureSession, CaptureTransform, InterventionPlan,
                       ObservationPoint, OnLimit, interventions, limits)
from ..errors import InvalidArgumentError, LifecoreTypeError
from .._torch_hooks import finish_despite_interrupts
from .model import Transformer, check_float_dtype

__all__ = ["CaptureOptions", "EngineCapture"]

# Decode iterations a session may number (predictions 1..); far beyond any run of the engine.
MAX_PREDICTIONS = 1 << 30

class _Stepping:
    """The thread running the engine's capture step (0 between steps): its hooks observe that
    thread's forwards alone. Apart from the EngineCapture, so the hooks never refer to it (a
    cycle through the model's hooks only the collector frees)."""

    thread = 0


@dataclass
class CaptureOptions:
    """``budget_bytes``: the cumulative budget of retained bytes, for the engine's life (every
    ``generate`` draws on it); ``scale``: ``(layer, factor)`` to scale one layer's output, or None."""

    budget_bytes: int = 64 * 1024
    scale: Optional[tuple[int, float]] = None

    def check(self, layers: int, dtype: Any = None) -> None:
        """Raises ``LifecoreTypeError`` / ``InvalidArgumentError``, naming the field, unless
        ``budget_bytes`` is an int in 0 .. 2**64 - 1 and ``scale`` is None or a
        ``(layer, factor)`` with a layer of the model's ``layers`` and a factor finite in
        ``dtype`` (the model's torch dtype; in float64 when None): a factor the layer's output
        cannot hold would fail every step's intervention."""
        if isinstance(layers, bool) or not isinstance(layers, int):
            raise LifecoreTypeError(f"CaptureOptions.check: argument 'layers' must be an int, got {type(layers).__name__}")
        if layers < 1:
            raise InvalidArgumentError(f"CaptureOptions.check: argument 'layers' must be at least 1, got {layers}")
        if dtype is not None:
            check_float_dtype("CaptureOptions.check", dtype)
        budget = self.budget_bytes
        if isinstance(budget, bool) or not isinstance(budget, int):
            raise LifecoreTypeError(f"CaptureOptions: budget_bytes must be an int, got {type(budget).__name__}")
        if not 0 <= budget < 1 << 64:
            raise InvalidArgumentError(f"CaptureOptions: budget_bytes must be between 0 and 2**64 - 1, got {budget}")
        if self.scale is None:
            return
        if not isinstance(self.scale, tuple) or len(self.scale) != 2:
            raise LifecoreTypeError(f"CaptureOptions: scale must be a (layer, factor) tuple or None, "
                                    f"got {self.scale!r}")
        layer, factor = self.scale
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise LifecoreTypeError(f"CaptureOptions: scale's layer must be an int, got {type(layer).__name__}")
        if not 0 <= layer < layers:
            raise InvalidArgumentError(f"CaptureOptions: scale's layer must be between 0 and {layers - 1} (the "
                                       f"model's layers), got {layer}")
        if isinstance(factor, bool) or not isinstance(factor, (int, float)):
            raise LifecoreTypeError(f"CaptureOptions: scale's factor must be a number, got {type(factor).__name__}")
        try:
            value = float(factor)
        except OverflowError:  # an int past a float's range
            value = math.inf
        if not math.isfinite(value):
            shown = f"an int of {factor.bit_length()} bits" if isinstance(factor, int) else repr(factor)
            raise InvalidArgumentError(f"CaptureOptions: scale's factor must be finite, got {shown}")
        if dtype is not None:
            import torch

            from ..capture.backends.torch_backend import _rounded_once

            # Rounded once, as the backend rounds it (torch's own cast rounds twice into half
            # precision, and would refuse a factor the backend applies)
            if not bool(torch.isfinite(_rounded_once([value], dtype)).all()):
                raise InvalidArgumentError(f"CaptureOptions: scale's factor {factor!r} is past what {dtype} (the "
                                           f"model's dtype) holds; the scaled layer's output could not take it")


@dataclass
class EngineCapture:
    """An Engine's capture (``Engine.capture``): one CaptureSession over the model's blocks, the
    points captured so far (``records``: phase, prediction, selection id and payload, in the
    order the steps ran) and how many points were captured and skipped on the budget. A skipped
    point is only counted, so ``records`` stays within the byte budget however many steps pass
    it; a point a forward that raised never reached is neither."""

    model: Transformer
    options: CaptureOptions
    session: CaptureSession = field(init=False)
    # (phase, prediction, selection id, payload) per captured point, in the order the steps ran
    records: list[tuple[CapturePhase, int, str, CapturePayload]] = field(default_factory=list)
    captured: int = 0
    skipped: int = 0

    def __post_init__(self) -> None:
        from ..torch import TorchBackend, _attach

        self.options.check(self.model.config.layers, next(self.model.parameters()).dtype)
        d = self.model.config.d_model
        paths = [f"layers.{i}" for i in range(self.model.config.layers)]
        discovery = CaptureDiscovery("lifecore-engine", [
            ObservationPoint(path, [Axis("rows", "unknown"), Axis("d", d)]) for path in paths])
        huge = 1 << 60
        budget = limits(per_step=(huge, huge, huge, huge),
                        cumulative=(huge, self.options.budget_bytes, huge, huge), on_limit=OnLimit.SKIP)
        plan = CapturePlan([CaptureSelection(path, path, CaptureTransform.summary()) for path in paths], budget)
        self.session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 1, MAX_PREDICTIONS)), discovery)
        backend = TorchBackend()
        if self.options.scale is not None:
            layer, factor = self.options.scale
            op = interventions.scale("scale", f"layers.{layer}", factor)
            self.session.enable_interventions(InterventionPlan([op]).admit(discovery, self.session), backend)
        # Its hooks serve its own steps: another Engine's forwards through the same Transformer
        # (capturing or not, on any thread), and any forward between steps, pass by.
        self._stepping = stepping = _Stepping()
        ident = threading.get_ident
        self.attachment: Any = _attach(self.session, self.model, backend, None, 0, None, keep=None,
                                       elsewhere=lambda: stepping.thread != ident())

    def begin(self, prefill: bool, iteration: int) -> None:
        if self.session.step_pending:
            # A step a Ctrl-C left undrained (one landing as end() was entered): its forward
            # never completed, so its records are dropped, and this step can begin.
            self.session.take_step()
        if prefill:
            self.session.begin_step(CapturePhase.PREFILL, 0)
        else:
            self.session.begin_step(CapturePhase.DECODE, iteration)
        self._stepping.thread = threading.get_ident()

    def end(self, completed: bool = True) -> None:
        """Drains the step. A forward that raised (``completed`` False) never finished its
        interventions: checking them would only mask its error; the step is drained all the
        same, or the next could not begin."""
        self._stepping.thread = 0
        try:
            if completed and self.session.intervention_plan is not None:
                self.session.finish_interventions()
        finally:
            step = self.session.take_step()
        if step is None:
            return
        for record in step.records:
            payload = record.payload  # a captured summary always has one
            if record.outcome != CaptureOutcome.CAPTURED or payload is None:
                # Only the budget skips; a point a raising forward never reached is no skip
                self.skipped += record.outcome == CaptureOutcome.SKIPPED
                continue
            self.captured += 1
            self.records.append((step.phase, step.prediction, record.selection_id, payload))

    @property
    def used_bytes(self) -> int:
        return int(self.session.cumulative_usage().retained_bytes)

    def close(self) -> None:
        finish_despite_interrupts(self.attachment.detach)  # no hook left behind by a Ctrl-C
