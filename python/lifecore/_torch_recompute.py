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

A :func:`lifecore.torch.capture` block's hooks serve its thread's forward: a forward another
thread had already begun when the block opened (its root pre-hook, which refuses other threads,
had run) reaches them too, and they stand aside for it (``elsewhere``), while a worker thread the
block's own forward hands submodules to is served.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Callable, Iterator, Optional

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


def running_forward_of(model: object) -> bool:
    """Whether the calling thread is inside a call of ``model``'s own forward (a frame of it on
    this thread's stack). A worker thread the model's forward hands a submodule to is not; a
    forward of the model that thread began itself is."""
    code = getattr(getattr(type(model), "forward", None), "__code__", None)
    if code is None:
        return False  # a forward that is no Python function: every thread is taken for a worker
    frame: Optional[FrameType] = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code and frame.f_locals.get("self") is model:
            return True
        frame = frame.f_back
    return False


def other_thread(thread: int) -> Callable[[], bool]:
    """For a capture block's hooks on the root module: True on any other thread (a root forward
    there is one of its own; a worker never calls the root)."""
    ident = threading.get_ident
    return lambda: ident() != thread


def other_than(thread: int, model: object) -> Callable[[], bool]:
    """The ``elsewhere`` of hooks that serve one thread's forwards of ``model`` (a capture
    block's): True on another thread that runs a forward of the model of its own (one begun
    before the block opened). A worker thread the block's own forward hands submodules to is
    served: it runs no forward of the model itself."""
    ident = threading.get_ident
    return lambda: ident() != thread and running_forward_of(model)
