"""State-machine steps per second on the mock (what CI can afford).

Every round runs the same seeded workload: Hypothesis derandomized with a fixed seed and no
example database, so one seed always executes the same runs and steps (the run checks that
every round executed the same workload and fails if one did not). Prints the steps per
round and the time per step with steps per second, median [quartiles] over the rounds.

    python -m lifecore.benchmarks.state_machine --backend mock --seed 0
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Optional, Sequence

import lifecore
from lifecore.benchmarks.harness import Run, Side, format_run, measure

__all__ = ["machine_throughput", "run_machine_once", "main"]


def _at_least_one(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
    return value


def run_machine_once(factory: Callable[[], Any], *, examples: int, steps: int, seed: int) -> dict[str, int]:
    """One seeded machine run; returns the workload it executed (counts). ValueError for
    ``examples`` or ``steps`` below 1."""
    from hypothesis import HealthCheck, Phase, settings

    from lifecore.testing.stream_capture import STATS, run_stream_capture_machine

    _at_least_one("examples", examples)
    _at_least_one("steps", steps)
    STATS.reset()
    run_stream_capture_machine(factory, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None, derandomize=True,
        phases=[Phase.generate], suppress_health_check=list(HealthCheck), print_blob=False), seed=seed)
    return {"runs": STATS.runs, "steps": STATS.steps, "graphs": STATS.graphs_sealed, "replays": STATS.replays,
            "faults": STATS.faults_injected}


def machine_throughput(factory: Callable[[], Any], *, examples: int = 20, steps: int = 50, seed: int = 0,
                       rounds: int = 3, warmup: int = 1, backend: str = "") -> Run:
    """Times ``rounds`` identical seeded machine runs (one per round); time per step."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    workload = run_machine_once(factory, examples=examples, steps=steps, seed=seed)
    if workload["steps"] < 1:
        raise RuntimeError("the state machine executed no step")
    seen: list[dict[str, int]] = []

    def one_run() -> None:
        seen.append(run_machine_once(factory, examples=examples, steps=steps, seed=seed))

    run = measure(Side(one_run, per=workload["steps"], unit="step", rate=True), rounds=rounds, warmup=warmup,
                  inner=1, name="machine step",
                  title=f"state machine{' on ' + backend if backend else ''}, seed {seed}, "
                        f"{examples} examples of up to {steps} steps")
    different = [w for w in seen if w != workload]
    if different:
        raise RuntimeError(f"seed {seed} executed different workloads: {workload} and {different[0]}")
    run.facts.update({"seed": seed, **workload})
    return run


def main(argv: Optional[Sequence[str]] = None) -> int:
    # Here: the command line is not a benchmark's import.
    from lifecore.cli import positive_int, temporary_hypothesis_storage

    parser = argparse.ArgumentParser(prog="python -m lifecore.benchmarks.state_machine", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default=lifecore.available_backends()[0],
                        help=f"{', '.join(lifecore.backend_names())} or auto (default: the first available)")
    parser.add_argument("--graphs", default="auto", choices=["auto", "hardware", "software"])
    parser.add_argument("--examples", type=positive_int, default=20, help="machine runs per round (default 20)")
    parser.add_argument("--steps", type=positive_int, default=50, help="steps per machine run (default 50)")
    parser.add_argument("--seed", type=int, default=0, help="the workload's seed (default 0)")
    parser.add_argument("--rounds", type=positive_int, default=3, help="timed rounds (default 3)")
    args = parser.parse_args(argv)

    try:
        with temporary_hypothesis_storage():  # no .hypothesis folder left in the current one
            run = machine_throughput(lambda: lifecore.Device(args.backend, graphs=args.graphs),
                                     examples=args.examples, steps=args.steps, seed=args.seed, rounds=args.rounds,
                                     backend=args.backend)
    except (ValueError, lifecore.LifecoreError) as error:
        print(f"state_machine: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    print(format_run(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
