"""The call guard over lifecore's functions written in Python.

Python answers a call its signature cannot bind (an argument the function does not take, one
too many, one missing) with a plain ``TypeError``; lifecore promises ``LifecoreTypeError``
naming the call, as ``_call_guard`` does for the bound C++ functions. ``install(module)`` (the
last line of each public module) wraps every function the module exports, and the constructor
and public methods of every class it exports, except the backend methods lifecore itself calls
at each observation (a guard would cost every call, and lifecore passes what they take).

A wrapper costs a call nothing more until a ``TypeError`` escapes; only then is the signature
read and bound, and the error becomes ``LifecoreTypeError`` when the binding fails (the
function's body never ran). A ``TypeError`` from within the body is left as it is. A
``LifecoreError`` whose message names an argument but no call (``argument 'x' ...``, from a
check several functions share) gets the call's name in front.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
from typing import Any, Callable, TypeVar

from .errors import LifecoreError, LifecoreTypeError

F = TypeVar("F", bound=Callable[..., Any])

# Backend methods lifecore calls per observation or per routed forward (the capture backend
# protocol and the routing hook): left unwrapped.
CALLED_BY_LIFECORE = frozenset({"describe", "shape", "dtype", "estimate", "native_bytes", "transform",
                                "summary_statistics", "intervene", "count", "select"})

_GUARDED = "__lifecore_guarded__"
_CALLED = re.compile(r"^[\w.<>]+\(\) ")


def _binds(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``func``'s signature binds the call (True, too, for a function that has none to
    bind against): read only on the failure path, so importing pays for no signature."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def guarded(func: F, call: str) -> F:
    """``func`` refusing a call its signature cannot bind with ``LifecoreTypeError`` naming
    ``call``."""
    if getattr(func, _GUARDED, False):
        return func

    @functools.wraps(func)
    def guard(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except LifecoreError as error:
            # A check shared by several calls names the argument alone: the call is named here,
            # by the innermost guarded function it escapes (an outer one finds it named).
            if error.args and isinstance(error.args[0], str) and error.args[0].startswith("argument '"):
                error.args = (f"{call}: {error.args[0]}",) + error.args[1:]
            raise
        except TypeError as error:
            if isinstance(error, LifecoreError) or _binds(func, args, kwargs):
                raise
            # Python's own words, which name the argument, without its "name() " prefix.
            raise LifecoreTypeError(f"{call}: {_CALLED.sub('', str(error), count=1)}") from None

    setattr(guard, _GUARDED, True)
    if inspect.iscoroutinefunction(func):
        _mark_coroutine_function(guard)
    return guard  # type: ignore[return-value]


def _mark_coroutine_function(guard: Callable[..., Any]) -> None:
    """Marks a guard over an ``async def`` as a coroutine function (it returns the coroutine, so
    a call it cannot bind is still refused at the call, not at the first await)."""
    mark = getattr(inspect, "markcoroutinefunction", None)  # Python 3.12+
    if mark is not None:
        mark(guard)
    else:  # 3.11: asyncio.iscoroutinefunction reads this marker (inspect's sees only code flags)
        import asyncio.coroutines

        guard._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]


def _guard_class(cls: type) -> None:
    if getattr(cls, "__init__") is object.__init__ and getattr(cls, "__new__") is object.__new__:
        # A class with no constructor of its own (NumpyBackend): object's refuses an argument
        # with a plain TypeError, so it gets one that takes none, guarded like the others.
        def __init__(self: Any) -> None:
            pass

        __init__.__qualname__ = f"{cls.__qualname__}.__init__"
        setattr(cls, "__init__", __init__)
    for name, value in list(vars(cls).items()):
        # A named tuple (Histogram) is made by its __new__: guarded as a constructor is.
        constructor = name in ("__init__", "__new__")
        if not constructor and (name.startswith("_") or name in CALLED_BY_LIFECORE):
            continue
        label = cls.__name__ if constructor else f"{cls.__name__}.{name}"
        if inspect.isfunction(value):
            setattr(cls, name, guarded(value, label))
        elif isinstance(value, (staticmethod, classmethod)) and inspect.isfunction(value.__func__):
            setattr(cls, name, type(value)(guarded(value.__func__, label)))


def install(module_name: str) -> None:
    """Guards what the module ``module_name`` exports (its ``__all__``) that is written in Python."""
    module = sys.modules[module_name]
    for name in getattr(module, "__all__", ()):
        value = vars(module).get(name)  # a name the module provides lazily (TorchBackend) is guarded where it lives
        if inspect.isfunction(value) and value.__module__.startswith("lifecore"):
            setattr(module, name, guarded(value, f"{module_name}.{name}"))
        elif (isinstance(value, type) and value.__module__.startswith("lifecore")
              and not value.__module__.startswith("lifecore._core") and not issubclass(value, BaseException)):
            _guard_class(value)
