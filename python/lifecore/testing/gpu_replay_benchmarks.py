"""Kept for the older import path: graph replay beside torch / CuPy graphs lives in
:mod:`lifecore.benchmarks.graph_replay` (timed by :mod:`lifecore.benchmarks.harness`)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from lifecore.benchmarks.graph_replay import cupy_unavailable_reason, torch_unavailable_reason
from lifecore.benchmarks.graph_replay import compare_replay as _compare_replay

__all__ = ["compare_replay", "torch_unavailable_reason", "cupy_unavailable_reason"]


def compare_replay(factory: Callable[[], Any], sizes: Sequence[int] = (10, 100, 1000), *, repeat: int = 5,
                   min_seconds: float = 0.05) -> dict[str, Any]:
    """``{"backend", "rows", "skipped", "runs"}``: ``repeat`` measured rounds per N, batches of
    at least ``min_seconds``; rows as :func:`lifecore.benchmarks.graph_replay.compare_replay`."""
    return _compare_replay(factory, sizes, rounds=repeat, warmup=1, min_batch_s=min_seconds)
