"""Graph replay side by side with the frameworks' own CUDA graphs, in one run.

The same N tiny kernels (``y += x`` / ``y -= x`` over 16 floats, N = 10, 100, 1000) are issued
eagerly and replayed from a captured graph by lifecore, by ``torch.cuda.CUDAGraph`` (when torch
with CUDA is importable and the backend is cuda) and by CuPy's stream capture (when cupy is
importable). Per N it reports each framework's eager and replay time per pass (with a sync),
the capture cycle (prepare / warmup -> begin -> N recorded kernels -> end), and the ratios:
eager / replay within each framework (``speedup``, ``torch_speedup``, ``cupy_speedup``) and each
framework's replay time over lifecore's (``torch_replay/lifecore_replay``).

:func:`compare_replay` returns ``{"rows": [...], "skipped": {framework: reason}}``; every row is
a flat dict for :func:`lifecore.testing.stream_benchmarks.format_table` and JSON.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from .stream_benchmarks import ELEMENTS, best_of, replay_vs_eager

__all__ = ["compare_replay", "torch_replay_vs_eager", "cupy_replay_vs_eager", "torch_unavailable_reason",
           "cupy_unavailable_reason"]


def torch_unavailable_reason(backend: str) -> Optional[str]:
    """None when torch's CUDA graphs can run beside a device of ``backend``, else why not."""
    if backend != "cuda":
        return f"torch CUDA graphs are compared only on the cuda backend (this run: {backend})"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} has no CUDA device"
    return None


def cupy_unavailable_reason(backend: str) -> Optional[str]:
    if backend != "cuda":
        return f"CuPy graphs are compared only on the cuda backend (this run: {backend})"
    try:
        import cupy
    except ImportError:
        return "cupy is not installed"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "cupy sees no CUDA device"
    except Exception as error:  # CuPy raises its own runtime errors without a device
        return f"cupy cannot reach a CUDA device: {error}"
    return None


def _timed(eager: Callable[[], None], replay: Callable[[], None], capture: Callable[[], None], *,
           repeat: int, min_seconds: float) -> dict[str, float]:
    eager_s = best_of(eager, repeat=repeat, min_seconds=min_seconds)
    replay_s = best_of(replay, repeat=repeat, min_seconds=min_seconds)
    capture_s = best_of(capture, repeat=max(1, repeat // 2), min_seconds=min_seconds)
    return {"eager_us": eager_s * 1e6, "replay_us": replay_s * 1e6, "capture_us": capture_s * 1e6,
            "speedup": eager_s / replay_s if replay_s > 0 else float("inf")}


def torch_replay_vs_eager(sizes: Sequence[int] = (10, 100, 1000), *, repeat: int = 5,
                          min_seconds: float = 0.05) -> list[dict[str, Any]]:
    """torch eager vs ``torch.cuda.CUDAGraph`` replay of N tiny in-place adds (needs CUDA)."""
    import torch

    device = torch.device("cuda")
    x = torch.arange(ELEMENTS, dtype=torch.float32, device=device)
    y = torch.ones(ELEMENTS, dtype=torch.float32, device=device)
    side = torch.cuda.Stream()

    def issue(n_ops: int) -> None:
        for i in range(n_ops):
            y.add_(x, alpha=1.0 if i % 2 == 0 else -1.0)

    def capture(n_ops: int) -> Any:
        # torch's recipe: warm up on a side stream, then capture.
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            issue(n_ops)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            issue(n_ops)
        return graph

    rows = []
    for n_ops in sizes:
        even = n_ops + (n_ops % 2)
        graph = capture(even)
        y.fill_(1.0)
        graph.replay()
        issue(1)
        torch.cuda.synchronize()
        correct = bool(torch.allclose(y, 1.0 + x))

        def eager() -> None:
            issue(n_ops)
            torch.cuda.synchronize()

        def replay() -> None:
            graph.replay()
            torch.cuda.synchronize()

        def capture_cycle() -> None:
            capture(even).reset()

        row = {"N": n_ops, **_timed(eager, replay, capture_cycle, repeat=repeat, min_seconds=min_seconds),
               "correct": correct}
        rows.append(row)
        graph.reset()
    return rows


def cupy_replay_vs_eager(sizes: Sequence[int] = (10, 100, 1000), *, repeat: int = 5,
                         min_seconds: float = 0.05) -> list[dict[str, Any]]:
    """CuPy eager vs a CuPy stream-captured graph of N tiny in-place adds (needs CUDA)."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        x = cupy.arange(ELEMENTS, dtype=cupy.float32)
        y = cupy.ones(ELEMENTS, dtype=cupy.float32)

    def issue(n_ops: int) -> None:
        for i in range(n_ops):
            if i % 2 == 0:
                cupy.add(y, x, out=y)
            else:
                cupy.subtract(y, x, out=y)

    def capture(n_ops: int) -> Any:
        with stream:
            issue(n_ops)  # warmup: compiles the kernels outside the capture
            stream.begin_capture()
            issue(n_ops)
            return stream.end_capture()

    rows = []
    for n_ops in sizes:
        even = n_ops + (n_ops % 2)
        graph = capture(even)
        with stream:
            y.fill(1.0)
            graph.launch(stream)
            issue(1)
        stream.synchronize()
        correct = bool(cupy.allclose(y, 1.0 + x))

        def eager() -> None:
            with stream:
                issue(n_ops)
            stream.synchronize()

        def replay() -> None:
            graph.launch(stream)
            stream.synchronize()

        def capture_cycle() -> None:
            capture(even)

        rows.append({"N": n_ops, **_timed(eager, replay, capture_cycle, repeat=repeat, min_seconds=min_seconds),
                     "correct": correct})
    return rows


def compare_replay(factory: Callable[[], Any], sizes: Sequence[int] = (10, 100, 1000), *, repeat: int = 5,
                   min_seconds: float = 0.05) -> dict[str, Any]:
    """lifecore eager / replay / capture on the factory's device, beside torch and CuPy graphs
    when they can run there. Returns ``{"backend", "rows", "skipped"}``."""
    device = factory()
    backend = device.backend
    device.close()
    ours = replay_vs_eager(factory, sizes, repeat=repeat, min_seconds=min_seconds)
    # lifecore's columns keep replay_vs_eager's names (speedup = eager / replay); the frameworks'
    # are prefixed with their name.
    rows = [{"backend": r["backend"], "N": r["N"], "eager_us": r["eager_us"], "replay_us": r["replay_us"],
             "speedup": r["speedup"], "capture_us": r["capture_us"], "correct": r["correct"]} for r in ours]
    skipped: dict[str, str] = {}
    for name, reason, run in (("torch", torch_unavailable_reason(backend), torch_replay_vs_eager),
                              ("cupy", cupy_unavailable_reason(backend), cupy_replay_vs_eager)):
        if reason is not None:
            skipped[name] = reason
            continue
        try:
            theirs = {r["N"]: r for r in run(sizes, repeat=repeat, min_seconds=min_seconds)}
        except Exception as error:  # a framework failing must not hide lifecore's figures
            skipped[name] = f"{type(error).__name__}: {error}"
            continue
        for row in rows:
            other = theirs[row["N"]]
            row[f"{name}_eager_us"] = other["eager_us"]
            row[f"{name}_replay_us"] = other["replay_us"]
            row[f"{name}_speedup"] = other["speedup"]
            row[f"{name}_capture_us"] = other["capture_us"]
            row[f"{name}_correct"] = other["correct"]
            row[f"{name}_replay/lifecore_replay"] = (other["replay_us"] / row["replay_us"]
                                                     if row["replay_us"] else float("inf"))
    return {"backend": backend, "rows": rows, "skipped": skipped}
