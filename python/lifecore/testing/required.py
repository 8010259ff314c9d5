"""The backends a test run requires: a suite bound to a device that cannot open here skips, so a
CI job on a GPU runner whose driver is missing would go green having run nothing. With
``LIFECORE_REQUIRE`` set in the environment (backend names, comma-separated:
``LIFECORE_REQUIRE=cuda``), such a test fails instead, as ``lifecore check --require cuda`` does
for the command line."""

from __future__ import annotations

import os

VARIABLE = "LIFECORE_REQUIRE"


def required_backends() -> frozenset[str]:
    """The backend names ``LIFECORE_REQUIRE`` lists now (empty when it is unset or blank).
    ``InvalidArgumentError`` for a name no backend is registered under: a misspelled variable
    (``CUDA``, ``nvidia``) would otherwise require nothing, and a GPU job would go green having
    run nothing, which is what the variable is there to prevent."""
    from lifecore import backend_names
    from lifecore.errors import InvalidArgumentError

    names = frozenset(name.strip() for name in os.environ.get(VARIABLE, "").split(",") if name.strip())
    unknown = sorted(names - set(backend_names()))
    if unknown:
        raise InvalidArgumentError(f"{VARIABLE} names no registered backend: {', '.join(map(repr, unknown))} "
                                   f"(the registered ones: {', '.join(backend_names())}; names are case-sensitive)")
    return names


def requirement_note(backend: str | None = None) -> str | None:
    """Why a test that cannot open ``backend`` (None: a device a factory could not open, its
    backend unknown here) must fail rather than skip, or None when it may skip: ``backend`` is
    required, or, unknown, any backend is."""
    required = required_backends()
    if not required or (backend is not None and backend not in required):
        return None
    return f"{VARIABLE}={','.join(sorted(required))} is set, so an unavailable backend fails the test"
