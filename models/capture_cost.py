"""Executable specification of what a capture transform costs: the cost table (how many
elements a payload keeps and how many numbers it holds), the admission floor any conforming
backend charges at least, and the price the bundled backends charge.

Pure Python, no import of lifecore: the state machines take their expected charges from here,
so a wrong price in the core's table disagrees with this one instead of agreeing with itself.
Transform kinds are named as ``TransformKind`` members are, in lower case (``"summary"``).
Every product and sum saturates at 2**64 - 1, as the core's does: a size past 64 bits stays
beyond any limit.
"""

from __future__ import annotations

from typing import Sequence

from .capture_session import Usage

UINT64_MAX = 2**64 - 1
TENSOR_PAYLOADS = ("preview", "slice", "full_tensor")  # payloads that grow with the region
SUMMARY_NUMBERS = 6  # count, nonfinite count, min, max, mean, std
REDUCTION_NUMBER_BYTES = 8  # a reduction's number, retained and copied as a float64
FLOOR_ENCODED_BYTES_PER_NUMBER = 2  # the shortest a number and its separator can be
# The JSON writer's bound: per payload, per number (shortest round-trip form and a comma), per
# shape entry.
PAYLOAD_ENCODED_OVERHEAD = 128
ENCODED_NUMBER_BYTES = 25
ENCODED_SHAPE_ENTRY_BYTES = 21


def _saturated(value: int) -> int:
    return min(value, UINT64_MAX)


def _elements(selected_shape: Sequence[int]) -> int:
    n = 1
    for extent in selected_shape:
        n = _saturated(n * extent)
    return n


def transform_size(kind: str, selected_elements: int, *, max_elements: int = 0, edge_count: int = 0,
                   count: int = 0) -> tuple[int, int]:
    """``(elements kept, numbers held)`` by one payload of ``kind`` over a region of
    ``selected_elements``: a preview keeps at most ``max_elements``, a slice or a full tensor
    all of them; a summary holds 6 numbers, a histogram its edges and counts (2 x edges - 1),
    top candidates an id and a score each. Reductions keep no elements."""
    if kind == "preview":
        kept = min(selected_elements, max_elements)
        return kept, kept
    if kind in ("slice", "full_tensor"):
        return selected_elements, selected_elements
    if kind == "summary":
        return 0, SUMMARY_NUMBERS
    if kind == "histogram":
        return 0, max(_saturated(2 * edge_count) - 1, 0)
    if kind == "top_candidates":
        return 0, _saturated(2 * count)
    raise ValueError(f"unknown transform kind {kind!r}")


def transform_floor(kind: str, selected_elements: int, itemsize: int, *, max_elements: int = 0,
                    edge_count: int = 0, count: int = 0) -> Usage:
    """The least any conforming backend charges for one capture, known at admission: 1
    capture; retained, each number at the source's itemsize up to 8 bytes; host, the elements
    a tensor payload keeps at their itemsize (a reduction may never cross); encoded, 2 bytes a
    number."""
    kept, numbers = transform_size(kind, selected_elements, max_elements=max_elements, edge_count=edge_count,
                                   count=count)
    return Usage(1, _saturated(numbers * min(itemsize, 8)), _saturated(kept * itemsize),
                 _saturated(numbers * FLOOR_ENCODED_BYTES_PER_NUMBER))


def transform_usage(kind: str, selected_shape: Sequence[int], itemsize: int, *, max_elements: int = 0,
                    edge_count: int = 0, count: int = 0, on_host: bool = True) -> Usage:
    """What the bundled backends charge for one capture: 1 capture; retained, a tensor
    payload's real bytes (elements kept x itemsize) or 8 bytes per number of a reduction; host,
    the whole selected region's bytes where it crosses to the host (``on_host``, and always for
    a tensor payload), else 8 bytes per number; encoded, the JSON writer's bound."""
    elements = _elements(selected_shape)
    kept, numbers = transform_size(kind, elements, max_elements=max_elements, edge_count=edge_count, count=count)
    tensor_payload = kind in TENSOR_PAYLOADS
    retained = _saturated(kept * itemsize) if tensor_payload else _saturated(numbers * REDUCTION_NUMBER_BYTES)
    host = (_saturated(elements * itemsize) if on_host or tensor_payload
            else _saturated(numbers * REDUCTION_NUMBER_BYTES))
    encoded = _saturated(PAYLOAD_ENCODED_OVERHEAD + _saturated(ENCODED_NUMBER_BYTES * numbers)
                         + _saturated(ENCODED_SHAPE_ENTRY_BYTES * len(selected_shape)))
    return Usage(1, retained, host, encoded)


NATIVE_OVERHEAD = 4096  # per transform: array headers and a payload's own small buffers
TOP_CANDIDATES_ROW_BYTES = 24  # per element of the last axis: the row negated, its order, the sort's workspace


def native_peak(kind: str, selected_shape: Sequence[int], itemsize: int, reduction_bytes: dict[str, int],
                max_elements: int = 0) -> int:
    """The bound the bundled backends document for the native memory one transform holds at
    once (what their ``native_bytes`` answers): a slice or full tensor, its copy in the source
    dtype; a preview of ``max_elements``, the leading rows holding its prefix flattened (fewer
    than twice the prefix, at most the region) and two copies of the prefix; a reduction,
    ``reduction_bytes[kind]`` per element, and for top candidates 24 bytes per element of the
    last axis more; each with 4,096 bytes of overhead. Saturates at 2**64 - 1."""
    elements = _elements(selected_shape)
    if kind in ("slice", "full_tensor"):
        peak = elements * itemsize
    elif kind == "preview":
        kept = min(elements, max_elements)
        peak = (min(elements, 2 * kept) + 2 * kept) * itemsize
    else:
        row = TOP_CANDIDATES_ROW_BYTES * selected_shape[-1] if kind == "top_candidates" and selected_shape else 0
        peak = elements * reduction_bytes[kind] + row
    return _saturated(peak + NATIVE_OVERHEAD)


# The bytes per element each bundled backend documents for a reduction. NumPy works in float64:
# a summary holds the converted copy, the finite mask, the finite values and the deviations; a
# histogram the copy and the sort's copy and masks. Torch: a histogram holds the float64 values,
# those inside the edges and two int64 bin tensors at once.
NUMPY_REDUCTION_BYTES = {"summary": 25, "histogram": 24, "top_candidates": 8}
TORCH_REDUCTION_BYTES = {"summary": 25, "histogram": 40, "top_candidates": 8}
