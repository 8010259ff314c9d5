"""Backends: where tensor work happens. A backend offering ``describe(tensor) -> (shape,
itemsize, on_host)`` is priced by the core's cost model (``transform_usage``: tensor payloads
at their real bytes) and its request reused while a point's facts hold (a ``describe`` that
raises ``LifecoreTypeError`` says the tensor is none of its kind: the session refuses the
observation with it and changes nothing; any other error fails the point's records); otherwise the session
calls ``shape`` and ``estimate`` (side-effect free; an unknown cost raises, it is never zero)
every time. A backend offering ``summary_statistics(tensor, request)`` is asked a non-empty
region's SUMMARY through it instead of ``transform``: it answers ``[min, max, mean,
population std]`` when every value is finite (the session adds the count; anything else in
the list fails the capture) or a summary payload. An empty region's summary is the session's
own (count 0, NaN statistics): no backend computes it. It also calls ``dtype``, ``native_bytes``
(only under a physical native byte limit: an upper bound of the native bytes the transform
holds at once, as ``cost.native_peak`` gives for the bundled backends; a backend without it
fails such captures), ``transform`` (only after the cost
was reserved; a tensor payload is ``CapturePayload.from_array`` of a copy in the source
dtype, and may never keep more bytes than were charged) and ``intervene``. A replacement
``intervene`` returns must keep the shape, the dtype class and (where ``describe`` tells) the
element size and the host side; a backend offering ``replacement_mismatch(original,
replacement) -> str | None`` is also asked what else differs (a dtype of the same size,
another device), and a phrase fails the operation. A backend keeps
no tensor handles. An estimate is never
below the core's admission value floor (1 capture; retained bytes >= numbers kept x
min(itemsize, 8); host bytes >= elements kept x itemsize for tensor payloads; encoded
bytes >= 2 per number)."""

from __future__ import annotations

from .cost import payload_cost
from .counting import CountingBackend, MockTensor
from .numpy_backend import NumpyBackend

__all__ = ["payload_cost", "CountingBackend", "MockTensor", "NumpyBackend"]
