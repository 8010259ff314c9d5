"""A plain, non-paged implementation of the engine's model, for the equality tests.

It reads the engine model's weights by name and nothing else of the engine: one request at a
time, a contiguous per-layer cache of past keys and values grown by concatenation, attention
written out with its own softmax, greedy decoding.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F


def _layer_norm(x, weights, name):
    return F.layer_norm(x, x.shape[-1:], weights[f"{name}.weight"], weights[f"{name}.bias"])


def _linear(x, weights, name):
    bias = weights.get(f"{name}.bias")
    out = x @ weights[f"{name}.weight"].T
    return out if bias is None else out + bias


def _attend(q, keys, values):
    """q [heads, head_dim]; keys / values [time, heads, head_dim]: every past position visible."""
    scores = (keys * q).sum(-1).T / math.sqrt(q.shape[-1])  # [heads, time]
    weights = torch.exp(scores - scores.max(-1, keepdim=True).values)
    weights = weights / weights.sum(-1, keepdim=True)
    return (weights.T[:, :, None] * values).sum(0)  # [heads, head_dim]


def generate(model, prompt, max_new_tokens, *, hook=None, margins=None):
    """Greedy tokens for one request, one token at a time. ``hook(layer, output)`` sees each
    layer's output row (and may return a replacement)."""
    weights = dict(model.state_dict())
    config = model.config
    heads, head_dim = config.heads, config.head_dim
    cache = [([], []) for _ in range(config.layers)]
    tokens, out = list(prompt), []
    position = 0

    def step(token):
        nonlocal position
        x = weights["embed.weight"][token] + weights["positions.weight"][position]
        for i in range(config.layers):
            name = f"layers.{i}"
            q, k, v = _linear(_layer_norm(x, weights, f"{name}.ln_attn"), weights, f"{name}.qkv").view(3, heads, head_dim)
            keys, values = cache[i]
            keys.append(k)
            values.append(v)
            attended = _attend(q, torch.stack(keys), torch.stack(values)).reshape(-1)
            x = x + _linear(attended, weights, f"{name}.proj")
            h = F.gelu(_linear(_layer_norm(x, weights, f"{name}.ln_mlp"), weights, f"{name}.fc"))
            x = x + _linear(h, weights, f"{name}.out")
            if hook is not None:
                replaced = hook(i, x)
                if replaced is not None:
                    x = replaced
        position += 1
        return _linear(_layer_norm(x, weights, "ln_final"), weights, "lm_head")

    with torch.no_grad():
        for token in tokens[:-1]:
            step(token)
        last = tokens[-1]
        for _ in range(max_new_tokens):
            logits = step(last)
            if margins is not None:
                top = torch.topk(logits.double(), 2).values
                margins.append(float(top[0] - top[1]))
            last = int(logits.argmax())
            out.append(last)
    return out
