"""Hypothesis state machines for lifecore's lifecycles, for lifecore's tests and yours.

Each machine lives in its own submodule and is imported on first use, so importing
``lifecore.testing`` does not require Hypothesis.
"""

from __future__ import annotations

from typing import Any

_MACHINES = {"SequenceSessionMachine": ".sequence_session"}


def __getattr__(name: str) -> Any:
    if name in _MACHINES:
        import importlib

        return getattr(importlib.import_module(_MACHINES[name], __name__), name)
    raise AttributeError(f"module 'lifecore.testing' has no attribute {name!r}")
