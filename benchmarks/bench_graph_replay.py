"""Replay of an N-op graph vs the same N tiny launches issued eagerly from Python
(N = 10, 100, 1000), plus the capture cycle (prepare -> warmup -> begin -> end). On the cuda
backend, the same N tiny kernels also run eagerly and from torch.cuda.CUDAGraph (when torch
with CUDA is importable) and from a CuPy graph (when cupy is), printed side by side.
Target on the mock at N = 1000: replay at least 10x faster than eager issue.

    python benchmarks/bench_graph_replay.py --backend cuda --json figures.json
"""

from __future__ import annotations

import argparse
import json
import sys

import lifecore
from lifecore.testing.gpu_replay_benchmarks import compare_replay
from lifecore.testing.stream_benchmarks import format_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="mock", choices=["mock", "cuda", "hip", "auto"])
    parser.add_argument("--graphs", default="auto", choices=["auto", "hardware", "software"])
    parser.add_argument("--sizes", default="10,100,1000", help="comma-separated N (default 10,100,1000)")
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repetitions")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.sizes.split(",") if n.strip()]
    try:
        result = compare_replay(lambda: lifecore.Device(args.backend, graphs=args.graphs), sizes,
                                repeat=3 if args.quick else 5, min_seconds=0.01 if args.quick else 0.05)
    except lifecore.LifecoreError as error:
        print(f"bench_graph_replay: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    print(format_table(result["rows"]))
    for name, reason in result["skipped"].items():
        print(f"({name} skipped: {reason})")
    big = [r for r in result["rows"] if r["N"] == max(sizes)]
    if big:
        row = big[0]
        line = f"\nN={row['N']}: lifecore replay is {row['speedup']:.1f}x faster than eager issue"
        if "torch_replay_us" in row:
            line += (f"; torch graph replay {row['torch_speedup']:.1f}x faster than torch eager; "
                     f"lifecore replay takes {1 / row['torch_replay/lifecore_replay']:.2f}x torch's replay time")
        print(line)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0 if all(r["correct"] for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
