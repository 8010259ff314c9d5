"""Sizes a caller describes (shapes, item sizes, a producer's strides) are read with checked
arithmetic and read the same whatever order they come in: an empty extent empties a shape even
where the other extents' product passes 64 bits, an item size of any uint64 is named without
wrapping, and an array interface's strides are counted against its axes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import lifecore
from lifecore import InvalidArgumentError, LifecoreError, LifecoreOverflowError
from lifecore.capture import (Axis, CaptureDiscovery, CaptureOutcome, CapturePayload, CapturePhase, CapturePlan,
                              CaptureRequest, CaptureSelection, CaptureSession, CaptureTransform, ObservationPoint,
                              ValueDtype, unlimited)
from lifecore.errors import AdmissionError

from dlpack_producer import Producer

ORDERS = [(0, 2**32, 2**32), (2**32, 2**32, 0)]  # empty, with the overflowing extents first or last


def outcome(call):
    try:
        return ("accepted", call())
    except LifecoreError as error:
        return (type(error).__name__, str(error))


def test_an_empty_shape_is_empty_whatever_its_other_extents_multiply_to():
    # Before: an overflow in the leading extents stuck, so [2**32, 2**32, 0] counted 2**64 - 1
    # elements and was refused, where [0, 2**32, 2**32] was taken.
    for shape in ORDERS:
        assert list(CapturePayload.tensor(list(shape), []).shape) == list(shape)


class EmptyRegion:
    """A capture backend whose tensor has `shape`, which holds no element."""

    def __init__(self, shape):
        self._shape = shape

    def describe(self, tensor):
        return (self._shape, 4, True)

    def shape(self, tensor):
        return list(self._shape)

    def dtype(self, tensor):
        return "floating"

    def transform(self, tensor, request):
        return CapturePayload.summary(0, 0, math.nan, math.nan, math.nan, math.nan)


def test_a_summary_of_an_empty_region_is_captured_in_any_order_of_its_extents():
    # Before: the region (2**32, 2**32, 0) missed the empty region's path, and the backend's
    # summary of 0 values was refused as one "for a region of 18446744073709551615": FAILED.
    point = ObservationPoint("p", [], dtype=ValueDtype.FLOATING)  # no rank: the backend's shape is taken
    plan = CapturePlan([CaptureSelection("s", "p", CaptureTransform.summary())], unlimited())
    for shape in ORDERS:
        session = CaptureSession(plan.admit(CaptureDiscovery("m", [point]), CaptureRequest(1, 1, 2)))
        session.begin_step(CapturePhase.PREFILL, 0)
        session.observe(EmptyRegion(shape), "p", object())
        assert session.take_step().record("s").outcome == CaptureOutcome.CAPTURED, shape


def test_an_empty_dlpack_tensor_reads_the_same_in_any_order_of_its_extents():
    # Before: (2**40, 2**40, 0) was refused as an overflow where (0, 2**40, 2**40) went on to
    # the array caster, which multiplied 2**40 by 2**40 as int64 filling in the strides (an
    # overflow, undefined). Both are refused now, before any caster, as the same overflow; an
    # empty tensor whose other extents fit reads as empty in any order.
    memory = np.zeros(4, np.float32)
    orders = [(0, 2**40, 2**40), (2**40, 2**40, 0)]
    with lifecore.Device("mock") as device:
        stream = device.stream()
        buffer = stream.alloc(16)
        for shape in orders:
            with pytest.raises(LifecoreOverflowError, match=r"the product of its extents \(the empty ones left "
                                                            r"out\) passes 2\*\*63 - 1"):
                stream.write(buffer, Producer(memory.ctypes.data, shape))
            with pytest.raises(LifecoreOverflowError, match=r"the product of its extents"):
                CapturePayload.from_array(Producer(memory.ctypes.data, shape))
        fitting = [(0, 2**20, 2**20), (2**20, 2**20, 0)]
        written = [outcome(lambda: stream.write(buffer, Producer(memory.ctypes.data, shape))) for shape in fitting]
        assert written[0] == written[1]
    made = [outcome(lambda: list(CapturePayload.from_array(Producer(memory.ctypes.data, shape)).shape))
            for shape in fitting]
    assert made == [("accepted", list(shape)) for shape in fitting]


@pytest.mark.parametrize("itemsize, held", [(3, "24-bit floats, "), (1, "8-bit floats (float8), "),
                                            (2**61, f"floats of {2**61} bytes, "),
                                            (2**61 + 2, f"floats of {2**61 + 2} bytes, ")])
def test_a_float_a_payload_cannot_keep_is_named_by_its_true_size(itemsize, held):
    # Before: itemsize * 8 wrapped (2**61 read "0-bit floats", 2**61 + 2 "16-bit floats", which a
    # payload keeps), and every such size was called float8.
    point = ObservationPoint("p", [Axis("d", 4)], dtype=ValueDtype.FLOATING, itemsize=itemsize)
    plan = CapturePlan([CaptureSelection("s", "p", CaptureTransform.full_tensor())], unlimited())
    with pytest.raises(AdmissionError, match="holds " + held.replace("(", r"\(").replace(")", r"\)")):
        plan.admit(CaptureDiscovery("m", [point]), CaptureRequest(1, 4, 3))


class LyingInterface(np.ndarray):
    """A read-only array whose DLPack export is refused (as NumPy refuses a read-only array's
    unversioned export) and whose __array_interface__ gives one stride for two axes."""

    def __dlpack__(self, *args, **kwargs):
        raise BufferError("cannot export a read-only array")

    @property
    def __array_interface__(self):
        return dict(np.asarray(self).__array_interface__, shape=(4, 4), strides=(16,))


def test_an_array_interface_with_fewer_strides_than_axes_is_refused():
    # Before: the strides were read one per axis without counting them: past the end of the list.
    array = np.zeros((4, 4), np.float32).view(LyingInterface)
    array.flags.writeable = False
    with lifecore.Device("mock") as device:
        stream = device.stream()
        buffer = stream.alloc(64)
        with pytest.raises(InvalidArgumentError, match=r"argument 'src' has 1 strides for 2 axes"):
            stream.copy(buffer, array)
