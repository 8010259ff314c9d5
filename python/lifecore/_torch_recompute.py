"""Whether a forward hook runs in a recompute: a forward that autograd runs again during a
backward, as activation checkpointing does (``torch.utils.checkpoint``, either variant, and
the gradient checkpointing of libraries built on it), to rebuild activations it did not keep.

Such a forward reproduces one the capture already saw: its outputs are not observed again, and
the interventions applied in it are applied again (:meth:`CaptureSession.reintervene`), so the
gradients are those of the forward that was captured. Autograd numbers each backward it runs
(a graph task) and reports -1 outside one; torch's own module trackers read the same number.
It cannot tell a recompute from another forward run inside a backward (a module called from a
tensor hook): every forward while a backward runs on the thread is taken for one.

A discovery's forward (``discover()``, or the one :func:`lifecore.torch.capture` runs before the
captured forward) is no step either: while one runs on the thread, every hook lifecore placed
(an ``attach``'s observers, interventions, call counts and routing) stands aside, so a session
attached to the model neither observes it nor applies an intervention in it.

A :func:`lifecore.torch.capture` block's hooks are its thread's: a forward another thread had
already begun when the block opened (its root pre-hook, which refuses other threads, had run)
reaches them too, and they stand aside for it (``elsewhere``). So do they for a submodule the
block's own forward hands to a worker thread: a thread's calls cannot be told apart by whose
forward they serve (a shared submodule, a decorated forward), and observing another caller's
would fail both. ``attach`` serves every thread.

Nor does a block serve another context of its own thread: asyncio runs each task in a context
of its own (a task made inside a block copies the context, the block in it), so a block stands
aside for a forward another task runs between its awaits (``OPEN_BLOCKS_HERE``). Generators
have no context of their own: blocks that interleaved generators hold open at once share each
forward, as nested blocks do.
"""

from __future__ import annotations

import contextvars
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

# The capture blocks open in the running context, innermost last: a block is added as it is
# entered and taken out as it closes, in whatever context it closes in (a task's copy of the
# context that made it keeps its own list).
OPEN_BLOCKS_HERE: contextvars.ContextVar[tuple[object, ...]] = contextvars.ContextVar(
    "lifecore_open_capture_blocks", default=())

import torch

# Absent in a torch without it: then no forward is ever taken for a recompute.
_graph_task_id = getattr(torch._C, "_current_graph_task_id", None)


def recomputing() -> bool:
    """True while autograd runs a backward on this thread (a forward then is a recompute)."""
    return _graph_task_id is not None and _graph_task_id() != -1


class _Discovering(threading.local):
    active = False  # read on every hook call: a class default, no lookup miss


_DISCOVERING = _Discovering()


def discovering() -> bool:
    """True while a discovery's forward runs on this thread."""
    return _DISCOVERING.active


def passed_over() -> bool:
    """True for a forward no session observes: a recompute, or a discovery's forward."""
    # recomputing() inlined: the observer calls this for every point it observes.
    return _DISCOVERING.active or (_graph_task_id is not None and _graph_task_id() != -1)


@contextmanager
def discovery_forward() -> Iterator[None]:
    """Marks the thread's forwards as a discovery's while the block runs (nested blocks keep it)."""
    before = _DISCOVERING.active
    _DISCOVERING.active = True
    try:
        yield
    finally:
        _DISCOVERING.active = before


def never() -> bool:
    """The ``elsewhere`` of hooks that serve every thread (an ``attach``'s)."""
    return False


def other_than(thread: int, serves: Callable[[], bool] | None = None) -> Callable[[], bool]:
    """The ``elsewhere`` of hooks that serve one thread (a capture block's): True on any other,
    and, given ``serves``, in a context of the thread it says the block does not serve."""
    ident = threading.get_ident
    if serves is None:
        return lambda: ident() != thread
    return lambda: ident() != thread or not serves()
