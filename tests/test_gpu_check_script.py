"""tools/gpu_check.sh, the script run once on a machine with an NVIDIA GPU, run here against the
fake CUDA driver (tests/fake_driver/fake_libcuda.c): its own Python checks of lifecore's CUDA
paths (backends and symbols, driver launches and a captured graph, buffers out by DLPack and
the CUDA array interface, a host array refused by launch / copy / fill, a bounded sync) must pass, and the
script must record every step, skip the unselected ones (GPU_CHECK_STEPS), write steps.json and
figures.json and exit 0. torch and CuPy are hidden from the script: their halves need a real
device, and one here would not see the fake driver's memory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import lifecore

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "gpu_check.sh"
RUN_HERE = ["backends", "driver launch figures", "buffers as tensors on cuda", "tensors in on cuda",
            "bounded sync on cuda"]


def test_gpu_check_runs_its_cuda_checks_against_the_fake_driver(fake_libcuda, tmp_path):
    for program in ("bash", "timeout"):
        if shutil.which(program) is None:
            pytest.skip(f"the script needs {program}, which this machine lacks")
    hidden = tmp_path / "hidden"
    for name in ("torch", "cupy"):
        (hidden / name).mkdir(parents=True)
        (hidden / name / "__init__.py").write_text(f"raise ImportError('{name} is hidden from this test')\n")
    package_parent = str(Path(lifecore.__file__).resolve().parents[1])  # the lifecore under test
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_CUDA_", "GPU_CHECK_"))}
    environment.update(
        PYTHONPATH=os.pathsep.join(p for p in (str(hidden), package_parent, os.environ.get("PYTHONPATH")) if p),
        LIFECORE_LIBCUDA=str(fake_libcuda), PYTHON=sys.executable, OUT=str(tmp_path / "out"),
        GPU_CHECK_WORK=str(tmp_path / "work"), GPU_CHECK_STEPS="^(" + "|".join(RUN_HERE) + ")$",
    )
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=environment, timeout=150)
    log = (tmp_path / "out" / "gpu_check.log").read_text()
    assert done.returncode == 0, done.stderr[-2000:] + log[-4000:]

    steps = json.loads((tmp_path / "out" / "steps.json").read_text())
    by_name = {step["step"]: step for step in steps}
    assert [name for name in RUN_HERE if by_name.get(name, {}).get("status") != "passed"] == [], log[-6000:]
    others = [step for step in steps if step["step"] not in RUN_HERE]
    assert others and all(step == {"step": step["step"], "status": "skipped",
                                   "reason": "not selected by GPU_CHECK_STEPS"} for step in others), others
    assert steps[-1]["step"] == "whole suite", "the script stopped before its last step"
    assert "torch half skipped" in log and "cupy half skipped" in log

    figures = json.loads((tmp_path / "out" / "figures.json").read_text())
    assert [chain["kernels"] for chain in figures["driver_launch"]["chains"]] == [1, 8, 64, 256]
    assert figures["steps"] == steps
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "figures.json", "gpu_check.log", "steps.json", "steps.jsonl"]
    assert "overall: PASS" in done.stdout
