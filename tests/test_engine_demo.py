"""``lifecore demo`` and the engine benchmark's two memories, run as a user would."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="torch is not installed")

pytestmark = pytest.mark.no_sanitizer


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lifecore", "demo", *args], capture_output=True, text=True,
                          timeout=120)


def test_demo_json_reports_the_run():
    result = demo("--requests", "12", "--seed", "3", "--capture", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["requests"] == 12 and summary["tokens generated"] > 12 * 8 - 1
    assert summary["decode iterations"] > 0 and summary["deferrals"] > 0
    assert 0 < summary["captured bytes"] <= summary["capture budget"]
    assert 0 < summary["bookkeeping share"] < 1
    assert summary["graph captures"] == 0  # the CPU runs the step eagerly


def test_demo_prints_a_table_and_no_progress_bar_off_a_terminal():
    result = demo("--requests", "6")
    assert result.returncode == 0, result.stderr
    rows = {line.split("  ")[1].strip() for line in result.stdout.splitlines() if line.strip()}
    for key in ("requests", "tokens generated", "tokens/s", "decode iterations", "deferrals", "preemptions",
                "graph captures", "graph replays", "captured bytes", "bookkeeping share"):
        assert key in rows
    assert "#" not in result.stdout and "\r" not in result.stdout


def test_demo_refuses_a_bad_option():
    result = demo("--requests", "0")
    assert result.returncode == 2 and "at least 1" in result.stderr
    result = demo("--requests", str(10**12))  # once built 10**12 requests before serving one
    assert result.returncode == 2 and "must be at most 100,000, got 1,000,000,000,000" in result.stderr
    result = demo("--seed", str(2**64))  # once torch's ValueError and a traceback
    assert result.returncode == 2 and "must be between -2**63 and 2**64 - 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_pool_past_the_device_names_what_sets_it():
    # Before: "Engine: argument 'num_blocks' ...", an option the demo does not have.
    result = demo("--preset", "gpt2-small", "--requests", "10000")
    assert result.returncode == 1, result.stderr
    assert "the demo's KV pool for 10,000 requests of preset 'gpt2-small'" in result.stderr
    assert "ask for fewer requests or a smaller preset" in result.stderr and "Traceback" not in result.stderr


def test_demo_refuses_a_device_it_cannot_run_on():
    import torch

    bad = ["nonesuch", "meta"] + ([] if torch.cuda.is_available() else ["cuda"])
    for device in bad:
        result = demo("--requests", "2", "--device", device)
        assert result.returncode == 2, (device, result.stdout, result.stderr)
        assert "--device" in result.stderr and repr(device) in result.stderr, (device, result.stderr)
        assert "Traceback" not in result.stderr and not result.stdout, (device, result.stderr)


def test_the_free_list_and_lifecore_make_the_same_decisions():
    from lifecore.benchmarks.engine import compare

    run = compare(8, "stub", rounds=1, warmup=0)
    assert run.facts["same decisions and tokens"] and run.facts["preemptions"] > 0 and run.facts["deferrals"] > 0


def test_demo_json_to_a_file_keeps_the_table_on_standard_output(tmp_path):
    """``--json PATH`` as for info, check and bench: the JSON goes to the file, the table stays."""
    path = tmp_path / "demo.json"
    result = demo("--requests", "4", "--seed", "1", "--json", str(path))
    summary = json.loads(path.read_text())
    assert summary["requests"] == 4 and summary["tokens generated"] > 0
    assert "tokens generated" in result.stdout and not result.stdout.lstrip().startswith("{")


def test_the_demo_module_takes_the_demo_commands_options():
    """``python -m lifecore.engine.demo`` ignored its arguments: ``--help`` ran the whole demo."""
    module = [sys.executable, "-m", "lifecore.engine.demo"]
    shown = subprocess.run([*module, "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "--requests" in shown.stdout and "tokens generated" not in shown.stdout
    ran = subprocess.run([*module, "--requests", "3", "--json"], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["requests"] == 3


def test_the_readmes_demo_table_shows_the_counts_the_demo_prints():
    """The README's sample of ``lifecore demo`` said 28 deferrals where the demo, whose counts repeat
    with the same seed, counts 8: every count row it shows must be what the default run counts."""
    import io
    import re
    from pathlib import Path

    from lifecore.engine.demo import run_demo

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    sample = re.search(r"`lifecore demo` serves .*?\n```\n(.*?)```", readme, re.S)
    assert sample is not None, "README.md has no sample of lifecore demo's table"
    shown = {key.strip(): value.strip() for key, value in
             (re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in sample.group(1).splitlines() if line.strip())}
    summary = run_demo(as_json=True, out=io.StringIO())  # the command's defaults
    counts = ("preset", "device", "requests", "tokens generated", "decode iterations", "deferrals", "preemptions",
              "graph captures", "graph replays", "graph pool", "captured bytes")
    assert {key: shown[key] for key in counts} == {key: str(summary[key]) for key in counts}


def test_the_demo_bound_is_the_same_in_the_command_and_the_engine():
    from lifecore.cli import MAX_DEMO_REQUESTS
    from lifecore.engine.demo import MAX_REQUESTS, run_demo

    assert MAX_DEMO_REQUESTS == MAX_REQUESTS
    with pytest.raises(ValueError, match="requests must be between 1 and 100,000, got 100,001"):
        run_demo(requests=MAX_REQUESTS + 1)
