"""Graph-capture benchmarks, measured side by side in one run (no third-party dependency).

Each function returns rows of plain dicts that :func:`format_table` prints; the scripts in the
source tree's ``benchmarks/`` folder and ``lifecore bench`` both call them.

- :func:`replay_vs_eager`: replaying a graph of N tiny launches vs issuing the same N launches
  from Python;
- :func:`capture_cycle_vs_model`: a prepare -> begin -> end cycle through the Python API vs the
  same transitions on the pure-Python reference model;
- :func:`machine_steps_per_second`: state-machine steps per second, overall and inside rules.
"""

from __future__ import annotations

import struct
import time
from typing import Any, Callable, Optional, Sequence

import lifecore
from lifecore.models.stream_capture import DeviceModel, Ref, StreamCaptureState as ModelState

__all__ = ["replay_vs_eager", "capture_cycle_vs_model", "machine_steps_per_second", "format_table", "best_of"]

DeviceFactory = Callable[[], Any]
ELEMENTS = 16  # floats per buffer: the kernels are tiny on purpose (launch overhead dominates)


def best_of(fn: Callable[[], None], *, repeat: int = 5, min_seconds: float = 0.02) -> float:
    """Seconds per call of ``fn``: the best of ``repeat`` rounds, each long enough to time."""
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


def _issue(stream: Any, x: Any, y: Any, n_ops: int) -> None:
    """N tiny launches alternating y += x and y -= x, so values stay bounded."""
    axpy = lifecore.kernels.axpy_f32
    for i in range(n_ops):
        stream.launch(axpy, 1, 64, [ELEMENTS, 1.0 if i % 2 == 0 else -1.0, x, y])


def replay_vs_eager(factory: DeviceFactory, sizes: Sequence[int] = (10, 100, 1000), *,
                    repeat: int = 5, min_seconds: float = 0.05) -> list[dict[str, Any]]:
    """Per size N: one pass of N eager launches + sync vs one replay of their graph + sync.

    Also checks that the replay computes what the eager pass computes (``correct``) and times
    one capture cycle (``capture_us``: prepare -> warmup -> begin -> N recorded launches -> end)."""
    rows = []
    device = factory()
    try:
        stream = device.stream()
        x, y = stream.alloc(4 * ELEMENTS), stream.alloc(4 * ELEMENTS)
        stream.write(x, struct.pack(f"<{ELEMENTS}f", *[float(i) for i in range(ELEMENTS)]))
        for n_ops in sizes:
            stream.write(y, struct.pack(f"<{ELEMENTS}f", *[1.0] * ELEMENTS))
            graph = stream.capture(lambda s: _issue(s, x, y, n_ops + (n_ops % 2)), warmup=1)
            # The check: from y = 1, one replay of an even number of +x/-x steps gives y = 1 again,
            # and an extra +x step (eager) gives 1 + x.
            stream.write(y, struct.pack(f"<{ELEMENTS}f", *[1.0] * ELEMENTS))
            graph.replay()
            _issue(stream, x, y, 1)
            got = struct.unpack(f"<{ELEMENTS}f", stream.read(y))
            correct = all(abs(v - (1.0 + i)) < 1e-4 for i, v in enumerate(got))

            def eager() -> None:
                _issue(stream, x, y, n_ops)
                stream.sync()

            def replay() -> None:
                graph.replay()
                stream.sync()

            def capture_cycle() -> None:
                stream.capture(lambda s: _issue(s, x, y, n_ops + (n_ops % 2)), warmup=1).destroy()

            eager_s = best_of(eager, repeat=repeat, min_seconds=min_seconds)
            replay_s = best_of(replay, repeat=repeat, min_seconds=min_seconds)
            capture_s = best_of(capture_cycle, repeat=max(1, repeat // 2), min_seconds=min_seconds)
            rows.append({
                "backend": f"{device.backend}/{device.graphs}", "N": n_ops,
                "eager_us": eager_s * 1e6, "replay_us": replay_s * 1e6,
                "speedup": eager_s / replay_s if replay_s > 0 else float("inf"),
                "capture_us": capture_s * 1e6, "nodes": graph.node_count, "correct": correct,
            })
            graph.destroy()
    finally:
        device.close()
    return rows


def capture_cycle_vs_model(factory: DeviceFactory, *, repeat: int = 5, min_seconds: float = 0.05) -> list[dict[str, Any]]:
    """The lifecycle's own overhead: transitions alone (the state type) and a whole stream cycle
    (prepare, one warmup launch, begin, one launch, end, destroy) vs the reference model."""
    rows = []

    def real_state() -> None:
        state = lifecore.StreamCaptureState()
        state.prepare(0)
        state.begin()
        state.end(0)

    def model_state() -> None:
        state = ModelState()
        state.prepare(0)
        state.begin()
        state.end(0)

    real_s = best_of(real_state, repeat=repeat, min_seconds=min_seconds)
    model_s = best_of(model_state, repeat=repeat, min_seconds=min_seconds)
    rows.append({"what": "StreamCaptureState prepare/begin/end", "lifecore_us": real_s * 1e6,
                 "model_us": model_s * 1e6, "model/lifecore": model_s / real_s})

    device = factory()
    try:
        stream = device.stream()
        x, y = stream.alloc(4 * ELEMENTS), stream.alloc(4 * ELEMENTS)
        axpy = lifecore.kernels.axpy_f32

        def real_cycle() -> None:
            stream.graph_prepare(0)
            stream.launch(axpy, 1, 64, [ELEMENTS, 1.0, x, y])
            stream.begin_capture()
            stream.launch(axpy, 1, 64, [ELEMENTS, 1.0, x, y])
            stream.end_capture(0).destroy()

        model = DeviceModel(device.graphs)
        sid = model.new_stream()
        mx, my = model.alloc(sid, 4 * ELEMENTS), model.alloc(sid, 4 * ELEMENTS)
        args = [ELEMENTS, 1.0, Ref(mx), Ref(my)]

        def model_cycle() -> None:
            model.graph_prepare(sid, 0)
            model.launch(sid, "axpy_f32", args)
            model.begin_capture(sid)
            model.launch(sid, "axpy_f32", args)
            model.destroy(model.end_capture(sid, 0))

        real_s = best_of(real_cycle, repeat=repeat, min_seconds=min_seconds)
        model_s = best_of(model_cycle, repeat=repeat, min_seconds=min_seconds)
        rows.append({"what": f"stream cycle on {device.backend}/{device.graphs}", "lifecore_us": real_s * 1e6,
                     "model_us": model_s * 1e6, "model/lifecore": model_s / real_s})
    finally:
        device.close()
    return rows


def machine_steps_per_second(factory: DeviceFactory, *, examples: int = 20, steps: int = 50,
                             seed: Optional[int] = 0) -> dict[str, Any]:
    """Runs the state machine and reports steps per second overall (Hypothesis included) and
    inside the rules alone (device + model + comparisons)."""
    from hypothesis import HealthCheck, settings

    from .stream_capture import STATS, run_stream_capture_machine

    STATS.reset()
    start = time.perf_counter()
    run_stream_capture_machine(factory, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
        suppress_health_check=list(HealthCheck), print_blob=False), seed=seed)
    wall = time.perf_counter() - start
    return {
        "runs": STATS.runs, "steps": STATS.steps, "seconds": wall,
        "steps_per_s": STATS.steps / wall if wall else 0.0,
        "rule_steps_per_s": STATS.steps / STATS.rule_seconds if STATS.rule_seconds else 0.0,
        "rule_and_invariant_steps_per_s": STATS.steps / (STATS.rule_seconds + STATS.invariant_seconds)
        if STATS.rule_seconds else 0.0,
        "graphs": STATS.graphs_sealed, "replays": STATS.replays, "faults": STATS.faults_injected,
    }


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
