"""``lifecore demo``: the engine serving random requests, then a summary table."""

from __future__ import annotations

import json
import random
import sys
from typing import Any, Optional, TextIO

from ..errors import InvalidArgumentError, LifecoreOverflowError
from .capture import CaptureOptions
from .engine import Engine
from .model import PRESETS
from .scheduler import Request

__all__ = ["run_demo", "demo_requests"]

CAPTURE_BUDGET = 8 * 1024  # small enough that a run shows captures skipped on the limit


def demo_requests(count: int, seed: int, vocab: int, max_positions: int) -> list[Request]:
    """Prompts of 4..64 tokens, outputs of 8..64 tokens (within the model's positions)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        prompt = rng.randint(4, min(64, max_positions // 2))
        new = rng.randint(8, min(64, max_positions - prompt))
        out.append(Request(f"req-{i}", [rng.randrange(vocab) for _ in range(prompt)], new))
    return out


class _Bar:
    """A one-line progress bar on a terminal; nothing elsewhere."""

    def __init__(self, total: int, stream: TextIO):
        self.total, self.done, self.stream, self.shown = total, 0, stream, -1

    def __call__(self, n: int) -> None:
        self.done += n
        filled = 30 * min(self.done, self.total) // max(self.total, 1)
        if filled != self.shown:
            self.shown = filled
            self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} tokens")
            self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r" + " " * 60 + "\r")
        self.stream.flush()


MAX_REQUESTS = 100_000  # a demo's requests are all built before it serves one: minutes of work at most


def run_demo(preset: str = "tiny", requests: int = 64, seed: int = 0, device: str = "cpu", capture: bool = False,
             as_json: bool = False, out: TextIO = sys.stdout) -> dict[str, Any]:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r} (presets: {', '.join(PRESETS)})")
    if not 1 <= requests <= MAX_REQUESTS:
        raise ValueError(f"requests must be between 1 and {MAX_REQUESTS:,}, got {requests:,}")
    config = PRESETS[preset]
    batch = demo_requests(requests, seed, config.vocab, config.max_positions)
    # A pool for a quarter of the requests at their longest: tight enough to defer and preempt.
    block_size = 16
    longest = max(-(-(len(r.prompt) + r.max_new_tokens) // block_size) for r in batch)
    num_blocks = max(longest, longest * requests // 4)
    options = CaptureOptions(budget_bytes=CAPTURE_BUDGET) if capture else None
    try:
        engine = Engine(preset, seed=seed, device=device, block_size=block_size, num_blocks=num_blocks,
                        max_batch=min(32, requests), capture=options)
    except (InvalidArgumentError, LifecoreOverflowError) as error:
        if "argument 'num_blocks'" not in str(error):
            raise
        # The pool is the demo's choice, not an argument its caller passed: say what sets it.
        raise type(error)(f"the demo's KV pool for {requests:,} requests of preset {preset!r} ({num_blocks:,} blocks "
                          f"of {block_size} tokens: a quarter of the requests at their longest) does not fit the "
                          f"device; ask for fewer requests or a smaller preset ({error})") from None
    bar: Optional[_Bar] = None
    if not as_json and out.isatty():
        bar = _Bar(sum(r.max_new_tokens for r in batch), out)
    try:
        result = engine.generate(batch, progress=bar)
    finally:
        if bar is not None:
            bar.close()
        engine.close()
    stats = result.stats
    summary: dict[str, Any] = {
        "preset": preset, "device": str(device), "requests": requests,
        "tokens generated": sum(len(t) for t in result.tokens.values()),
        "tokens/s": round(sum(len(t) for t in result.tokens.values()) / result.seconds, 1),
        "decode iterations": stats.iterations, "deferrals": stats.deferrals, "preemptions": stats.preemptions,
        "graph captures": result.graph_captures, "graph replays": result.graph_replays,
        "graph pool": result.graph_pool,
        "captured bytes": engine.capture.used_bytes if engine.capture else 0,
        "capture budget": CAPTURE_BUDGET if capture else 0,
        "captures skipped": engine.capture.skipped if engine.capture else 0,
        "bookkeeping share": round(stats.bookkeeping_s / result.seconds, 4),
        "seconds": round(result.seconds, 3),
    }
    if as_json:
        out.write(json.dumps(summary) + "\n")
    else:
        width = max(len(k) for k in summary)
        rows = dict(summary)
        if capture:
            rows["captured bytes"] = f"{summary['captured bytes']:,} of {CAPTURE_BUDGET:,} (skipped " \
                                     f"{summary['captures skipped']})"
        for key in ("capture budget", "captures skipped"):
            rows.pop(key)
        rows["bookkeeping share"] = f"{100 * summary['bookkeeping share']:.1f}% of wall time in lifecore"
        for key, value in rows.items():
            out.write(f"  {key.ljust(width)}  {value}\n")
    return summary


if __name__ == "__main__":  # pragma: no cover
    from ..cli import main

    sys.exit(main(["demo", *sys.argv[1:]]))  # the same options as ``lifecore demo``
