"""Every script in examples/ runs as written (graph capture falls back to the mock)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


def test_there_are_examples():
    assert {p.name for p in EXAMPLES} >= {"graph_capture.py", "sequence_lifecycle.py", "capture_numpy.py"}


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(script: Path):
    # An example teaches the current API: a DeprecationWarning its own code triggers fails it
    # (capture_numpy.py read candidates through the deprecated payload.counts).
    result = subprocess.run([sys.executable, "-W", "error::DeprecationWarning:__main__", str(script)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
