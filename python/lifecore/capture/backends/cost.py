"""The conservative cost model shared by the backends (and by the tests' reference model).

What a transform keeps is the core's cost table (``transform_size``); this module only prices it.

Encoded bytes follow the core's JSON writer: each number takes at most 25 bytes (the
shortest round-trip form and a comma), each shape entry at most 21.
"""

from __future__ import annotations

from math import prod
from typing import Sequence

from ..._core.capture import CaptureUsage, TransformKind, transform_size

NUMBER_BYTES = 25
SHAPE_ENTRY_BYTES = 21
PAYLOAD_OVERHEAD = 128


def payload_numbers(kind: TransformKind, selected_shape: Sequence[int], max_elements: int = 0,
                    edges: Sequence[float] = (), count: int = 0) -> int:
    """How many numbers a payload of this transform holds at most (the core's cost table)."""
    return transform_size(kind, prod(selected_shape), max_elements=max_elements, edge_count=len(edges),
                          count=count)[1]


def payload_cost(kind: TransformKind, selected_shape: Sequence[int], itemsize: int, *, max_elements: int = 0,
                 edges: Sequence[float] = (), count: int = 0, host_copy: bool = True) -> CaptureUsage:
    """Usage of one transform: 1 capture, 8 retained bytes per number kept, host bytes for
    what crosses to the host (the whole region when ``host_copy``), encoded JSON bytes."""
    numbers = payload_numbers(kind, selected_shape, max_elements, edges, count)
    region = prod(selected_shape) * itemsize
    host = region if host_copy else numbers * 8
    encoded = PAYLOAD_OVERHEAD + NUMBER_BYTES * numbers + SHAPE_ENTRY_BYTES * len(selected_shape)
    return CaptureUsage(1, numbers * 8, host, encoded)
