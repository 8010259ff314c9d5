"""Type variables the C++ module's stubs use (cpp/bindings/stub_patterns.txt): a stub file
declares no type variable of its own there, so they are imported from here."""

from __future__ import annotations

from typing import TypeVar

BlockTableOut = TypeVar("BlockTableOut")
"""What ``AdmissionCoordinator.block_table`` fills and returns: the type of its ``out``."""
