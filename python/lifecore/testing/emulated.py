"""The emulated backend, asked of the registry by its role rather than by its name.

Tests that need fault injection, the pause hooks or memory limits need an emulated device on
host memory that offers them; the registry marks such a backend ``BackendInfo.emulated``.
Code that asks for the role keeps working when the backend behind it is renamed or replaced.
"""

from __future__ import annotations

from .. import _python_guard

from .._core import backends
from ..errors import BackendUnavailableError

__all__ = ["emulated_backend"]

#: DLPack's device type for host memory: a buffer of a backend whose memory is host memory
#: (the emulated device's) is exported with it, so NumPy views it.
DLPACK_CPU = 1


def emulated_backend() -> str:
    """The name of the first registered backend with ``emulated=True``, in registry order.

    Raises ``BackendUnavailableError`` when no registered backend is emulated.
    """
    infos = backends()
    for info in infos:
        if info.emulated:
            return info.name
    known = ", ".join(repr(info.name) for info in infos) or "none"
    raise BackendUnavailableError(f"no registered backend is an emulated device (registered backends: {known})")


# Plain functions answer an argument they do not take with LifecoreTypeError (the
# machines' classes are Hypothesis's to call, so only the functions are guarded).
emulated_backend = _python_guard.guarded(emulated_backend, "emulated_backend")
