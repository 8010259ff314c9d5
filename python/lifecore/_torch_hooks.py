"""Forward hooks placed on torch modules so that a Ctrl-C can never leave one behind.

``register_forward_hook`` hands back the handle that removes the hook only once it has
returned: a KeyboardInterrupt delivered as it returns (where CPython runs a pending signal
handler) loses the handle, and the hook stays on the model with nothing to remove it. So each
hook is noted here *before* torch registers it, and removed by identity from the module's hook
tables: a removal finds every hook that may have been placed, and one interrupted half way is
finished by calling it again.

A TorchScript module (what ``torch.jit.script`` or ``torch.jit.trace`` gives) takes no forward
hooks: placing one is refused with an error that says so, before torch's own.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from . import _core
from .errors import LifecoreTypeError

# A module's hook tables, and the tables that hold flags under the same ids.
_TABLES = (("_forward_hooks", ("_forward_hooks_with_kwargs", "_forward_hooks_always_called")),
           ("_forward_pre_hooks", ("_forward_pre_hooks_with_kwargs",)))


def _keys_of(table: Any, hook: Any) -> list[Any]:
    """The keys under which ``table`` holds ``hook``. Another thread may place or remove a hook
    on the same module meanwhile (a capture block of its own): the table is copied in one call
    (no Python code runs while it is), and read again should a change still come through."""
    while True:
        try:
            return [key for key, placed in tuple(table.items()) if placed is hook]
        except RuntimeError:  # "mutated during iteration": the next copy sees the table as it is
            continue


def _unhook(module: Any, hook: Any) -> None:
    """Removes every registration of ``hook`` (by identity) from ``module``'s forward and
    pre-forward hooks, and their flags; nothing if it is not there."""
    for name, flags in _TABLES:
        table = getattr(module, name, None)
        if not table:
            continue
        for key in _keys_of(table, hook):
            table.pop(key, None)
            for flag in flags:
                flagged = getattr(module, flag, None)
                if flagged is not None:
                    flagged.pop(key, None)


def refuse_scripted(module: Any, what: str) -> None:
    """LifecoreTypeError when ``module`` is a TorchScript module, which runs its forward in
    TorchScript and takes no forward hooks; ``what`` names it in the message."""
    if isinstance(module, torch.jit.ScriptModule):
        raise LifecoreTypeError(f"{what} is a TorchScript module ({type(module).__name__}, from torch.jit.script or "
                                f"torch.jit.trace), which takes no forward hooks: pass the torch.nn.Module before "
                                f"scripting or tracing it")


class PlacedHooks:
    """The hooks one owner placed, each noted before it is registered."""

    __slots__ = ("_placed",)

    def __init__(self) -> None:
        self._placed: list[tuple[Any, Any]] = []

    def forward(self, module: Any, hook: Any, **options: Any) -> Any:
        """``module.register_forward_hook(hook, **options)``; returns ``hook``."""
        refuse_scripted(module, f"the module {type(module).__name__}")
        self._placed.append((module, hook))
        module.register_forward_hook(hook, **options)
        return hook

    def forward_pre(self, module: Any, hook: Any, **options: Any) -> Any:
        """``module.register_forward_pre_hook(hook, **options)``; returns ``hook``."""
        refuse_scripted(module, f"the module {type(module).__name__}")
        self._placed.append((module, hook))
        module.register_forward_pre_hook(hook, **options)
        return hook

    def remove(self, hook: Any) -> None:
        """Removes ``hook`` from every module it was placed on here."""
        for module, placed in [entry for entry in self._placed if entry[1] is hook]:
            _unhook(module, placed)
        self._placed = [entry for entry in self._placed if entry[1] is not hook]

    def remove_all(self) -> None:
        """Removes every hook placed here, the last first; an interrupted call is finished by
        the next (each entry goes only once its hook is off its module)."""
        while self._placed:
            module, hook = self._placed[-1]
            _unhook(module, hook)
            self._placed.pop()


# finish_despite_interrupts(release): calls release() (every step of it safe to repeat) until a
# call completes, a KeyboardInterrupt raised inside a run (a Ctrl-C's handler runs between any
# two bytecodes) starting another, and raises the interrupt once one has: an interrupt never
# leaves a hook on a model, nor a model claimed by a block that has closed. In C: a loop in
# Python could itself be stopped before its try. exit_releasing is a context manager's
# __exit__ built on it (self._release(), then self._exit_after_release(*exc)), in C for the
# same reason: a Python __exit__ can be stopped at its first instruction.
finish_despite_interrupts: Callable[[Callable[[], object]], None] = getattr(_core, "_finish_despite_interrupts")
exit_releasing: Any = getattr(_core, "_exit_releasing")
