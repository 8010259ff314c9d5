"""Backends: where tensor work happens. The session calls ``shape``, ``dtype``,
``estimate`` (side-effect free; an unknown cost raises, it is never zero), ``native_bytes``
(only under a physical native byte limit: the peak native bytes the transform would
materialize; a backend without it fails such captures), ``transform`` (only after the cost
was reserved) and ``intervene``. A backend keeps no tensor handles. An estimate is never
below the core's admission value floor (1 capture; retained bytes >= numbers kept x
min(itemsize, 8); host bytes >= elements kept x itemsize for tensor payloads; encoded
bytes >= 2 per number)."""

from __future__ import annotations

from .cost import payload_cost
from .counting import CountingBackend, MockTensor
from .numpy_backend import NumpyBackend

__all__ = ["payload_cost", "CountingBackend", "MockTensor", "NumpyBackend"]
