"""Differential run: the same seeded random steps (allocations, writes, fills, built-in kernel
launches, captures, replays, reads and the refusals a hardware capture owes) on two devices;
every observable result must be identical. Prints a summary; exits 1 at the first divergence
(with the step list), 2 when a device cannot be opened. It times nothing: every figure it prints
is a count.

    python -m lifecore.benchmarks.differential --backends mock,cuda --steps 300 --runs 5 --seed 0
"""

from __future__ import annotations

import argparse
import sys

import lifecore
from lifecore.testing.differential import parse_specs, run_differential


def main(argv: list[str] | None = None) -> int:
    from lifecore.cli import positive_int  # here: the command line is not a benchmark's import

    parser = argparse.ArgumentParser(prog="python -m lifecore.benchmarks.differential", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="mock,auto",
                        help="two devices A,B: mock, cuda, hip or auto, optionally /hardware or /software "
                             "(default mock,auto)")
    # At least 1 each: no run, or runs of no step, would compare nothing and report the devices identical.
    parser.add_argument("--steps", type=positive_int, default=300, help="steps per run (default 300)")
    parser.add_argument("--runs", type=positive_int, default=5, help="seeded runs (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first run (default 0)")
    args = parser.parse_args(argv)
    try:
        report = run_differential(parse_specs(args.backends), steps=args.steps, seed=args.seed, runs=args.runs)
    except (ValueError, lifecore.BackendUnavailableError) as error:
        print(f"differential: {error}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0 if report.identical else 1


if __name__ == "__main__":
    sys.exit(main())
