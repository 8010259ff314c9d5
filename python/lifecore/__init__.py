"""lifecore: lifecycles for GPU inference runtimes that cannot go wrong.

- graph capture on a stream (``StreamCaptureState``, ``Device``, ``Stream``, ``Graph``);
- sequence sessions and the KV memory behind them (``lifecore.sequence``);
- bounded activation capture with interventions (``lifecore.capture``, ``lifecore.torch``).
"""

from __future__ import annotations

from . import errors
from ._core import BackendInfo, backends, driver_operations
from .errors import *  # noqa: F401,F403

__version__ = "0.1.0"

__all__ = ["BackendInfo", "backends", "driver_operations", "errors", *errors.__all__]
