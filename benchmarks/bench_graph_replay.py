"""Replay of an N-op graph vs the same N tiny launches issued eagerly from Python
(N = 10, 100, 1000). Target on the mock at N = 1000: replay at least 10x faster."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import device_factory, format_table, parse_args  # noqa: E402

from lifecore.testing.stream_benchmarks import replay_vs_eager  # noqa: E402

if __name__ == "__main__":
    args = parse_args(__doc__ or "")
    rows = replay_vs_eager(device_factory(args))
    print(format_table(rows))
    big = [r for r in rows if r["N"] == 1000]
    if big:
        print(f"\nN=1000: replay is {big[0]['speedup']:.1f}x faster than eager issue (target >= 10x)")
