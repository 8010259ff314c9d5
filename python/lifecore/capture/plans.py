"""Conveniences for building capture limits."""

from __future__ import annotations

from .._core.capture import CaptureLimits, CaptureUsage, OnLimit

_BIG = 2**62


def unlimited(on_limit: OnLimit = OnLimit.FAIL) -> CaptureLimits:
    """Limits so large that no realistic run reaches them (useful in examples and tests)."""
    big = CaptureUsage(_BIG, _BIG, _BIG, _BIG)
    return CaptureLimits(per_step=big, cumulative=big, on_limit=on_limit)


def limits(
    *,
    per_step: tuple[int, int, int, int] | CaptureUsage,
    cumulative: tuple[int, int, int, int] | CaptureUsage,
    on_limit: OnLimit | str = OnLimit.FAIL,
) -> CaptureLimits:
    """Limits from (captures, retained_bytes, host_bytes, encoded_bytes) tuples."""
    def usage(value: tuple[int, int, int, int] | CaptureUsage) -> CaptureUsage:
        return value if isinstance(value, CaptureUsage) else CaptureUsage(*value)

    if isinstance(on_limit, str):
        on_limit = {"fail": OnLimit.FAIL, "skip": OnLimit.SKIP}[on_limit]
    return CaptureLimits(per_step=usage(per_step), cumulative=usage(cumulative), on_limit=on_limit)
