"""The backends the tests need, named by their role and read from the registry.

Most runtime tests want the emulated device on purpose: it offers fault injection, the pause
hooks and memory limits on host memory. ``EMULATED`` is the registry's name for it
(``lifecore.testing.emulated_backend()``), so no test spells a backend's name.
"""

from typing import NoReturn

import pytest

from lifecore.testing import emulated_backend
from lifecore.testing.required import requirement_note

EMULATED = emulated_backend()


def unavailable(backend: str, reason: str) -> NoReturn:
    """Skips the running test, which needs a device of ``backend``, saying ``reason``; fails it
    instead where ``LIFECORE_REQUIRE`` lists the backend: a GPU job whose driver cannot open a
    device must not go green having run nothing."""
    note = requirement_note(backend)
    if note is not None:
        pytest.fail(f"{backend}: {reason} ({note})", pytrace=False)
    pytest.skip(f"{backend}: {reason}")
