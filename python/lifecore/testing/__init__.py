"""Hypothesis state machines that check lifecore's lifecycles against their reference
models; each takes a backend factory so third parties can run them on their backends."""

from __future__ import annotations

from .capture_session import CaptureSessionMachine

__all__ = ["CaptureSessionMachine"]
