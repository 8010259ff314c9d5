"""Kept for the older import path: the graph-capture benchmarks live in
:mod:`lifecore.benchmarks` and time everything with :mod:`lifecore.benchmarks.harness`.

These functions return the older flat rows (medians from the harness's interleaved runs);
``repeat`` is the number of measured rounds and ``min_seconds`` the least time of a batch."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

from lifecore.benchmarks.capture_cycle import capture_cycle_vs_model as _cycle_runs
from lifecore.benchmarks.graph_replay import ELEMENTS, compare_replay
from lifecore.benchmarks.state_machine import machine_throughput

__all__ = ["replay_vs_eager", "capture_cycle_vs_model", "machine_steps_per_second", "format_table", "best_of",
           "ELEMENTS"]

DeviceFactory = Callable[[], Any]


def best_of(fn: Callable[[], None], *, repeat: int = 5, min_seconds: float = 0.02) -> float:
    """Seconds per call of ``fn``: the best of ``repeat`` rounds (no benchmark uses it any more:
    a best-of follows the machine's load; the harness interleaves and takes medians)."""
    loops = 1
    while True:
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds or loops >= 1 << 20:
            break
        loops *= 2
    best = elapsed / loops
    for _ in range(repeat - 1):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, (time.perf_counter() - start) / loops)
    return best


def replay_vs_eager(factory: DeviceFactory, sizes: Sequence[int] = (10, 100, 1000), *,
                    repeat: int = 5, min_seconds: float = 0.05) -> list[dict[str, Any]]:
    """Per N: eager pass vs replay (``eager_us``, ``replay_us`` per pass, ``speedup``), the capture
    cycle (``capture_us``), the node count and ``correct``."""
    result = compare_replay(factory, sizes, rounds=repeat, warmup=1, min_batch_s=min_seconds)
    rows = []
    for row, run in zip(result["rows"], result["runs"]):
        rows.append({k: row[k] for k in ("backend", "N", "eager_us", "replay_us", "speedup", "capture_us")}
                    | {"nodes": run.facts["nodes"], "correct": row["correct"]})
    return rows


def capture_cycle_vs_model(factory: DeviceFactory, *, repeat: int = 5, min_seconds: float = 0.05) -> list[dict[str, Any]]:
    rows = []
    for run in _cycle_runs(factory, rounds=repeat, warmup=1, min_batch_s=min_seconds):
        ours, model = run["lifecore"].summary.median, run["model"].summary.median
        rows.append({"what": run.title, "lifecore_us": ours / 1e3, "model_us": model / 1e3,
                     "model/lifecore": run.ratios[0].summary.median})
    return rows


def machine_steps_per_second(factory: DeviceFactory, *, examples: int = 20, steps: int = 50,
                             seed: Optional[int] = 0) -> dict[str, Any]:
    run = machine_throughput(factory, examples=examples, steps=steps, seed=0 if seed is None else seed,
                             rounds=1, warmup=0)
    m = run["machine step"]
    facts = run.facts
    return {"runs": facts["runs"], "steps": facts["steps"], "seconds": m.summary.median * m.per / 1e9,
            "steps_per_s": m.rate_summary.median, "graphs": facts["graphs"], "replays": facts["replays"],
            "faults": facts["faults"]}


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A plain-text table (floats with 3 significant decimals)."""
    if not rows:
        return "(no rows)"
    columns = list(rows[0])

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"
        return str(value)

    cells = [[cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
