"""The conservative cost model shared by the backends (and by the tests' reference model).

Both halves are the core's: what a transform keeps is its cost table (``transform_size``), and
its price is ``transform_usage``, the same function the session applies to a backend's
``describe`` facts. A tensor payload (preview, slice, full tensor) is charged at its real
bytes, elements kept x itemsize; a reduction at 8 bytes per number.

Encoded bytes follow the core's JSON writer: each number takes at most 25 bytes (the
shortest round-trip form and a comma), each shape entry at most 21, 128 per payload.
"""

from __future__ import annotations

from math import prod
from typing import Sequence

from ..._core.capture import CaptureUsage, TransformKind, transform_size, transform_usage

NUMBER_BYTES = 25
SHAPE_ENTRY_BYTES = 21
PAYLOAD_OVERHEAD = 128
UINT64_MAX = 2**64 - 1


def payload_numbers(kind: TransformKind, selected_shape: Sequence[int], max_elements: int = 0,
                    edges: Sequence[float] = (), count: int = 0) -> int:
    """How many numbers a payload of this transform holds at most (the core's cost table)."""
    return transform_size(kind, prod(selected_shape), max_elements=max_elements, edge_count=len(edges),
                          count=count)[1]


def payload_cost(kind: TransformKind, selected_shape: Sequence[int], itemsize: int, *, max_elements: int = 0,
                 edges: Sequence[float] = (), count: int = 0, host_copy: bool = True) -> CaptureUsage:
    """Usage of one transform: 1 capture, the payload's real bytes retained, host bytes for
    what crosses to the host (the whole region when ``host_copy``), encoded JSON bytes."""
    usage = transform_usage(kind, list(selected_shape), itemsize, max_elements=max_elements, edge_count=len(edges),
                            count=count, on_host=host_copy)
    if UINT64_MAX in (usage.retained_bytes, usage.host_bytes, usage.encoded_bytes):
        # The core saturates; a backend's own estimate past 64 bits is an overflow error, as
        # it always was: rebuild the usage from the exact figures.
        numbers = payload_numbers(kind, selected_shape, max_elements, edges, count)
        kept = transform_size(kind, prod(selected_shape), max_elements=max_elements, edge_count=len(edges),
                              count=count)[0]
        tensor_payload = kind in (TransformKind.PREVIEW, TransformKind.SLICE, TransformKind.FULL_TENSOR)
        region = prod(selected_shape) * itemsize
        return CaptureUsage(1, kept * itemsize if tensor_payload else numbers * 8,
                            region if host_copy or tensor_payload else numbers * 8,
                            PAYLOAD_OVERHEAD + NUMBER_BYTES * numbers + SHAPE_ENTRY_BYTES * len(selected_shape))
    return usage
