"""The backend registry as seen from Python: names and availability, in registry order.

Each backend registers itself in the C++ driver floor; ``lifecore.backends()`` returns what the
registry knows, one ``BackendInfo`` per backend. Everything in the package that needs a list of
backends (the command line, the differential runner, the test suite) reads it from here, so a
new backend appears everywhere without being named anywhere.
"""

from __future__ import annotations

from ._core import BackendInfo, backends
from .errors import InvalidArgumentError, LifecoreTypeError

__all__ = ["available_backends", "backend_info", "backend_names"]


def backend_names() -> list[str]:
    """Names of every registered backend, available here or not, in registry order."""
    return [info.name for info in backends()]


def available_backends() -> list[str]:
    """Names of the registered backends that can open a device here, in registry order.

    ``lifecore.Device(name)`` opens a device for each of them; the others are listed by
    :func:`lifecore.backends` with the reason they are unavailable.
    """
    return [info.name for info in backends() if info.available]


def backend_info(name: str) -> BackendInfo:
    """The registry's ``BackendInfo`` for the backend called ``name``.

    Raises ``InvalidArgumentError`` naming the registered backends when there is none, and
    ``LifecoreTypeError`` for a name that is not a string.
    """
    if not isinstance(name, str):
        raise LifecoreTypeError(f"backend_info: name must be a str, got {type(name).__name__}")
    infos = backends()
    for info in infos:
        if info.name == name:
            return info
    known = ", ".join(repr(info.name) for info in infos)
    raise InvalidArgumentError(f"unknown backend {name!r}: registered backends are {known}")
