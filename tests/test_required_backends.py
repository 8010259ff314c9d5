"""LIFECORE_REQUIRE: a suite bound to a backend that cannot open a device here skips, unless
the run requires that backend; then it fails, so a GPU job cannot go green having run nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import lifecore
from lifecore.testing import emulated_backend
from lifecore.testing.required import required_backends, requirement_note

pytest.importorskip("hypothesis", reason="hypothesis is not installed")

UNAVAILABLE = next((info.name for info in lifecore.backends() if not info.available), None)


def run_pytest(tmp_path, source: str, required: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_user_suite.py").write_text(textwrap.dedent(source))
    env = {k: v for k, v in os.environ.items() if k != "LIFECORE_REQUIRE"}
    if required is not None:
        env["LIFECORE_REQUIRE"] = required
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


def test_the_variable_lists_backends(monkeypatch):
    monkeypatch.setenv("LIFECORE_REQUIRE", " cuda, hip ,")
    assert required_backends() == {"cuda", "hip"}
    assert requirement_note("cuda") is not None and requirement_note("mock") is None
    assert requirement_note(None) is not None  # a factory's backend is not known: any requirement counts
    monkeypatch.setenv("LIFECORE_REQUIRE", "  ")
    assert required_backends() == frozenset() and requirement_note("cuda") is None
    for misspelled in ("CUDA", "cuda,nvidia", "cuda-12"):
        monkeypatch.setenv("LIFECORE_REQUIRE", misspelled)
        with pytest.raises(lifecore.InvalidArgumentError, match="LIFECORE_REQUIRE names no registered backend"):
            required_backends()


@pytest.mark.skipif(UNAVAILABLE is None, reason="every registered backend opens a device here")
def test_a_required_backend_that_cannot_open_fails_the_conformance_suite_and_a_bound_machine(tmp_path):
    source = f"""
        import lifecore
        from lifecore.testing import StreamCaptureMachine
        from lifecore.testing.conformance import BackendConformance

        class TestTheirBackend(BackendConformance):
            backend = {UNAVAILABLE!r}

        TestBound = StreamCaptureMachine.bind(lambda: lifecore.Device({UNAVAILABLE!r})).TestCase
    """
    skipped = run_pytest(tmp_path, source, None)
    assert skipped.returncode == 0 and " passed" not in skipped.stdout and "skipped" in skipped.stdout, skipped.stdout
    failed = run_pytest(tmp_path, source, UNAVAILABLE)
    assert failed.returncode == 1, failed.stdout
    assert f"LIFECORE_REQUIRE={UNAVAILABLE} is set, so an unavailable backend fails the test" in failed.stdout
    assert "TestBound" in failed.stdout and "TestTheirBackend" in failed.stdout
    conformance_only = "\n".join(line for line in source.splitlines() if "TestBound" not in line)
    other = run_pytest(tmp_path, conformance_only, emulated_backend())
    assert other.returncode == 0, other.stdout  # a conformance suite of a backend not listed still skips
    # A name no backend is registered under fails the run, rather than requiring nothing (before:
    # LIFECORE_REQUIRE=CUDA skipped all 133 tests and pytest exited 0).
    misspelled = run_pytest(tmp_path, conformance_only, UNAVAILABLE.upper())
    assert misspelled.returncode == 1, misspelled.stdout
    assert "LIFECORE_REQUIRE names no registered backend" in misspelled.stdout


@pytest.mark.skipif(UNAVAILABLE is None, reason="every registered backend opens a device here")
def test_the_projects_own_backend_tests_fail_for_a_required_backend_that_cannot_open():
    # Before: the backend_name fixture skipped an unavailable backend whatever the variable said,
    # so LIFECORE_REQUIRE=cuda left this project's own suite green on a broken driver.
    here = os.path.dirname(os.path.abspath(__file__))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
               os.path.join(here, "test_stream_machine.py"), "-k", UNAVAILABLE]
    env = {k: v for k, v in os.environ.items() if k not in ("LIFECORE_REQUIRE", "HYPOTHESIS_PROFILE")}
    skipped = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=here)
    assert skipped.returncode == 0 and " passed" not in skipped.stdout and "skipped" in skipped.stdout, skipped.stdout
    env["LIFECORE_REQUIRE"] = UNAVAILABLE
    failed = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=here)
    assert failed.returncode == 1, failed.stdout
    assert f"LIFECORE_REQUIRE={UNAVAILABLE} is set, so an unavailable backend fails the test" in failed.stdout


def test_a_set_but_empty_hypothesis_profile_is_the_default_one():
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, HYPOTHESIS_PROFILE="")
    collected = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--co",
                                os.path.join(here, "test_registry_api.py")],
                               capture_output=True, text=True, timeout=300, env=env, cwd=here)
    assert collected.returncode == 0, collected.stdout + collected.stderr  # before: "Profile '' is not registered"
