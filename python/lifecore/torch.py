"""PyTorch integration: discover a module's observation points, attach a CaptureSession
to an ``nn.Module`` by module path through forward hooks, and route mixture-of-experts
selectors through the session's routing control.

At each hooked module the hook observes the output, then intervenes, and a replacement
(if any) becomes the module's output, so downstream modules consume it. A module whose
forward picks experts takes part in routing control by offering ``routing_policy()``
(returning a :class:`RoutingPolicy`, or ``(num_experts, top_k)`` for plain top-k) and
``set_routing_hook(hook)``; it then calls ``hook.select(scores, top_k)`` (or :func:`route`
when no hook is set) to get ``(expert ids, coefficients)``. Before any routing work the hook
validates the session's control against the module's policy and rows
(:meth:`GroupSelectionControl.validate`); a mismatch fails the routing record.

Interventions may be enabled before or after :func:`attach`: a plan enabled later is
hooked at the next forward through the attached root module.

Memory: :func:`mem_pool` gives torch a ``torch.cuda.MemPool`` whose segments are lifecore's.
Its allocator (:func:`pooled_allocator`) is a ``CUDAPluggableAllocator`` over two C functions
of lifecore's extension module; a request is served by the lifecore stream whose native handle
torch names (a stream :func:`mem_pool` routed), as a Buffer lent from that stream's memory
manager. Inside a lifecore capture window those segments come from the persistent pool, the
warmup primes them and every recording on the stream retains what is still lent, so the
guarantees of the window (the recorded pass allocates nothing, the graph keeps what it touched)
cover torch's work. A segment torch gives back returns to lifecore's pool after the stream's fence.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any, Iterable, Mapping, Optional, Union

import torch
from torch import nn

from .capture import (
    Axis,
    BackendCapabilities,
    CaptureDiscovery,
    CaptureSession,
    ObservationPoint,
    RoutingPolicy,
    ValueDtype,
)
from .capture.backends.torch_backend import TorchBackend, route
from . import _core
from .errors import BackendUnavailableError, InvalidArgumentError, LifecoreTypeError

__all__ = ["ROUTING_SUFFIX", "TorchBackend", "artifact_identity", "discover", "attach", "TorchAttachment",
           "ALLOC_SYMBOL", "FREE_SYMBOL", "allocator_library", "pooled_allocator", "pooled_allocator_available",
           "mem_pool", "release_stream", "allocator_stats",
           "RoutingHook", "route", "routing_policy_of"]

ROUTING_SUFFIX = "#routing"

ALLOC_SYMBOL: str = _core.POOLED_ALLOC_SYMBOL
"""The allocation function lifecore's extension module exports for a pluggable allocator:
``void* alloc(size_t size, int device, cudaStream_t stream)``; null when refused."""
FREE_SYMBOL: str = _core.POOLED_FREE_SYMBOL
"""Its release function: ``void free(void* ptr, size_t size, int device, cudaStream_t stream)``."""


def allocator_library() -> str:
    """The path of lifecore's extension module, the shared library that exports
    :data:`ALLOC_SYMBOL` and :data:`FREE_SYMBOL`."""
    path = getattr(_core, "__file__", None)
    if not path:
        raise BackendUnavailableError("lifecore's extension module has no file to load an allocator from")
    return str(path)


@functools.lru_cache(maxsize=None)
def pooled_allocator() -> Any:
    """The process's ``torch.cuda.memory.CUDAPluggableAllocator`` over lifecore's pooled
    allocator (made once). :class:`BackendUnavailableError` when this torch cannot load a
    pluggable allocator (a build without CUDA, or a version without ``MemPool``)."""
    available, reason = pooled_allocator_available()
    if not available:
        raise BackendUnavailableError(f"pooled_allocator: {reason}")
    return torch.cuda.memory.CUDAPluggableAllocator(allocator_library(), ALLOC_SYMBOL, FREE_SYMBOL)


def pooled_allocator_available() -> tuple[bool, str]:
    """Whether this torch can pool over lifecore's allocator, and if not, why."""
    if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
        return False, f"torch {torch.__version__} has no torch.cuda.MemPool (torch 2.6 or later)"
    if not hasattr(torch.cuda.memory, "CUDAPluggableAllocator") or not hasattr(torch._C, "_cuda_customAllocator"):
        return False, f"torch {torch.__version__} was built without CUDA pluggable allocators"
    return True, ""


def mem_pool(stream: Any) -> Any:
    """A new ``torch.cuda.MemPool`` over :func:`pooled_allocator`, with ``stream`` (a lifecore
    ``Stream``) routed to serve its requests: allocate in it with ``torch.cuda.use_mem_pool``
    while torch's current stream is ``torch.cuda.ExternalStream(stream.handle)``. Requests for
    any other stream are refused (torch reports them as out of memory). Inside a driver capture
    a request the primed pool cannot serve is refused too, rather than allocated in the window."""
    if not isinstance(stream, _core.Stream):
        raise LifecoreTypeError(f"mem_pool: argument 'stream' must be a lifecore Stream, got {type(stream).__name__}")
    allocator = pooled_allocator()
    _core.pooled_allocator_route(stream)
    return torch.cuda.MemPool(allocator.allocator())


def release_stream(stream: Any) -> bool:
    """Stops routing the pooled allocator's requests to ``stream``; memory it already lent
    stays valid until torch frees it. False when the stream was not routed."""
    if not isinstance(stream, _core.Stream):
        raise LifecoreTypeError(
            f"release_stream: argument 'stream' must be a lifecore Stream, got {type(stream).__name__}")
    return bool(_core.pooled_allocator_unroute(stream))


def allocator_stats() -> dict[str, int]:
    """The pooled allocator's process-wide counters: allocations, releases, live, live_bytes,
    unknown_stream (requests naming a stream not routed), refused (a routed stream could not
    serve them), unknown_pointer (frees of memory it did not lend), streams (routed now)."""
    return dict(_core.pooled_allocator_stats())


def artifact_identity(model: nn.Module) -> str:
    """A SHA-256 over the module tree, parameter names, shapes and dtypes (not values)."""
    _require_module(model, "artifact_identity")
    digest = hashlib.sha256()
    for name, module in model.named_modules():
        digest.update(f"{name}:{type(module).__qualname__};".encode())
    for name, parameter in model.named_parameters():
        digest.update(f"{name}:{tuple(parameter.shape)}:{parameter.dtype};".encode())
    return digest.hexdigest()


OutputIndex = Union[int, Mapping[str, int]]


def _require_module(model: Any, call: str) -> None:
    if not isinstance(model, nn.Module):
        raise LifecoreTypeError(f"{call}: argument 'model' must be a torch.nn.Module, got {type(model).__name__}")


def _index_for(output_index: OutputIndex, path: str) -> int:
    """The tuple position selected at ``path`` (a mapping names positions per path; paths it
    does not name use position 0)."""
    if isinstance(output_index, Mapping):
        return int(output_index.get(path, 0))
    return int(output_index)


def _selected_tensor(output: Any, index: int = 0) -> Optional[torch.Tensor]:
    """The tensor a hook observes: the output itself, or element ``index`` of a tuple/list output."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and -len(output) <= index < len(output) and isinstance(
            output[index], torch.Tensor):
        return output[index]
    return None


def _with_replacement(output: Any, index: int, replacement: torch.Tensor) -> Any:
    if isinstance(output, torch.Tensor):
        return replacement
    items = list(output)
    items[index] = replacement
    return type(output)(items) if isinstance(output, list) else tuple(items)


def _dtype(tensor: torch.Tensor) -> ValueDtype:
    if tensor.dtype.is_floating_point:
        return ValueDtype.FLOATING
    return ValueDtype.BOOLEAN if tensor.dtype == torch.bool else ValueDtype.INTEGER


def discover(model: nn.Module, *example_args: Any, batch_axis: int = 0, sequence_axis: int = 1,
             logits: Iterable[str] = (), identity: Optional[str] = None,
             capabilities: Optional[BackendCapabilities] = None, output_index: OutputIndex = 0,
             **example_kwargs: Any) -> CaptureDiscovery:
    """Runs one example forward and records every named module's output as an observation
    point: the batch axis is symbolic ``batch``, the sequence axis ``sequence`` (the prompt
    length in prefill, one token in decode), the others known. Paths in ``logits`` are
    marked as logits; each module with ``routing_policy()`` adds ``<path>#routing``.

    A module returning a tuple is observed at element ``output_index`` (an int for every
    module, or a mapping path -> index; default 0, the first element). Pass the same
    ``output_index`` to :func:`attach`."""
    _require_module(model, "discover")
    shapes: dict[str, torch.Tensor] = {}
    handles = []
    for name, module in model.named_modules():
        if not name:
            continue

        def record(module: nn.Module, args: Any, output: Any, name: str = name) -> None:
            tensor = _selected_tensor(output, _index_for(output_index, name))
            if tensor is not None:
                shapes[name] = tensor

        handles.append(module.register_forward_hook(record))
    try:
        with torch.no_grad():
            model(*example_args, **example_kwargs)
    finally:
        for handle in handles:
            handle.remove()
    logits = set(logits)
    catalog = []
    for name, tensor in shapes.items():
        axes = []
        for i, extent in enumerate(tensor.shape):
            if i == batch_axis:
                axes.append(Axis("batch", "batch"))
            elif i == sequence_axis and tensor.dim() > 2:
                axes.append(Axis("seq", "sequence"))
            else:
                axes.append(Axis("vocab" if name in logits and i == tensor.dim() - 1 else f"d{i}", int(extent)))
        catalog.append(ObservationPoint(name, axes, meaning="logits" if name in logits else "activation",
                                        dtype=_dtype(tensor), itemsize=tensor.element_size()))
    for name, module in model.named_modules():
        policy = routing_policy_of(module)
        if policy is not None:
            catalog.append(ObservationPoint(name + ROUTING_SUFFIX,
                                            [Axis("rows", "token_rows"), Axis("experts", policy.num_experts)],
                                            meaning="routing", routing=policy))
    return CaptureDiscovery(identity or artifact_identity(model), catalog, capabilities)


def routing_policy_of(module: nn.Module) -> Optional[RoutingPolicy]:
    """The module's routing policy (``routing_policy()`` returning a RoutingPolicy or
    ``(num_experts, top_k)``), or None for a module that does not route."""
    policy = getattr(module, "routing_policy", None)
    if not callable(policy):
        return None
    value = policy()
    if isinstance(value, RoutingPolicy):
        return value
    experts, top_k = value
    return RoutingPolicy(int(experts), int(top_k))


class RoutingHook:
    """Given to a mixture-of-experts module: applies the session's routing control.
    ``policy`` is the module's actual routing policy, checked against each control."""

    def __init__(self, session: CaptureSession, backend: Any, path: str, policy: Optional[RoutingPolicy] = None):
        self.session, self.backend, self.path, self.policy = session, backend, path, policy

    def select(self, scores: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Expert ids and coefficients for ``scores`` [rows, experts]."""
        rows = scores.shape[0]
        control = self.session.routing_control(self.path, rows)
        if control is None:
            return route(scores, top_k, policy=self.policy)
        try:
            # Re-checked before any routing work: the module's policy may have changed since
            # discovery, or it may route a different top_k than it declared.
            actual = self.policy if self.policy is not None else control.policy
            if top_k != actual.top_k:
                raise InvalidArgumentError(f"the selector routes top {top_k}, its policy says {actual.top_k}")
            control.validate(actual, rows)
            original = route(scores, top_k, policy=control.policy) if control.capture_original else None
            effective = route(scores, top_k, control)
        except Exception as error:
            self.session.routing_failed(self.path, f"{type(error).__name__}: {error}")
            raise
        self.session.routing_applied(self.backend, self.path, original, effective)
        return effective


class TorchAttachment:
    """The hooks attached to one module tree; ``detach()`` (or leaving the ``with`` block)
    removes them all.

    Interventions may be enabled on the session after attaching: a forward pre-hook on the
    root module notices a new intervention plan at the next forward and hooks its targets
    (upgrading observe-only hooks to observe-then-intervene) before any submodule runs.
    Code that calls submodules directly, not through the attached root, calls ``sync()``."""

    def __init__(self, session: CaptureSession, model: nn.Module, backend: Any, output_index: OutputIndex):
        self._session, self._backend, self._output_index = session, backend, output_index
        self._modules = dict(model.named_modules())
        self._hooks: dict[str, tuple[Any, bool]] = {}  # path -> (handle, intervenes)
        self._routed: dict[str, Any] = {}  # path -> a routed module (it has set_routing_hook)
        self._root: Optional[torch.utils.hooks.RemovableHandle] = model.register_forward_pre_hook(lambda module, args: self.sync())

    def _check(self, hooked: set[str], routed: set[str]) -> None:
        unknown = sorted((hooked | routed) - self._modules.keys())
        if unknown:
            raise InvalidArgumentError(f"no module at path(s) {unknown}")
        for path in sorted(routed):
            if not callable(getattr(self._modules[path], "set_routing_hook", None)):
                raise InvalidArgumentError(f"module {path} does not take a routing hook")

    def _hook(self, targets: set[str], intervened: set[str]) -> None:
        """Hooks ``targets`` (checked first, so a bad path hooks nothing new)."""
        routed = {t[: -len(ROUTING_SUFFIX)] for t in targets if t.endswith(ROUTING_SUFFIX)}
        hooked = {t for t in targets if not t.endswith(ROUTING_SUFFIX)}
        self._check(hooked, routed)
        for path in sorted(hooked):
            intervenes = path in intervened
            present = self._hooks.get(path)
            if present is not None and (present[1] or not intervenes):
                continue
            hook = _make_hook(self._session, self._backend, path, intervenes, _index_for(self._output_index, path))
            handle = self._modules[path].register_forward_hook(hook)
            if present is not None:
                present[0].remove()  # an observe-only hook becomes observe-then-intervene
            self._hooks[path] = (handle, intervenes)
        for path in sorted(routed - self._routed.keys()):
            module = self._modules[path]
            module.set_routing_hook(RoutingHook(self._session, self._backend, path + ROUTING_SUFFIX,
                                                routing_policy_of(module)))
            self._routed[path] = module

    def sync(self) -> None:
        """Hooks the targets of an intervention plan enabled since the last sync."""
        if self._root is None:
            return
        plan = self._session.intervention_plan
        if plan is None:
            # A session takes interventions only before its first step: once one has begun,
            # none can arrive, and the root hook stops costing anything.
            if self._session.step_pending or self._session.next_prediction > 0:
                self._drop_root()
            return
        targets = {op.target for op in plan.plan.operations}
        self._hook(targets, {t for t in targets if not t.endswith(ROUTING_SUFFIX)})
        self._drop_root()  # a session takes one intervention plan: nothing more to notice

    def _drop_root(self) -> None:
        if self._root is not None:
            self._root.remove()
            self._root = None

    def detach(self) -> None:
        for handle, _ in self._hooks.values():
            handle.remove()
        for module in self._routed.values():
            module.set_routing_hook(None)
        self._drop_root()
        self._hooks, self._routed = {}, {}

    @property
    def attached(self) -> bool:
        return bool(self._hooks or self._routed)

    def __enter__(self) -> "TorchAttachment":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.detach()


def _make_hook(session: CaptureSession, backend: Any, path: str, intervenes: bool, index: int):
    observe, intervene = session.observe, session.intervene

    def selected(output: Any) -> torch.Tensor:
        if isinstance(output, torch.Tensor):
            return output
        tensor = _selected_tensor(output, index)
        if tensor is None:
            raise InvalidArgumentError(f"output of {path} has no tensor at output_index {index} "
                                       f"({type(output).__name__} of {len(output) if hasattr(output, '__len__') else '?'})")
        return tensor

    if not intervenes:
        # The session's observer is itself the hook: no Python frame of ours per forward, the
        # path resolved once. A plain tensor output is observed as is; anything else goes
        # through selected() (a tuple element, or the error naming what is missing).
        return session.observer(path, backend, tensor_type=torch.Tensor, select=selected)

    def observe_then_intervene(module: nn.Module, args: Any, output: Any) -> Any:
        tensor = selected(output)
        observe(backend, path, tensor)
        replacement = intervene(backend, path, tensor)
        if replacement is None:
            return None
        return _with_replacement(output, index, replacement)

    return observe_then_intervene


def attach(session: CaptureSession, model: nn.Module, backend: Any = None,
           paths: Optional[Iterable[str]] = None, output_index: OutputIndex = 0) -> TorchAttachment:
    """Hooks every module named by the session's capture selections and intervention
    targets (or by ``paths``). Interventions enabled after attaching are hooked at the next
    forward through ``model`` (see :class:`TorchAttachment`).

    ``output_index`` selects which element of a tuple (or list) output is observed and
    intervened on: an int for every hooked module, or a mapping path -> index (paths it
    does not name use 0). The default, 0, is the first tensor; a replacement goes back at
    the same position and the other elements pass through unchanged."""
    if not isinstance(session, CaptureSession):
        raise LifecoreTypeError(f"attach: argument 'session' must be a CaptureSession, got {type(session).__name__}")
    _require_module(model, "attach")
    backend = backend if backend is not None else TorchBackend()
    plan = session.intervention_plan
    operations = list(plan.plan.operations) if plan is not None else []
    targets = set(paths) if paths is not None else (
        {s.path for s in session.plan.plan.selections} | {op.target for op in operations})
    attachment = TorchAttachment(session, model, backend, output_index)
    try:
        attachment._hook(targets, {op.target for op in operations})
        attachment.sync()
    except BaseException:
        attachment.detach()  # attach is all or nothing
        raise
    return attachment
