"""The core's one cost table of transforms: the backends' charges and the admission floor
both read it, and a backend's payload holds exactly the numbers it counts."""

from __future__ import annotations

from math import prod

import numpy as np
import pytest

from lifecore._core.capture import transform_floor, transform_size
from lifecore.capture import (
    CapturePhase,
    CaptureSelection,
    CaptureSlice,
    CaptureTransform,
    CaptureUsage,
    NumpyBackend,
    TransformKind,
)
from lifecore.capture.backends import payload_cost
from lifecore.capture.backends.cost import payload_numbers
from lifecore.errors import LifecoreOverflowError, LifecoreTypeError

import capture_builders

SHAPE = (1, 4, 8)  # the sample catalog's blocks.0.mlp
ELEMENTS = 32

# One transform of every kind, with the (elements kept, numbers held) the table gives it
# over 32 selected elements.
ROWS = {
    TransformKind.PREVIEW: (CaptureTransform.preview(5), (5, 5)),
    TransformKind.SLICE: (CaptureTransform.slice(), (32, 32)),
    TransformKind.FULL_TENSOR: (CaptureTransform.full_tensor(), (32, 32)),
    TransformKind.SUMMARY: (CaptureTransform.summary(), (0, 6)),
    TransformKind.HISTOGRAM: (CaptureTransform.histogram([-1.0, 0.0, 1.0, 4.0]), (0, 7)),
    TransformKind.TOP_CANDIDATES: (CaptureTransform.top_candidates(3), (0, 6)),
}


def size_of(t: CaptureTransform, elements: int = ELEMENTS) -> tuple[int, int]:
    return transform_size(t.kind, elements, max_elements=t.max_elements, edge_count=len(t.edges), count=t.count)


def numbers_in(payload) -> int:
    if payload.kind == "summary":
        return 6  # count, nonfinite, min, max, mean, std
    if payload.kind == "tensor":
        return payload.tensor.size
    if payload.kind == "histogram":
        return payload.bin_edges.size + payload.counts.size
    return payload.candidate_ids.size + payload.scores.size


def test_every_transform_kind_has_a_row():
    assert set(ROWS) == set(TransformKind.__members__.values())


@pytest.mark.parametrize("kind", list(ROWS), ids=lambda k: k.name)
def test_the_table_gives_each_kind_its_size(kind):
    transform, expected = ROWS[kind]
    assert size_of(transform) == expected
    kept, numbers = expected
    assert transform_floor(transform, ELEMENTS, 4) == CaptureUsage(1, 4 * numbers, 4 * kept, 2 * numbers)


@pytest.mark.parametrize("kind", list(ROWS), ids=lambda k: k.name)
def test_a_backend_charges_and_emits_what_the_table_counts(kind):
    transform, (_, numbers) = ROWS[kind]
    # Top candidates read the logits; everything else the hidden state, the slice over all of it.
    path, shape = ("logits", (1, 4, 16)) if kind == TransformKind.TOP_CANDIDATES else ("blocks.0.mlp", SHAPE)
    slices = [CaptureSlice("d", 0, 8)] if kind == TransformKind.SLICE else []
    session = capture_builders.session_for(CaptureSelection("s", path, transform, slices=slices))
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(NumpyBackend(), path, np.linspace(-2.0, 2.0, prod(shape), dtype=np.float32).reshape(shape))
    (record,) = session.take_step().records
    assert numbers_in(record.payload) == numbers
    args = dict(max_elements=transform.max_elements, edges=transform.edges, count=transform.count)
    assert payload_numbers(kind, shape, **args) == numbers
    charge, floor = payload_cost(kind, shape, 4, **args), transform_floor(transform, prod(shape), 4)
    # A tensor payload is charged its real bytes (float32 here), a reduction 8 per number.
    tensor_payload = kind in (TransformKind.PREVIEW, TransformKind.SLICE, TransformKind.FULL_TENSOR)
    assert charge.retained_bytes == (4 if tensor_payload else 8) * numbers
    assert record.charged.retained_bytes == charge.retained_bytes
    assert record.payload.nbytes == (4 if tensor_payload else 8) * numbers
    for field in ("captures", "retained_bytes", "host_bytes", "encoded_bytes"):  # the floor is a lower bound
        assert getattr(floor, field) <= getattr(charge, field), field


def test_a_size_past_64_bits_saturates():
    assert size_of(CaptureTransform.top_candidates(2**63)) == (0, 2**64 - 1)
    assert transform_floor(CaptureTransform.full_tensor(), 2**62, 8).retained_bytes == 2**64 - 1


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(LifecoreTypeError, match="kind"):
        transform_size("summary", 1)
    with pytest.raises(LifecoreOverflowError, match="selected_elements"):
        transform_size(TransformKind.SLICE, 2**64)
    with pytest.raises(LifecoreTypeError, match="transform"):
        transform_floor(TransformKind.SLICE, 1, 4)


# ---- the pure cost model (lifecore.models.capture_cost) against the core's table

from hypothesis import given, strategies as st

from lifecore.models import capture_cost

_KINDS = list(ROWS)
_SIZES = st.one_of(st.integers(0, 64), st.integers(0, 2**64 - 1))


@given(kind=st.sampled_from(_KINDS), shape=st.lists(_SIZES, max_size=4), itemsize=st.sampled_from([1, 2, 4, 8, 16]),
       max_elements=_SIZES, edges=st.integers(0, 40), count=_SIZES, on_host=st.booleans())
def test_the_pure_cost_model_prices_as_the_core_does(kind, shape, itemsize, max_elements, edges, count, on_host):
    """The machines expect the model's prices; the core's must be the same, saturation included."""
    name = kind.name.lower()
    edge_list = [float(i) for i in range(edges)]
    core = payload_cost(kind, shape, itemsize, max_elements=max_elements, edges=edge_list, count=count, host_copy=on_host)
    pure = capture_cost.transform_usage(name, shape, itemsize, max_elements=max_elements, edge_count=edges,
                                        count=count, on_host=on_host)
    assert pure.astuple() == core.as_tuple()
    elements = min(prod(shape), 2**64 - 1)
    transform = {TransformKind.PREVIEW: lambda: CaptureTransform.preview(max(max_elements, 1)),
                 TransformKind.SLICE: CaptureTransform.slice, TransformKind.FULL_TENSOR: CaptureTransform.full_tensor,
                 TransformKind.SUMMARY: CaptureTransform.summary,
                 TransformKind.HISTOGRAM: lambda: CaptureTransform.histogram([float(i) for i in range(max(edges, 2))]),
                 TransformKind.TOP_CANDIDATES: lambda: CaptureTransform.top_candidates(max(min(count, 2**32), 1)),
                 }[kind]()
    floor = transform_floor(transform, elements, itemsize)
    pure_floor = capture_cost.transform_floor(name, elements, itemsize, max_elements=transform.max_elements,
                                              edge_count=len(transform.edges), count=transform.count)
    assert pure_floor.astuple() == floor.as_tuple()


def test_the_capture_machine_finds_a_wrong_price(monkeypatch):
    """A backend charging half the host bytes the cost table says (the counting backend prices
    through the core's table, patched here) disagrees with the pure model's expectation."""
    from hypothesis import settings

    from lifecore.capture.backends import cost
    from lifecore.testing import CaptureSessionMachine

    priced = cost.transform_usage

    def cheap(*args, **kwargs):
        usage = priced(*args, **kwargs)
        usage.host_bytes //= 2
        return usage

    monkeypatch.setattr(cost, "transform_usage", cheap)
    with pytest.raises(AssertionError, match="host_bytes"):
        CaptureSessionMachine.run(settings=settings(max_examples=150, stateful_step_count=20, deadline=None,
                                                    report_multiple_bugs=False, print_blob=False), seed=0)
