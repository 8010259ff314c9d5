"""A reference engine on lifecore: continuous batching over a paged KV cache, a captured decode
step on CUDA, bounded activation capture. It is small on purpose: the code an engine author reads.

- :mod:`.model`: a decoder-only transformer (random weights) with paged attention.
- :mod:`.kv_cache`: the KV cache tensor and the batch's block table.
- :mod:`.scheduler`: the continuous-batching scheduler on ``lifecore.sequence``.
- :mod:`.graphs`: the decode step per batch-size bucket in a lifecore graph window (CUDA).
- :mod:`.capture`: per-layer summaries under a byte budget, and one scaled layer.
- :mod:`.engine`: the pieces put together; :mod:`.demo`: ``lifecore demo``.

Needs torch (``pip install torch``, or ``pip install ".[torch]"`` in lifecore's source folder).
"""

from __future__ import annotations

try:
    import torch  # noqa: F401  (each module below needs it: said once, here)
except ModuleNotFoundError as error:
    from .._needs_torch import torch_missing

    raise torch_missing("lifecore.engine", error) from error

from .. import _python_guard
from .capture import CaptureOptions
from .engine import Engine, Result
from .model import PRESETS, ModelConfig, Transformer
from .scheduler import Request, Running, Stats

__all__ = ["Engine", "Result", "CaptureOptions", "PRESETS", "ModelConfig", "Transformer", "Request", "Running",
           "Stats"]


# Last: what this module exports answers a call it cannot bind with LifecoreTypeError.
_python_guard.install(__name__)
