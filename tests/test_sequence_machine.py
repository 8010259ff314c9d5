"""The sequence-session state machine against every available page memory."""

from __future__ import annotations

import pytest
from hypothesis.stateful import run_state_machine_as_test

from lifecore.errors import BackendUnavailableError
from lifecore.sequence import AdmissionCoordinator
from lifecore.testing import SequenceSessionMachine
from lifecore.testing.sequence_session import STATS


def _mock_factory():
    try:
        AdmissionCoordinator("mock", domains={"kv": 4096}, page_bytes=4096, tokens_per_page=1, max_active_sequences=1)
    except BackendUnavailableError as error:
        pytest.skip(f"mock backend unavailable: {error}")
    return lambda **kw: AdmissionCoordinator("mock", **kw)


@pytest.mark.parametrize("backend", ["host", "mock"])
def test_sequence_session_machine(backend):
    factory = (lambda **kw: AdmissionCoordinator(None, **kw)) if backend == "host" else _mock_factory()
    STATS.reset()
    run_state_machine_as_test(lambda: SequenceSessionMachine(factory))
    assert STATS.steps > 0, "the machine ran no step"
    # the scheduler-like rules reach growth: without them extensions were a rarity
    grown = sum(n for (rule, outcome), n in STATS.outcomes.items() if outcome == "EXTENDED")
    assert grown > 0, STATS.report()
