"""Backends: where tensor work happens. The session calls ``shape``, ``dtype``,
``estimate`` (side-effect free; an unknown cost raises, it is never zero), ``transform``
(only after the cost was reserved) and ``intervene``. A backend keeps no tensor handles."""

from __future__ import annotations

from .cost import payload_cost
from .counting import CountingBackend, MockTensor
from .numpy_backend import NumpyBackend

__all__ = ["payload_cost", "CountingBackend", "MockTensor", "NumpyBackend"]
