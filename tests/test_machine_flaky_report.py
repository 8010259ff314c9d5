"""A machine run that fails once and passes when Hypothesis replays it (on a device, timing can
decide a failure) still reports the steps of the run that failed."""

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import rule

from lifecore.testing.machine import LifecycleMachine, counted, run_machine
from lifecore.testing.machine_stats import MachineStats


class OnceFailingMachine(LifecycleMachine):
    stats = MachineStats(lifecycle="once-failing")
    failures_left = 1

    @rule(n=__import__("hypothesis").strategies.integers(0, 3))
    @counted
    def poke(self, n: int) -> None:
        if n == 3 and type(self).failures_left:
            type(self).failures_left -= 1
            raise AssertionError("the device was late this once")


def test_a_failure_the_replay_does_not_repeat_reports_the_failing_run() -> None:
    OnceFailingMachine.failures_left = 1
    quick = settings(max_examples=50, stateful_step_count=8, deadline=None, database=None, derandomize=True,
                     suppress_health_check=list(HealthCheck))
    with pytest.raises(Flaky) as raised:
        run_machine(OnceFailingMachine, settings=quick)
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    assert "The run that failed first" in notes, notes
    assert "poke(n=3)" in notes and "AssertionError: the device was late this once" in notes, notes


def test_a_failure_the_replay_repeats_is_reported_as_it_is() -> None:
    # Every run with poke(n=3) fails: Hypothesis shrinks and reports it; no note is added.
    OnceFailingMachine.failures_left = 10**9
    quick = settings(max_examples=50, stateful_step_count=8, deadline=None, database=None, derandomize=True,
                     suppress_health_check=list(HealthCheck))
    with pytest.raises(AssertionError, match="the device was late this once") as raised:
        run_machine(OnceFailingMachine, settings=quick)
    assert not isinstance(raised.value, Flaky)
    assert not any("The run that failed first" in note for note in getattr(raised.value, "__notes__", []))
