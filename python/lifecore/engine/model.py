"""The engine's model: a decoder-only transformer with random weights and paged attention.

Every forward takes a flat batch of token rows. Row ``r`` belongs to sequence ``seq[r]``
(a row of the block table) at position ``pos[r]``: a decode step has one row per sequence, a
prefill one row per prompt token, so prefill and decode share one attention path. Each layer
writes the rows' keys and values into the paged KV cache through the block table, then
gathers every key and value its rows may see through the same table.

The KV cache is one tensor ``[num_blocks, layers, 2, block_size, heads, head_dim]``: a block
holds ``block_size`` tokens of every layer's keys and values, so one lifecore page is one
block id.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import InvalidArgumentError, LifecoreOverflowError, LifecoreTypeError

__all__ = ["ModelConfig", "PRESETS", "Transformer", "Block", "StepInputs", "paged_attention"]


@dataclass(frozen=True)
class ModelConfig:
    """The shape of the decoder-only transformer: ``layers`` blocks of ``heads`` attention heads
    over ``d_model`` features (a multiple of ``heads``; ``head_dim`` is ``d_model // heads``), a
    ``vocab`` of token ids and ``max_positions`` learned positions. Every field is a positive int
    (``InvalidArgumentError``, a ValueError, otherwise)."""

    layers: int
    heads: int
    d_model: int
    vocab: int
    max_positions: int

    def __post_init__(self) -> None:
        for name in ("layers", "heads", "d_model", "vocab", "max_positions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"ModelConfig: {name} must be a positive int, got {value!r}")
        if self.d_model % self.heads:
            raise InvalidArgumentError(f"ModelConfig: d_model ({self.d_model}) must be a multiple of heads ({self.heads})")

    @property
    def head_dim(self) -> int:
        """Features per attention head: ``d_model // heads``."""
        return self.d_model // self.heads


#: ``tiny`` runs the tests and the demo on a CPU in seconds; ``gpt2-small`` has GPT-2 small's shape.
PRESETS = {
    "tiny": ModelConfig(layers=2, heads=2, d_model=32, vocab=97, max_positions=256),
    "gpt2-small": ModelConfig(layers=12, heads=12, d_model=768, vocab=50257, max_positions=1024),
}


@dataclass
class StepInputs:
    """What one forward reads besides the weights. ``table`` is ``[batch, width]`` block ids;
    ``kv`` the cache. On the graph path every tensor here is a fixed buffer the replay reads."""

    tokens: torch.Tensor  # [rows] int64
    pos: torch.Tensor  # [rows] int64
    seq: torch.Tensor  # [rows] int64, the row of `table` each token row belongs to
    table: torch.Tensor  # [batch, width] int32 or int64
    kv: torch.Tensor  # [num_blocks, layers, 2, block_size, heads, head_dim]


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, inputs: StepInputs) -> torch.Tensor:
    """Writes the rows' ``k`` / ``v`` ([rows, heads, head_dim]) into the cache, then attends each
    row's ``q`` over its sequence's positions ``0..pos`` gathered through the block table."""
    kv = inputs.kv
    block_size = kv.shape[3]
    table = inputs.table.long()
    pos, seq = inputs.pos, inputs.seq
    cache_k, cache_v = kv[:, layer, 0], kv[:, layer, 1]  # views: writes land in the cache
    blocks = table[seq, torch.div(pos, block_size, rounding_mode="floor")]
    offsets = pos % block_size
    cache_k.index_put_((blocks, offsets), k)
    cache_v.index_put_((blocks, offsets), v)
    rows, heads, head_dim = q.shape
    width = table.shape[1] * block_size
    keys = cache_k[table[seq]].reshape(rows, width, heads, head_dim)  # [rows, width, heads, head_dim]
    values = cache_v[table[seq]].reshape(rows, width, heads, head_dim)
    scores = torch.einsum("rhd,rthd->rht", q, keys) / math.sqrt(head_dim)
    visible = torch.arange(width, device=q.device)[None, :] <= pos[:, None]  # [rows, width]
    scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
    # A position past the row's length is another sequence's block, or the padding block: its
    # weight is 0, and 0 x NaN is NaN, so a value left there by a request whose keys and values
    # were not finite would reach this row. Zeroed, what it holds never matters.
    values = values.masked_fill(~visible[:, :, None, None], 0)
    return torch.einsum("rht,rthd->rhd", torch.softmax(scores, dim=-1), values)


class Block(nn.Module):
    """Pre-norm attention and MLP; its output ([rows, d_model]) is what capture observes."""

    def __init__(self, config: ModelConfig, index: int):
        super().__init__()
        self.index, self.heads, self.head_dim = index, config.heads, config.head_dim
        d = config.d_model
        self.ln_attn = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln_mlp = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor, inputs: StepInputs) -> torch.Tensor:
        rows = x.shape[0]
        q, k, v = self.qkv(self.ln_attn(x)).view(rows, 3, self.heads, self.head_dim).unbind(1)
        x = x + self.proj(paged_attention(q, k, v, self.index, inputs).reshape(rows, -1))
        out: torch.Tensor = x + self.out(F.gelu(self.fc(self.ln_mlp(x))))
        return out


def check_seed(call: str, seed: object) -> None:
    """A seed torch.manual_seed takes, refused naming ``call`` otherwise (torch would take a
    bool or a str as a number)."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise LifecoreTypeError(f"{call}: argument 'seed' must be an int, got {type(seed).__name__}")
    if not -(2**63) <= seed < 2**64:
        raise LifecoreOverflowError(f"{call}: argument 'seed' must be between -2**63 and 2**64 - 1, got {seed}")


def check_float_dtype(call: str, dtype: object) -> None:
    """A floating-point torch.dtype, refused naming ``call`` otherwise."""
    if not isinstance(dtype, torch.dtype):
        raise LifecoreTypeError(f"{call}: argument 'dtype' must be a torch.dtype (e.g. torch.float32), got {dtype!r}")
    if not dtype.is_floating_point:
        raise InvalidArgumentError(f"{call}: argument 'dtype' must be a floating-point torch.dtype, got {dtype}")
    if dtype.itemsize < 2:  # torch has no arithmetic in the float8 types: the first forward would fail
        raise InvalidArgumentError(f"{call}: argument 'dtype' must be a floating-point torch.dtype torch computes "
                                   f"in (float16, bfloat16, float32, float64), got {dtype}")


def _check_transformer_arguments(config: object, seed: object, dtype: object, device: object) -> None:
    """Transformer's arguments, each refused naming itself before torch sees it."""
    if not isinstance(config, ModelConfig):
        raise LifecoreTypeError(f"Transformer: argument 'config' must be a ModelConfig (PRESETS[name] is one), "
                                f"got {type(config).__name__}")
    check_seed("Transformer", seed)
    check_float_dtype("Transformer", dtype)
    if device is None:
        return
    if not isinstance(device, (str, torch.device)):
        raise LifecoreTypeError(f"Transformer: argument 'device' must be a str, a torch.device or None, "
                                f"got {type(device).__name__}")
    try:
        wanted = torch.device(device)
    except (RuntimeError, ValueError) as error:
        raise InvalidArgumentError(f"Transformer: argument 'device' {device!r} is not a torch device ({error})") from None
    if wanted.type == "cuda" and not torch.cuda.is_available():
        raise InvalidArgumentError(f"Transformer: argument 'device' is {device!r}, but this torch has no CUDA device")


class Transformer(nn.Module):
    """Random weights from ``seed``; modules ``embed``, ``layers.<i>``, ``ln_final``, ``lm_head``."""

    def __init__(self, config: ModelConfig, *, seed: int = 0, dtype: torch.dtype = torch.float32,
                 device: Optional[torch.device | str] = None):
        _check_transformer_arguments(config, seed, dtype, device)
        super().__init__()
        self.config = config
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            self.embed = nn.Embedding(config.vocab, config.d_model)
            self.positions = nn.Embedding(config.max_positions, config.d_model)
            self.layers = nn.ModuleList(Block(config, i) for i in range(config.layers))
            self.ln_final = nn.LayerNorm(config.d_model)
            self.lm_head = nn.Linear(config.d_model, config.vocab, bias=False)
            for module in self.modules():  # GPT-2's initialisation scale keeps logits well spread
                if isinstance(module, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(module.weight, std=0.02 if isinstance(module, nn.Linear) else 0.5)
                    if isinstance(module, nn.Linear) and module.bias is not None:
                        nn.init.normal_(module.bias, std=0.02)
        finally:
            torch.random.set_rng_state(generator_state)
        self.to(dtype=dtype, device=device)
        self.eval()
        self.requires_grad_(False)

    def forward(self, inputs: StepInputs) -> torch.Tensor:
        """Logits ``[rows, vocab]`` for every token row."""
        x = self.embed(inputs.tokens) + self.positions(inputs.pos)
        for layer in self.layers:
            x = layer(x, inputs)
        logits: torch.Tensor = self.lm_head(self.ln_final(x))
        return logits
