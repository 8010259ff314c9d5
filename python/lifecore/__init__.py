"""lifecore: lifecycles for GPU inference runtimes that cannot go wrong.

- graph capture on a stream (``StreamCaptureState``, ``Device``, ``Stream``, ``Graph``);
- sequence sessions and the KV memory behind them (``lifecore.sequence``);
- bounded activation capture with interventions (``lifecore.capture``, ``lifecore.torch``).
"""

from __future__ import annotations

from . import errors
from ._core.driver import BackendInfo, backends, driver_operations, status_codes
from ._core.runtime import (
    Buffer,
    BufferView,
    CacheMode,
    CaptureEnd,
    CaptureVariant,
    Device,
    Graph,
    Kernel,
    Module,
    Profile,
    Stream,
    StreamCaptureState,
)
from . import _call_guard, _copy_protocol, _python_guard
from ._registry import available_backends, backend_info, backend_names

# Every bound function answers a wrong argument with a lifecore error (see _call_guard).
_call_guard.install()
# Values copy and pickle; handles and reports refuse, saying what to send (see _copy_protocol).
_copy_protocol.install()
from . import capture, kernels, sequence
from .errors import *  # noqa: F401,F403
from .kernels import float_bits

__version__ = "0.1.0"

__all__ = [
    "BackendInfo",
    "available_backends",
    "backend_info",
    "backend_names",
    "backends",
    "driver_operations",
    "status_codes",
    "errors",
    "Buffer",
    "BufferView",
    "CacheMode",
    "CaptureEnd",
    "CaptureVariant",
    "Device",
    "Graph",
    "Kernel",
    "Module",
    "Profile",
    "Stream",
    "StreamCaptureState",
    "float_bits",
    "kernels",
    "sequence",
    "capture",
    # The errors, named here rather than spread from errors.__all__, which mypy does not read
    # (a star import would not give them); tests/test_package.py keeps the two lists equal.
    "LifecoreError",
    "InvalidArgumentError",
    "LifecoreTypeError",
    "LifecoreOverflowError",
    "CaptureStateError",
    "CaptureRefusedError",
    "DriverError",
    "DeviceLostError",
    "BackendUnavailableError",
    "StaleAuthorityError",
    "CapacityError",
    "BudgetExceededError",
    "AdmissionError",
    "SessionStateError",
    "ClosedError",
    "CaptureSessionError",
    "EngineError",
]


# Last: what this module exports answers a call it cannot bind with LifecoreTypeError.
_python_guard.install(__name__)
