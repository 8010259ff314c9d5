"""The graph-replay benchmark (lifecore beside torch / CuPy graphs): it runs and reports here.

No timing is asserted (benchmarks print ratios; tests only check that the figures exist, the
replays computed the right values, and the framework comparisons skip with a reason)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import lifecore
from lifecore.testing.gpu_replay_benchmarks import compare_replay, cupy_unavailable_reason, torch_unavailable_reason

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_graph_replay.py"


def test_compare_replay_on_the_mock_skips_the_frameworks_with_reasons() -> None:
    result = compare_replay(lambda: lifecore.Device("mock"), (10, 20), repeat=1, min_seconds=0.001)
    assert result["backend"] == "mock"
    assert [row["N"] for row in result["rows"]] == [10, 20]
    for row in result["rows"]:
        assert row["correct"] and row["eager_us"] > 0 and row["replay_us"] > 0 and row["capture_us"] > 0
    assert set(result["skipped"]) == {"torch", "cupy"}
    assert all("cuda backend" in reason for reason in result["skipped"].values())


def test_the_script_writes_json(tmp_path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--backend", "mock", "--quick", "--sizes", "10",
                           "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "torch skipped" in done.stdout and "capture_us" in done.stdout
    figures = json.loads(out.read_text())
    assert figures["rows"][0]["N"] == 10 and figures["rows"][0]["correct"] is True


def test_an_unavailable_backend_is_a_clean_failure() -> None:
    missing = [b.name for b in lifecore.backends() if not b.available]
    if not missing:
        pytest.skip("every backend is available here")
    done = subprocess.run([sys.executable, str(SCRIPT), "--backend", missing[0], "--quick"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_non_cuda_backends_never_touch_the_frameworks() -> None:
    assert "cuda backend" in torch_unavailable_reason("mock")
    assert "cuda backend" in cupy_unavailable_reason("hip")


@pytest.mark.no_sanitizer
def test_torch_graphs_beside_lifecore_on_cuda() -> None:
    info = [b for b in lifecore.backends() if b.name == "cuda"][0]
    if not info.available:
        pytest.skip(f"no CUDA device: {info.reason}")
    reason = torch_unavailable_reason("cuda")
    if reason:
        pytest.skip(reason)
    result = compare_replay(lambda: lifecore.Device("cuda"), (10,), repeat=1, min_seconds=0.001)
    row = result["rows"][0]
    assert row["correct"] and row["torch_correct"] and row["torch_replay_us"] > 0
