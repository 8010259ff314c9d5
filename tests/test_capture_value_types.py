"""What an API review found of capture's value types: equal requests and routing policies
hashed apart (a set kept both), a usage hashed by its values while they could change under
it, and a payload of another kind answered a summary's statistics with zeros."""

from __future__ import annotations

import numpy as np
import pytest

from lifecore.capture import CapturePayload, CaptureRequest, CaptureUsage, RoutingPolicy


def test_equal_requests_and_policies_hash_alike():
    assert len({CaptureRequest(1, 4, 3), CaptureRequest(1, 4, 3), CaptureRequest(2, 4, 3)}) == 2
    assert len({RoutingPolicy(8, 2), RoutingPolicy(8, 2), RoutingPolicy(8, 2, scoring="sigmoid")}) == 2
    cache = {CaptureRequest(1, 4, 3): "admitted"}
    assert cache[CaptureRequest(1, 4, 3)] == "admitted"


def test_a_usage_compares_by_value_but_is_not_hashable_as_it_can_change():
    usage = CaptureUsage(1, 2, 3, 4)
    assert usage == CaptureUsage(1, 2, 3, 4)
    with pytest.raises(TypeError, match="unhashable"):
        hash(usage)
    assert {usage.as_tuple()} == {(1, 2, 3, 4)}  # its hashable form


def test_a_payload_of_another_kind_has_no_summary_statistics():
    tensor = CapturePayload.from_array(np.full((2, 2), 5, np.float32))
    assert (tensor.count, tensor.nonfinite, tensor.min, tensor.max, tensor.mean, tensor.std) == (None,) * 6
    summary = CapturePayload.summary(4, 1, -1.0, 2.0, 0.5, 1.25)
    assert (summary.count, summary.nonfinite, summary.min, summary.max, summary.mean, summary.std) == \
        (4, 1, -1.0, 2.0, 0.5, 1.25)
