"""Hypothesis state machines for lifecore's lifecycles, shipped with the package so you can run
them against your own GPUs (they need ``hypothesis``).

- :class:`StreamCaptureMachine` / :func:`run_stream_capture_machine`: graph capture on a stream,
  differential against :mod:`lifecore.models.stream_capture`.
"""

from __future__ import annotations

from .stream_capture import STATS, MachineStats, StreamCaptureMachine, run_stream_capture_machine

__all__ = ["StreamCaptureMachine", "run_stream_capture_machine", "MachineStats", "STATS"]
