"""The sequence-session state machine against every available page memory."""

from __future__ import annotations

import pytest
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


def _machine_holding_two_pages():
    """A machine with one open session of 2 pages in each domain, already checked once."""
    machine = SequenceSessionMachine()
    machine.admit(8, 4, None, True)  # 8 tokens at 4 a page, opened
    (entry,) = machine.entries
    assert entry.rs is not None and entry.rs.backing.pages == 2
    machine.block_ids_follow_their_contract()
    return machine, entry


def _ids_as(monkeypatch, cls, change):
    from lifecore import sequence

    real = getattr(sequence, cls).block_ids
    monkeypatch.setattr(getattr(sequence, cls), "block_ids", lambda self, domain=None: change(real(self, domain)))


def test_the_machine_checks_block_ids_against_the_domains_blocks(monkeypatch):
    # Before: ids were only compared with lifecore's other views of the same storage (a block
    # table, a decode table), so an id past the arena, shown the same everywhere, passed.
    machine, _ = _machine_holding_two_pages()
    _ids_as(monkeypatch, "BackingSnapshot", lambda ids: ids + 6)  # domain 'a' has 6 blocks: ids 0 .. 5
    with pytest.raises(AssertionError, match=r"block id \d+ of 6 blocks"):
        machine.block_ids_follow_their_contract()


def test_the_machine_checks_that_a_sequence_keeps_the_ids_it_held(monkeypatch):
    machine, _ = _machine_holding_two_pages()
    _ids_as(monkeypatch, "BackingSnapshot", lambda ids: ids[::-1].copy())  # the pages written swap blocks
    with pytest.raises(AssertionError, match="became"):
        machine.block_ids_follow_their_contract()


def test_the_machine_checks_that_a_live_frame_keeps_its_ids(monkeypatch):
    machine, entry = _machine_holding_two_pages()
    machine._acquire(entry)
    assert entry.frame is not None and entry.frame_ids
    machine.block_ids_follow_their_contract()
    _ids_as(monkeypatch, "FrameHold", lambda ids: ids[::-1].copy())
    with pytest.raises(AssertionError):
        machine.block_ids_follow_their_contract()
