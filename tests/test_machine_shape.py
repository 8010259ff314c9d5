"""The one shape of the three lifecycles' state machines (lifecore.testing.machine): the same
construction, binding, running, statistics and comparison with the model; and a seeded run
executes the same steps every time."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, settings

import lifecore
from lifecore.capture import NumpyBackend
from lifecore.sequence import AdmissionCoordinator
from lifecore.testing import (
    STATS,
    CaptureSessionMachine,
    LifecycleMachine,
    MachineStats,
    SequenceSessionMachine,
    StreamCaptureMachine,
    run_stream_capture_machine,
)
from lifecore.testing.stream_benchmarks import machine_steps_per_second

from backend_roles import EMULATED

SMALL = settings(max_examples=4, stateful_step_count=15, deadline=None, database=None,
                 suppress_health_check=list(HealthCheck))


def _numpy_tensor(shape, dtype, itemsize):
    np = pytest.importorskip("numpy")
    return np.ones(shape, dtype={("floating", 4): np.float32, ("integer", 8): np.int64}[(dtype, itemsize)])


# Each lifecycle: its machine and a factory of the thing under test.
MACHINES = {
    "stream": (StreamCaptureMachine, lambda: lifecore.Device(EMULATED)),
    "sequence": (SequenceSessionMachine, lambda **kw: AdmissionCoordinator(None, **kw)),
    "capture": (CaptureSessionMachine, NumpyBackend),
}


def _traced_run(machine: type, factory, seed: int, **options) -> list:
    stats = machine.stats
    stats.reset()
    stats.trace = []
    try:
        machine.run(factory, settings=SMALL, seed=seed, **options)
        return list(stats.trace)
    finally:
        stats.trace = None


@pytest.mark.parametrize("lifecycle", sorted(MACHINES))
def test_every_machine_has_the_same_shape(lifecycle: str) -> None:
    machine, factory = MACHINES[lifecycle]
    assert issubclass(machine, LifecycleMachine)
    assert isinstance(machine.stats, MachineStats) and machine.stats.lifecycle
    assert len({id(m.stats) for m, _ in MACHINES.values()}) == len(MACHINES), "one statistics object per lifecycle"
    options = {"tensor_factory": _numpy_tensor} if lifecycle == "capture" else {}
    bound = machine.bind(factory, name=f"Bound{lifecycle}", **options)
    assert issubclass(bound, machine) and bound.__name__ == f"Bound{lifecycle}"
    machine.stats.reset()
    bound.run(settings=SMALL, seed=1)
    stats = machine.stats
    assert stats.runs > 0 and stats.steps > 0 and sum(stats.rules.values()) == stats.steps
    assert stats.rule_seconds > 0
    assert stats.report().startswith(f"runs {stats.runs}, steps {stats.steps}")


@pytest.mark.parametrize("lifecycle", sorted(MACHINES))
def test_the_same_seed_executes_the_same_steps(lifecycle: str) -> None:
    machine, factory = MACHINES[lifecycle]
    options = {"tensor_factory": _numpy_tensor} if lifecycle == "capture" else {}
    first = _traced_run(machine, factory, 0, **options)
    second = _traced_run(machine, factory, 0, **options)
    assert first, "the machine ran no step"
    assert first == second
    assert _traced_run(machine, factory, 5, **options) != first, "a different seed should run other steps"


_TRACE_IN_A_FRESH_PROCESS = """
import hashlib, lifecore
from hypothesis import HealthCheck, settings
from lifecore.testing import StreamCaptureMachine, emulated_backend
StreamCaptureMachine.stats.trace = []
StreamCaptureMachine.run(lambda: lifecore.Device(emulated_backend()), seed=0, settings=settings(
    max_examples=4, stateful_step_count=15, deadline=None, database=None, suppress_health_check=list(HealthCheck)))
print(hashlib.sha256(repr(StreamCaptureMachine.stats.trace).encode()).hexdigest())
"""


def test_a_seeded_run_is_the_same_in_another_process() -> None:
    """Nothing of the process (hash seed, what ran before) changes the steps of a seed."""
    here = hashlib.sha256(repr(_traced_run(StreamCaptureMachine, lambda: lifecore.Device(EMULATED), 0)).encode())
    result = subprocess.run([sys.executable, "-c", _TRACE_IN_A_FRESH_PROCESS], capture_output=True, text=True,
                            timeout=120, env={**__import__("os").environ, "PYTHONHASHSEED": "123"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == here.hexdigest()


def test_the_throughput_run_executes_the_same_workload_for_a_seed() -> None:
    rows = [machine_steps_per_second(lambda: lifecore.Device(EMULATED), examples=3, steps=20, seed=0) for _ in range(2)]
    workload = [{k: row[k] for k in ("runs", "steps", "graphs", "replays", "faults")} for row in rows]
    assert workload[0] == workload[1] and workload[0]["steps"] > 0


def test_the_old_entry_points_still_work() -> None:
    steps = STATS.steps
    run_stream_capture_machine(lambda: lifecore.Device(EMULATED, graphs="software"), settings=SMALL, seed=2)
    assert STATS.steps > steps and STATS is StreamCaptureMachine.stats
    assert STATS.graphs_sealed == STATS.events["graphs_sealed"]
    from lifecore.testing.sequence_session import SequenceMachineStats

    assert SequenceMachineStats is MachineStats


def test_machine_stats_counts_only_declared_events() -> None:
    stats = MachineStats("example", event_names=("sealed",))
    stats.count("sealed", 2)
    stats.sealed += 1
    assert stats.sealed == 3 and stats.events["sealed"] == 3
    with pytest.raises(ValueError, match="not an event"):
        stats.count("other")
    with pytest.raises(AttributeError):
        stats.other  # noqa: B018
    stats.step("rule", {"i": 1})
    stats.note("rule", "ok")
    stats.trace = []
    stats.step("rule", {"i": 2})
    assert stats.trace == [("rule", (("i", "2"),))]
    stats.reset()
    assert (stats.steps, stats.sealed, stats.trace, dict(stats.outcomes)) == (0, 0, [], {})


@pytest.mark.parametrize("lifecycle", sorted(MACHINES))
def test_a_bound_test_case_whose_backend_cannot_open_here_is_skipped_with_the_reason(lifecycle: str) -> None:
    # Machine.bind(lambda: lifecore.Device("cuda")).TestCase, collected by pytest on a runner with
    # no GPU, failed: Hypothesis took BackendUnavailableError for a bug ("Falsifying example").
    # It is skipped with the reason, as lifecore's own tests skip a backend that cannot open; any
    # other error of the factory still fails the case.
    import unittest

    from lifecore.errors import BackendUnavailableError

    machine, _ = MACHINES[lifecycle]

    def unavailable(*args, **kwargs):
        raise BackendUnavailableError("cuda: no CUDA driver here")

    def broken(*args, **kwargs):
        raise RuntimeError("the factory is broken")

    options = {"tensor_factory": _numpy_tensor} if lifecycle == "capture" else {}
    for factory, skipped, failed in ((unavailable, 1, 0), (broken, 0, 1)):
        case = machine.bind(factory, **options).TestCase
        case.settings = SMALL
        result = unittest.TestResult()
        unittest.defaultTestLoader.loadTestsFromTestCase(case).run(result)
        assert (len(result.skipped), len(result.failures) + len(result.errors)) == (skipped, failed), \
            (result.skipped, result.failures, result.errors)
        if skipped:
            assert "cuda: no CUDA driver here" in result.skipped[0][1]
