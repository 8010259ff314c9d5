"""The graph-replay benchmark (lifecore beside torch / CuPy graphs): it runs and reports here.

No timing is asserted (benchmarks print what the harness measured; tests only check that the
figures exist, the replays computed the right values, and the framework comparisons skip with
a reason)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import lifecore
from lifecore.benchmarks.graph_replay import compare_replay, cupy_unavailable_reason, torch_unavailable_reason

from backend_roles import EMULATED, unavailable

SCRIPT = [sys.executable, "-m", "lifecore.benchmarks.graph_replay"]


def test_compare_replay_on_the_emulated_device_skips_the_frameworks_with_reasons() -> None:
    result = compare_replay(lambda: lifecore.Device(EMULATED), (10, 20), rounds=2, warmup=0, min_batch_s=0.0005)
    assert result["backend"] == EMULATED
    assert [row["N"] for row in result["rows"]] == [10, 20]
    for row in result["rows"]:
        assert row["correct"] and row["eager_us"] > 0 and row["replay_us"] > 0 and row["capture_us"] > 0
    for run in result["runs"]:
        # Per launch and per node, both sides in one interleaved run, with their per-round ratio.
        assert run["eager"].unit == "launch" and run["eager"].per == run.facts["N"]
        assert run["replay"].unit == "node" and run["replay"].per == run.facts["nodes"] == run.facts["N"]
        assert len(run["eager"].samples_ns) == len(run["replay"].samples_ns) == 2
        assert [r.name for r in run.ratios] == ["eager / replay"] and len(run.ratios[0].samples) == 2
    assert set(result["skipped"]) == {"torch", "cupy"}
    assert "torch sees as its GPU" in result["skipped"]["torch"]
    assert "CUDA array interface" in result["skipped"]["cupy"]


def test_the_script_writes_json(tmp_path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run([*SCRIPT, "--backend", EMULATED, "--quick", "--sizes", "10",
                           "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "torch skipped" in done.stdout and "eager / replay" in done.stdout
    assert "per launch" in done.stdout and "per node" in done.stdout and "per capture cycle" in done.stdout
    figures = json.loads(out.read_text())
    run = figures["runs"][0]
    assert run["facts"] == {"N": 10, "nodes": 10, "correct": True}
    assert len(run["sides"]["eager"]["samples_ns"]) == run["rounds"] == 5
    assert set(run["ratios"]) == {"eager / replay"}


def test_json_on_standard_output_is_the_json_alone() -> None:
    # The figures' text went to standard output before the JSON, which then did not parse.
    done = subprocess.run([*SCRIPT, "--backend", EMULATED, "--quick", "--sizes", "10", "--json", "-"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["runs"][0]["facts"]["correct"] is True
    assert "eager / replay" in done.stderr and "torch skipped" in done.stderr


def test_an_unavailable_backend_is_a_clean_failure() -> None:
    missing = [b.name for b in lifecore.backends() if not b.available]
    if not missing:
        pytest.skip("every backend is available here")
    done = subprocess.run([*SCRIPT, "--backend", missing[0], "--quick"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_frameworks_run_only_beside_backends_whose_memory_they_see() -> None:
    # The registry's interop facts decide: the emulated device's memory is host memory (torch device "cpu",
    # no CUDA array interface), HIP's memory has no CUDA array interface for CuPy.
    assert "torch sees as its GPU" in torch_unavailable_reason(EMULATED)
    assert "CUDA array interface" in cupy_unavailable_reason(EMULATED)
    assert "CUDA array interface" in cupy_unavailable_reason("hip")


@pytest.mark.no_sanitizer
def test_torch_graphs_beside_lifecore_on_cuda() -> None:
    info = [b for b in lifecore.backends() if b.name == "cuda"][0]
    if not info.available:
        unavailable("cuda", f"no CUDA device: {info.reason}")
    reason = torch_unavailable_reason("cuda")
    if reason:
        pytest.skip(reason)
    result = compare_replay(lambda: lifecore.Device("cuda"), (10,), rounds=2, warmup=1, min_batch_s=0.001)
    row = result["rows"][0]
    assert row["correct"] and row["torch_correct"] and row["torch_replay_us"] > 0


def test_the_older_import_paths_still_work() -> None:
    from lifecore.testing.gpu_replay_benchmarks import compare_replay as old_compare
    from lifecore.testing.stream_benchmarks import capture_cycle_vs_model, format_table, replay_vs_eager

    rows = replay_vs_eager(lambda: lifecore.Device(EMULATED), (10,), repeat=1, min_seconds=0.0005)
    assert rows[0]["N"] == 10 and rows[0]["correct"] and rows[0]["nodes"] == 10 and rows[0]["speedup"] > 0
    assert "speedup" in format_table(rows)
    assert old_compare(lambda: lifecore.Device(EMULATED), (10,), repeat=1, min_seconds=0.0005)["rows"][0]["correct"]
    cycle = capture_cycle_vs_model(lambda: lifecore.Device(EMULATED), repeat=1, min_seconds=0.0005)
    assert [row["model/lifecore"] > 0 for row in cycle] == [True, True]
