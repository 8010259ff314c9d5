"""The capture test files, collected together in one process with LIFECORE_LEAK_WARNINGS=1, end
with no report of a core object alive at the interpreter's exit, and so do the torch capture
tests run together.

A core object made at collection (a parametrize value) is held by the collected test until the
process ends, and past the interpreter's exit when torch and hypothesis are both loaded (with a
plain Python object in its place, that object is never finalized either): nanobind then reports
it as leaked. No single file showed it; test_capture_payloads.py with any file importing torch
did. conftest's _no_native_parameter refuses such a parameter in any test; this runs the case."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# The collection imports torch where it is installed, which does not load under ASan.
pytestmark = [pytest.mark.no_sanitizer, pytest.mark.time_limit(150)]

TESTS = Path(__file__).resolve().parent


def test_running_the_torch_capture_tests_in_one_process_leaves_no_core_object_at_exit():
    """A failed observation's backend exception was kept by the observer after the call, and
    its traceback's frames (a torch hook's, holding the capture block) closed a cycle through
    the core that the collector cannot see: the complex-value tests of the short path left
    three sessions, their observers and records alive at exit."""
    pytest.importorskip("torch", reason="torch is not installed")
    files = ["test_capture_short_path.py", "test_capture_torch.py"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
        cwd=TESTS, env=dict(os.environ, LIFECORE_LEAK_WARNINGS="1"), capture_output=True, text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    leaks = [line for line in done.stderr.splitlines() if "leaked" in line]
    assert not leaks, "\n".join(leaks[:10])


def test_collecting_every_capture_test_file_in_one_process_leaves_no_core_object_at_exit():
    files = sorted(p.name for p in TESTS.glob("test_capture*.py") if p.name != Path(__file__).name)
    assert "test_capture_payloads.py" in files and "test_capture_short_path.py" in files
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", *files],
        cwd=TESTS, env=dict(os.environ, LIFECORE_LEAK_WARNINGS="1"), capture_output=True, text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    leaks = [line for line in done.stderr.splitlines() if "leaked" in line]
    assert not leaks, "\n".join(leaks[:10])
