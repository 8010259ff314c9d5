"""Whether a device offers fault injection, asked of the device rather than of its backend's name.

``Device.inject_fault`` makes a chosen driver operation fail; only a backend whose driver
offers it (today the emulated one) accepts the call, the others refuse it with a
``LifecoreError``. Code that runs over every registered backend asks this instead of comparing
names, so a new backend that offers fault injection is exercised with faults too.
"""

from __future__ import annotations

from .. import _python_guard

from typing import Any

from ..errors import InvalidArgumentError, LifecoreError, LifecoreTypeError

__all__ = ["offers_fault_injection"]


def offers_fault_injection(device: Any) -> bool:
    """True when ``device.inject_fault`` can make a driver operation fail on this device.

    The probe names no driver operation, so it injects nothing: a device that offers fault
    injection refuses the empty name as a bad argument, one that does not refuses the call
    itself. A closed device raises ``ClosedError`` as every other call does.
    """
    from .. import Device

    if not isinstance(device, Device):
        raise LifecoreTypeError(f"offers_fault_injection: argument 'device' must be a lifecore Device, "
                                f"got {type(device).__name__}")
    try:
        device.inject_fault("", 1)
    except InvalidArgumentError:
        return True
    except LifecoreError as error:
        if type(error) is LifecoreError:  # the refusal of the call itself, not a closed device
            return False
        raise
    raise AssertionError("inject_fault accepted an empty operation name")


# Plain functions answer an argument they do not take with LifecoreTypeError (the
# machines' classes are Hypothesis's to call, so only the functions are guarded).
offers_fault_injection = _python_guard.guarded(offers_fault_injection, "offers_fault_injection")
