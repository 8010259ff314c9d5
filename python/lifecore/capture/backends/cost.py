"""The conservative cost model shared by the backends (the state machines check it against
the pure model in ``lifecore.models.capture_cost``).

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
    what crosses to the host (the whole region when ``host_copy``), encoded JSON bytes. A
    figure past 64 bits saturates at 2**64 - 1, as the core's own pricing does: beyond any
    limit, so the session refuses it as a limit (skipped under ``"skip"``), never a wrapped
    number and never a failed capture."""
    return transform_usage(kind, list(selected_shape), itemsize, max_elements=max_elements, edge_count=len(edges),
                           count=count, on_host=host_copy)


# Bytes per element of the selected region that a bundled backend's reduction holds at once,
# beyond the region itself. NumPy works in float64: a summary holds the converted copy, the
# finite mask, the finite values and std's deviations (8 + 1 + 8 + 8); a histogram the copy and
# np.histogram's sorted copy and masks (measured 16.04 with uneven edges, bounded at 24); top
# candidates the copy.
# Torch: a summary at most a float copy, the mask, the finite values and their float64 copy
# (4 + 1 + 8 + 8, bounded as NumPy's); a histogram the float64 values, the values inside the
# edges, and two int64 bin tensors at once (8 + 8 + 8 + 8, bounded at 40); top candidates the
# float64 copy.
NUMPY_REDUCTION_BYTES = {TransformKind.SUMMARY: 25, TransformKind.HISTOGRAM: 24, TransformKind.TOP_CANDIDATES: 8}
NATIVE_OVERHEAD = 4096  # per transform: array headers and the payload's own small buffers
TORCH_REDUCTION_BYTES = {TransformKind.SUMMARY: 25, TransformKind.HISTOGRAM: 40, TransformKind.TOP_CANDIDATES: 8}


def native_peak(kind: TransformKind, selected_shape: Sequence[int], itemsize: int,
                reduction_bytes: dict[TransformKind, int], max_elements: int = 0) -> int:
    """An upper bound of the native memory a bundled backend's transform holds at once over a
    region of ``selected_shape`` (what ``native_bytes`` answers): a slice or full tensor its
    copy in the source dtype; a preview of ``max_elements`` the leading rows that hold its
    prefix, flattened (a strided region's are copied: fewer than twice the prefix, never more
    than the region) and two copies of the prefix (the kept one, and NumPy's conversion to
    native byte order before it); a reduction ``reduction_bytes[kind]`` per
    element, and for top candidates the last row negated, its sort order and the stable sort's
    workspace (24 bytes per element of the last axis); each with ``NATIVE_OVERHEAD`` bytes more.
    Past 64 bits it saturates at 2**64 - 1 (beyond any physical limit)."""
    elements = prod(selected_shape)
    if kind in (TransformKind.SLICE, TransformKind.FULL_TENSOR):
        peak = elements * itemsize + NATIVE_OVERHEAD
    elif kind == TransformKind.PREVIEW:
        kept = min(elements, max_elements)
        peak = (min(elements, 2 * kept) + 2 * kept) * itemsize + NATIVE_OVERHEAD
    else:
        extra = 24 * selected_shape[-1] if kind == TransformKind.TOP_CANDIDATES and len(selected_shape) else 0
        peak = elements * reduction_bytes[kind] + extra + NATIVE_OVERHEAD
    return min(peak, UINT64_MAX)  # past 64 bits: saturated, beyond any physical limit (as payload_cost)
