"""Replay of an N-node graph vs the same N tiny launches issued eagerly from Python, and the
capture cycle that builds the graph (prepare -> warmup -> begin -> N recorded launches -> end).

Per N (default 10, 100, 1000) every side runs interleaved in one run: eager issue (time per
launch, a pass with its sync divided by N), replay (time per node, a replay with its sync
divided by the graph's node count), the capture cycle (per cycle), and their per-round ratio
eager / replay. On the cuda backend the same kernels also run eagerly and from
``torch.cuda.CUDAGraph`` (when torch with CUDA is importable) and from a CuPy graph (when cupy
is), in the same interleaved run; a framework that cannot run is skipped with the reason.

    python -m lifecore.benchmarks.graph_replay --backend cuda --json figures.json
"""

from __future__ import annotations

import argparse
import struct
import sys
from typing import Any, Callable, Optional, Sequence, cast

import lifecore
from lifecore.benchmarks.harness import Run, Side, format_run, interleave

__all__ = ["replay_vs_eager", "compare_replay", "torch_unavailable_reason", "cupy_unavailable_reason",
           "ELEMENTS", "main"]

DeviceFactory = Callable[[], Any]
ELEMENTS = 16  # floats per buffer: the kernels are tiny on purpose (launch overhead dominates)


def _issue(stream: Any, x: Any, y: Any, n_ops: int) -> None:
    """N tiny launches alternating y += x and y -= x, so values stay bounded."""
    axpy = lifecore.kernels.axpy_f32
    for i in range(n_ops):
        stream.launch(axpy, 1, 64, [ELEMENTS, 1.0 if i % 2 == 0 else -1.0, x, y])


def torch_unavailable_reason(backend: str) -> Optional[str]:
    """None when torch's CUDA graphs can run beside a device of ``backend``, else why not."""
    if lifecore.backend_info(backend).torch_device != "cuda":
        return f"torch's graphs are compared only on a backend whose memory torch sees as its GPU (this run: {backend})"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} has no CUDA device"
    return None


def cupy_unavailable_reason(backend: str) -> Optional[str]:
    """None when CuPy graphs can run beside a device of ``backend``, else why not."""
    if not lifecore.backend_info(backend).cuda_array_interface:
        return f"CuPy graphs are compared only on a backend that offers the CUDA array interface (this run: {backend})"
    try:
        import cupy  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return "cupy is not installed"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "cupy sees no CUDA device"
    except Exception as error:  # CuPy raises its own runtime errors without a device
        return f"cupy cannot reach a CUDA device: {error}"
    return None


class _Lifecore:
    """lifecore's sides for one N on an open stream (the graph is built once, checked, kept)."""

    def __init__(self, stream: Any, x: Any, y: Any, n_ops: int) -> None:
        self.stream, self.x, self.y, self.n_ops = stream, x, y, n_ops
        stream.write(y, struct.pack(f"<{ELEMENTS}f", *[1.0] * ELEMENTS))
        self.graph = stream.capture(lambda s: _issue(s, x, y, self.n_ops), warmup=1)
        self.correct = self.check()
        self.nodes = self.graph.node_count

    def check(self) -> bool:
        """Whether a replay computes the right values: from y = 1, one replay of an even number
        of +x/-x steps gives y = 1 again, and an extra +x step (eager) gives 1 + x."""
        self.stream.write(self.y, struct.pack(f"<{ELEMENTS}f", *[1.0] * ELEMENTS))
        self.graph.replay()
        _issue(self.stream, self.x, self.y, 1)
        got = struct.unpack(f"<{ELEMENTS}f", self.stream.read(self.y))
        return all(abs(v - (1.0 + i)) < 1e-4 for i, v in enumerate(got))

    def eager(self) -> None:
        _issue(self.stream, self.x, self.y, self.n_ops)
        self.stream.sync()

    def replay(self) -> None:
        self.graph.replay()
        self.stream.sync()

    def capture_cycle(self) -> None:
        self.stream.capture(lambda s: _issue(s, self.x, self.y, self.n_ops), warmup=1).destroy()

    def sides(self) -> dict[str, Side]:
        return {"eager": Side(self.eager, per=self.n_ops, unit="launch"),
                "replay": Side(self.replay, per=self.nodes, unit="node"),
                "capture": Side(self.capture_cycle, unit="capture cycle")}

    def close(self) -> None:
        self.graph.destroy()


class _Torch:
    """torch eager vs ``torch.cuda.CUDAGraph`` replay of N tiny in-place adds (needs CUDA)."""

    def __init__(self, n_ops: int) -> None:
        import torch

        self.torch, self.n_ops = torch, n_ops
        device = torch.device("cuda")
        self.x = torch.arange(ELEMENTS, dtype=torch.float32, device=device)
        self.y = torch.ones(ELEMENTS, dtype=torch.float32, device=device)
        self.side_stream = cast(Any, torch.cuda).Stream()
        self.graph = self._capture(self.n_ops)
        self.y.fill_(1.0)
        self.graph.replay()
        self._issue(1)
        torch.cuda.synchronize()
        self.correct = bool(torch.allclose(self.y, 1.0 + self.x))

    def _issue(self, n_ops: int) -> None:
        for i in range(n_ops):
            self.y.add_(self.x, alpha=1.0 if i % 2 == 0 else -1.0)

    def _capture(self, n_ops: int) -> Any:
        torch = self.torch
        # torch's recipe: warm up on a side stream, then capture.
        self.side_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side_stream):
            self._issue(n_ops)
        torch.cuda.current_stream().wait_stream(self.side_stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._issue(n_ops)
        return graph

    def eager(self) -> None:
        self._issue(self.n_ops)
        self.torch.cuda.synchronize()

    def replay(self) -> None:
        self.graph.replay()
        self.torch.cuda.synchronize()

    def capture_cycle(self) -> None:
        self._capture(self.n_ops).reset()

    def sides(self) -> dict[str, Side]:
        return {"torch eager": Side(self.eager, per=self.n_ops, unit="launch"),
                "torch replay": Side(self.replay, per=self.n_ops, unit="node"),
                "torch capture": Side(self.capture_cycle, unit="capture cycle")}

    def close(self) -> None:
        self.graph.reset()


class _Cupy:
    """CuPy eager vs a CuPy stream-captured graph of N tiny in-place adds (needs CUDA)."""

    def __init__(self, n_ops: int) -> None:
        import cupy

        self.cupy, self.n_ops = cupy, n_ops
        self.stream = cupy.cuda.Stream(non_blocking=True)
        with self.stream:
            self.x = cupy.arange(ELEMENTS, dtype=cupy.float32)
            self.y = cupy.ones(ELEMENTS, dtype=cupy.float32)
        self.graph = self._capture(self.n_ops)
        with self.stream:
            self.y.fill(1.0)
            self.graph.launch(self.stream)
            self._issue(1)
        self.stream.synchronize()
        self.correct = bool(cupy.allclose(self.y, 1.0 + self.x))

    def _issue(self, n_ops: int) -> None:
        for i in range(n_ops):
            if i % 2 == 0:
                self.cupy.add(self.y, self.x, out=self.y)
            else:
                self.cupy.subtract(self.y, self.x, out=self.y)

    def _capture(self, n_ops: int) -> Any:
        with self.stream:
            self._issue(n_ops)  # warmup: compiles the kernels outside the capture
            self.stream.begin_capture()
            self._issue(n_ops)
            return self.stream.end_capture()

    def eager(self) -> None:
        with self.stream:
            self._issue(self.n_ops)
        self.stream.synchronize()

    def replay(self) -> None:
        self.graph.launch(self.stream)
        self.stream.synchronize()

    def capture_cycle(self) -> None:
        self._capture(self.n_ops)

    def sides(self) -> dict[str, Side]:
        return {"cupy eager": Side(self.eager, per=self.n_ops, unit="launch"),
                "cupy replay": Side(self.replay, per=self.n_ops, unit="node"),
                "cupy capture": Side(self.capture_cycle, unit="capture cycle")}

    def close(self) -> None:
        pass


def replay_vs_eager(factory: DeviceFactory, sizes: Sequence[int] = (10, 100, 1000), *, rounds: int = 15,
                    warmup: int = 2, min_batch_s: float = 0.002, frameworks: bool = True) -> dict[str, Any]:
    """One interleaved run per N. Returns ``{"backend", "target" (backend/graphs), "runs": [Run, ...],
    "skipped": {name: why}}``;
    each run's facts hold N, the node count and whether a replay computed the right values, checked
    before the timed rounds and again after them (the timed replays themselves are not read back)."""
    sizes = [int(n) for n in sizes]
    if not sizes or any(n < 2 or n % 2 for n in sizes):
        raise ValueError(f"sizes must be even whole numbers of at least 2 (+x / -x pairs, so a replay leaves y "
                         f"as it found it and is checked), got {list(sizes)!r}")
    device = factory()
    runs: list[Run] = []
    skipped: dict[str, str] = {}
    try:
        backend, target = device.backend, f"{device.backend}/{device.graphs}"
        frameworks_here: list[tuple[str, Any]] = []
        if frameworks:
            for name, reason, kind in (("torch", torch_unavailable_reason(device.backend), _Torch),
                                       ("cupy", cupy_unavailable_reason(device.backend), _Cupy)):
                if reason is None:
                    frameworks_here.append((name, kind))
                else:
                    skipped[name] = reason
        stream = device.stream()
        x, y = stream.alloc(4 * ELEMENTS), stream.alloc(4 * ELEMENTS)
        stream.write(x, struct.pack(f"<{ELEMENTS}f", *[float(i) for i in range(ELEMENTS)]))
        for n_ops in sizes:
            ours = _Lifecore(stream, x, y, n_ops)
            opened: list[tuple[str, Any]] = []
            try:
                sides = ours.sides()
                for name, kind in frameworks_here:
                    if name in skipped:
                        continue
                    try:
                        theirs = kind(n_ops)
                    except Exception as error:  # a framework failing must not hide lifecore's figures
                        skipped[name] = f"{type(error).__name__}: {error}"
                        continue
                    opened.append((name, theirs))
                    sides.update(theirs.sides())
                run = interleave(sides, rounds=rounds, warmup=warmup, min_batch_s=min_batch_s,
                                 title=f"graph replay vs eager issue, {target}, N = {n_ops}")
                run.ratio("eager", "replay")
                facts: dict[str, Any] = {"N": n_ops, "nodes": ours.nodes, "correct": ours.correct and ours.check()}
                for name, theirs in opened:
                    run.ratio(f"{name} eager", f"{name} replay")
                    run.ratio(f"{name} replay", "replay")
                    facts[f"{name} correct"] = theirs.correct
                run.facts.update(facts)
                runs.append(run)
            finally:
                ours.close()
                for _, theirs in opened:
                    theirs.close()
    finally:
        device.close()
    return {"backend": backend, "target": target, "runs": runs, "skipped": skipped}


def _row(run: Run, backend: str) -> dict[str, Any]:
    """One run as a flat row of medians (microseconds per pass, as the older table had)."""
    facts = run.facts
    row: dict[str, Any] = {"backend": backend, "N": facts["N"]}
    for prefix in ("", "torch ", "cupy "):
        if f"{prefix}eager" not in run.measurements:
            continue
        key = prefix.strip().replace(" ", "") + ("_" if prefix else "")
        eager, replay, capture = (run[f"{prefix}{s}"] for s in ("eager", "replay", "capture"))
        row[f"{key}eager_us"] = eager.summary.median * eager.per / 1e3
        row[f"{key}replay_us"] = replay.summary.median * replay.per / 1e3
        row[f"{key}speedup"] = next(r.summary.median for r in run.ratios
                                    if r.numerator == f"{prefix}eager" and r.denominator == f"{prefix}replay")
        row[f"{key}capture_us"] = capture.summary.median / 1e3
        row[f"{key}correct"] = facts[f"{prefix}correct"]
    return row


def compare_replay(factory: DeviceFactory, sizes: Sequence[int] = (10, 100, 1000), *, rounds: int = 15,
                   warmup: int = 2, min_batch_s: float = 0.002) -> dict[str, Any]:
    """:func:`replay_vs_eager` plus ``rows``: per N a flat dict of medians (``eager_us`` and
    ``replay_us`` per pass, ``speedup`` the median per-round ratio, ``capture_us``, ``correct``,
    and the same prefixed ``torch_`` / ``cupy_`` when those ran)."""
    result = replay_vs_eager(factory, sizes, rounds=rounds, warmup=warmup, min_batch_s=min_batch_s)
    result["rows"] = [_row(run, result["target"]) for run in result["runs"]]
    return result


def to_json(result: dict[str, Any]) -> dict[str, Any]:
    return {"backend": result["backend"], "target": result["target"], "runs": [run.to_json() for run in result["runs"]],
            "skipped": dict(result["skipped"])}


def _sizes(text: str) -> list[int]:
    """argparse type: comma-separated even whole numbers of at least 2."""
    try:
        sizes = [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes must be comma-separated whole numbers, got {text!r}") from None
    if not sizes or any(n < 2 or n % 2 for n in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be even whole numbers of at least 2 (+x / -x pairs), "
                                         f"got {text!r}")
    return sizes


def main(argv: Optional[Sequence[str]] = None) -> int:
    # Here: the command line is not a benchmark's import.
    from lifecore.cli import EXIT_OUTPUT, _json_path_error, _OutputError, _write_json, positive_int, report_stream

    parser = argparse.ArgumentParser(prog="python -m lifecore.benchmarks.graph_replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default=lifecore.available_backends()[0],
                        help=f"{', '.join(lifecore.backend_names())} or auto (default: the first available)")
    parser.add_argument("--graphs", default="auto", choices=["auto", "hardware", "software"])
    parser.add_argument("--sizes", default=[10, 100, 1000], type=_sizes,
                        help="comma-separated N, each even and at least 2 (default 10,100,1000)")
    parser.add_argument("--rounds", type=positive_int, default=None, help="measured rounds (default 15, 5 with --quick)")
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="also write the figures as JSON (- for standard output)")
    args = parser.parse_args(argv)
    problem = _json_path_error(args.json)  # before the run, not after it
    if problem:
        parser.error(problem)
    try:
        sizes = args.sizes
        rounds = args.rounds if args.rounds is not None else (5 if args.quick else 15)
        result = replay_vs_eager(lambda: lifecore.Device(args.backend, graphs=args.graphs), sizes, rounds=rounds,
                                 warmup=1 if args.quick else 2, min_batch_s=0.001 if args.quick else 0.005)
    except (ValueError, lifecore.LifecoreError) as error:
        print(f"graph_replay: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    out = report_stream(args.json)
    for run in result["runs"]:
        print(format_run(run), file=out)
    for name, reason in result["skipped"].items():
        print(f"({name} skipped: {reason})", file=out)
    if args.json:
        try:
            _write_json(args.json, to_json(result))
        except _OutputError as error:
            print(f"graph_replay: {error}", file=sys.stderr)
            return EXIT_OUTPUT  # as the lifecore command: output that could not be written
    return 0 if all(run.facts["correct"] for run in result["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
