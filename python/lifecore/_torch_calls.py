"""The calls of a module that one forward runs more than once (a layer shared across depth, a
block applied in a loop), as :mod:`lifecore.torch` names and hooks them.

Each call is a point of its own, ``"<module>#<k>"`` for the k-th call (from 0): the session's
rule of one observation per point per step then holds call by call, and each call's records,
budget, interventions and routing are its own. A module called once keeps its plain path.
The hook of such a module counts its calls in each forward through the attached root and
hands call k to the hook of point k; the count is checked against what the attachment
expects, at the call past it and when the forward returns.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from typing import Any, Optional

from ._torch_recompute import discovering, never, recomputing
from .errors import CaptureSessionError

CALL_MARK = "#"


def call_path(path: str, call: int) -> str:
    """The point of the ``call``-th call (from 0) of the module at ``path``."""
    return f"{path}{CALL_MARK}{call}"


class AppliedState:
    """Whether an intervening hook ever replaced an output (the hook's ``state``)."""

    __slots__ = ("applied",)

    def __init__(self) -> None:
        self.applied = False


def name_collision(paths: Iterable[str], routing_suffix: str) -> Optional[tuple[str, str]]:
    """A module path that is also the point lifecore names for another module's call or routing
    (``"a#0"`` beside a module ``"a"``, ``"a#routing"``, ``"a#0#routing"``): (that path, what
    else it names); None when every path names its module alone. Its points could not be told
    apart. The root (``""``) has a routing point but no calls (it is called once per forward)."""
    modules = set(paths)
    for path in sorted(p for p in modules if CALL_MARK in p):
        routing = path.endswith(routing_suffix)
        stem = path[: -len(routing_suffix)] if routing else path
        if routing and stem in modules:
            return path, f"the routing point of module {stem!r}"
        base, _, call = stem.rpartition(CALL_MARK)
        if base and base in modules and call.isdigit() and str(int(call)) == call:
            what = f"call {call} of module {base!r}"
            return path, f"the routing point of {what}" if routing else what
    return None


def split_call(point: str, modules: Container[str]) -> Optional[tuple[str, Optional[int]]]:
    """(module path, call) of a point: call None for a module's plain path; None when the
    point names no module of ``modules``."""
    if point in modules:
        return point, None
    base, mark, call = point.rpartition(CALL_MARK)
    # Only the canonical spelling of a call ("#1", never "#01"), so one call has one point.
    if mark and base in modules and call.isdigit() and str(int(call)) == call:
        return base, int(call)
    return None


def counts_of(points: Iterable[str], routing_suffix: str) -> dict[str, int]:
    """Module path -> calls per forward, read off per-call point paths (a routing point's
    suffix set aside): one more than the highest call named."""
    counts: dict[str, int] = {}
    for point in points:
        if point.endswith(routing_suffix):
            point = point[: -len(routing_suffix)]
        base, mark, call = point.rpartition(CALL_MARK)
        if mark and base and call.isdigit() and str(int(call)) == call:
            counts[base] = max(counts.get(base, 0), int(call) + 1)
    return counts


def _times(n: int) -> str:
    return f"{n} time" if n == 1 else f"{n} times"


def raise_routing_recompute(path: str) -> None:
    """A routing selector called in a forward run again in backward: its control was the
    step's, and a recompute cannot be routed as the forward was."""
    raise CaptureSessionError(
        f"a forward run again in backward (activation checkpointing) routed {path!r}, where a routing control "
        f"was in force: a control applies once per step and cannot be applied again, so the recompute could "
        f"route otherwise than the captured forward; keep the routed module out of checkpointed regions")


class Calls:
    """One module's calls in the forward under way: ``hooks`` maps a call to what handles it
    (calls with none pass untouched). ``expected`` is the count the attachment was told; None
    when it was not, and then the forward must reach the highest call that has a hook.
    ``discovered``: that count is what a capture block's own discovery forward counted, not a
    caller's ``calls=``."""

    __slots__ = ("path", "expected", "count", "hooks", "elsewhere", "discovered")

    def __init__(self, path: str, expected: Optional[int], elsewhere: Callable[[], bool] = never,
                 discovered: bool = False):
        self.path, self.expected = path, expected
        self.count = 0
        self.hooks: dict[int, Any] = {}
        self.elsewhere = elsewhere  # True for a call on a thread the attachment does not serve
        self.discovered = discovered

    def next(self) -> Any:
        """The handler of the call now made (None for none); refuses a call past ``expected``
        before anything is observed at it."""
        call = self.count
        self.count = call + 1
        if self.expected is not None and call >= self.expected:
            told = (f"the block's discovery forward called it {_times(self.expected)}, and the captured forward "
                    f"must make the calls it counted: a model that calls it more often in this forward needs a "
                    f"discovery of such a forward (discovery=lifecore.torch.discover(...))" if self.discovered else
                    f"pass attach(..., calls={{{self.path!r}: n}}) for another count, from a discovery of such a "
                    f"forward")
            raise CaptureSessionError(
                f"module {self.path!r} was called {_times(call + 1)} in one forward; the attachment expects "
                f"{self.expected} ({call_path(self.path, 0)} to {call_path(self.path, self.expected - 1)}): {told}")
        return self.hooks.get(call)

    def shortfall(self) -> Optional[str]:
        """Why the forward just ended called the module too few times; None when it did not."""
        needed = self.expected if self.expected is not None else max(self.hooks, default=-1) + 1
        if self.count >= needed:
            return None
        why = ("as the block's discovery forward counted" if self.discovered else "as calls= says") \
            if self.expected is not None else f"the session names {call_path(self.path, needed - 1)}"
        return f"module {self.path!r} was called {_times(self.count)} in the forward; the attachment expects " \
               f"{needed} ({why})"


class CalledForward(Calls):
    """The forward hook of a module observed per call; ``intervening`` holds the calls whose
    hook also intervenes (an observe-only one may be upgraded in place)."""

    __slots__ = ("intervening",)

    def __init__(self, path: str, expected: Optional[int], elsewhere: Callable[[], bool] = never,
                 discovered: bool = False):
        super().__init__(path, expected, elsewhere, discovered)
        self.intervening: set[int] = set()

    def __call__(self, module: Any, args: Any, output: Any) -> Any:
        if discovering() or self.elsewhere():
            return None  # a discovery's forward (or another thread's) is no call of the step's
        if recomputing():
            # Which call a backward runs again is not known: an observed call is passed over,
            # but an intervention a call applied cannot be applied again to the right call.
            applied = sorted(k for k in self.intervening
                             if getattr(getattr(self.hooks.get(k), "state", None), "applied", False))
            if applied:
                raise CaptureSessionError(
                    f"a forward run again in backward (activation checkpointing) reached {self.path!r}, whose "
                    f"calls {applied} applied an intervention per call: which call a recompute repeats is "
                    f"unknown, so the intervention cannot be applied again; keep the module out of "
                    f"checkpointed regions, or intervene on a module called once")
            return None
        hook = self.next()
        return None if hook is None else hook(module, args, output)


class CalledRouting(Calls):
    """The routing hook of a module routed per call: call k's ``select`` goes to the
    :class:`~lifecore.torch.RoutingHook` of point ``<module>#<k>#routing``; a call with none
    routes as with no hook set."""

    __slots__ = ("module", "policy", "route")

    def __init__(self, path: str, expected: Optional[int], module: Any, policy: Any, route: Any,
                 elsewhere: Callable[[], bool] = never, discovered: bool = False):
        super().__init__(path, expected, elsewhere, discovered)
        self.module, self.policy, self.route = module, policy, route

    def select(self, scores: Any, top_k: int) -> Any:
        """As :meth:`lifecore.torch.RoutingHook.select`, for the call now made."""
        if discovering() or self.elsewhere():
            return self.route(scores, top_k, policy=self.policy)  # a discovery's forward: no control asked for
        if recomputing():
            if any(getattr(h, "controlled", False) for h in self.hooks.values()):
                raise_routing_recompute(self.path)
            return self.route(scores, top_k, policy=self.policy)  # no control was ever in force here
        hook = self.next()
        if hook is None:
            return self.route(scores, top_k, policy=self.policy)
        return hook.select(scores, top_k)
