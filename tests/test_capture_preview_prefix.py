"""A preview keeps the first elements of its region without flattening the whole region: a
strided region (a mask broadcast over heads and tokens, a transposed view) was copied whole
before the prefix was cut, so a 16-element preview could allocate gigabytes. Each test here
could fail: the prefix is compared with the whole region flattened, and what a preview of a
broadcast region allocates is measured (tracemalloc for NumPy, the storage behind the prefix
for torch) against the region's size. No test allocates the region whole: a terabyte attempt
would abort a sanitized run, or be granted lazily by an overcommitting kernel."""

from __future__ import annotations

import numpy as np
import pytest

from lifecore.capture import (Axis, BackendCapabilities, CaptureDiscovery, CaptureLimits, CaptureOutcome,
                              CapturePhase, CaptureRequest, CaptureSelection, CaptureTransform, CaptureUsage,
                              NumpyBackend, ObservationPoint, OnLimit, TransformKind, ValueDtype)
from lifecore.capture.backends.cost import NATIVE_OVERHEAD, NUMPY_REDUCTION_BYTES, native_peak
from lifecore.capture.backends.leading import first_elements

from capture_builders import session_for

# 2**40 one-byte elements: a terabyte once flattened (only priced here, never allocated).
HUGE = (2**20, 2**20)
# 2**26 one-byte elements broadcast from one row: 64 MiB once flattened, 8 KiB of storage.
WIDE = (2**13, 2**13)


def _mask_discovery(**capabilities: bool) -> CaptureDiscovery:
    """One point, 'mask', of unsigned bytes in two axes of any extent."""
    point = ObservationPoint("mask", [Axis("rows", None), Axis("cols", None)], dtype=ValueDtype.INTEGER, itemsize=1)
    return CaptureDiscovery("m", [point], BackendCapabilities(**capabilities))


def _preview_record(backend, region, count: int, limits=None, **capabilities: bool):
    """The record of one preview of ``count`` elements of ``region`` at 'mask', in one step."""
    session = session_for(CaptureSelection("p", "mask", CaptureTransform.preview(count)), limits=limits,
                          discovery=_mask_discovery(**capabilities), request=CaptureRequest(1, 1, 1))
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(backend, "mask", region)
    return session.take_step().records[0]


def _regions(rng: np.random.Generator) -> list[np.ndarray]:
    base = rng.standard_normal((3, 4, 5, 6)).astype(np.float32)
    return [
        base,                                  # contiguous: every prefix is a view
        base.transpose(3, 1, 0, 2),            # permuted axes
        base[:, ::2, ::-1, 1:5],               # steps, a reversed axis, an offset
        np.broadcast_to(base[:1, :1], (7, 4, 5, 6)),  # stride 0 along the first two axes
        base[1, 2],                            # two axes
        base[0, 0, 0],                         # one strided axis
        base[:, :, :, ::3].T,                  # Fortran order
        np.array(3.5, dtype=np.float32),       # no axes
        base[:, :0],                           # empty
        base.astype(">f4")[:, 1:3],            # byte-swapped, strided
    ]


@pytest.mark.parametrize("count", [0, 1, 2, 5, 6, 7, 29, 30, 31, 119, 120, 121, 359, 360, 361, 10**6])
def test_the_prefix_is_the_flattened_regions_prefix_for_numpy(count):
    for region in _regions(np.random.default_rng(count)):
        got = first_elements(region, count)
        want = region.reshape(-1)[:count]
        assert got.ndim == 1 and got.dtype == region.dtype
        assert np.array_equal(got, want), (region.shape, region.strides, count)


def _torch_regions(torch, seed: int) -> list:
    """The layouts of _regions that torch has (no negative strides, no byte-swapped dtypes)."""
    base = torch.randn(3, 4, 5, 6, generator=torch.Generator().manual_seed(seed))
    return [
        base,                                  # contiguous
        base.permute(3, 1, 0, 2),              # permuted axes
        base[:, ::2, :, 1:5],                  # steps and an offset
        base[:1, :1].expand(7, 4, 5, 6),       # stride 0 along the first two axes
        base[1, 2],                            # two axes
        base[0, 0, 0],                         # one axis
        base[:, :, :, ::3].permute(3, 2, 1, 0),  # Fortran order
        torch.tensor(3.5),                     # no axes
        base[:, :0],                           # empty
    ]


@pytest.mark.parametrize("count", [1, 5, 6, 31, 121, 361, 10**6])
def test_the_prefix_is_the_flattened_regions_prefix_for_torch(count):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    for view in _torch_regions(torch, count):
        got = first_elements(view, count)
        assert got.dim() == 1 and got.dtype == view.dtype
        assert torch.equal(got, view.reshape(-1)[:count]), (tuple(view.shape), view.stride(), count)


def test_a_numpy_preview_of_a_broadcast_region_copies_only_its_prefix():
    """A row broadcast to 64 MiB: its 16-element preview allocates kilobytes, where flattening
    the region (what a preview did before) allocated all 64 MiB."""
    import tracemalloc

    values = np.arange(WIDE[1], dtype=np.uint8)
    region = np.broadcast_to(values, WIDE)
    tracemalloc.start()
    try:
        record = _preview_record(NumpyBackend(), region, 16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert record.outcome == CaptureOutcome.TRUNCATED, record.message
    assert record.payload.dtype == "uint8" and np.array_equal(record.payload.tensor, values[:16])
    assert record.charged.retained_bytes == 16
    assert peak < (1 << 20) < region.size, peak


def test_a_torch_preview_of_a_broadcast_region_copies_only_its_prefix():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from lifecore.torch import TorchBackend

    values = torch.arange(256, dtype=torch.uint8).repeat(WIDE[1] // 256)
    region = values.expand(*WIDE)
    for count in (300, WIDE[1] + 5):  # within the first row, and into the second
        prefix = first_elements(region, count)
        # The storage behind the prefix: the rows that hold it (a view of the first row, or a
        # copy of two), never the 64 MiB a whole flattening gives.
        assert prefix.untyped_storage().nbytes() <= 2 * WIDE[1], (count, prefix.untyped_storage().nbytes())
        assert torch.equal(prefix, torch.cat([values, values])[:count])
    record = _preview_record(TorchBackend(), region, 300)
    assert record.outcome == CaptureOutcome.TRUNCATED, record.message
    assert torch.equal(record.payload.tensor, values[:300])


def test_a_previews_native_bound_follows_its_prefix_not_its_region():
    """What native_bytes answers for a preview: the rows holding the prefix and two copies of
    it, so a physical native limit of a few kilobytes admits a 16-element preview of a large
    region (a terabyte priced, 64 MiB observed), and refuses one whose prefix would not fit."""
    assert native_peak(TransformKind.PREVIEW, list(HUGE), 1, NUMPY_REDUCTION_BYTES, 16) == 4 * 16 + NATIVE_OVERHEAD
    # A prefix the size of the region: the region flattened and two copies, at most.
    assert native_peak(TransformKind.PREVIEW, [3, 4], 4, NUMPY_REDUCTION_BYTES, 100) == 3 * 12 * 4 + NATIVE_OVERHEAD
    region = np.broadcast_to(np.zeros(WIDE[1], dtype=np.uint8), WIDE)
    big = CaptureUsage(2**62, 2**62, 2**62, 2**62)
    limits = CaptureLimits(big, big, OnLimit.SKIP, physical_native_bytes=NATIVE_OVERHEAD + 1024)
    records = [_preview_record(NumpyBackend(), region, count, limits, physical_native_limit=True)
               for count in (16, 4096)]
    assert records[0].outcome == CaptureOutcome.TRUNCATED, records[0].message
    assert records[1].outcome == CaptureOutcome.SKIPPED and records[1].budget == "physical_native_bytes"
