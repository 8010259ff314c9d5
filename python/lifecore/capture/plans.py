"""Conveniences for building capture limits."""

from __future__ import annotations

from typing import Literal

from .._core.capture import CaptureLimits, CaptureUsage, OnLimit
from ..errors import InvalidArgumentError, LifecoreTypeError

_BIG = 2**62


def unlimited(on_limit: OnLimit = OnLimit.FAIL) -> CaptureLimits:
    """Limits so large that no realistic run reaches them (useful in examples and tests)."""
    big = CaptureUsage(_BIG, _BIG, _BIG, _BIG)
    return CaptureLimits(per_step=big, cumulative=big, on_limit=on_limit)


def limits(
    *,
    per_step: tuple[int, int, int, int] | list[int] | CaptureUsage,
    cumulative: tuple[int, int, int, int] | list[int] | CaptureUsage,
    on_limit: OnLimit | Literal["fail", "skip"] = OnLimit.FAIL,
) -> CaptureLimits:
    """Limits from (captures, retained_bytes, host_bytes, encoded_bytes) tuples (or lists)."""
    def usage(name: str, value: tuple[int, int, int, int] | list[int] | CaptureUsage) -> CaptureUsage:
        if isinstance(value, CaptureUsage):
            return value
        if not isinstance(value, (tuple, list)) or len(value) != 4:
            raise LifecoreTypeError(f"limits: argument '{name}' must be a CaptureUsage or a tuple of four ints "
                                    f"(captures, retained_bytes, host_bytes, encoded_bytes), got {value!r}")
        return CaptureUsage(*value)

    if isinstance(on_limit, str):
        policies = {"fail": OnLimit.FAIL, "skip": OnLimit.SKIP}
        if on_limit not in policies:
            raise InvalidArgumentError(f"limits: argument 'on_limit' must be 'fail', 'skip' or an OnLimit, "
                                       f"got {on_limit!r}")
        on_limit = policies[on_limit]
    return CaptureLimits(per_step=usage("per_step", per_step), cumulative=usage("cumulative", cumulative),
                         on_limit=on_limit)
