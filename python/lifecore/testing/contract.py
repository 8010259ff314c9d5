"""The one comparison every lifecycle's state machine makes: the same call on the reference
model and on lifecore, which must succeed together or refuse together with the same error
kind (``lifecore.models.contract.ModelError``) and agree on every field the lifecycle's
contract fixes (an exact message, a fragment or status code, the budget a limit names).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

from hypothesis import note
from hypothesis.errors import InvalidArgument

from .. import errors
from ..models.contract import ERROR_KINDS, ModelError
from .machine_stats import MachineStats

__all__ = ["Agreement", "both", "error_kind_of", "FIELDS"]

#: The fields a lifecycle may hold lifecore to, beyond the error kind.
FIELDS = ("message", "contains", "budget", "cumulative")


_KIND_OF_CLASS = {getattr(errors, class_name): kind for kind, class_name in ERROR_KINDS.items()}


def error_kind_of(error: BaseException) -> str:
    """The ``ErrorKind`` name of a lifecore error (its most specific lifecore class)."""
    for cls in type(error).__mro__:
        if cls in _KIND_OF_CLASS:
            return _KIND_OF_CLASS[cls]
    raise TypeError(f"not a lifecore error: {type(error).__name__}")


@dataclass
class Agreement:
    """What one call did on both sides, once they agreed: the model's value (``expected``)
    and lifecore's (``actual``), or the refusal (``kind``, with both errors)."""

    what: str
    expected: Any = None
    actual: Any = None
    model_error: Optional[ModelError] = None
    error: Optional[BaseException] = None

    @property
    def kind(self) -> Optional[str]:
        """The error kind both raised, or None when both succeeded."""
        return None if self.model_error is None else self.model_error.kind

    def __iter__(self) -> Iterator[Any]:
        """``expected, actual, kind = machine.both(...)``."""
        return iter((self.expected, self.actual, self.kind))


def _agrees_on(field: str, expected: ModelError, error: BaseException) -> Optional[str]:
    """None when ``error`` carries what ``expected`` fixes in ``field``, else what differs."""
    wanted = getattr(expected, field)
    if wanted is None:
        return None
    text = str(error)
    if field == "message":
        return None if text == wanted else f"message {text!r} != {wanted!r}"
    if field == "contains":
        code = getattr(error, "code", None)
        return None if wanted in text or str(code) == wanted else f"{text!r} does not name {wanted!r}"
    actual = getattr(error, field, None)
    return None if actual == wanted else f"{field} {actual!r} != {wanted!r}"


def _outcome(error: Optional[BaseException]) -> str:
    """What one side did, as a failure report's falsifying steps show it."""
    return "accepted" if error is None else f"refused: {error!r}"


# The one narrower error a refusal may be: an overflow is an invalid argument, said more
# precisely. Any other subclass is another kind (a DeviceLostError is a DriverError whose device
# is gone, which the caller then throws away): it must be the model's.
_NARROWER = {(errors.InvalidArgumentError, errors.LifecoreOverflowError)}


def _same_kind(expected: type, raised: type) -> bool:
    """Whether ``raised`` (a subclass of ``expected``) is that kind: lifecore's most derived
    error class in its ancestry is ``expected``, or a narrower form the contract allows."""
    own = next(c for c in raised.__mro__ if c.__module__ == errors.__name__)
    return own is expected or (expected, own) in _NARROWER


def both(model_call: Callable[[], Any], core_call: Callable[[], Any], *, fields: Sequence[str] = (),
         what: str = "", stats: Optional[MachineStats] = None) -> Agreement:
    """Runs ``model_call`` then ``core_call`` and asserts they agree: both succeed, or both
    refuse with the same error kind (lifecore's error may be a subclass of the model's, as a
    LifecoreOverflowError is an InvalidArgumentError) and the same value of each of ``fields``
    the model's error fixes. A refusal is counted in ``stats`` as ``err:<kind>`` of the rule
    running. Returns both sides' results."""
    unknown = [f for f in fields if f not in FIELDS]
    if unknown:
        raise ValueError(f"both: unknown fields {unknown}: expected some of {', '.join(FIELDS)}")
    result = Agreement(what or getattr(core_call, "__name__", "call"))
    try:
        result.expected = model_call()
    except ModelError as e:
        result.model_error = e
    try:
        result.actual = core_call()
    except errors.LifecoreError as e:
        result.error = e
    expected, error = result.model_error, result.error
    try:
        note(f"{result.what}: model -> {_outcome(expected)}, lifecore -> {_outcome(error)}")
    except InvalidArgument:  # outside a Hypothesis test: nothing to note it in
        pass
    if expected is None and error is not None:
        # A backend's own failure (a transform, a describe...) surfaces through the session:
        # said as that, since the backend is then the party under test.
        culprit = "the backend under test failed inside lifecore" if "backend." in str(error) else "lifecore raised"
        raise AssertionError(f"{result.what}: the model accepts it but {culprit}: {type(error).__name__}: {error}")
    if expected is not None and error is None:
        raise AssertionError(f"{result.what}: expected {expected.error_class} ({expected}) but lifecore accepted it")
    if expected is not None and error is not None:
        expected_class = getattr(errors, expected.error_class)
        assert isinstance(error, expected_class) and _same_kind(expected_class, type(error)), (
            f"{result.what}: expected {expected.error_class}, got {type(error).__name__}: {error}")
        for field in fields:
            difference = _agrees_on(field, expected, error)
            assert difference is None, f"{result.what}: {difference}"
        if stats is not None:
            stats.note(stats.current, "err:" + expected.kind)
    return result
