"""The engine's KV cache: one tensor of blocks, and the block table of a batch's frames.

The coordinator decides which sequence holds which pages; a page is one block id, so the
cache is ``[num_blocks, layers, 2, block_size, heads, head_dim]`` and one page's bytes are
``block_size * layers * 2 * heads * head_dim * itemsize``. Where the coordinator lays its
pages in an arena, the cache tensor is a view of that arena (``arena("kv")``) and the block
table comes from the frames in one call (``block_table``): lifecore owns the memory, the
engine shapes it, and it is the engine's to keep alive while a captured graph may read it.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import torch

__all__ = ["KVCache", "DOMAIN"]

DOMAIN = "kv"


def page_bytes(layers: int, heads: int, head_dim: int, block_size: int, dtype: torch.dtype) -> int:
    """The bytes of one block: every layer's keys and values for ``block_size`` tokens."""
    return block_size * layers * 2 * heads * head_dim * torch.empty((), dtype=dtype).element_size()


def on_device(actual: torch.device, wanted: torch.device) -> bool:
    """Whether memory on ``actual`` is on ``wanted``: the same type, and the same index where
    ``wanted`` names one (a CPU is one device: "cpu:0" is "cpu")."""
    return actual.type == wanted.type and (wanted.type == "cpu" or wanted.index is None
                                           or actual.index == wanted.index)


class KVCache:
    """``tensor`` is the cache; ``block_table(frames, width, out)`` the batch's table.

    The block ids are the coordinator's: the cache keeps no bookkeeping of its own.
    """

    def __init__(self, coordinator: Any, layers: int, heads: int, head_dim: int, block_size: int,
                 dtype: torch.dtype, device: torch.device | str):
        self.coordinator, self.block_size = coordinator, block_size
        self.page_bytes = page_bytes(layers, heads, head_dim, block_size, dtype)
        if coordinator.page_bytes != self.page_bytes or coordinator.tokens_per_page != block_size:
            raise ValueError(f"KVCache: the coordinator's pages ({coordinator.page_bytes} bytes, "
                             f"{coordinator.tokens_per_page} tokens) are not this cache's blocks "
                             f"({self.page_bytes} bytes, {block_size} tokens)")
        capacity = next(d.total_bytes for d in coordinator.capacity().domains if d.name == DOMAIN)
        self.num_blocks = capacity // self.page_bytes
        shape = (self.num_blocks, layers, 2, block_size, heads, head_dim)
        arena = self._arena(dtype, device, shape)
        # Host accounting hands out the same block ids but owns no memory: the engine allocates.
        self.tensor = arena if arena is not None else torch.zeros(shape, dtype=dtype, device=device)
        self.on_arena = arena is not None

    def _arena(self, dtype: torch.dtype, device: torch.device | str, shape: tuple[Any, ...]) -> Optional[torch.Tensor]:
        """The coordinator's arena as the cache tensor; None on host accounting (no memory behind
        its blocks: the engine allocates). An arena that cannot be the tensor (a domain grown
        into several chunks, pages on another device) raises, rather than leaving the arena
        allocated beside a cache of the engine's own."""
        if self.coordinator.page_memory_kind == "host":
            return None
        try:
            raw = torch.utils.dlpack.from_dlpack(self.coordinator.arena(DOMAIN))
        except Exception as error:
            raise ValueError(f"KVCache: the coordinator's arena cannot be the cache tensor ({error})") from error
        wanted = torch.device(device)
        if not on_device(raw.device, wanted):
            raise ValueError(f"KVCache: the coordinator's pages are on {raw.device}, the cache is asked for on "
                             f"{wanted}: make the coordinator on the cache's device")
        elements = self.num_blocks * int(np.prod(shape[1:]))
        return raw.reshape(-1).view(torch.uint8).view(dtype)[:elements].view(shape)

    def block_ids(self, frame: Any) -> list[int]:
        """The blocks of one sequence's live frame, in token order."""
        return [int(i) for i in frame.snapshot.block_ids(DOMAIN)]

    def block_table(self, frames: Sequence[Any], width: int, out: np.ndarray) -> np.ndarray:
        """Fills ``out[:len(frames), :width]`` (int32) with each frame's blocks, padded with 0."""
        rows = out[: len(frames), :width]
        if rows.flags.c_contiguous:  # the graph path's full-width table: written in place
            self.coordinator.block_table(frames, width, out=rows, domain=DOMAIN, pad=0)
        else:
            rows[...] = self.coordinator.block_table(frames, width, domain=DOMAIN, pad=0)
        return out
