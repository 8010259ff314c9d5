"""The error for a part of lifecore that needs PyTorch where it is not installed."""

from __future__ import annotations


def torch_missing(part: str, error: ModuleNotFoundError) -> ModuleNotFoundError:
    """A ModuleNotFoundError (for ``torch``) saying which part needs it and how to install it;
    ``error`` when it is about another module (a broken torch install names what it lacks)."""
    if error.name != "torch":
        return error
    return ModuleNotFoundError(f"{part} needs PyTorch, which is not installed: pip install torch (or, in lifecore's "
                               f"source folder, pip install \".[torch]\")", name="torch")
