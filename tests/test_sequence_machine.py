"""The sequence-session state machine against every available page memory."""

from __future__ import annotations

from hypothesis.stateful import run_state_machine_as_test

from lifecore.sequence import AdmissionCoordinator
from lifecore.testing import SequenceSessionMachine
from lifecore.testing.sequence_session import STATS


def _run_machine(factory) -> None:
    STATS.reset()
    run_state_machine_as_test(lambda: SequenceSessionMachine(factory))
    assert STATS.steps > 0, "the machine ran no step"
    # the scheduler-like rules reach growth: without them extensions were a rarity
    grown = sum(n for (rule, outcome), n in STATS.outcomes.items() if outcome == "EXTENDED")
    assert grown > 0, STATS.report()
    # frames ran with participant flights, and finalized frames were used again
    dispatched = sum(n for (rule, outcome), n in STATS.outcomes.items() if outcome == "dispatch:ok")
    reused = sum(n for (rule, outcome), n in STATS.outcomes.items() if outcome.startswith("reused "))
    assert dispatched > 0 and reused > 0, STATS.report()
    # the decode tables were checked with sessions in their rows, not only empty
    assert STATS.outcomes[("decode table", "rows shown")] > 0, STATS.report()


def test_sequence_session_machine_on_host_pages():
    _run_machine(lambda **kw: AdmissionCoordinator(None, **kw))


def test_sequence_session_machine(backend_name):
    _run_machine(lambda **kw: AdmissionCoordinator(backend_name, **kw))


def test_every_run_closes_its_coordinator():
    """On a device, a coordinator holds its arena until it goes: the machine closes each one it
    made, and lets go of it, whether the run passed or failed."""
    from hypothesis import settings

    made = []

    def factory(**kw):
        made.append(AdmissionCoordinator(None, **kw))
        return made[-1]

    SequenceSessionMachine.run(factory, settings=settings(max_examples=5, stateful_step_count=10, deadline=None),
                               seed=0)
    assert made and all(c.closed for c in made), f"{sum(not c.closed for c in made)} of {len(made)} left open"
