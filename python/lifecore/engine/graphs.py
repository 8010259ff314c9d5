"""The decode step captured once per batch-size bucket in a lifecore graph window, then replayed.

Torch's kernels run on the lifecore stream (``torch.cuda.ExternalStream(stream.handle)``);
the step reads fixed buffers (tokens, positions, the block table) that each iteration fills
before the replay, so a new batch needs no new capture. A batch is padded to its bucket
(1, 2, 4, 8, ...): pad rows write into the engine's padding block, which no sequence holds.

Memory: each bucket's warmup and recorded pass allocate in a ``torch.cuda.MemPool`` of their
own over lifecore's pooled allocator (:func:`lifecore.torch.mem_pool`): torch's segments are
Buffers lent from the lifecore stream's memory manager. The warmup runs inside the prepared
window, so its segments come from the persistent pool and are primed; the recorded pass reuses
the blocks the warmup freed (torch's cache inside those segments), so nothing is allocated in
the window (a request the primed pool could not serve there is refused, and the capture with
it); and the recording retains every segment the stream has lent, so the graph keeps its
intermediates for its life whatever torch does with its cache. lifecore's guarantees therefore
cover torch's work in the warmup and in the window. They do not cover what was allocated
before: the weights and the KV cache (the coordinator's arena) exist before any capture and are
the engine's to keep alive while the graphs live. Where this torch cannot load a pluggable
allocator (``pool_kind == "torch"``), a private torch pool takes its place and lifecore's
guarantees then cover the window and the stream, not torch's intermediates.
"""

from __future__ import annotations

from typing import Any, cast

import torch

from .. import torch as lifecore_torch
from .model import StepInputs, Transformer

__all__ = ["DecodeGraphs", "buckets"]


def buckets(max_batch: int) -> list[int]:
    """1, 2, 4, ... up to the first power of two that holds ``max_batch``."""
    sizes = [1]
    while sizes[-1] < max_batch:
        sizes.append(sizes[-1] * 2)
    return sizes


class DecodeGraphs:
    """The captured decode step, one graph per bucket, replayed on the lifecore ``stream``.

    ``pool_kind`` says whose pool holds torch's memory in the window: ``"lifecore"`` (the pooled
    allocator) or ``"torch"`` (a private torch pool, where the pluggable allocator is unavailable;
    ``pool_fallback`` says why)."""

    def __init__(self, model: Transformer, kv: torch.Tensor, stream: Any, *, max_batch: int, width: int,
                 pad_block: int):
        self.model, self.kv, self.stream, self.width = model, kv, stream, width
        self.torch_stream: Any = cast(Any, torch.cuda).ExternalStream(stream.handle, device=kv.device)
        size = buckets(max_batch)[-1]
        device = kv.device
        self.tokens = torch.zeros(size, dtype=torch.int64, device=device)
        self.pos = torch.zeros(size, dtype=torch.int64, device=device)
        self.seq = torch.arange(size, dtype=torch.int64, device=device)
        self.table = torch.full((size, width), pad_block, dtype=torch.int32, device=device)
        self.pad_block = pad_block
        self.graphs: dict[int, tuple[Any, torch.Tensor, Any]] = {}  # bucket -> (graph, next tokens, pool)
        self.captures = self.replays = 0
        self.recorded_allocations = 0  # lifecore driver allocations made by recorded passes: 0 when primed
        available, reason = lifecore_torch.pooled_allocator_available()
        self.pool_kind = "lifecore" if available else "torch"
        self.pool_fallback = reason

    def _pool(self) -> Any:
        if self.pool_kind == "lifecore":
            return lifecore_torch.mem_pool(self.stream)
        return torch.cuda.MemPool()

    def _capture(self, bucket: int) -> tuple[Any, torch.Tensor, Any]:
        inputs = StepInputs(self.tokens[:bucket], self.pos[:bucket], self.seq[:bucket], self.table[:bucket], self.kv)
        pool = self._pool()
        stream = self.stream
        stream.graph_prepare()
        try:
            with torch.cuda.stream(self.torch_stream), torch.cuda.use_mem_pool(pool), torch.no_grad():
                self.model(inputs).argmax(-1)  # warmup: eager, inside the window: primes the step's segments
                stream.sync()
                stream.begin_capture()
                allocations = stream.device.memory_stats()["driver_allocations"]
                out = self.model(inputs).argmax(-1)  # recorded, not run
                graph = stream.end_capture()
        except BaseException:
            stream.abort_capture()  # out of the window whichever step failed (a no-op once out)
            raise
        self.recorded_allocations += stream.device.memory_stats()["driver_allocations"] - allocations
        self.captures += 1
        return graph, out, pool

    def run(self, tokens: torch.Tensor, pos: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """Next tokens for ``len(tokens)`` rows; ``table`` is ``[rows, width]`` (width at most the graphs')."""
        rows = tokens.shape[0]
        bucket = next(b for b in buckets(rows) if b >= rows)
        with torch.cuda.stream(self.torch_stream):
            self.tokens[:rows].copy_(tokens, non_blocking=True)
            self.pos[:rows].copy_(pos, non_blocking=True)
            self.tokens[rows:bucket].zero_()
            self.pos[rows:bucket].zero_()
            self.table[:bucket].fill_(self.pad_block)
            self.table[:rows, : table.shape[1]].copy_(table, non_blocking=True)
            if bucket not in self.graphs:
                self.graphs[bucket] = self._capture(bucket)
            graph, out, _ = self.graphs[bucket]
            graph.replay()
            self.replays += 1
            return out[:rows].cpu()  # waits for the lifecore stream

    def close(self) -> None:
        for graph, _, _ in self.graphs.values():
            graph.destroy()
        self.graphs.clear()  # the pools go, and torch hands their segments back to lifecore's pool
        if self.pool_kind == "lifecore":
            lifecore_torch.release_stream(self.stream)
