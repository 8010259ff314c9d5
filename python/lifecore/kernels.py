"""The built-in kernels, available on every backend under the same names and parameters.

Each is a :class:`lifecore.Kernel` (``.name``, ``.params``, ``.param_names``, ``.read_only``,
``.signature``) to pass to :meth:`lifecore.Stream.launch`. Every pointer the caller passes holds
float32 elements: a tensor or a ``BufferView`` of another element type is refused, and a
``Buffer`` is taken as float32 bytes. A ``const ptr`` is only read, so a read-only tensor may be passed there:

- ``axpy_f32(n: u32, a: f32, x: const ptr, y: ptr)``: ``y = a*x + y``
- ``scale_f32(n: u32, a: f32, x: const ptr, out: ptr)``: ``out = a*x``
- ``add_f32(n: u32, x: const ptr, y: const ptr, out: ptr)``: ``out = x + y``
- ``axpy_info_f32(info: ptr, x: const ptr, y: ptr)``: like ``axpy_f32`` with ``n`` and ``a`` read from a
  metadata buffer: launch it with ``args=[x, y]`` and ``info=[n, float_bits(a)]``.
"""

from __future__ import annotations

import numbers
import struct
from typing import Any, Union

import numpy as np

from . import _python_guard
from ._core.runtime import Kernel, builtin_kernel, builtin_kernel_names
from .errors import LifecoreOverflowError, LifecoreTypeError

__all__ = ["Kernel", "axpy_f32", "scale_f32", "add_f32", "axpy_info_f32", "all_kernels", "float_bits"]

axpy_f32: Kernel = builtin_kernel("axpy_f32")
scale_f32: Kernel = builtin_kernel("scale_f32")
add_f32: Kernel = builtin_kernel("add_f32")
axpy_info_f32: Kernel = builtin_kernel("axpy_info_f32")


def all_kernels() -> list[Kernel]:
    """Every built-in kernel, in a stable order."""
    return [builtin_kernel(name) for name in builtin_kernel_names()]


# What float_bits takes, as a checker can see it: a float (an int too), a numbers.Real (a
# Fraction), a NumPy integer or float scalar. Not any __float__ (a Decimal, a tensor): those are
# refused at run time, so the annotation does not promise them.
_RealNumber = Union[float, numbers.Real, np.integer[Any], np.floating[Any]]


def float_bits(value: _RealNumber) -> int:
    """The IEEE-754 single-precision bits of ``value`` as an unsigned int (an info word).

    ``value`` is a real number: an int or a float, a NumPy integer or float scalar of any
    width, a ``Fraction`` (not a bool: LifecoreTypeError); infinities and NaN have bits, a
    finite number beyond the float32 range raises LifecoreOverflowError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # NumPy's bool is no Real
        raise LifecoreTypeError(f"float_bits: argument 'value' must be a float, got {type(value).__name__}")
    try:
        bits: int = struct.unpack("<I", struct.pack("<f", float(value)))[0]
        return bits
    except (OverflowError, struct.error):  # OverflowError: an int too large for a C double
        raise LifecoreOverflowError(f"float_bits: argument 'value' is outside the float32 range, got {value}") from None


# Last: what this module exports answers a call it cannot bind with LifecoreTypeError.
_python_guard.install(__name__)
