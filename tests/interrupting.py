"""A Ctrl-C delivered as a call returns, made on purpose: the call does its work, then raises
KeyboardInterrupt once, as CPython raises a pending signal's exception right after a call."""

from __future__ import annotations

from typing import Any


def interrupting_after(owner: Any, name: str, monkeypatch: Any) -> None:
    """``owner.name`` runs, then raises KeyboardInterrupt; the calls after it run as they are."""
    original = getattr(owner, name)

    def interrupted(*args: Any, **kwargs: Any) -> None:
        original(*args, **kwargs)
        monkeypatch.setattr(owner, name, original)
        raise KeyboardInterrupt(f"Ctrl-C as {name} returns")

    monkeypatch.setattr(owner, name, interrupted)
