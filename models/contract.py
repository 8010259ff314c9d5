"""What every reference model shares: the error kinds and :class:`ModelError`, the one way a
model says that a call is refused and what the implementation must raise instead.

Pure Python, no import of lifecore. The kinds mirror the core's ``ErrorKind`` (the list in
``lifecore/error.hpp``), each with the lifecore exception class it raises.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["ERROR_KINDS", "ModelError", "error_kind"]

#: Every ``ErrorKind`` name, in the core's order, and the lifecore exception class it raises.
ERROR_KINDS: dict[str, str] = {
    "Lifecore": "LifecoreError",
    "InvalidArgument": "InvalidArgumentError",
    "TypeMismatch": "LifecoreTypeError",
    "Overflow": "LifecoreOverflowError",
    "CaptureState": "CaptureStateError",
    "CaptureRefused": "CaptureRefusedError",
    "Driver": "DriverError",
    "DeviceLost": "DeviceLostError",
    "BackendUnavailable": "BackendUnavailableError",
    "StaleAuthority": "StaleAuthorityError",
    "Capacity": "CapacityError",
    "BudgetExceeded": "BudgetExceededError",
    "Admission": "AdmissionError",
    "SessionState": "SessionStateError",
    "Closed": "ClosedError",
    "CaptureSession": "CaptureSessionError",
}

_KIND_OF_CLASS = {class_name: kind for kind, class_name in ERROR_KINDS.items()}


def error_kind(name: str) -> str:
    """The ``ErrorKind`` name for ``name``: a kind (``"CaptureState"``) or the name of the
    exception class it raises (``"CaptureStateError"``). ValueError for anything else."""
    if name in ERROR_KINDS:
        return name
    kind = _KIND_OF_CLASS.get(name)
    if kind is None:
        raise ValueError(f"unknown error kind {name!r}: expected one of {', '.join(ERROR_KINDS)} "
                         f"or the exception class one of them raises")
    return kind


class ModelError(Exception):
    """A refused call: what the implementation must raise.

    ``kind`` is the ``ErrorKind`` name (``"CaptureState"``) and ``error_class`` the lifecore
    exception class it raises (``"CaptureStateError"``); either may be given. The other fields
    say what else the contract fixes, where it does: ``message`` (the text; exact in the
    lifecycles that compare it), ``contains`` (a fragment of the text, or the driver's status
    code), ``budget`` and ``cumulative`` (which limit a BudgetExceededError names). Which of
    them an implementation is held to is declared by each lifecycle's state machine; a field
    left None is never compared.
    """

    def __init__(self, kind: str, message: Optional[str] = None, *, contains: Optional[str] = None,
                 budget: Optional[str] = None, cumulative: Optional[bool] = None) -> None:
        self.kind = error_kind(kind)
        self.error_class = ERROR_KINDS[self.kind]
        super().__init__(message or contains or self.error_class)
        self.message = message
        self.contains = contains
        self.budget = budget
        self.cumulative = cumulative

    def __repr__(self) -> str:
        fixed = [f"{name}={value!r}" for name, value in (("message", self.message), ("contains", self.contains),
                                                         ("budget", self.budget), ("cumulative", self.cumulative))
                 if value is not None]
        return f"ModelError({', '.join([repr(self.kind), *fixed])})"
