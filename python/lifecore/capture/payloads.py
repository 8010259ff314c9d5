"""Payload values: what ``payload.tensor``, ``.summary``, ``.histogram`` and ``.candidates``
give on a payload (on the class they stay the constructors backends use).

- ``tensor``: the array a tensor payload keeps (a NumPy array from the NumPy backend, a host
  torch tensor from the torch backend) in the source dtype and the selected shape; a payload
  built from numbers (``CapturePayload.tensor(shape, values)``) gives a float64 NumPy array.
- ``summary``: a :class:`Summary` (count, nonfinite, min, max, mean, std); ``stats`` is
  ``[min, max, mean, std]`` as a float64 array.
- ``histogram``: a :class:`Histogram` (``bin_edges`` float64, ``counts`` int64).
- ``candidates``: :class:`Candidates` (``ids`` int64, ``scores`` float64), best first.

Each is None on a payload of another kind. ``values`` (and ``counts`` outside histograms)
still answer as before, with a DeprecationWarning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, NamedTuple, Optional, TypeVar, cast, overload

import numpy as np
import numpy.typing as npt

from .._core.capture import CapturePayload

__all__ = ["Summary", "Histogram", "Candidates", "ValueOrConstructor"]


@dataclass(frozen=True)
class Summary:
    """A summary payload's value: the count of values, how many were not finite, and min,
    max, mean and population std of the finite ones."""

    count: int
    """How many values the summarized region held."""
    nonfinite: int
    """How many of them were NaN or infinite (left out of the statistics below)."""
    min: float
    """The smallest finite value."""
    max: float
    """The largest finite value."""
    mean: float
    """The mean of the finite values."""
    std: float
    """The population standard deviation of the finite values."""


class Histogram(NamedTuple):
    """A histogram payload's value: ``bin_edges`` (float64, one more than the bins) and
    ``counts`` (int64, values per bin; the last bin is closed, values outside the edges are not
    counted)."""

    bin_edges: npt.NDArray[np.float64]
    counts: npt.NDArray[np.int64]


class Candidates(NamedTuple):
    """A top-candidates payload's value: ``ids`` (int64) and ``scores`` (float64), best first."""

    ids: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]


C = TypeVar("C")
V = TypeVar("V")


class ValueOrConstructor(Generic[C, V]):
    """On the class: the constructor (``CapturePayload.summary(...)``); on a payload: its value."""

    def __init__(self, constructor: C, value: Callable[[Any], V], doc: str = ""):
        self._constructor, self._value = constructor, value
        made = getattr(constructor, "__doc__", None) or ""
        self.__doc__ = f"{doc}\n\nOn the class, the constructor: {made}" if doc else made

    @overload
    def __get__(self, instance: None, owner: Optional[type] = None) -> C: ...

    @overload
    def __get__(self, instance: object, owner: Optional[type] = None) -> V: ...

    def __get__(self, instance: object, owner: Optional[type] = None) -> Any:
        return self._constructor if instance is None else self._value(instance)


def _summary(p: CapturePayload) -> Optional[Summary]:
    if p.kind != "summary":
        return None
    # A summary's statistics are all present (None only on payloads of other kinds).
    count, nonfinite, low, high, mean, std = p.count, p.nonfinite, p.min, p.max, p.mean, p.std
    assert count is not None and nonfinite is not None and low is not None and high is not None
    assert mean is not None and std is not None
    return Summary(count, nonfinite, low, high, mean, std)


def _histogram(p: CapturePayload) -> Optional[Histogram]:
    if p.kind != "histogram":
        return None
    return Histogram(cast(npt.NDArray[np.float64], p.bin_edges), p.counts)


def _candidates(p: CapturePayload) -> Optional[Candidates]:
    if p.kind != "candidates":
        return None
    return Candidates(cast(npt.NDArray[np.int64], p.candidate_ids), cast(npt.NDArray[np.float64], p.scores))


def _install() -> None:
    if isinstance(CapturePayload.__dict__.get("summary"), ValueOrConstructor):
        return  # already installed (a reload)
    for name, value, doc in (
            ("tensor", lambda p: p._tensor, "On a payload: its array (NumPy or torch, in the source dtype), None "
                                            "unless a tensor, slice or preview payload."),
            ("summary", _summary, "On a payload: its Summary (count, nonfinite, min, max, mean, std), else None."),
            ("histogram", _histogram, "On a payload: its Histogram (bin_edges, counts), else None."),
            ("candidates", _candidates, "On a payload: its Candidates (ids, scores), best first, else None.")):
        setattr(CapturePayload, name, ValueOrConstructor(getattr(CapturePayload, name), value, doc))


_install()
