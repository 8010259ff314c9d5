"""The benchmark modules' command lines, run in a subprocess as a user would."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import lifecore

README = Path(__file__).resolve().parent.parent / "README.md"


def bench(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", f"lifecore.benchmarks.{module}", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("module,args", [
    ("state_machine", ("--examples", "0")), ("state_machine", ("--steps", "-1")),
    ("state_machine", ("--examples", "x")), ("state_machine", ("--rounds", "0")),
    ("graph_replay", ("--rounds", "0")),
    ("differential", ("--backends", "mock,mock", "--steps", "0")),
    ("differential", ("--backends", "mock,mock", "--runs", "0")),
])
def test_bad_counts_are_usage_errors(module: str, args: tuple[str, ...]) -> None:
    # Once a Hypothesis traceback and exit 1 (the status of a wrong result), or a vacuous pass.
    result = bench(module, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and f"error: argument {args[-2]}: " in result.stderr, result.stderr
    assert result.stdout == ""


def test_the_state_machine_benchmark_refuses_counts_below_one() -> None:
    from lifecore.benchmarks import state_machine

    for options in ({"examples": 0, "steps": 5}, {"examples": 2, "steps": 0}):
        with pytest.raises(ValueError, match="at least 1"):
            state_machine.run_machine_once(lambda: lifecore.Device("mock"), seed=0, **options)


def test_the_readme_state_machine_counts_are_what_the_command_prints() -> None:
    import hypothesis

    from lifecore.benchmarks import state_machine

    text = README.read_text(encoding="utf-8")
    found = re.search(r"`python -m lifecore\.benchmarks\.state_machine --examples 5 --rounds 3` with Hypothesis\s+"
                      r"(\S+(?:\s+or\s+\S+)*) \(.*?\n  (seed: 0, runs: \d+, steps: \d+, graphs: \d+, replays: \d+, "
                      r"faults: \d+)\n", text, re.S)
    assert found, "the README shows no state-machine benchmark output with its Hypothesis versions"
    versions = re.split(r"\s+or\s+", found.group(1))
    if hypothesis.__version__ not in versions:
        pytest.skip(f"the README's counts are Hypothesis {' or '.join(versions)}'s; this is {hypothesis.__version__}")
    counts = state_machine.run_machine_once(lambda: lifecore.Device(lifecore.available_backends()[0]), examples=5,
                                            steps=50, seed=0)
    assert found.group(2) == "seed: 0, " + ", ".join(f"{k}: {v}" for k, v in counts.items())


def test_graph_replay_writes_json_to_stdout_and_refuses_a_path_it_cannot_write_up_front(tmp_path) -> None:
    # Before: "-" made a file named "-", and an unwritable path failed after the whole run with
    # a traceback.
    result = subprocess.run([sys.executable, "-m", "lifecore.benchmarks.graph_replay", "--quick", "--sizes", "10",
                             "--rounds", "1", "--json", "-"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (tmp_path / "-").exists()
    assert '"runs"' in result.stdout
    refused = bench("graph_replay", "--quick", "--sizes", "10", "--json", "/proc/lifecore-replay.json")
    assert refused.returncode == 2 and "argument --json" in refused.stderr, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr and refused.stdout == ""


def test_graph_replay_refuses_bad_sizes_with_its_usage() -> None:
    # Before: "--sizes abc" printed int()'s own error ("invalid literal for int() with base 10").
    for sizes, words in (("abc", "comma-separated whole numbers, got 'abc'"), ("0", "at least 2 (+x / -x pairs), got '0'"),
                         (",", "at least 2 (+x / -x pairs), got ','"), ("10,3", "even whole numbers")):
        refused = bench("graph_replay", "--quick", "--sizes", sizes)
        assert refused.returncode == 2 and "usage:" in refused.stderr and words in refused.stderr, refused.stderr
        assert "invalid literal" not in refused.stderr and refused.stdout == ""
