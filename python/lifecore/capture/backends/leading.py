"""The first elements of a region in row-major order, copying no more than holds them.

A preview keeps the first ``count`` elements of its region. Flattening the whole region first
(``reshape(-1)`` / ``ravel()``) copies all of it when it is strided: a 16-element preview of an
attention mask broadcast to ``[batch, heads, tokens, tokens]`` (stride 0 along the broadcast
axes) would allocate the whole mask. Here the region is narrowed to its leading rows that hold
the prefix before it is flattened, so a copy is smaller than ``2 * count`` elements (and never
larger than the region). Works on NumPy arrays and torch tensors alike (indexing, ``shape``,
``reshape``).
"""

from __future__ import annotations

from math import prod
from typing import Any


def first_elements(region: Any, count: int) -> Any:
    """The first ``count`` elements of ``region`` (all of them when it has fewer) in row-major
    order, as a 1-D array or tensor of its dtype: a view where one exists, else a copy of
    fewer than ``2 * count`` elements."""
    shape = tuple(region.shape)
    total = prod(shape)
    if total == 0 or count >= total or len(shape) == 0:
        return region.reshape(-1)[:count]
    while len(shape) > 1:
        inner = prod(shape[1:])  # > 0: the region is not empty
        if count > inner:
            # The prefix spans more than one row: the rows that hold it, fewer than
            # count / inner + 1 of them (count < total, so within the axis).
            return region[: -(-count // inner)].reshape(-1)[:count]
        region, shape = region[0], shape[1:]  # the prefix lies in the first row
    return region[:count]  # one axis: a view, however strided
