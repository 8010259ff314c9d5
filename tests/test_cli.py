"""The ``lifecore`` command, run in a subprocess as a user would."""

from __future__ import annotations

import json
import subprocess
import sys

import lifecore


def run(*args: str, code: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "lifecore", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def test_info_lists_every_backend():
    result = run("info")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split()[:2] == ["backend", "available"]
    for info in lifecore.backends():
        row = next(line for line in lines if line.split()[0] == info.name)
        assert row.split()[1] == ("yes" if info.available else "no")
        if not info.available:
            assert info.reason.split()[0] in row


def test_info_works_without_hypothesis():
    code = ("import sys; sys.modules['hypothesis'] = None\n"
            "from lifecore.cli import main\n"
            "sys.exit(main(['info']))")
    result = run(code=code)
    assert result.returncode == 0, result.stderr
    assert all(name in result.stdout for name in lifecore.backend_names())


def test_check_passes_and_reports_every_check():
    result = run("check", "--examples", "2", "--steps", "15", "--seed", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every check passed" in result.stdout
    first, *others = lifecore.available_backends()
    for target in (f"{first}/hardware", f"{first}/software", *(f"{name}/" for name in others)):
        assert any(line.startswith("state machine") and target in line and "PASS" in line
                   for line in result.stdout.splitlines()), result.stdout
    assert any(line.startswith("replay benchmark") and "per launch" in line and "per node" in line
               for line in result.stdout.splitlines()), result.stdout
    assert "runs," not in result.stderr  # no progress bar: stderr is not a terminal here


def test_check_fails_when_the_implementation_disagrees_with_the_model():
    # Corrupt the reference model's count of open windows: the machine must notice, and check
    # must exit non-zero naming the failed check.
    code = ("import sys\n"
            "import lifecore.models.stream_capture as m\n"
            "m.DeviceModel.windows_active = lambda self: 7\n"
            "from lifecore.cli import main\n"
            "sys.exit(main(['check', '--examples', '3', '--steps', '10', '--seed', '3']))")
    result = run(code=code, timeout=300)
    assert result.returncode != 0, result.stdout
    assert "FAIL" in result.stdout and "check(s) failed" in result.stdout


def test_fuzz_runs_the_requested_graph_kind():
    result = run("fuzz", "--graphs", "software", "--examples", "2", "--steps", "10", "--seed", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    default = lifecore.available_backends()[0]
    assert f"{default}/software" in result.stdout and f"{default}/hardware" not in result.stdout


def test_bench_prints_the_three_measurements(tmp_path):
    out = tmp_path / "figures.json"
    result = run("bench", "--quick", "--json", str(out), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    default = lifecore.available_backends()[0]
    titles = [line for line in result.stdout.splitlines() if line.startswith(f"graph replay vs eager issue, {default}/")]
    assert [t.split("N = ")[1].split()[0] for t in titles] == ["10", "100", "1000"]
    assert "per launch" in result.stdout and "per node" in result.stdout and "eager / replay" in result.stdout
    assert "model / lifecore" in result.stdout and "steps/s" in result.stdout
    figures = json.loads(out.read_text())
    assert set(figures) == {"graph_replay", "capture_cycle", "state_machine"}
    assert [r["facts"]["N"] for r in figures["graph_replay"]["runs"]] == [10, 100, 1000]
    assert figures["state_machine"]["facts"]["seed"] == 0


def test_unknown_backend_is_a_usage_error():
    result = run("bench", "--backend", "nonesuch")
    assert result.returncode == 2
    assert "usage:" in result.stderr and "nonesuch" in result.stderr and "Traceback" not in result.stderr
    assert all(name in result.stderr for name in lifecore.backend_names())  # the registry's names


def test_the_help_offers_the_registered_backends():
    result = run("fuzz", "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert ", ".join(["auto", *lifecore.backend_names()]) in text
    assert f"(default {lifecore.available_backends()[0]})" in text


def test_an_unavailable_backend_is_a_usage_error_naming_why():
    missing = [info for info in lifecore.backends() if not info.available]
    if not missing:
        import pytest

        pytest.skip("every backend is available on this machine")
    result = run("fuzz", "--backend", missing[0].name, "--examples", "1")
    assert result.returncode == 2
    assert "not available here" in result.stderr and "Traceback" not in result.stderr


def test_out_of_range_counts_are_usage_errors():
    for args in (("fuzz", "--steps", "0"), ("fuzz", "--examples", "-1"), ("check", "--examples", "x")):
        result = run(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "usage:" in result.stderr and "Traceback" not in result.stderr


def test_version():
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"lifecore {lifecore.__version__}"


def test_no_progress_redraws_off_a_terminal():
    result = run("fuzz", "--graphs", "software", "--examples", "3", "--steps", "5", "--seed", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "\r" not in result.stderr and "runs," not in result.stderr
