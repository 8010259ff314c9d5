"""An intervention plan's limits, each at its exact boundary: at most 64 operations, operation ids
of at most 128 bytes, payloads of at most 512 KiB in all (held as float64: 65,536 elements), and
an encoded plan of at most 1 MiB. The last value inside is admitted, the first outside refused
with an AdmissionError naming the limit, and a refused admission leaves the session usable."""

from __future__ import annotations

import numpy as np
import pytest

from lifecore.capture import (
    Axis,
    CaptureDiscovery,
    CaptureSchedule,
    InterventionPlan,
    NumpyBackend,
    ObservationPoint,
    interventions as iv,
)
from lifecore.errors import AdmissionError
from lifecore.testing.capture_session import _catalog

from capture_builders import session_for

PREFILL_ONLY = CaptureSchedule(decode=False)


def discovery_with(d: int = 8, meaning: str = "") -> CaptureDiscovery:
    """The sample catalog plus a point 'wide' of [batch, seq, d], with the given meaning."""
    catalog = _catalog()
    extra = {"meaning": meaning} if meaning else {}
    catalog.append(ObservationPoint("wide", [Axis("batch", "batch"), Axis("seq", "sequence"), Axis("d", d)], **extra))
    return CaptureDiscovery("limits-artifact", catalog)


def admit(ops, discovery):
    session = session_for(discovery=discovery)
    return session, InterventionPlan(list(ops)).admit(discovery, session)


def refused(ops, discovery, fragment: str) -> None:
    session = session_for(discovery=discovery)
    with pytest.raises(AdmissionError, match=fragment):
        InterventionPlan(list(ops)).admit(discovery, session)
    # The session is untouched: a plan inside the limits is admitted and enabled on it.
    admitted = InterventionPlan([iv.zero("ok", "wide")]).admit(discovery, session)
    session.enable_interventions(admitted, NumpyBackend())


def test_sixty_four_operations_are_admitted_sixty_five_refused() -> None:
    discovery = discovery_with()
    _, admitted = admit([iv.zero(f"z{i}", "wide") for i in range(64)], discovery)
    assert admitted.identity.startswith("intervention-v1-")
    refused([iv.zero(f"z{i}", "wide") for i in range(65)], discovery, "more than 64 operations")


def test_operation_ids_of_128_bytes_are_admitted_129_refused() -> None:
    discovery = discovery_with()
    admit([iv.zero("x" * 128, "wide")], discovery)
    admit([iv.zero("é" * 64, "wide")], discovery)  # bytes, not characters: 64 two-byte characters
    refused([iv.zero("x" * 129, "wide")], discovery, "128")
    refused([iv.zero("é" * 64 + "x", "wide")], discovery, "128")
    refused([iv.zero("", "wide")], discovery, "1 to 128 bytes")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_payloads_up_to_512_kib_are_admitted(dtype) -> None:
    elements = (512 << 10) // 8
    discovery = discovery_with(elements)
    admit([iv.add("a", "wide", np.ones((1, 1, elements), dtype), schedule=CaptureSchedule(prefill=False))],
          discovery)
    # Split over two operations: the limit is for the plan's payloads in all.
    half = discovery_with(elements // 2)
    admit([iv.add("a", "wide", np.ones((1, 1, elements // 2), dtype), schedule=CaptureSchedule(prefill=False)),
           iv.add("b", "wide", np.ones((1, 1, elements // 2), dtype), schedule=CaptureSchedule(prefill=False))],
          half)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_payloads_past_512_kib_are_refused(dtype) -> None:
    elements = (512 << 10) // 8 + 1
    discovery = discovery_with(elements)
    refused([iv.add("a", "wide", np.ones((1, 1, elements), dtype), schedule=CaptureSchedule(prefill=False))],
            discovery, "512 KiB")
    half = discovery_with(elements // 2 + 1)
    refused([iv.add("a", "wide", np.ones((1, 1, elements // 2 + 1), dtype), schedule=CaptureSchedule(prefill=False)),
             iv.add("b", "wide", np.ones((1, 1, elements // 2 + 1), dtype), schedule=CaptureSchedule(prefill=False))],
            half, "512 KiB")


def test_an_encoded_plan_past_1_mib_is_refused() -> None:
    # Each operation's point is part of the plan's encoding: 64 of them with a 17,000-byte meaning
    # pass 1 MiB, while one of them (or 64 with a short meaning) stays far below.
    wide = discovery_with(meaning="m" * 17_000)
    refused([iv.zero(f"z{i}", "wide") for i in range(64)], wide, "exceeds 1 MiB")
    admit([iv.zero("z0", "wide")], wide)
    admit([iv.zero(f"z{i}", "wide") for i in range(64)], discovery_with(meaning="m" * 1_000))
