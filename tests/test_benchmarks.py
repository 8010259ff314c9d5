"""The benchmarks other than graph replay: each runs through the harness and reports what it
measured. No timing is asserted; the tests check the sides, the ratios and the counted facts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import lifecore
from lifecore import _core
from lifecore.benchmarks import asyncio_waiters, capture, capture_cycle, sequence, state_machine
from lifecore.benchmarks.harness import format_run

from backend_roles import EMULATED

QUICK = dict(rounds=2, warmup=0, min_batch_s=0.0005)


def test_capture_cycle_sets_lifecore_beside_the_model() -> None:
    runs = capture_cycle.capture_cycle_vs_model(lambda: lifecore.Device(EMULATED), **QUICK)
    assert len(runs) == 2
    for run in runs:
        assert list(run.measurements) == ["model", "lifecore"]
        assert run.ratios[0].name == "model / lifecore" and len(run.ratios[0].samples) == 2
    assert f"{EMULATED}/" in runs[1].title


def test_the_state_machine_workload_is_the_same_for_the_same_seed() -> None:
    run = state_machine.machine_throughput(lambda: lifecore.Device(EMULATED), examples=3, steps=10, seed=0,
                                           rounds=2, warmup=0)
    again = state_machine.run_machine_once(lambda: lifecore.Device(EMULATED), examples=3, steps=10, seed=0)
    assert {k: run.facts[k] for k in again} == again and again["steps"] > 0
    m = run["machine step"]
    assert m.per == again["steps"] and m.unit == "step" and m.rate
    assert "steps/s" in format_run(run)


def test_the_state_machine_workload_does_not_depend_on_the_process() -> None:
    outputs = []
    for hash_seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-m", "lifecore.benchmarks.state_machine", "--examples", "3",
                               "--steps", "10", "--rounds", "1", "--seed", "5"], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert done.returncode == 0, done.stderr
        outputs.append([line for line in done.stdout.splitlines() if line.strip().startswith("seed: 5")])
    assert outputs[0] == outputs[1] and len(outputs[0]) == 1


def test_the_state_machine_refuses_a_seed_that_is_not_an_int() -> None:
    with pytest.raises(ValueError, match="seed"):
        state_machine.machine_throughput(lambda: lifecore.Device(EMULATED), seed=None)  # type: ignore[arg-type]


def test_sequence_lifecycles_time_python_cpp_model_and_free_list_alike() -> None:
    run = sequence.lifecycles(live=8, cpp_batch=2, **QUICK)
    assert list(run.measurements) == ["Python step()", "Python primitives", "C++ step()", "C++ primitives",
                                      "reference model", "Python free list"]
    assert all(m.unit == "lifecycle" and len(m.samples_ns) == 2 for m in run.measurements.values())
    assert run["C++ step()"].per == 2 and len(run.ratios) == 4
    assert run.facts == {"live sequences": 8}


def test_sequence_decode_steps_continue_one_long_sequence() -> None:
    run = sequence.decode_steps(batch=40, **QUICK)
    assert run["Python step() (1 call)"].per == 40 and run["C++ step()"].per == 400
    assert [r.name for r in run.ratios] == ["reference model step() / Python step() (1 call)",
                                            "Python step() (1 call) / C++ step()"]


def test_the_block_id_comparisons_time_lifecore_beside_a_python_free_list() -> None:
    quick = dict(rounds=2, warmup=0)
    run = sequence.decode_iteration(300, inner=4, **quick)
    assert list(run.measurements) == ["lifecore step() x256 + block_table", "lifecore step_all + block_table",
                                      "lifecore step() x256 + DecodeTable.update", "lifecore DecodeTable.step",
                                      "Python free list + NumPy table", "Python free list + NumPy table, NumPy tokens"]
    # The batched sides against the baseline given the same NumPy token array too.
    assert [r.denominator for r in run.ratios].count("Python free list + NumPy table, NumPy tokens") == 2
    assert len(run.ratios) == 6 and run.facts == {"live sequences": 300}
    assert all(m.unit == "iteration" for m in run.measurements.values())
    admitted = sequence.admission(inner=4, **quick)
    assert admitted.ratios[0].name == "lifecore admit + open_session / Python free list slice"
    released = sequence.release(inner=4, **quick)
    assert released.ratios[0].name == "lifecore close (session + resources) / Python free list extend"
    assert released.facts == {"driver calls on the emulated device (admit, open and close of a sequence)": 0}
    assert "the first admitted first" in released.title
    reversed_run = sequence.release(inner=4, order="reverse", **quick)
    assert "the last admitted first" in reversed_run.title and len(reversed_run.ratios) == 1
    with pytest.raises(ValueError, match="order must be one of"):
        sequence.release(inner=4, order="random", **quick)
    assert sequence.arena_memory(200) >= 0 and sequence.arena_memory(200, blocks=4) >= 0
    assert sequence.arena_memory(200, traced=True) > 0


def test_the_per_call_iteration_in_parts_shows_the_steps_the_table_and_the_headroom() -> None:
    run = sequence.decode_iteration_parts(300, rounds=2, warmup=0, inner=4)
    assert list(run.measurements)[:5] == ["Python loop alone", "lifecore step() x256", "lifecore block_table alone",
                                          "NumPy fill of a 256 x 128 int32 table", "Python free list + NumPy table"]
    assert [r.name for r in run.ratios] == [
        "lifecore step() x256 / Python free list + NumPy table",
        "lifecore block_table alone / NumPy fill of a 256 x 128 int32 table",
        "floor: the loop + a C call per row + the fill / Python free list + NumPy table"]
    # Each difference is taken per round from the sides it names.
    steps, loop, baseline = (run[n].samples_ns for n in ("lifecore step() x256", "Python loop alone",
                                                         "Python free list + NumPy table"))
    assert run["step() over the loop"].samples_ns == pytest.approx([s - lo for s, lo in zip(steps, loop)])
    headroom = run["headroom for a table (baseline - steps)"].samples_ns
    assert headroom == pytest.approx([b - s for b, s in zip(baseline, steps)])
    floor = run["floor: the loop + a C call per row + the fill"].samples_ns
    left = run["left for a per-call API's own work (baseline - floor)"].samples_ns
    assert left == pytest.approx([b - f for b, f in zip(baseline, floor)])
    assert run.facts == {"live sequences": 300}


def test_the_cpp_loop_refuses_bad_sizes_and_does_its_work_untimed() -> None:
    with pytest.raises(lifecore.InvalidArgumentError):
        _core._SequenceBenchLoop(1, 8, 16)
    loop = _core._SequenceBenchLoop(3, 64, 16)
    assert loop.lifecycles(5, True) is None and loop.decode_steps(100, False) is None


def test_capture_observe_derives_the_captured_cost_per_round() -> None:
    run = capture.observe(**QUICK)
    derived = run["lifecore captured observe"]
    with_, without, backend, empty = (run[n].samples_ns for n in (
        "lifecore step with observe", "lifecore step", "constant backend calls (in a function)",
        "empty Python function"))
    # The backend's calls less the function call they are timed in: the lambda's frame and a
    # tuple were subtracted too, before.
    assert run["constant backend calls"].samples_ns == tuple(b - e for b, e in zip(backend, empty))
    assert derived.samples_ns == tuple(a - b - (c - e) for a, b, c, e in zip(with_, without, backend, empty))
    assert "model captured observe / lifecore captured observe" in format_run(run)


@pytest.mark.no_sanitizer
def test_capture_forward_pass_or_its_reason() -> None:
    run = capture.forward(rounds=1, warmup=0, min_batch_s=0.0005)
    try:
        import torch  # noqa: F401
    except ImportError:
        assert run is None
        return
    assert run is not None and list(run.measurements)[:3] == [
        "unhooked", "plain hooks computing summaries", "lifecore capture of the summaries"]
    assert run.facts["record outcomes in a step"] == "CAPTURED: 4"  # every point captured under finite limits
    # Per point where users run it: each side's time over the unhooked forward, and their ratio.
    assert run.ratios[-1].name == "lifecore per point in the forward / plain hooks per point in the forward"
    assert run["lifecore per point in the forward"].unit == "point"


@pytest.mark.no_sanitizer
def test_capture_sixteen_points_per_block_and_one_point_against_the_bare_summary() -> None:
    run = capture.forward(blocks=1, points_per_block=16, rounds=1, warmup=0, min_batch_s=0.0005)
    if run is None:
        return  # torch is not importable (the other forward test checks that answer)
    assert run.facts["record outcomes in a step"] == "CAPTURED: 16"
    point = capture.per_point(points=4, rounds=1, warmup=0, min_batch_s=0.0005)
    assert point is not None and list(point.measurements)[:3] == [
        "bare summary", "captured point (observer)", "captured point (session.observe)"]


def test_asyncio_waiters_time_to_thread_beside_both_kinds_of_awaiters() -> None:
    run = asyncio_waiters.to_thread_latency(16, rounds=1, warmup=0, calls=2, polling_calls=1)
    assert list(run.measurements) == ["no awaiters", "16 awaiters, wait_async", "16 awaiters, former polling"]
    assert run.ratios[0].name == "16 awaiters, former polling / 16 awaiters, wait_async"
    # wait_async starts no thread; the former polling loop filled the default pool.
    assert run.facts["live threads, 16 awaiters, wait_async"] == run.facts["live threads, no awaiters"]
    assert run.facts["live threads, 16 awaiters, former polling"] > run.facts["live threads, no awaiters"]
    assert "per to_thread" in format_run(run)
