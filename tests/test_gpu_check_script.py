"""tools/gpu_check.sh, the script run once on a machine with an NVIDIA GPU, run here against the
fake CUDA driver (tests/fake_driver/fake_libcuda.c): its own Python checks of lifecore's CUDA
paths (backends and symbols, driver launches and a captured graph, buffers out by DLPack and
the CUDA array interface, a host array refused by launch / copy / fill, a bounded sync) must pass, and the
script must record every step, skip the unselected ones (GPU_CHECK_STEPS), write steps.json and
figures.json and exit 0. torch and CuPy are hidden from the script: their halves need a real
device, and one here would not see the fake driver's memory.

Then what the script does where things go wrong, without a GPU: where libcuda cannot be loaded,
every step that needs the cuda backend is skipped with the loader's reason (none fails); a step
past its limit is stopped with SIGABRT, so its Python stack is in the log and on stdout, and it
is recorded as a timeout; where the cuda backend is available, a pytest step in which tests were
skipped for want of a CUDA device fails."""

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
# The steps that need lifecore's cuda backend (skipped, with the loader's reason, where it is unavailable).
DEVICE_STEPS = ["driver launch figures", "stream state machine on cuda", "buffers as tensors on cuda",
                "tensors in on cuda", "captured write on cuda", "bounded sync on cuda",
                "another library's capture on cuda", "a blocking stream's capture on cuda", "device tests on cuda",
                "engine with graphs on cuda",
                "differential mock,cuda", "benchmarks"]


def run_script(tmp_path: Path, steps: list[str], *, hidden: dict[str, str] | None = None, timeout: float = 150,
               **env: str) -> tuple[subprocess.CompletedProcess, str, dict]:
    """Runs the script with only ``steps`` selected and the lifecore under test; ``hidden`` maps a
    module name to the text of a stand-in the script's Python finds first (torch and CuPy raise
    ImportError unless given). Returns the run, the log and the step records by name."""
    for program in ("bash", "timeout"):
        if shutil.which(program) is None:
            pytest.skip(f"the script needs {program}, which this machine lacks")
    stand_ins = {name: f"raise ModuleNotFoundError('{name} is hidden from this test')\n" for name in ("torch", "cupy")}
    stand_ins.update(hidden or {})
    folder = tmp_path / "hidden"
    for name, text in stand_ins.items():
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(text)
    package_parent = str(Path(lifecore.__file__).resolve().parents[1])  # the lifecore under test
    # The script sets PYTHONUNBUFFERED and PYTHONFAULTHANDLER itself: none is inherited here.
    environment = {k: v for k, v in os.environ.items() if not k.startswith(
        ("FAKE_CUDA_", "GPU_CHECK_", "LIFECORE_LIBCUDA", "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER"))}
    environment.update(
        PYTHONPATH=os.pathsep.join(p for p in (str(folder), package_parent, os.environ.get("PYTHONPATH")) if p),
        PYTHON=sys.executable, OUT=str(tmp_path / "out"), GPU_CHECK_WORK=str(tmp_path / "work"),
        GPU_CHECK_STEPS="^(" + "|".join(steps) + ")$",
    )
    environment.update(env)
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=environment, timeout=timeout)
    log = (tmp_path / "out" / "gpu_check.log").read_text()
    assert done.returncode == 0, done.stderr[-2000:] + log[-4000:]
    steps_json = json.loads((tmp_path / "out" / "steps.json").read_text())
    assert steps_json[-1]["step"] == "whole suite", "the script stopped before its last step"
    return done, log, {step["step"]: step for step in steps_json}


def test_gpu_check_runs_its_cuda_checks_against_the_fake_driver(fake_libcuda, tmp_path):
    done, log, by_name = run_script(tmp_path, RUN_HERE, LIFECORE_LIBCUDA=str(fake_libcuda))
    steps = json.loads((tmp_path / "out" / "steps.json").read_text())
    assert [name for name in RUN_HERE if by_name.get(name, {}).get("status") != "passed"] == [], log[-6000:]
    others = [step for step in steps if step["step"] not in RUN_HERE]
    assert others and all(step == {"step": step["step"], "status": "skipped",
                                   "reason": "not selected by GPU_CHECK_STEPS"} for step in others), others
    assert "torch half skipped" in log and "cupy half skipped" in log

    figures = json.loads((tmp_path / "out" / "figures.json").read_text())
    assert [chain["kernels"] for chain in figures["driver_launch"]["chains"]] == [1, 8, 64, 256]
    assert figures["steps"] == steps
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "figures.json", "gpu_check.log", "steps.json", "steps.jsonl"]
    # The header, on stdout before any step: the GPU, the commit, what lifecore says of cuda.
    header = done.stdout.split("\n===", 1)[0]
    assert "\ngpu: " in header and "\ncommit: " in header, header
    assert "cuda backend: cuda: available=True" in done.stdout
    assert "overall: PASS" in done.stdout


def test_without_a_loadable_libcuda_every_device_step_is_skipped_with_the_loaders_reason(tmp_path):
    missing = tmp_path / "no_such_libcuda.so.1"
    done, log, by_name = run_script(tmp_path, ["backends"] + DEVICE_STEPS, LIFECORE_LIBCUDA=str(missing))
    assert by_name["backends"]["status"] == "passed", log[-4000:]
    for name in DEVICE_STEPS:
        record = by_name[name]
        assert record["status"] == "skipped", (name, record, log[-4000:])
        assert record["reason"].startswith("cuda unavailable: ") and str(missing) in record["reason"], record
        assert f"=== SKIP: {name} (cuda unavailable: " in done.stdout
    assert "cuda backend: cuda: available=False" in done.stdout and str(missing) in done.stdout
    assert "=== FAIL" not in done.stdout and "=== TIMEOUT" not in done.stdout, done.stdout[-4000:]
    assert "overall: PASS" in done.stdout


def test_a_step_past_its_limit_prints_its_python_stack_and_is_a_timeout(tmp_path):
    """The environment step's CuPy import hangs; the budget leaves the step about 15 s: timeout's
    SIGABRT makes Python print where it was (faulthandler), and the step is a TIMEOUT (exit 124)."""
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    smi = bin_folder / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'Stand-in H200, 580.00.00, 143771 MiB'\n")
    smi.chmod(0o755)
    hang = ("import time\nprint('the cupy stand-in waits')\n\n"
            "def waiting_for_the_device():\n    time.sleep(120)\n\nwaiting_for_the_device()\n")
    done, log, by_name = run_script(
        tmp_path, ["environment"], hidden={"cupy": hang}, timeout=120,
        PATH=f"{bin_folder}{os.pathsep}{os.environ.get('PATH', '')}",
        GPU_CHECK_BUDGET_S="25", GPU_CHECK_SUITE_S="10")
    record = by_name["environment"]
    assert record["status"] == "timed_out" and record["exit"] == 124, (record, log[-4000:])
    assert record["seconds"] < 25, record  # SIGABRT ended it: no SIGKILL needed
    # The stack, in the log and in the excerpt on stdout, names the function that hung.
    assert "Fatal Python error: Aborted" in log and "in waiting_for_the_device" in log, log[-4000:]
    excerpt = done.stdout.split("=== environment", 1)[1].split("=== TIMEOUT: environment", 1)[0]
    assert "in waiting_for_the_device" in excerpt and "its last lines" in excerpt, done.stdout[-4000:]
    assert "the cupy stand-in waits" in log  # what Python printed before the hang was kept (unbuffered)
    header = done.stdout.split("\n===", 1)[0]
    assert "gpu: Stand-in H200, 580.00.00, 143771 MiB" in header, header
    assert "overall: FAIL" in done.stdout and "TIMEOUT  environment" in done.stdout


def test_a_step_cut_off_waits_for_what_its_command_started(tmp_path):
    """SIGABRT reaches the step's whole process group, and the shell running the step dies of it
    at once while the Python it started is still writing: here a handler that writes a second
    after the signal. The excerpt on stdout is read only once that Python has ended, so it holds
    what was written last (read at once, it missed the stack a slow faulthandler wrote)."""
    late = ("import signal, sys, time\n\n"
            "def written_late(signum, frame):\n    time.sleep(1)\n"
            "    print('written a second after the abort', flush=True)\n    sys.exit(3)\n\n"
            "signal.signal(signal.SIGABRT, written_late)\nprint('the cupy stand-in waits', flush=True)\n"
            "time.sleep(120)\n")
    done, log, by_name = run_script(tmp_path, ["environment"], hidden={"cupy": late}, timeout=120,
                                    GPU_CHECK_BUDGET_S="25", GPU_CHECK_SUITE_S="10")
    record = by_name["environment"]
    assert record["status"] == "timed_out" and record["exit"] == 124, (record, log[-4000:])
    excerpt = done.stdout.split("=== environment", 1)[1].split("=== TIMEOUT: environment", 1)[0]
    assert "written a second after the abort" in excerpt, done.stdout[-4000:]


def test_tests_skipped_for_want_of_a_cuda_device_fail_where_cuda_is_available(fake_libcuda, tmp_path):
    """Against the fake driver the cuda backend is available, and test_backend_cuda.py's tests of a
    real device skip ("no CUDA device": they never run on the fake): the step fails and says so."""
    done, log, by_name = run_script(tmp_path, ["backend tests"], LIFECORE_LIBCUDA=str(fake_libcuda))
    assert by_name["backend tests"]["status"] == "failed", log[-4000:]
    assert "cuda check: FAILED" in log and "skipped although the cuda backend is available" in done.stdout

    # The check itself, on junit files: a device's skip fails it, and so does every cuda test skipped.
    def junit(*cases: str) -> str:
        path = tmp_path / f"case_{len(list(tmp_path.glob('case_*.xml')))}.xml"
        path.write_text(f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>')
        return str(path)

    ran = '<testcase classname="tests.t" name="test_on_cuda[cuda]"/>'
    skipped_cuda = '<testcase classname="tests.t" name="test_on_cuda[hip]"><skipped message="hip: none"/></testcase>'
    other = '<testcase classname="tests.t" name="test_fill"><skipped message="no CUDA device: the example"/></testcase>'
    all_cuda_skipped = '<testcase classname="tests.t" name="test_cuda_x"><skipped message="a CUDA device is present"/></testcase>'
    check = [sys.executable, str(tmp_path / "work" / "cuda_ran.py")]
    assert subprocess.run(check + [junit(ran, skipped_cuda)], capture_output=True).returncode == 0
    assert subprocess.run(check + [junit(ran, other)], capture_output=True).returncode == 1
    assert subprocess.run(check + [junit(all_cuda_skipped)], capture_output=True).returncode == 1


def test_the_differential_run_is_made_in_the_scratch_folder_and_a_divergence_reaches_the_log(fake_libcuda, tmp_path):
    """lifecore fuzz --differential mock,cuda against the fake driver (whose kernels compute
    nothing, so the run may well diverge): it runs from the scratch folder, leaves nothing in the
    checkout, and a divergence is in the log and on stdout."""
    checkout = SCRIPT.parents[1]
    before = set(checkout.glob("lifecore-failure-*"))
    done, log, by_name = run_script(tmp_path, ["differential mock,cuda"], LIFECORE_LIBCUDA=str(fake_libcuda))
    record = by_name["differential mock,cuda"]
    assert record["status"] in ("passed", "failed"), (record, log[-4000:])
    assert "differential mock" in log, log[-4000:]
    assert "would be ignored" not in log, log[-4000:]  # no option the differential run refuses
    assert set(checkout.glob("lifecore-failure-*")) == before
    if record["status"] == "failed":
        assert "divergence at step" in log and "its last lines" in done.stdout, done.stdout[-4000:]
