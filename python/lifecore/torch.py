"""PyTorch integration: discover a module's observation points, attach a CaptureSession
to an ``nn.Module`` by module path through forward hooks, and route mixture-of-experts
selectors through the session's routing control.

At each hooked module the hook observes the output, then intervenes, and a replacement
(if any) becomes the module's output, so downstream modules consume it: a record at an
intervened module holds its output before the intervention (every point :func:`discover`
names has position ``BEFORE_INTERVENTION``); capture a module downstream to see the effect.
A module called more than once in one forward (a shared or tied layer, a block applied in a
loop) is a point per call, ``<path>#<k>`` for its k-th call: :func:`discover` names them, each
call is observed, intervened on and routed on its own, and a forward that calls the module more
or fewer times than the attachment expects is refused (see :func:`attach`). A module called
once keeps its plain path. A module whose
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

The short path for the common case, :func:`capture` (a ``with`` block around one forward) and
:func:`run_with_capture` (one call returning ``(output, records)``), builds the same pieces:
:func:`discover`, a plan admitted for that forward, one :class:`CaptureSession` whose ledger
holds the byte budget, and :func:`attach`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import itertools
import math
import os
import random
import re
import sys
import threading
import types
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any, Optional, Union, cast

try:
    import torch
except ModuleNotFoundError as _no_torch:  # private: the name is unbound after the block
    from ._needs_torch import torch_missing

    raise torch_missing("lifecore.torch", _no_torch) from _no_torch
from torch import nn

from . import _python_guard
from .capture import (
    Axis,
    BackendCapabilities,
    Candidates,
    CaptureDiscovery,
    CapturedStep,
    CaptureLimits,
    CaptureOutcome,
    CapturePayload,
    CapturePhase,
    CapturePlan,
    CaptureRecord,
    CaptureRequest,
    CaptureSelection,
    CaptureSession,
    CaptureTransform,
    CaptureUsage,
    Histogram,
    ObservationPoint,
    OnLimit,
    PointPosition,
    RoutingPolicy,
    Summary,
    TransformKind,
    ValueDtype,
)
from .capture.backends.arguments import as_index as _as_index, require, require_backend
from .capture.backends.torch_backend import TorchBackend, route
from ._torch_calls import (AppliedState, CalledForward, CalledRouting, call_path, counts_of,
                           name_collision as _name_collision, raise_routing_recompute, split_call)
from ._torch_hooks import PlacedHooks, exit_releasing, finish_despite_interrupts, refuse_scripted
from ._torch_recompute import (OPEN_BLOCKS_HERE, discovering, discovery_forward, never, other_than, passed_over,
                               recomputing)
from ._torch_outputs import (check_output_index as _check_output_index, index_for as _index_for,
                             selected_tensor as _selected_tensor, selection_problem as _selection_problem,
                             rebuilder as _rebuilder)
from . import _core
from .errors import (AdmissionError, BackendUnavailableError, CaptureSessionError, ClosedError, InvalidArgumentError,
                     LifecoreOverflowError, LifecoreTypeError)

__all__ = ["ROUTING_SUFFIX", "TorchBackend", "artifact_identity", "discover", "attach", "TorchAttachment",
           "call_counts", "ALLOC_SYMBOL", "FREE_SYMBOL", "allocator_library", "pooled_allocator",
           "pooled_allocator_available", "mem_pool", "release_stream", "allocator_stats",
           "RoutingHook", "route", "routing_policy_of", "attachments", "capture", "run_with_capture", "ModelCapture",
           "CapturedModules", "ModuleCapture", "DEFAULT_HISTOGRAM_EDGES", "DEFAULT_TOP_K", "DEFAULT_PREVIEW"]

#: What a module's path is followed by to name its routing point (the selector's expert choice
#: a ``set_routing_hook`` hands over), as ``discover`` names it: ``"blocks.0.moe#routing"``.
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


def pooled_allocator() -> Any:
    """The process's ``torch.cuda.memory.CUDAPluggableAllocator`` over lifecore's pooled
    allocator (made once). :class:`BackendUnavailableError` when this torch cannot load a
    pluggable allocator (a build without CUDA, or a version without ``MemPool``)."""
    return _pooled_allocator_once()


@functools.lru_cache(maxsize=None)
def _pooled_allocator_once() -> Any:
    # Cached here, not on the public name, so that one keeps its signature for a type checker.
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


# What artifact_identity gives (a SHA-256 in hex); a discovery made with discover(identity=...)
# names its model its own way, which is not compared.
_DEFAULT_IDENTITY = re.compile(r"[0-9a-f]{64}")
# Why a capture block's hooks saw nothing, where torch's compiler ran: the same words in the
# error for a module that returned nothing and in the warning for a block that saw no forward.
_COMPILED_SKIPS_HOOKS = ("a model torch.compile compiled before the block skips hooks added after it (capture the "
                         "module before compiling, or call torch._dynamo.reset())")


def artifact_identity(model: nn.Module) -> str:
    """A SHA-256 over the module tree, parameter names, shapes and dtypes (not values)."""
    _require_module(model, "artifact_identity", hooked=False)
    digest = hashlib.sha256()
    for name, module in model.named_modules():
        digest.update(f"{name}:{type(module).__qualname__};".encode())
    for name, parameter in model.named_parameters():
        digest.update(f"{name}:{tuple(parameter.shape)}:{parameter.dtype};".encode())
    return digest.hexdigest()


OutputIndex = Union[int, str, Mapping[str, Union[int, str]]]


def _require_module(model: Any, call: str, hooked: bool = True) -> None:
    if not isinstance(model, nn.Module):
        raise LifecoreTypeError(f"{call}: argument 'model' must be a torch.nn.Module, got {type(model).__name__}")
    if hooked:  # what places hooks on it: a TorchScript module takes none
        refuse_scripted(model, f"{call}: argument 'model'")
        clash = _name_collision((name for name, _ in model.named_modules()), ROUTING_SUFFIX)
        if clash is not None:
            raise InvalidArgumentError(
                f"{call}: module {clash[0]!r} of {type(model).__name__} has the name lifecore gives "
                f"{clash[1]} ('<path>#<k>' names a module's k-th call, '<path>{ROUTING_SUFFIX}' its routing), so "
                f"their points could not be told apart: rename the module")


def _check_calls(calls: Any, model: nn.Module, call: str) -> None:
    """Refuses ``calls`` that are not a mapping of the model's module paths to counts >= 1."""
    if calls is None:
        return
    if not isinstance(calls, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in calls.items()):
        raise LifecoreTypeError(f"{call}: argument 'calls' must be a mapping of module paths to ints (calls per "
                                f"forward) or None, got {calls!r}")
    modules = dict(model.named_modules())
    for path, count in calls.items():
        if path not in modules or not path:
            raise InvalidArgumentError(f"{call}: argument 'calls' names no module {path!r} of {type(model).__name__}")
        if count < 1:
            raise InvalidArgumentError(f"{call}: argument 'calls' gives {path!r} {count} calls; a count is >= 1")


def call_counts(discovery: CaptureDiscovery) -> dict[str, int]:
    """Module path -> calls per forward, for each module the discovery names per call
    (``"<path>#<k>"``): what :func:`attach` takes as ``calls``. Modules called once are not in it."""
    if not isinstance(discovery, CaptureDiscovery):
        raise LifecoreTypeError(f"call_counts: argument 'discovery' must be a CaptureDiscovery, "
                                f"got {type(discovery).__name__}")
    return counts_of((point.path for point in discovery.catalog), ROUTING_SUFFIX)


def _check_axes(call: str, batch_axis: Any, sequence_axis: Any) -> tuple[int, int]:
    """``batch_axis`` and ``sequence_axis`` as ints (a NumPy or torch integer is one); refuses
    one that is not an integer (a bool included), and the two naming the same axis (the
    sequence would never be seen)."""
    axes = {"batch_axis": batch_axis, "sequence_axis": sequence_axis}
    for name, value in axes.items():
        axes[name] = _as_index(value)
        if axes[name] is None:
            raise LifecoreTypeError(f"{call}: argument '{name}' must be an int (an axis of the tensors), "
                                    f"got {type(value).__name__}")
    if axes["batch_axis"] == axes["sequence_axis"]:
        raise InvalidArgumentError(f"{call}: arguments 'batch_axis' and 'sequence_axis' name the same axis "
                                   f"({axes['batch_axis']})")
    return axes["batch_axis"], axes["sequence_axis"]


def _logit_paths(logits: Any, model: nn.Module, call: str, or_none: bool = False) -> list[str]:
    """``logits`` as a list of the model's module paths (a str is one path, as ``paths`` reads
    it): a non-str entry or a path naming no module is refused, so no point is silently left
    unmarked."""
    named = ([logits] if isinstance(logits, str) else
             list(logits) if isinstance(logits, Iterable) and not isinstance(logits, bytes) else None)
    if named is None or not all(isinstance(p, str) for p in named):
        raise LifecoreTypeError(f"{call}: argument 'logits' must be a module path or a list of them"
                                f"{' or None' if or_none else ''}, got {logits!r}")
    modules = {name for name, _ in model.named_modules() if name}
    unknown = [path for path in named if path not in modules]
    if unknown:
        raise InvalidArgumentError(f"{call}: argument 'logits' names no module {unknown[0]!r} of "
                                   f"{type(model).__name__}")
    return named


# What discover's ``axis_kinds`` may call an axis, and the name its Axis gets.
_AXIS_KIND_NAMES = {"batch": "batch", "sequence": "seq", "token_rows": "rows", "context": "context"}


def _axis_kinds(value: Any, model: nn.Module, call: str) -> dict[str, tuple[Optional[str], ...]]:
    """``axis_kinds`` checked: module path (or ``<path>#<k>``) -> one kind or None per axis."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise LifecoreTypeError(f"{call}: argument 'axis_kinds' must be a mapping of module path -> axis kinds "
                                f"or None, got {type(value).__name__}")
    modules = {name for name, _ in model.named_modules() if name}
    checked: dict[str, tuple[Optional[str], ...]] = {}
    for path, kinds in value.items():
        if not isinstance(path, str):
            raise LifecoreTypeError(f"{call}: argument 'axis_kinds' must be keyed by module paths (str), "
                                    f"got {type(path).__name__}")
        if path not in modules and path.rpartition("#")[0] not in modules:
            raise InvalidArgumentError(f"{call}: argument 'axis_kinds' names no module {path!r} of "
                                       f"{type(model).__name__}")
        if not isinstance(kinds, (list, tuple)) or not all(k is None or isinstance(k, str) for k in kinds):
            raise LifecoreTypeError(f"{call}: argument 'axis_kinds' must give {path!r} a list of axis kinds "
                                    f"(str or None, one per output axis), got {kinds!r}")
        unknown = [k for k in kinds if k is not None and k not in _AXIS_KIND_NAMES]
        if unknown:
            raise InvalidArgumentError(f"{call}: argument 'axis_kinds' gives {path!r} the axis kind {unknown[0]!r}; "
                                       f"the kinds are {', '.join(map(repr, _AXIS_KIND_NAMES))} and None "
                                       f"(the extent the example gives)")
        checked[path] = tuple(kinds)
    return checked


def _dtype(tensor: torch.Tensor) -> ValueDtype:
    if tensor.dtype.is_floating_point:
        return ValueDtype.FLOATING
    if tensor.dtype.is_complex:
        return ValueDtype.UNKNOWN  # as TorchBackend.dtype says: no transform reduces complex values
    return ValueDtype.BOOLEAN if tensor.dtype == torch.bool else ValueDtype.INTEGER


def discover(model: nn.Module, *example_args: Any, batch_axis: int = 0, sequence_axis: int = 1,
             logits: Union[str, Iterable[str]] = (), identity: Optional[str] = None,
             capabilities: Optional[BackendCapabilities] = None, output_index: OutputIndex = 0,
             axis_kinds: Optional[Mapping[str, Sequence[Optional[str]]]] = None,
             **example_kwargs: Any) -> CaptureDiscovery:
    """Runs one example forward and records every named module's output as an observation
    point (the calls made on this thread: a module the forward hands to a worker thread is not
    seen). The example's batch B and prompt length T are read from its first tensor input at
    ``batch_axis`` and ``sequence_axis``; of each output, the axis at ``batch_axis`` is symbolic
    ``batch`` where it is B, ``token_rows`` (batch x tokens of the step, as a mixture-of-experts
    router's flattened rows) where it is B x T with T > 1, and the axis at ``sequence_axis`` (of
    an output of rank 3 or more) ``sequence`` (the prompt length in prefill, one token in
    decode) where it is T; every other axis is the extent it has. A negative axis counts from
    the end of each output's shape, and then (the input's axes not being the outputs') those
    two axes are ``batch`` and ``sequence`` whatever their extent. ``axis_kinds`` names the axes of particular points
    instead: module path (or ``<path>#<k>``) -> one entry per output axis, ``"batch"``,
    ``"sequence"``, ``"token_rows"``, ``"context"`` (prompt plus the tokens generated before
    the step: an attention pattern's key axis) or None (the extent the example gives); each is
    checked against the example. Paths in ``logits`` (a module path or a list of them) are
    marked as logits; each module with ``routing_policy()`` adds ``<path>#routing``. The axes'
    names, which a ``CaptureSlice`` names its axis by: ``"batch"``, ``"seq"``, ``"rows"`` and
    ``"context"`` for those kinds, ``"vocab"`` for the last axis of logits, and ``"d<i>"`` for
    axis i of the extent it has (a second axis of one kind takes its index: ``"batch2"``); a
    routing point's are ``"rows"`` and ``"experts"``.

    A module the forward calls more than once (a layer shared across depth, a block applied in
    a loop) has a point per call, ``<path>#0``, ``<path>#1``, ... (and ``<path>#<k>#routing``
    for a routing module), each with the shape that call gave: the session observes a point
    once per step, so each call's records, budget, interventions and routing are its own. It
    has no plain ``<path>`` point (a point at it could only observe one call of the forward);
    a module called once keeps its plain path. :func:`call_counts` gives how many calls each
    such module got, for :func:`attach`'s ``calls``.

    A module returning a container is observed at its element ``output_index``: an int is a
    position (of a tuple or list, or of a ModelOutput-like mapping, one with ``to_tuple()``,
    as its own ``output[i]`` reads it), a str a key (of a dict or other mapping, or a
    namedtuple's field); one for every module, or a mapping module path -> int or str (paths
    it does not name use 0, the first element; every call of a module is selected alike). A plain dict has no position, so under an int it is not
    observed: select it by key. Pass the same ``output_index`` to :func:`attach`. An argument of
    the wrong type, or a TorchScript ``model`` (a scripted submodule is no point), raises
    ``LifecoreTypeError``, a ``logits`` or ``axis_kinds`` path naming no
    module, an unknown axis kind or equal axes ``InvalidArgumentError``, before the forward
    runs; ``axis_kinds`` of the wrong length for the output, or a kind the example's extent
    contradicts, ``InvalidArgumentError`` after it."""
    _require_module(model, "discover")
    if identity is not None and not isinstance(identity, str):  # named as discover's, not the discovery's
        raise LifecoreTypeError(f"discover: argument 'identity' must be a str or None, got {type(identity).__name__}")
    batch_axis, sequence_axis = _check_axes("discover", batch_axis, sequence_axis)
    output_index = _check_output_index(output_index, "discover")
    logits = _logit_paths(logits, model, "discover")
    kinds = _axis_kinds(axis_kinds, model, "discover")
    return _discover(model, example_args, example_kwargs, batch_axis=batch_axis, sequence_axis=sequence_axis,
                     logits=logits, identity=identity, capabilities=capabilities, output_index=output_index,
                     symbolic=True, axis_kinds=kinds)


def _discover(model: nn.Module, example_args: tuple[Any, ...], example_kwargs: Mapping[str, Any], *,
              batch_axis: int, sequence_axis: int, logits: Iterable[str], identity: Optional[str],
              capabilities: Optional[BackendCapabilities], output_index: OutputIndex,
              symbolic: bool, axis_kinds: Optional[Mapping[str, tuple[Optional[str], ...]]] = None,
              why_none: Optional[dict[str, str]] = None,
              called_elsewhere: Optional[set[str]] = None) -> CaptureDiscovery:
    """:func:`discover`; with ``symbolic`` False every axis is the extent the example forward
    gave (for a session admitted for that one forward, whatever its outputs' axes mean: a
    convolution's axis 1 is channels, not a sequence). ``why_none`` receives, per module whose
    output held no tensor at its output_index, what the output held instead; ``called_elsewhere``
    receives the modules called on another thread than the discovery's (not seen)."""
    # Module path -> what each of its calls returned at output_index: (shape, dtype, itemsize),
    # or None for no tensor there. Facts only: a module called in a loop keeps no tensors.
    seen: dict[str, list[Optional[tuple[tuple[int, ...], ValueDtype, int]]]] = {}
    # A module output_index names by path: why its output had no tensor there (a module the
    # caller pointed at is no point to drop silently, as one a single index misses is).
    named_index = isinstance(output_index, Mapping)
    problems: dict[str, str] = {}
    placed = PlacedHooks()
    discovering_thread = threading.get_ident()
    # TorchScript runs a scripted submodule's forward and all below it: no hooks, so no points.
    scripted = tuple(f"{name}." for name, module in model.named_modules()
                     if name and isinstance(module, torch.jit.ScriptModule))
    try:
        for name, module in model.named_modules():
            if not name or (scripted and f"{name}.".startswith(scripted)):
                continue

            def record(module: nn.Module, args: Any, output: Any, name: str = name) -> None:
                if recomputing():
                    return  # a forward the model runs again in its own backward is no call of its own
                if threading.get_ident() != discovering_thread:
                    # Another thread's call (a forward begun before this discovery, or a worker
                    # its forward handed the module to): not seen, and noted for the error that
                    # a module only such calls reached would otherwise meet without a reason.
                    if called_elsewhere is not None:
                        called_elsewhere.add(name)
                    return
                index = _index_for(output_index, name)
                tensor = _selected_tensor(output, index)
                seen.setdefault(name, []).append(
                    None if tensor is None else (tuple(tensor.shape), _dtype(tensor), tensor.element_size()))
                if tensor is None and (why_none is not None or (named_index and name in output_index)):  # type: ignore[operator]
                    problems.setdefault(name, _selection_problem(output, index, name))

            placed.forward(module, record)
        with torch.no_grad(), discovery_forward():  # a session attached to the model stands aside
            model(*example_args, **example_kwargs)
    finally:
        finish_despite_interrupts(placed.remove_all)
    for name in sorted(problems):
        if named_index and name in output_index and not any(seen.get(name, ())):  # type: ignore[operator]
            raise InvalidArgumentError(f"discover: argument 'output_index' names {name!r}, but the {problems[name]}")
    if why_none is not None:
        why_none.update(problems)
    logits = set(logits)
    example = _request_for(example_args, example_kwargs, batch_axis, sequence_axis)
    batch, tokens = example.batch, example.prompt_tokens
    # The input's axes are the outputs' where they count from the start ([B, T] ids, [B, T, D]
    # activations); counted from the end they are not, and each axis keeps its one kind.
    read = batch_axis >= 0 and sequence_axis >= 0 and _first_tensor(example_args, example_kwargs) is not None
    # What each kind is in the example's forward, a prefill of its batch and prompt.
    extents = {"batch": batch, "sequence": tokens, "token_rows": batch * tokens, "context": tokens}
    catalog = []
    for name, calls in seen.items():
        for call, facts in enumerate(calls):
            if facts is None:
                continue
            # A module called more than once is a point per call: one observation per point
            # per step holds for each, and each call keeps its own shape.
            path = name if len(calls) == 1 else call_path(name, call)
            shape, dtype, itemsize = facts
            # A negative axis counts from the end of this output's shape, as the request reads it.
            batch_at = batch_axis + len(shape) if batch_axis < 0 else batch_axis
            sequence_at = sequence_axis + len(shape) if sequence_axis < 0 else sequence_axis
            given = (axis_kinds or {}).get(path, (axis_kinds or {}).get(name))
            if given is not None and len(given) != len(shape):
                raise InvalidArgumentError(f"discover: argument 'axis_kinds' gives {path!r} {len(given)} axes; its "
                                           f"output has shape {list(shape)}")
            axes = []
            for i, extent in enumerate(shape):
                kind: Optional[str] = None
                if given is not None:
                    kind = given[i]
                    if kind is not None and extents[kind] != extent:
                        raise InvalidArgumentError(
                            f"discover: argument 'axis_kinds' calls axis {i} of {path!r} {kind!r}, which is "
                            f"{extents[kind]} in the example (batch {batch}, {tokens} tokens), but the output "
                            f"has shape {list(shape)}")
                elif symbolic and i == batch_at:
                    kind = "batch" if not read or extent == batch else \
                        "token_rows" if tokens > 1 and extent == batch * tokens else None
                elif symbolic and i == sequence_at and len(shape) > 2 and (not read or extent == tokens):
                    kind = "sequence"
                if kind is None:
                    axes.append(Axis("vocab" if name in logits and i == len(shape) - 1 else f"d{i}", int(extent)))
                else:
                    label = _AXIS_KIND_NAMES[kind]
                    taken = {axis.name for axis in axes}
                    axes.append(Axis(label if label not in taken else f"{label}{i}", kind))
            # The hook observes before it intervenes: an intervention at this module changes what
            # flows downstream, never what was recorded here.
            catalog.append(ObservationPoint(path, axes, meaning="logits" if name in logits else "activation",
                                            dtype=dtype, itemsize=itemsize,
                                            position=PointPosition.BEFORE_INTERVENTION))
    pointed = {point.path for point in catalog} | {name for name, calls in seen.items() if any(calls)}
    unused = sorted(set(axis_kinds or {}) - pointed)
    if unused:
        raise InvalidArgumentError(f"discover: argument 'axis_kinds' names {unused[0]!r}, which the example forward "
                                   f"gave no tensor point (a call past the module's, or no tensor at its output_index)")
    for name, module in model.named_modules():
        policy = routing_policy_of(module)
        if policy is not None:
            called = len(seen.get(name, ()))
            for path in [name] if called <= 1 else [call_path(name, call) for call in range(called)]:
                catalog.append(ObservationPoint(path + ROUTING_SUFFIX,
                                                [Axis("rows", "token_rows"), Axis("experts", policy.num_experts)],
                                                meaning="routing", routing=policy))
    if scripted and not catalog:
        outer = [s[:-1] for s in scripted if not any(s != o and s.startswith(o) for o in scripted)]
        _warn_at_caller(f"discover: no point was found in {type(model).__name__}, whose submodules "
                        f"{', '.join(map(repr, outer[:4]))}{', ...' if len(outer) > 4 else ''} are TorchScript modules "
                        f"(they take no forward hooks)")
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
        require(session, CaptureSession, "RoutingHook", "session")
        require_backend(backend, "RoutingHook")
        require(path, str, "RoutingHook", "path")
        if policy is not None:
            require(policy, RoutingPolicy, "RoutingHook", "policy")
        self.session, self.backend, self.path, self.policy = session, backend, path, policy
        self.controlled = False  # whether a routing control was ever handed out here
        self._elsewhere = never  # a capture block's: True on the threads it does not serve
        # The router's scores are the point's value: a capture selection there observes them.
        observer = session.observer(path, backend)
        self._observer = observer if observer.selected else None
        self._keep: Any = None  # the attachment that set it: alive while the module holds the hook

    def select(self, scores: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Expert ids and coefficients for ``scores`` [rows, experts]. The session's capture
        selections at this point observe ``scores`` first (the router's output, before any
        control). In a forward run again in backward (activation checkpointing) it observes
        nothing, routes by the policy where no control was ever in force here, and raises
        ``CaptureSessionError`` where one was: a routing control applies once per step, so a
        recompute could not be sure to route as the captured forward did. In a discovery's
        forward it routes by the policy, and nothing is observed or asked for."""
        if discovering() or self._elsewhere():
            return route(scores, top_k, policy=self.policy)
        if recomputing():
            if self.controlled:
                raise_routing_recompute(self.path)
            return route(scores, top_k, policy=self.policy)  # no control was ever in force here
        if self._observer is not None:
            self._observer.observe(scores)
        rows = scores.shape[0]
        control = self.session.routing_control(self.path, rows)
        if control is None:
            return route(scores, top_k, policy=self.policy)
        self.controlled = True
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
    removes them all. Made by :func:`attach`; ``keep``, a list the new attachment joins before
    it places any hook, lets an owner detach it even when a Ctrl-C lost the constructor's return.
    Each hook is noted before torch registers it and removed by identity, so a Ctrl-C at any
    point of attaching or detaching leaves none that ``detach()`` cannot remove.

    Interventions may be enabled on the session after attaching: a forward pre-hook on the
    root module notices a new intervention plan at the next forward and hooks its targets
    (upgrading observe-only hooks to observe-then-intervene) before any submodule runs.
    Code that calls submodules directly, not through the attached root, calls ``sync()``.
    An attachment places its hooks one sync at a time, and a routed module's own
    ``set_routing_hook`` runs inside that: it must not wait on a forward through the same
    attachment (that forward's sync would wait for it).

    A module the session names per call (``"<path>#<k>"``, see :func:`discover`) has one hook
    that counts its calls in each forward through the attached root (a pre-hook on the root
    starts the count, a forward hook on it checks the count when the forward returns) and
    hands call k to point k's hook. A call past the count the attachment expects raises
    ``CaptureSessionError`` before anything is observed at it; a forward that returns having
    called the module fewer times raises it too, after its records are complete."""

    def __init__(self, session: CaptureSession, model: nn.Module, backend: Any, output_index: OutputIndex,
                 calls: Optional[Mapping[str, int]] = None, keep: Optional[list["TorchAttachment"]] = None,
                 thread: int = 0, paths: Optional[Iterable[str]] = None,
                 serves: Optional[Callable[[], bool]] = None, elsewhere: Optional[Callable[[], bool]] = None,
                 discovered_calls: bool = False):
        self._session, self._backend, self._output_index = session, backend, output_index
        self._model = model
        # attach(paths=...): the points it hooks, intervention targets enabled later included.
        self._paths: Optional[frozenset[str]] = None if paths is None else frozenset(paths)
        # Paths hooked for themselves (the session names nothing there yet): a plan enabled later
        # that names one of their calls replaces the plain hook (_attached_points, sync).
        self._standing: set[str] = set()
        # One hooking at a time per attachment: two forwards syncing it at once would each place
        # the plan's hooks (the global lock only covers the routing claim, not the placing).
        self._hooking = threading.RLock()
        self._serial = next(_ATTACHMENT_SERIALS)  # attachments(model) lists them in this order
        # A capture block's attachment serves the block's thread alone (``thread``; 0 for every
        # thread), in the contexts the block (``block``) is open in: another thread's calls (a
        # forward begun before the block opened), or another asyncio task's, pass by.
        # An owner that knows when its forwards run (an Engine's steps) gives ``elsewhere`` itself.
        if elsewhere is None:
            elsewhere = never if thread == 0 else other_than(thread, serves)
        self._elsewhere = elsewhere  # not self below: a closure over the attachment would be a cycle through it
        self._passed_over = passed_over if elsewhere is never else (lambda: passed_over() or elsewhere())
        self._modules = dict(model.named_modules())
        self._calls = dict(calls or {})
        self._discovered_calls = discovered_calls  # the counts are a block's discovery's, not calls=
        # Every forward hook placed, noted before torch registers it (a Ctrl-C as a registration
        # returns would otherwise lose it): detach() removes them all.
        self._placed = PlacedHooks()
        # Modules given a routing hook, noted before it is set: detach() clears each.
        self._routing_set: list[Any] = []
        self._hooks: dict[str, tuple[Any, bool]] = {}  # path -> (hook, intervenes)
        self._routed: dict[str, Any] = {}  # path -> a routed module (it has set_routing_hook)
        # Modules named per call: path (or path + ROUTING_SUFFIX) -> the hook counting its calls.
        self._counted: dict[str, Union[CalledForward, CalledRouting]] = {}
        self._counting: list[Any] = []  # the root's hooks that start and check the counts
        self._detached = False  # detach() ran (an attachment awaiting its first hook is not)
        self._detaching = False  # detach() began (an interrupted one is finished by the next)
        self._root: Optional[Any] = None  # the root's pre-hook that notices an intervention plan
        if keep is not None:
            keep.append(self)  # before any hook: whoever passed `keep` can detach what follows
        root = lambda module, args: None if self._elsewhere() else self.sync()  # noqa: E731
        self._root = root
        try:
            self._placed.forward_pre(model, root)
        except BaseException:
            finish_despite_interrupts(self._placed.remove_all)  # the caller never gets this attachment to detach
            raise

    def _where(self, points: Iterable[str], caller: str) -> dict[str, tuple[str, Optional[int]]]:
        """Point -> (module path, call); refuses points that name no module, and a module
        named both as one point and per call, or per call past the count ``calls`` gives it."""
        where, unknown = {}, []
        for point in points:
            found = split_call(point, self._modules)
            if found is None:
                unknown.append(point)
            else:
                where[point] = found
        if unknown:
            raise InvalidArgumentError(f"{caller}: no module at path(s) {sorted(unknown)} in "
                                       f"{type(self._model).__name__} (module paths as named_modules() gives them, "
                                       f"a call as '<path>#<k>')")
        return where

    def _check(self, hooked: dict[str, tuple[str, Optional[int]]],
               routed: dict[str, tuple[str, Optional[int]]], caller: str) -> None:
        for module in sorted({m for m, _ in routed.values()}):
            if not callable(getattr(self._modules[module], "set_routing_hook", None)):
                raise InvalidArgumentError(f"{caller}: module {module} does not take a routing hook")
            holder = _routing_holder(self._modules[module])
            if holder is not None and holder is not self:
                # A module holds one routing hook: a second would replace the first's, whose
                # control would stop applying while it still says it is attached.
                raise InvalidArgumentError(
                    f"{caller}: module {module!r} takes one routing hook, and {holder!r} holds it: detach that "
                    f"attachment first (lifecore.torch.attachments() of the {type(holder._model).__name__} it is "
                    f"attached to lists it; nothing was placed)")
        for suffix, points, whole in (("", hooked, self._hooks), (ROUTING_SUFFIX, routed, self._routed)):
            plain = {m for m, call in points.values() if call is None} | set(whole)
            per_call = {m for m, call in points.values() if call is not None} | {
                p[: len(p) - len(suffix)] for p in self._counted if (p.endswith(ROUTING_SUFFIX) == bool(suffix))}
            for module in sorted(plain & per_call):
                raise InvalidArgumentError(f"{caller}: the session names module {module!r} both as one point "
                                           f"({module}{suffix}) and per call ({call_path(module, 0)}{suffix}, ...)")
        for point, (module, call) in sorted({**hooked, **routed}.items()):
            expected = self._calls.get(module)
            if expected is None:
                continue
            if call is not None and call >= expected:
                raise InvalidArgumentError(f"{caller}: {point} names call {call} of {module!r}, but calls= gives it "
                                           f"{expected} calls (0 to {expected - 1})")
            if call is None and expected > 1:
                raise InvalidArgumentError(
                    f"{caller}: the session names {module!r} as one point, but calls= says it is called {expected} times per "
                    f"forward: a point observes one call, so name them {call_path(module, 0)} to "
                    f"{call_path(module, expected - 1)} (as discover does)")

    def _hook(self, targets: set[str], intervened: set[str], caller: str) -> None:
        """Hooks ``targets`` (checked first, so a bad path hooks nothing new); errors name ``caller``."""
        with self._hooking:
            self._hook_once(targets, intervened, caller)

    def _hook_once(self, targets: set[str], intervened: set[str], caller: str) -> None:
        routed = self._where((t[: -len(ROUTING_SUFFIX)] for t in targets if t.endswith(ROUTING_SUFFIX)), caller)
        hooked = self._where((t for t in targets if not t.endswith(ROUTING_SUFFIX)), caller)
        # A path hooked for itself gives way to the session's own points of its module (their
        # calls or routing): both on one module would be refused as one module named two ways.
        for point in set(targets) - self._standing:
            module = self._module_of(point)
            if module in self._standing and module in self._hooks:
                self._placed.remove(self._hooks.pop(module)[0])
                self._standing.discard(module)
        # One attachment at a time checks and claims the modules it routes (noted in _routing_set,
        # which the check reads): two threads routing one module would both find it free, and the
        # second would replace the first's hook. The modules' own code (set_routing_hook,
        # routing_policy) runs after, outside the lock, so it may wait on another attachment.
        with _ROUTING_LOCK:
            self._check(hooked, routed, caller)
            for module_path, _ in routed.values():
                module = self._modules[module_path]
                if not any(m is module for m in self._routing_set):
                    self._routing_set.append(module)
        self._place(hooked, routed, intervened)

    def _place(self, hooked: dict[str, tuple[str, Optional[int]]], routed: dict[str, tuple[str, Optional[int]]],
               intervened: set[str]) -> None:
        for path in sorted(hooked):
            module, call = hooked[path]
            intervenes = path in intervened
            index = _index_for(self._output_index, module)
            if call is not None:
                counted = self._counted.get(module)
                if counted is None:
                    counted = CalledForward(module, self._calls.get(module), self._elsewhere, self._discovered_calls)
                    self._placed.forward(self._modules[module], counted)
                    self._count(module, counted)
                assert isinstance(counted, CalledForward)
                if call in counted.hooks and (call in counted.intervening or not intervenes):
                    continue
                counted.hooks[call] = self._make_hook(path, intervenes, index)
                if intervenes:
                    counted.intervening.add(call)
                continue
            present = self._hooks.get(path)
            if present is not None and (present[1] or not intervenes):
                continue
            hook = self._placed.forward(self._modules[path],
                                        self._make_hook(path, intervenes, index))
            if present is not None:
                self._placed.remove(present[0])  # an observe-only hook becomes observe-then-intervene
            self._hooks[path] = (hook, intervenes)
        for path in sorted(routed):
            module_path, call = routed[path]
            module = self._modules[module_path]
            policy = routing_policy_of(module)
            if call is not None:
                counted = self._counted.get(module_path + ROUTING_SUFFIX)
                if counted is None:
                    counted = CalledRouting(module_path, self._calls.get(module_path), module, policy, route,
                                            self._elsewhere, self._discovered_calls)
                    module.set_routing_hook(counted)  # claimed in _routing_set by _hook
                    self._count(module_path + ROUTING_SUFFIX, counted)
                if call not in counted.hooks:
                    counted.hooks[call] = self._routing_hook(path + ROUTING_SUFFIX, policy)
            elif module_path not in self._routed:
                hook = self._routing_hook(path + ROUTING_SUFFIX, policy)
                hook._elsewhere = self._elsewhere
                module.set_routing_hook(hook)
                self._routed[module_path] = module

    def _routing_hook(self, point: str, policy: Optional[RoutingPolicy]) -> RoutingHook:
        hook = RoutingHook(self._session, self._backend, point, policy)
        hook._keep = self  # the module holds the hook, so the attachment lives while it is set
        return hook

    def _count(self, key: str, counted: Union[CalledForward, CalledRouting]) -> None:
        """Keeps a per-call hook; the first one places the root's hooks that start each
        forward's count and check it when the forward returns."""
        self._counted[key] = counted
        if not self._counting:
            self._counting = [lambda module, args: self._start_counts(),
                              lambda module, args, output: self._end_counts()]
            self._placed.forward_pre(self._model, self._counting[0])
            self._placed.forward(self._model, self._counting[1])

    def _make_hook(self, path: str, intervenes: bool, index: Union[int, str]) -> Any:
        # The hook keeps the attachment: while any of its hooks is on the model, the attachment
        # lives (attach's guard sees it, attachments(model) finds it, detach() can remove them).
        return _make_hook(self._session, self._backend, path, intervenes, index, self._passed_over, self._elsewhere,
                          keep=self)

    def _start_counts(self) -> None:
        if self._passed_over():
            return  # a recompute (or a discovery) of the whole model counts nothing: the forward's count stands
        for counted in self._counted.values():
            counted.count = 0

    def _end_counts(self) -> None:
        if self._passed_over():
            return
        short = [problem for _, counted in sorted(self._counted.items()) if (problem := counted.shortfall())]
        self._start_counts()  # calls made directly after this forward count from zero again
        if short:
            raise CaptureSessionError("; ".join(short))

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
        # Attached to `paths` only: other targets are another attachment's.
        targets = {op.target for op in plan.plan.operations if self._named_by_paths(op.target)}
        self._hook(targets, {t for t in targets if not t.endswith(ROUTING_SUFFIX)},
                   "TorchAttachment.sync (the intervention plan's targets)")
        self._drop_root()  # a session takes one intervention plan: nothing more to notice

    def _module_of(self, point: str) -> str:
        """The module path of a point: itself, less its routing suffix and its call."""
        bare = _unrouted(point)
        found = split_call(bare, self._modules)
        return found[0] if found is not None else bare

    def _named_by_paths(self, point: str) -> bool:
        """Whether attach's ``paths`` name ``point``: as it is, or its module (a module's path
        covers its routing point and its per-call points); every point without ``paths``."""
        if self._paths is None or point in self._paths:
            return True
        return _unrouted(point) in self._paths or self._module_of(point) in self._paths

    def _attached_points(self, points: set[str]) -> set[str]:
        """The session's ``points`` this attachment hooks: all of them without ``paths``; with
        them, those they name (as they are, or by their module), and each path that names no
        module the session names by call or routing (a point of its own, as before)."""
        if self._paths is None:
            return set(points)
        covered = {p for p in points if self._named_by_paths(p)}
        by_parts = {self._module_of(p) for p in covered if p not in self._paths}
        alone = {p for p in self._paths if p not in by_parts}
        self._standing = alone - set(points)
        return covered | alone

    def _drop_root(self) -> None:
        if self._root is not None:
            self._placed.remove(self._root)
            self._root = None

    def detach(self) -> None:
        """Removes every hook this attachment placed (forward hooks, routing hooks, the root's
        pre-hook and call counting); calling it again does nothing, and finishes one a Ctrl-C
        interrupted. The session keeps its records. A routed module whose
        ``set_routing_hook(None)`` raises does not stop it: every other hook goes, the
        attachment is detached (it no longer holds that module), and that error is raised
        after, with a note naming the module."""
        self._detaching = True
        self._placed.remove_all()
        refused: list[tuple[Any, Exception]] = []
        while self._routing_set:
            module = self._routing_set[-1]
            try:
                module.set_routing_hook(None)
            except Exception as refusal:  # the module's own code; a Ctrl-C leaves it held, for detach() again
                refused.append((module, refusal))
            self._routing_set.pop()
        # Detached (no longer holding its modules' routing) only once their hooks are cleared: a
        # concurrent attach would otherwise route a module whose hook this then cleared.
        self._detached = True
        self._root = None
        # The hooks go with these (no hook refers to itself: see _make_hook's state), and with
        # them their hold on this attachment, the model and the session.
        self._hooks, self._routed, self._counted, self._counting = {}, {}, {}, []
        if refused:
            first = refused[0][1]  # the first that raised
            paths = [next((repr(p) for p, m in self._modules.items() if m is module), type(module).__name__)
                     for module, _ in refused]
            first.add_note(f"TorchAttachment.detach: set_routing_hook(None) of {', '.join(paths)} raised; every "
                           f"other hook was removed and the attachment is detached (it no longer holds "
                           f"{'that module' if len(paths) == 1 else 'those modules'}; a hook it still holds is "
                           f"its own to clear)")
            raise first

    @property
    def attached(self) -> bool:
        """Whether any module hook or routing hook is still in place (False after ``detach()``)."""
        return bool(self._hooks or self._routed or self._counted)

    def __repr__(self) -> str:
        points = len(self._hooks) + len(self._routed) + sum(len(c.hooks) for c in self._counted.values())
        state = ("detached" if self._detached else "detaching (interrupted: detach() again)" if self._detaching
                 else f"{points} point(s) hooked")
        return f"TorchAttachment({type(self._model).__name__}, {state}, session {self._session.id})"

    def __enter__(self) -> "TorchAttachment":
        if self._detached or self._detaching:
            raise ClosedError("TorchAttachment.__enter__: the attachment is detached; a with block needs one "
                              "that is not (attach() again)")
        return self

    # Leaving the with block detaches, to the end whatever Ctrl-C lands (in C: exit_releasing).
    __exit__ = exit_releasing

    def _release(self) -> None:
        self.detach()  # again, it finishes one a Ctrl-C interrupted

    def _exit_after_release(self, *exc: Any) -> None:
        return None


class _ContainerChecked:
    """A backend for the operations at one container output: before the first operation is
    applied, checks that a replacement can go back into the container (:func:`_rebuilder`),
    its LifecoreTypeError failing that operation; everything else is the backend's."""

    def __init__(self, backend: Any, output: Any, index: Union[int, str]) -> None:
        self._backend, self._output, self._index = backend, output, index
        self._rebuild: Optional[Callable[[torch.Tensor], Any]] = None

    def transform(self, tensor: Any, request: Any) -> Any:
        return self._backend.transform(tensor, request)

    def intervene(self, tensor: Any, request: Any) -> Any:
        if self._rebuild is None:
            self._rebuild = _rebuilder(self._output, self._index)
        return self._backend.intervene(tensor, request)

    def rebuild(self, replacement: torch.Tensor) -> Any:
        """The output with ``replacement`` in it (an operation applied, so the check passed)."""
        rebuild = self._rebuild if self._rebuild is not None else _rebuilder(self._output, self._index)
        return rebuild(replacement)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


def _make_hook(session: CaptureSession, backend: Any, path: str, intervenes: bool, index: Union[int, str],
               aside: Callable[[], bool], elsewhere: Callable[[], bool], keep: Any = None) -> Any:
    """The hook at one point; ``aside`` says when it observes nothing (a recompute, a discovery's
    forward, a thread its attachment does not serve: ``elsewhere``); ``keep`` lives as long as
    the hook does."""
    observe, intervene, reintervene = session.observe, session.intervene, session.reintervene

    def selected(output: Any) -> torch.Tensor:
        if isinstance(output, torch.Tensor):
            return output
        tensor = _selected_tensor(output, index)
        if tensor is None:
            raise InvalidArgumentError(_selection_problem(output, index, path))
        return tensor

    if not intervenes:
        # The session's observer is itself the hook: no Python frame of ours per forward, the
        # path resolved once. A plain tensor output is observed as is; anything else goes
        # through selected() (a container's element, or the error naming what is missing).
        return session.observer(path, backend, tensor_type=torch.Tensor, select=selected, recomputing=aside, keep=keep)

    state = AppliedState()

    def observe_then_intervene(module: nn.Module, args: Any, output: Any) -> Any:
        if discovering() or elsewhere():
            return None  # a discovery's forward (or another thread's): nothing observed, nothing applied
        tensor = selected(output)
        # A container's element: whether a replacement can go back into it is checked as the
        # first operation applies, inside the backend's intervene, so an output it cannot go
        # back into fails that operation (FAILED, the output unchanged) and no operation reads
        # APPLIED on an output it did not change; none applying, nothing is checked.
        applying = backend if isinstance(output, torch.Tensor) else _ContainerChecked(backend, output, index)
        if recomputing():  # observed already; what was applied then is applied again
            replacement = reintervene(applying, path, tensor)
        else:
            observe(applying, path, tensor)  # one backend type for both calls: the core caches its check
            replacement = intervene(applying, path, tensor)
        if replacement is None:
            return None
        state.applied = True
        return replacement if applying is backend else applying.rebuild(replacement)

    # Its state apart from it, so the closure never refers to itself: that cycle, only the
    # collector frees, held the session (its bound methods) after detach().
    observe_then_intervene.state = state  # type: ignore[attr-defined]
    observe_then_intervene.keep = keep  # type: ignore[attr-defined]
    return observe_then_intervene


# The attachments made, weakly: attach refuses a session already attached to the same model.
# Each hook an attachment places keeps it alive, so one whose handle was dropped without
# detach() stays here while its hooks are on the model.
_LIVE_ATTACHMENTS: "weakref.WeakSet[TorchAttachment]" = weakref.WeakSet()
_LIVE_ATTACHMENTS_LOCK = threading.Lock()
_ROUTING_LOCK = threading.RLock()  # held while an attachment checks and claims the modules it routes
_ATTACHMENT_SERIALS = itertools.count()


def _unrouted(point: str) -> str:
    """A point less its routing suffix: the module's point (or call) a routing point is of."""
    return point[: -len(ROUTING_SUFFIX)] if point.endswith(ROUTING_SUFFIX) else point


def _routing_holder(module: nn.Module) -> Optional["TorchAttachment"]:
    """The attachment, not detached, that set ``module``'s routing hook; None when none has."""
    with _LIVE_ATTACHMENTS_LOCK:
        return next((a for a in _LIVE_ATTACHMENTS
                     if not a._detached and any(m is module for m in a._routing_set)), None)


def attachments(model: nn.Module) -> list[TorchAttachment]:
    """The attachments whose hooks are on ``model`` (made by :func:`attach` with ``model`` as its
    root, not detached yet), oldest first: one whose handle was dropped without ``detach()``
    is found here, and its ``detach()`` removes its hooks."""
    _require_module(model, "attachments", hooked=False)
    with _LIVE_ATTACHMENTS_LOCK:
        found = [a for a in _LIVE_ATTACHMENTS if a._model is model and not a._detached]
    return sorted(found, key=lambda a: a._serial)


def attach(session: CaptureSession, model: nn.Module, backend: Any = None,
           paths: Optional[Iterable[str]] = None, output_index: OutputIndex = 0,
           calls: Optional[Mapping[str, int]] = None) -> TorchAttachment:
    """Hooks every module named by the session's capture selections and intervention
    targets, or only the points ``paths`` names (a session's points split between models, an
    encoder's and a decoder's, are attached to each with its own paths): a point named as it
    is or by its module (a module's path covers its routing point and its per-call points,
    selections and intervention targets alike). Interventions enabled after attaching are
    hooked at the next forward through ``model`` (see :class:`TorchAttachment`), those at
    ``paths`` alone when it is given. A point whose module
    holds another attachment's routing hook raises ``InvalidArgumentError``: a module takes
    one routing hook.

    A point ``"<path>#<k>"`` is the k-th call (from 0) of the module at ``path`` in each
    forward through ``model`` (:func:`discover` names the calls of a module called more than
    once so). ``calls`` maps module paths to how many calls each gets per forward
    (``calls=call_counts(discovery)`` gives what the discovery saw): a forward calling one of
    them more or fewer times raises ``CaptureSessionError``, naming the module and the counts.
    A module it does not name must reach the highest call the session names, and calls past
    that pass unobserved. ``calls`` that contradict the session (a call past the count, a module
    called several times named as one point) or the model raise ``InvalidArgumentError`` here,
    as does a session already attached to ``model`` by an attachment not detached yet (each
    point would be observed twice per forward); a TorchScript module, ``model`` or one to be
    hooked, ``LifecoreTypeError`` (it takes no hooks; none is left placed).

    A forward that autograd runs again in backward (activation checkpointing) observes nothing
    and applies again what the forwards applied at each point to a tensor of its shape
    (:meth:`CaptureSession.reintervene`), so gradients are those of the captured forward
    while the attachment is in place; it raises ``CaptureSessionError`` where forwards of that
    shape differed, at an intervention that applied on one call of a module called several
    times, or at a routing hook where a control was in force (a recompute cannot repeat
    those). Any forward while autograd runs a backward on the thread is taken for a recompute.

    ``output_index`` selects which element of a container output is observed and intervened
    on, as :func:`discover` reads it: an int is a position (tuple, list, ModelOutput-like
    mapping), a str a key (mapping) or field (namedtuple); one for every hooked module, or a
    mapping path -> int or str (paths it does not name use 0). The default, 0, is the first
    element; a replacement goes back at the same position or key of a container of the same
    type (a namedtuple, a list subclass, a shallow copy of a dict or ModelOutput), and the
    other elements pass through unchanged. An output with no tensor there (a missing key, an
    element that is ``None`` or not a tensor, a plain dict under an int) raises
    ``InvalidArgumentError`` at the forward, naming the module, the selection and what the
    output holds."""
    return _attach(session, model, backend, paths, output_index, calls, keep=None)


def _attach(session: CaptureSession, model: nn.Module, backend: Any, paths: Optional[Iterable[str]],
            output_index: OutputIndex, calls: Optional[Mapping[str, int]],
            keep: Optional[list[TorchAttachment]], thread: int = 0,
            serves: Optional[Callable[[], bool]] = None,
            elsewhere: Optional[Callable[[], bool]] = None, discovered_calls: bool = False) -> TorchAttachment:
    """:func:`attach`; the attachment also joins ``keep`` as soon as it exists (before any hook
    is placed), so an owner that loses the return value to a Ctrl-C still detaches it."""
    if not isinstance(session, CaptureSession):
        raise LifecoreTypeError(f"attach: argument 'session' must be a CaptureSession, got {type(session).__name__}")
    _require_module(model, "attach")
    output_index = _check_output_index(output_index, "attach")
    _check_calls(calls, model, "attach")
    backend = backend if backend is not None else TorchBackend()
    require_backend(backend, "attach")
    plan = session.intervention_plan
    operations = list(plan.plan.operations) if plan is not None else []
    if paths is not None:
        if isinstance(paths, (str, bytes)) or not isinstance(paths, Iterable):
            raise LifecoreTypeError(f"attach: argument 'paths' must be an iterable of module paths (str) or None, "
                                    f"got {type(paths).__name__}" + (" (wrap one path in a list)"
                                                                     if isinstance(paths, str) else ""))
        paths = list(paths)
        wrong = [p for p in paths if not isinstance(p, str)]
        if wrong:
            raise LifecoreTypeError(f"attach: argument 'paths' must hold module paths (str), got "
                                    f"{type(wrong[0]).__name__} {wrong[0]!r}")
    points = {s.path for s in session.plan.plan.selections} | {op.target for op in operations}
    made: list[TorchAttachment] = []  # the attachment, as soon as it exists
    try:
        with _LIVE_ATTACHMENTS_LOCK:  # the check and the new attachment's entry, as one
            for live in _LIVE_ATTACHMENTS:
                if live._session is session and live._model is model and not live._detached:
                    raise InvalidArgumentError(
                        f"attach: the session is already attached to this {type(model).__name__} (an attachment "
                        f"not detached yet): a second would observe and intervene at every point twice in each "
                        f"forward. Nothing was placed; detach the first (lifecore.torch.attachments(model) lists "
                        f"them), or attach another session")
            attachment = TorchAttachment(session, model, backend, output_index, calls, keep=made, thread=thread,
                                         paths=paths, serves=serves, elsewhere=elsewhere,
                                         discovered_calls=discovered_calls)
            _LIVE_ATTACHMENTS.add(attachment)
        if keep is not None:
            keep.append(attachment)
        attachment._hook(attachment._attached_points(points), {op.target for op in operations}, "attach")
        attachment.sync()
    except BaseException:
        def undo() -> None:  # attach is all or nothing
            for attachment in made:
                attachment.detach()
        finish_despite_interrupts(undo)
        raise
    return attachment


# The short path: capture(model, paths, transforms) and run_with_capture(model, inputs, paths,
# transforms). Everything below is built from discover, an admitted CapturePlan, one
# CaptureSession (its ledger holds the budget) and attach: nothing is captured around them.

TransformSpec = Union[str, CaptureTransform]

#: Bin edges of the ``"histogram"`` transform: 40 bins of 0.5 over [-10, 10] (values outside
#: are not counted: ``summary.count - counts.sum()`` of them, when both are captured).
DEFAULT_HISTOGRAM_EDGES: tuple[float, ...] = tuple(-10.0 + 0.5 * i for i in range(41))
#: How many candidates the ``"top_k"`` transform keeps (of the last row's last axis).
DEFAULT_TOP_K = 10
#: How many leading elements the ``"preview"`` transform keeps.
DEFAULT_PREVIEW = 16

_TRANSFORMS: dict[str, Callable[[], CaptureTransform]] = {
    "summary": CaptureTransform.summary,
    "tensor": CaptureTransform.full_tensor,
    "top_k": lambda: CaptureTransform.top_candidates(DEFAULT_TOP_K),
    "histogram": lambda: CaptureTransform.histogram(list(DEFAULT_HISTOGRAM_EDGES)),
    "preview": lambda: CaptureTransform.preview(DEFAULT_PREVIEW),
}
_UNLIMITED = 2**62  # the axes of the ledger a byte budget leaves open (as capture.unlimited())
_UINT64_MAX = 2**64 - 1


class ModuleCapture:
    """What one module's output gave in a :func:`capture` forward: one session record per
    transform, in the order the transforms were given.

    ``summary``, ``tensor``, ``histogram`` and ``candidates`` read the payload of the record
    whose transform makes that kind (the first such record), and are None when no transform
    makes it or its record holds no payload (skipped over the budget, or failed)."""

    __slots__ = ("path", "records")

    path: str
    """The module path (as ``model.named_modules()`` names it), or ``"<path>#<k>"`` for the
    k-th call of a module the forward calls more than once."""
    records: tuple[CaptureRecord, ...]
    """The session's records for this module, one per transform, in transform order."""

    def __init__(self, path: str, records: Sequence[CaptureRecord]):
        self.path = path
        self.records = tuple(records)

    @property
    def outcome(self) -> CaptureOutcome:
        """``CAPTURED`` when every transform captured; otherwise the first other outcome
        (``SKIPPED`` over the budget under ``on_limit="skip"``, ``TRUNCATED``, ``FAILED``, ...)."""
        for record in self.records:
            if record.outcome != CaptureOutcome.CAPTURED:
                return record.outcome
        return CaptureOutcome.CAPTURED

    @property
    def skip_reason(self) -> Optional[str]:
        """``"limit"`` (or ``"schedule"``) for the first skipped record, else None."""
        for record in self.records:
            reason = record.skip_reason
            if reason is not None:
                return str(reason)
        return None

    @property
    def payload(self) -> Optional[CapturePayload]:
        """The first record's payload (the only one with a single transform), None if it
        holds none."""
        return self.records[0].payload if self.records else None

    def _value(self, name: str) -> Any:
        for record in self.records:
            payload = record.payload
            if payload is not None:
                value = getattr(payload, name)
                if value is not None:
                    return value
        return None

    @property
    def summary(self) -> Optional[Summary]:
        """The ``"summary"`` transform's :class:`~lifecore.capture.Summary` (count,
        nonfinite, min, max, mean, std of the finite values), or None."""
        value: Optional[Summary] = self._value("summary")
        return value

    @property
    def tensor(self) -> Optional[torch.Tensor]:
        """The ``"tensor"`` (or ``"preview"``) transform's host copy of the output in its
        source dtype (a ``torch.Tensor``; ``"preview"`` keeps the flat leading elements), or None.
        With both, the whole ``"tensor"`` one, whatever their order: a record a preview cut
        (``TRUNCATED``) is read only when no record holds the whole region."""
        # A preview given first would otherwise hide the whole tensor asked for beside it, also
        # when it cut nothing (it is flat): the whole region's copy has the region's shape.
        first: Optional[torch.Tensor] = None
        for record in self.records:
            payload = record.payload
            if record.outcome != CaptureOutcome.CAPTURED or payload is None or payload.tensor is None:
                continue
            copy: torch.Tensor = payload.tensor
            if tuple(copy.shape) == tuple(record.selected_shape):
                return copy
            if first is None:
                first = copy
        if first is not None:
            return first
        value: Optional[torch.Tensor] = self._value("tensor")
        return value

    @property
    def histogram(self) -> Optional[Histogram]:
        """The ``"histogram"`` transform's :class:`~lifecore.capture.Histogram`
        (``bin_edges``, ``counts``), or None."""
        value: Optional[Histogram] = self._value("histogram")
        return value

    @property
    def candidates(self) -> Optional[Candidates]:
        """The ``"top_k"`` transform's :class:`~lifecore.capture.Candidates` (``ids``,
        ``scores``, best first, over the last axis of the output's last row), or None."""
        value: Optional[Candidates] = self._value("candidates")
        return value

    def __repr__(self) -> str:
        def shown(record: CaptureRecord) -> str:
            why = record.skip_reason or record.fail_reason  # what a skip or failure was for
            if record.budget is not None:
                why = f"{why} {record.budget}"
            return f"{record.outcome.name}({why})" if why else record.outcome.name
        kinds = ", ".join(f"{r.selection_id[len(self.path) + 1:]}={shown(r)}" for r in self.records)
        return f"ModuleCapture({self.path!r}, {kinds})"


class CapturedModules(Mapping[str, ModuleCapture]):
    """The records of a :func:`capture` forward as a mapping module path ->
    :class:`ModuleCapture`, in module order. Empty until the forward through the model has
    returned (or the ``with`` block has ended); ``step`` and ``session`` are the session's own
    drained step and the session itself (its ledger: ``session.cumulative_usage()``)."""

    step: Optional[CapturedStep]
    """The session's drained :class:`~lifecore.capture.CapturedStep` (None before the forward)."""
    session: Optional[CaptureSession]
    """The :class:`~lifecore.capture.CaptureSession` the forward ran in, whose ledger holds the
    budget (None before the forward)."""

    def __init__(self) -> None:
        self._modules: dict[str, ModuleCapture] = {}
        self.step = None
        self.session = None

    def _fill(self, session: CaptureSession, step: CapturedStep) -> None:
        self.session, self.step = session, step
        grouped: dict[str, list[CaptureRecord]] = {}
        for record in step.records:
            grouped.setdefault(record.path, []).append(record)
        self._modules = {path: ModuleCapture(path, records) for path, records in grouped.items()}

    def __getitem__(self, path: str) -> ModuleCapture:
        try:
            return self._modules[path]
        except KeyError:
            state = "captured " + ", ".join(repr(p) for p in self._modules) if self._modules else (
                "nothing captured yet: the records fill when the forward through the model returns")
            raise KeyError(f"no module {path!r} in these records ({state})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __repr__(self) -> str:
        return f"CapturedModules({list(self._modules.values())!r})"


def _transform_problem(transform: CaptureTransform, max_bins: int) -> Optional[str]:
    """What admission would refuse in the transform itself (it is refused at the forward, after
    a discovery forward ran the model), given the discovery's ``max_bins`` (its capabilities'
    max_histogram_bins): None when nothing."""
    if transform.kind == TransformKind.PREVIEW and transform.max_elements == 0:
        return "a preview needs max_elements > 0, got CaptureTransform.preview(0)"
    if transform.kind == TransformKind.TOP_CANDIDATES and transform.count == 0:
        return "top candidates need k > 0, got CaptureTransform.top_candidates(0)"
    if transform.kind == TransformKind.HISTOGRAM:
        edges = list(transform.edges)
        if len(edges) < 2:
            return f"a histogram needs at least two edges, got {edges}"
        if len(edges) - 1 > max_bins:
            return (f"a histogram of {len(edges) - 1:,} bins has too many: the discovery's capabilities allow "
                    f"{max_bins:,} (BackendCapabilities.max_histogram_bins)")
        if not all(math.isfinite(edge) for edge in edges):
            return f"a histogram's edges must be finite, got {edges}"
        if any(later <= earlier for earlier, later in zip(edges, edges[1:])):
            return f"a histogram's edges must be strictly increasing, got {edges}"
    return None


def _transforms(transforms: Union[TransformSpec, Sequence[TransformSpec]], call: str,
                max_bins: int) -> list[tuple[str, CaptureTransform]]:
    """(name, transform) pairs; a name is the string given or the transform's kind."""
    items = [transforms] if isinstance(transforms, (str, CaptureTransform)) else transforms
    if not isinstance(items, (list, tuple)):
        raise LifecoreTypeError(f"{call}: argument 'transforms' must be a transform name, a CaptureTransform or "
                                f"a non-empty list of them, got {transforms!r}")
    if not items:  # the right type, no value: as an empty list of paths is refused
        raise InvalidArgumentError(f"{call}: argument 'transforms' names no transform (give a transform name, a "
                                   f"CaptureTransform or a non-empty list of them)")
    made = []
    for item in items:
        if isinstance(item, CaptureTransform):
            if (problem := _transform_problem(item, max_bins)) is not None:  # refused before any forward, not at it
                raise AdmissionError(f"{call}: {problem}")  # what admission at the forward raised
            if item.kind == TransformKind.SLICE:
                # Its slices belong to a selection, which a block builds without any.
                raise InvalidArgumentError(f"{call}: a slice transform needs the slices of a CaptureSelection, which "
                                           f"a block has no way to give; build the plan yourself (CaptureSelection("
                                           f"..., slices=[...]) in a CapturePlan, then attach())")
            made.append((item.kind.name.lower(), item))
        elif isinstance(item, str):
            if item not in _TRANSFORMS:
                raise InvalidArgumentError(f"{call}: unknown transform {item!r}; the names are "
                                           f"{', '.join(map(repr, _TRANSFORMS))} (or pass a CaptureTransform)")
            transform = _TRANSFORMS[item]()
            if (problem := _transform_problem(transform, max_bins)) is not None:  # the default histogram's bins
                raise AdmissionError(f"{call}: {problem} (the {item!r} transform)")
            made.append((item, transform))
        else:
            raise LifecoreTypeError(f"{call}: a transform is a name or a CaptureTransform, got {type(item).__name__}")
    return made


def _matching(modules: Sequence[str], pattern: str) -> list[str]:
    """The module a pattern names exactly, or else those it matches as a glob: a path with
    brackets (``layer[0]``, a ModuleDict key) names itself, where a glob reads a character class."""
    return [pattern] if pattern in modules else [m for m in modules if fnmatchcase(m, pattern)]


def _patterns(paths: Union[str, Iterable[str]], modules: Sequence[str], model: nn.Module,
              call: str) -> dict[str, tuple[str, list[str], Optional[int]]]:
    """Pattern -> (its module part, the module paths that matches, the call it names or None)
    (``fnmatch``: ``*`` also crosses dots). A pattern that matches no module as it is, but
    ends in ``#<k>``, names the k-th call of the modules its part before matches."""
    patterns = [paths] if isinstance(paths, str) else list(paths) if isinstance(paths, Iterable) else None
    if patterns is None or not all(isinstance(p, str) for p in patterns):
        raise LifecoreTypeError(f"{call}: argument 'paths' must be a module path or glob, or a list of them, "
                                f"got {paths!r}")
    if not patterns:
        raise InvalidArgumentError(f"{call}: argument 'paths' names no module")
    matched = {}
    for pattern in patterns:
        base, called = pattern, None
        hits = _matching(modules, pattern)
        head, mark, tail = pattern.rpartition("#")
        if not hits and mark and tail.isdigit() and str(int(tail)) == tail:
            base, called = head, int(tail)
            hits = _matching(modules, base)
        if not hits:
            shown = ", ".join(modules[:12]) + (", ..." if len(modules) > 12 else "")
            raise InvalidArgumentError(f"{call}: {pattern!r} matches no module of {type(model).__name__} "
                                       f"(its module paths: {shown or 'none'})")
        if hits == [base]:  # a module named exactly: one TorchScript runs is refused by name
            refuse_scripted(model.get_submodule(base), f"{call}: module {base!r}")
        matched[pattern] = (base, hits, called)
    return matched


def _budget(budget_bytes: Optional[int], call: str) -> int:
    if budget_bytes is None:
        return _UNLIMITED
    given: Any = budget_bytes
    # An int, NumPy's or torch's too (np.prod(shape) * 4 is one), never a bool of any library.
    budget_bytes = _as_index(budget_bytes)
    if budget_bytes is None:
        raise LifecoreTypeError(f"{call}: argument 'budget_bytes' must be an int (bytes) or None, "
                                f"got {type(given).__name__}")
    if budget_bytes < 0:
        raise InvalidArgumentError(f"{call}: argument 'budget_bytes' must be >= 0, got {budget_bytes}")
    if budget_bytes > _UINT64_MAX:
        raise LifecoreOverflowError(f"{call}: argument 'budget_bytes' {budget_bytes} does not fit in 64 bits")
    return budget_bytes


def _on_limit(on_limit: Union[str, OnLimit], call: str) -> OnLimit:
    if isinstance(on_limit, OnLimit):
        return on_limit
    policies = {"skip": OnLimit.SKIP, "fail": OnLimit.FAIL}
    if isinstance(on_limit, str) and on_limit in policies:
        return policies[on_limit]
    message = f"{call}: argument 'on_limit' must be 'skip', 'fail' or an OnLimit, got {on_limit!r}"
    if not isinstance(on_limit, str):  # a wrong type, as capture.limits() says it
        raise LifecoreTypeError(message)
    raise InvalidArgumentError(message)


def _first_tensor(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Optional[torch.Tensor]:
    return next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)


def _axis_extent(args: tuple[Any, ...], kwargs: Mapping[str, Any], axis: int) -> int:
    """The extent of the first tensor argument at ``axis`` (1 without one, or without that axis)."""
    first = _first_tensor(args, kwargs)
    return int(first.shape[axis]) if first is not None and -first.dim() <= axis < first.dim() else 1


def _empty_input(args: tuple[Any, ...], kwargs: Mapping[str, Any], batch_axis: int, sequence_axis: int) -> bool:
    """Whether the first tensor argument has a batch or sequence axis of extent 0."""
    return _axis_extent(args, kwargs, batch_axis) == 0 or _axis_extent(args, kwargs, sequence_axis) == 0


def _request_for(args: tuple[Any, ...], kwargs: Mapping[str, Any], batch_axis: int,
                 sequence_axis: int) -> CaptureRequest:
    """One prefill of the first tensor argument: its batch and sequence extents (1 where it
    has no such axis)."""
    return CaptureRequest(max(_axis_extent(args, kwargs, batch_axis), 1),
                          max(_axis_extent(args, kwargs, sequence_axis), 1), 1)


def _version_of(tensor: torch.Tensor) -> int:
    """A tensor's version counter, which every in-place write moves (an inference tensor has
    none: -1)."""
    try:
        return int(tensor._version)
    except RuntimeError:
        return -1


def _written_in_place(model: nn.Module, args: tuple[Any, ...],
                      kwargs: Mapping[str, Any]) -> list[tuple[str, torch.Tensor, int]]:
    """The tensors a discovery forward shares with the captured one, named, with their versions
    now: the buffers of the modules in training mode (a norm's running statistics, a spectral
    norm's power iteration; in eval mode a buffer written in place is a cache slot written again
    with the same values, warned of at every block for nothing), and the tensor arguments (those
    passed as they are, in plain tuples too: every other argument the discovery gets a copy of).
    A tensor made under ``torch.inference_mode`` has no version counter and is not seen."""
    watched = []
    for prefix, module in model.named_modules():
        if module.training:
            for name, buffer in module.named_buffers(recurse=False):
                path = f"{prefix}.{name}" if prefix else name
                watched.append((f"buffer {path!r}", buffer, _version_of(buffer)))

    def add(name: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            watched.append((name, value, _version_of(value)))
        elif type(value) is tuple:
            for i, item in enumerate(value):
                add(f"{name}[{i}]", item)
    for i, value in enumerate(args):
        add(f"argument {i}", value)
    for key, value in kwargs.items():
        add(f"argument {key!r}", value)
    return watched


def _warn_at_caller(message: str) -> None:
    """A UserWarning attributed to the first frame outside torch and lifecore: the forward call
    or the block the user wrote, whatever depth of hooks it comes from."""
    internal = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.abspath(__file__)) + os.sep)
    frame: Optional[types.FrameType] = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(internal):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level + 1)


def _eager(hook: Any) -> Any:
    """``hook`` as torch.compile runs it: as it is, outside the graph it traces (a capture
    block's hooks build a session and attach it, which a trace cannot hold). For the hooks run
    once per forward only: the per-point hooks stay as cheap as they are. Wrapped only once
    torch's compiler is loaded (a compiled model made it so): a program that never compiles
    neither imports it (a second, at the first block) nor pays the wrapper at each forward."""
    if "torch._dynamo" not in sys.modules:
        return hook
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    return disable(hook) if disable is not None else hook


# Values a forward cannot change: passed to a discovery forward as they are.
_UNCHANGING = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size,
               torch.memory_format, torch.layout)


def _unchanging(value: Any) -> bool:
    """Whether a forward cannot change ``value``: a tensor (passed as is: a forward that wrote
    into its input in place would be unusual), a plain value, or a tuple of such."""
    if isinstance(value, (torch.Tensor, *_UNCHANGING)):
        return True
    return type(value) is tuple and all(_unchanging(item) for item in value)


def _for_discovery(call: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments a block's discovery forward runs on: each one a forward could change (a
    KV cache object, a list) deep-copied, so the captured forward gets them as the caller
    passed them; one that cannot be copied is passed as is, with a warning."""
    memo: dict[int, Any] = {}  # one memo for all: an object passed twice is one copy, passed twice

    def copied(name: str, value: Any) -> Any:
        if _unchanging(value):
            return value
        try:
            return copy.deepcopy(value, memo)
        except Exception as error:  # noqa: BLE001 - any failure to copy: warned, the value passed
            _warn_at_caller(f"{call}: argument {name} ({type(value).__name__}) could not be copied for the "
                            f"discovery forward ({type(error).__name__}: {error}), so both forwards get it: a forward "
                            f"that changes it (a cache appended to) changes it twice; pass discovery=lifecore.torch."
                            f"discover(...) made beforehand")
            return value
    return (tuple(copied(f"{i}", value) for i, value in enumerate(args)),
            {key: copied(repr(key), value) for key, value in kwargs.items()})




@contextlib.contextmanager
def _host_random_states_kept() -> Iterator[None]:
    """Puts back, on leaving, the process's other random states a forward may draw from:
    Python's ``random`` and NumPy's global generator (torch's is ``fork_rng``'s)."""
    python_state = random.getstate()
    numpy = sys.modules.get("numpy")  # drawn from only where the program already imported it
    numpy_state = numpy.random.get_state() if numpy is not None else None
    try:
        yield
    finally:
        random.setstate(python_state)
        if numpy is not None:
            numpy.random.set_state(numpy_state)


class _OpenBlocks:
    """The thread whose :func:`capture` blocks are open on each model, and which blocks. A block
    on a model another thread's block holds is refused before it places a hook: its hooks
    would run in that thread's forward (refusing it), and placing them races that forward's
    walk over the model's hook tables. Each change is one assignment under the lock, and
    entering or leaving twice changes nothing: a block's exit interrupted anywhere is finished
    by running it again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # id(model) -> (thread, its open blocks); a block keeps its model
        self._held: dict[int, tuple[int, tuple["ModelCapture", ...]]] = {}

    def enter(self, model: nn.Module, block: "ModelCapture", call: str) -> None:
        me = threading.get_ident()
        with self._lock:
            thread, blocks = self._held.get(id(model), (me, ()))
            if thread != me:
                raise CaptureSessionError(
                    f"{call}: a capture block of thread {thread} is open on this {type(model).__name__}: while it "
                    f"is, the model is that thread's (its hooks would refuse this thread's forward). Nothing was "
                    f"placed; open the block once that one closes")
            if not any(b is block for b in blocks):
                self._held[id(model)] = (me, blocks + (block,))

    def leave(self, model: nn.Module, block: "ModelCapture") -> None:
        with self._lock:
            held = self._held.get(id(model))
            if held is None or not any(b is block for b in held[1]):
                return
            rest = tuple(b for b in held[1] if b is not block)
            if rest:
                self._held[id(model)] = (held[0], rest)
            else:
                del self._held[id(model)]


_OPEN_BLOCKS = _OpenBlocks()


class ModelCapture:
    """A :func:`capture` in progress: a context manager whose ``with`` value is its
    :class:`CapturedModules` (``records``).

    At the first forward through the model inside the block, a forward pre-hook builds the
    session from that forward's inputs: the discovery (one extra forward under
    ``torch.no_grad()`` unless ``discovery`` was given), the plan admitted for one prefill of
    their batch and sequence, and a :class:`CaptureSession` attached to the selected modules;
    the forward then runs as one step, drained into ``records`` when it returns. A second
    forward through the model in the same block raises :class:`CaptureSessionError` before
    it runs (open another block, or use :func:`attach` for steps of a generation), as does a
    hooked module called by itself after the forward; a forward that autograd runs again in
    backward (activation checkpointing) is the captured one, and is not observed again.
    Blocks may nest (on one model, or on a module inside another block's model): each captures
    the one real forward, and no block observes another's discovery forward, nor does a
    session attached to the model (:func:`attach`): lifecore's hooks stand aside while a
    discovery's forward runs (so does :func:`discover`'s own forward).
    Leaving the block removes every hook and drains a step a failed forward left. The
    discovery's forward is otherwise a forward like any other (hooks of your own on the model
    see it too), with the random states (torch's, Python's ``random``, NumPy's global
    generator) put back after it so that the captured forward draws what a
    forward without the block would, on deep copies of the arguments a forward
    could change (any but tensors and plain values: a KV cache object the caller or
    ``generate()`` passes, say), so the captured forward gets them as they were passed: give
    ``discovery`` where running the model once more (or the copies) costs too much or changes
    the model's state or a tensor argument in place (the block warns, after the discovery
    forward, naming each buffer or argument it wrote). A block that closes with no forward
    having reached its hooks warns that nothing was captured."""

    records: CapturedModules
    """The records the ``with`` block gives: filled when the forward through the model returns."""

    def __init__(self, model: nn.Module, paths: Union[str, Iterable[str]],
                 transforms: Union[TransformSpec, Sequence[TransformSpec]], *, budget_bytes: Optional[int],
                 on_limit: Union[str, OnLimit], backend: Any, discovery: Optional[CaptureDiscovery],
                 output_index: OutputIndex, batch_axis: int, sequence_axis: int,
                 logits: Optional[Union[str, Iterable[str]]] = None, call: str = "capture"):
        _require_module(model, call)
        batch_axis, sequence_axis = _check_axes(call, batch_axis, sequence_axis)
        output_index = _check_output_index(output_index, call)
        if discovery is not None and not isinstance(discovery, CaptureDiscovery):
            raise LifecoreTypeError(f"{call}: argument 'discovery' must be a CaptureDiscovery or None, "
                                    f"got {type(discovery).__name__}")
        if (discovery is not None and _DEFAULT_IDENTITY.fullmatch(discovery.artifact_identity)
                and discovery.artifact_identity != artifact_identity(model)):
            _warn_at_caller(f"{call}: the discovery's artifact_identity is not this {type(model).__name__}'s: it was "
                            f"made for another model (or one changed since, or with identity=); a point whose shape "
                            f"differs stops the forward part way, with the modules before it run")
        modules = [name for name, _ in model.named_modules() if name]
        self._model, self._call, self._model_paths = model, call, set(modules)
        self._calls: dict[str, int] = {}
        self._why_none: dict[str, str] = {}  # what the block's own discovery saw where no tensor was
        self._called_elsewhere: set[str] = set()  # modules its discovery saw called on other threads only
        self._matched = _patterns(paths, modules, model, call)
        # The bins a histogram may have: what the given discovery allows, else what the block's
        # own discovery (made with the default capabilities) will.
        capabilities = discovery.capabilities if discovery is not None else BackendCapabilities()
        self._transforms = _transforms(transforms, call, capabilities.max_histogram_bins)
        budget = _budget(budget_bytes, call)
        self._limits = CaptureLimits(per_step=CaptureUsage(_UNLIMITED, budget, _UNLIMITED, _UNLIMITED),
                                     cumulative=CaptureUsage(_UNLIMITED, budget, _UNLIMITED, _UNLIMITED),
                                     on_limit=_on_limit(on_limit, call))
        self._backend = backend if backend is not None else TorchBackend()
        require_backend(self._backend, call)  # before any hook, not at the forward
        self._discovery, self._output_index = discovery, output_index
        if logits is None:  # top candidates are admitted on logits only: asking for them says these are
            top_k = any(t.kind == TransformKind.TOP_CANDIDATES for _, t in self._transforms)
            logits = [path for _, hits, _ in self._matched.values() for path in hits] if top_k else []
        self._logits = _logit_paths(logits, model, call, or_none=True)
        self._batch_axis, self._sequence_axis = batch_axis, sequence_axis
        self._placed = PlacedHooks()  # the block's two hooks on the model
        self._attachment: Optional[TorchAttachment] = None
        self._attachments: list[TorchAttachment] = []  # every one made, each as soon as it exists
        self._session: Optional[CaptureSession] = None
        self._entered = False
        self._forward_seen = False  # a forward reached the block's pre-hook
        self._thread = 0  # the thread that entered the block
        self._passed_by_task = False  # a forward of another asyncio task reached its hooks
        self.records = CapturedModules()

    def _plan(self, discovery: CaptureDiscovery) -> CapturePlan:
        """A selection per (point, transform), for the matched modules the discovery saw
        return a tensor (a container or an unused module does not): a module called more than
        once gives a point per call, or the one call its pattern names. An exact path that
        did not, or a glob none of whose modules did, is an error. A complex tensor (the
        discovery's UNKNOWN dtype) no transform reduces: a glob passes over it, an exact path
        naming one is an error, before the forward's modules run."""
        present = {point.path for point in discovery.catalog}
        complex_points = {point.path for point in discovery.catalog if point.dtype == ValueDtype.UNKNOWN}
        modules = {name: i for i, (name, _) in enumerate(self._model.named_modules())}
        per_call: dict[str, list[str]] = {}  # module -> its call points, in call order
        for entry in discovery.catalog:
            where = split_call(entry.path, modules)
            if where is not None and where[1] is not None:
                per_call.setdefault(where[0], []).append(entry.path)
        selections = []
        chosen: dict[str, tuple[int, int]] = {}  # point -> (module order, call or -1): the plan's order
        for pattern, (base, hits, called) in self._matched.items():
            seen: list[tuple[str, tuple[int, int]]] = []
            for module in hits:
                if called is not None:
                    points = [p for p in [call_path(module, called)] if p in present]
                else:
                    points = [module] if module in present else per_call.get(module, [])
                seen += [(p, (modules[module], -1 if p == module else int(p.rpartition("#")[2]))) for p in points]
            if base in hits and not seen:
                if called is not None:
                    calls = ", ".join(per_call.get(base, [])) or ("only " + base if base in present else "none")
                    raise InvalidArgumentError(f"{self._call}: {pattern!r}: module {base!r} has no call {called} "
                                               f"that returned a tensor in the forward (its points: {calls}; at "
                                               f"output_index {self._output_index})")
                if base in self._why_none:
                    raise InvalidArgumentError(f"{self._call}: module {pattern!r} returned no tensor at its "
                                               f"output_index: the {self._why_none[base]}")
                if base in self._called_elsewhere:
                    raise InvalidArgumentError(
                        f"{self._call}: module {pattern!r} was called on another thread than the block's (a worker "
                        f"the forward hands it to, say): a capture block observes the calls made on the thread "
                        f"that entered it. Call the module on that thread, or attach() a session, which observes "
                        f"every thread")
                compiled = f"; {_COMPILED_SKIPS_HOOKS}" if "torch._dynamo" in sys.modules else ""
                raise InvalidArgumentError(f"{self._call}: module {pattern!r} returned no tensor in the forward "
                                           f"(at output_index {self._output_index}), or was not called{compiled}")
            if not seen:
                scripted = sum(isinstance(self._model.get_submodule(hit), torch.jit.ScriptModule) for hit in hits)
                why = f"; {scripted} of them are TorchScript modules, which take no forward hooks" if scripted else ""
                if not scripted and "torch._dynamo" in sys.modules:
                    why = f"; {_COMPILED_SKIPS_HOOKS}"  # as a named module's refusal says
                raise InvalidArgumentError(f"{self._call}: {pattern!r} matches {hits[:6]} but none of them returned "
                                           f"a tensor in the forward (at output_index {self._output_index}){why}")
            complex_seen = [p for p, _ in seen if p in complex_points]
            if complex_seen and (hits == [base] or len(complex_seen) == len(seen)):
                raise InvalidArgumentError(
                    f"{self._call}: {pattern!r}: {', '.join(map(repr, complex_seen[:4]))} returned complex "
                    f"values, which no transform keeps or reduces (nothing was captured); capture a module that "
                    f"returns torch.view_as_real of them")
            seen = [(p, order) for p, order in seen if p not in complex_points]
            for point, order in seen:
                chosen.setdefault(point, order)
        names = [name if [n for n, _ in self._transforms].count(name) == 1 else f"{name}{i}"
                 for i, (name, _) in enumerate(self._transforms)]
        for path in sorted(chosen, key=chosen.__getitem__):
            for name, (_, transform) in zip(names, self._transforms):
                selections.append(CaptureSelection(f"{path}:{name}", path, transform))
        return CapturePlan(selections, self._limits)

    def _begin(self, module: nn.Module, args: tuple[Any, ...], kwargs: Optional[dict[str, Any]] = None) -> None:
        # torch registers a with_kwargs pre-hook as a plain one first: a forward on another thread
        # in that window calls it without kwargs, and must still be refused below.
        kwargs = {} if kwargs is None else kwargs
        if passed_over():
            return  # a discovery's own forward (this block's or another's), or a recompute in backward
        if threading.get_ident() == self._thread and not self._serves_here():
            return  # another asyncio task's forward: the block is not open there
        self._forward_seen = True
        if threading.get_ident() != self._thread:
            # The hooks live on the model, for every thread: another thread's forward would be
            # captured as this block's, or run its module hooks into this block's session.
            raise CaptureSessionError(
                f"{self._call}: a forward through {type(self._model).__name__} on another thread, while a capture "
                f"block of thread {self._thread} is open on it: the block's hooks are the model's, so only the "
                f"thread that entered the block may run the model until the block closes (nothing was captured, "
                f"and the block is unchanged)")
        if self._session is not None:
            raise CaptureSessionError(f"{self._call}: the block already captured one forward through "
                                      f"{type(self._model).__name__}; open another block for the next (blocks "
                                      f"open at once on one thread share each forward, as nested blocks do: "
                                      f"blocks of generators interleaved on one thread capture each other's)")
        # An empty batch or sequence has nothing a discovery made on real inputs can admit (a
        # request is of one row and one position at least): its own forward, of nothing, is
        # discovered as without discovery=.
        given = self._discovery if not _empty_input(args, kwargs, self._batch_axis, self._sequence_axis) else None
        discovery = given if given is not None else self._discover(args, kwargs)
        request = _request_for(args, kwargs, self._batch_axis, self._sequence_axis)
        plan = self._plan(discovery)
        # A given discovery too: one made on a model that builds its own batch has a fixed
        # extent there, not the batch, which admission would take.
        self._refuse_batched_logits(plan, discovery)
        session = CaptureSession(plan.admit(discovery, request))
        # The calls the discovery saw are the calls this forward must make: counted exactly.
        self._calls = {path: n for path, n in call_counts(discovery).items() if path in self._model_paths}
        self._attachment = _attach(session, self._model, self._backend, None, self._output_index, self._calls,
                                   keep=self._attachments, thread=self._thread, serves=self._serving(),
                                   discovered_calls=True)
        session.begin_step(CapturePhase.PREFILL, 0)
        self._session = session

    def _refuse_batched_logits(self, plan: CapturePlan, discovery: CaptureDiscovery) -> None:
        """Top candidates rank the last row of one sequence's logits. The request's batch is the
        first tensor argument's, which logits of a batch the model builds itself (guidance's
        cond and uncond rows), or of inputs passed inside a list, do not show: the block's own
        discovery, whose axes are this forward's extents, is read at ``batch_axis`` instead (a
        given one's fixed extent there too: its batch axis is the symbolic one)."""
        points = {point.path: point for point in discovery.catalog}
        for selection in plan.selections:
            point = points.get(selection.path)
            if selection.transform.kind != TransformKind.TOP_CANDIDATES or point is None:
                continue
            axes = point.axes
            at = self._batch_axis + len(axes) if self._batch_axis < 0 else self._batch_axis
            if 0 <= at < len(axes) - 1 and isinstance(axes[at].size, int) and axes[at].size != 1:
                raise AdmissionError(f"{self._call}: top candidates of {selection.id!r} need unsliced logits with "
                                     f"batch 1: point {selection.path!r} has extent {axes[at].size} at batch_axis "
                                     f"{self._batch_axis} (its shape "
                                     f"{[a.size for a in axes]}): the last row ranked would be the last sequence's"
                                     + ("; if that axis is the sequence (logits with no batch axis), pass "
                                        "discovery=lifecore.torch.discover(model, inputs, logits=[...]), which "
                                        "names it where the inputs have a batch axis of 1 (inputs with none "
                                        "need one: inputs[None])" if len(axes) == 2 else ""))

    def _discover(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CaptureDiscovery:
        """The discovery's forward. Every hook lifecore placed on the thread's models (other
        blocks', an ``attach``'s) stands aside while it runs (``discovery_forward``)."""
        args, kwargs = _for_discovery(self._call, args, kwargs)
        # What it writes in place is seen by its tensors' version counters: the model's buffers
        # (a norm's running statistics, a spectral norm's power iteration) and the tensors passed
        # as they are (a cache the forward advances).
        watched = _written_in_place(self._model, args, kwargs)
        # The random state is put back after it: the captured forward draws (noise, sampling,
        # a dropout of the model's own) what a forward without the block would.
        cuda = [torch.cuda.current_device()] if torch.cuda.is_available() and cast(Any, torch.cuda).is_initialized() else []
        with torch.random.fork_rng(devices=cuda), _host_random_states_kept():
            # Admitted for this one forward: every axis is the extent it has in it.
            discovery = _discover(self._model, args, kwargs, batch_axis=self._batch_axis,
                                  sequence_axis=self._sequence_axis, logits=self._logits, identity=None,
                                  capabilities=None, output_index=self._output_index, symbolic=False,
                                  why_none=self._why_none, called_elsewhere=self._called_elsewhere)
        written = [name for name, tensor, version in watched if _version_of(tensor) != version]
        if written:
            shown = ", ".join(written[:4]) + (f" and {len(written) - 4} more" if len(written) > 4 else "")
            _warn_at_caller(
                f"{self._call}: the discovery forward lifecore runs before the captured one wrote in place into "
                f"{shown}, so the captured forward runs on what it wrote (a running statistic or a length "
                f"advanced twice; a cache slot written again with the same values is harmless); pass "
                f"discovery=lifecore.torch.discover(...) made beforehand, or call model.eval()")
        return discovery

    def _after(self, module: nn.Module, args: Any, output: Any) -> None:
        # A discovery's forward is no capture, nor is a forward another thread began before the
        # block opened (its root pre-hook ran before the block's, which would have refused it).
        if not passed_over() and threading.get_ident() == self._thread and self._serves_here():
            self._drain()

    def _drain(self) -> None:
        session = self._session
        if session is not None and session.step_pending:
            step = session.take_step()
            if step is not None:
                self.records._fill(session, step)

    def __enter__(self) -> CapturedModules:
        if self._entered:
            raise CaptureSessionError(f"{self._call}: a capture is entered once; call capture() again")
        self._entered = True
        self._thread = threading.get_ident()
        try:
            _OPEN_BLOCKS.enter(self._model, self, self._call)
            OPEN_BLOCKS_HERE.set(OPEN_BLOCKS_HERE.get() + (self,))
            self._placed.forward_pre(self._model, _eager(self._begin), with_kwargs=True)
            self._placed.forward(self._model, _eager(self._after))
        except BaseException:
            finish_despite_interrupts(self._release)  # the with never starts, so no __exit__ would
            raise
        return self.records

    def _serves_here(self) -> bool:
        """Whether a forward in the running context is this block's: one in a context it is open
        in (the task that entered it, and tasks made inside it). Another asyncio task's forward
        on the same thread is passed by, whether or not a block of its own is open (taking it
        gave one task's block another's forward, and refused the block's own)."""
        if self in OPEN_BLOCKS_HERE.get():
            return True
        self._passed_by_task = True
        return False

    def _serving(self) -> Callable[[], bool]:
        """_serves_here for the block's attachment, holding the block weakly (no cycle through it)."""
        block = weakref.ref(self)

        def serves() -> bool:
            alive = block()
            return alive is not None and alive._serves_here()
        return serves

    def _close_here(self) -> None:
        """Takes the block out of the running context's open blocks."""
        here = OPEN_BLOCKS_HERE.get()
        if self in here:
            OPEN_BLOCKS_HERE.set(tuple(block for block in here if block is not self))

    def _release(self) -> None:
        """Every hook off the model, the model let go and the block closed; each step is safe
        to repeat (finish_despite_interrupts runs it again after a Ctrl-C inside it)."""
        self._placed.remove_all()
        _OPEN_BLOCKS.leave(self._model, self)
        self._close_here()
        for attachment in self._attachments:
            attachment.detach()
        self._attachments.clear()
        self._attachment = None

    # Leaving the block releases it to the end whatever Ctrl-C lands (in C: exit_releasing),
    # then drains the step into the records and warns.
    __exit__ = exit_releasing

    def _exit_after_release(self, *exc: Any) -> None:
        self._drain()
        if exc[0] is None and not self._forward_seen and self._passed_by_task:
            _warn_at_caller(
                f"{self._call}: the block closed without a forward of its own: a forward through "
                f"{type(self._model).__name__} ran in another asyncio task (a context the block was not entered "
                f"in, such as a worker task made before it) and was passed by. A block captures the forwards of "
                f"the task that entered it and of tasks made inside it; run the forward there, or attach() a "
                f"session for a model another task runs")
        elif exc[0] is None and not self._forward_seen:
            _warn_at_caller(
                f"{self._call}: the block closed without a forward through {type(self._model).__name__} reaching "
                f"its hooks, so nothing was captured: {_COMPILED_SKIPS_HOOKS}, and a model class that overrides "
                f"__call__ bypasses forward hooks")
        elif exc[0] is None and len(self.records) and all(
                record.outcome == CaptureOutcome.MISSING for record in self.records.values()):
            # The root's hooks ran but no point's: a compiled forward that calls the root's
            # hooks (a module of its own class, not a Sequential) and skips those placed inside.
            _warn_at_caller(
                f"{self._call}: the forward through {type(self._model).__name__} reached none of the "
                f"{len(self.records)} selected points' hooks, so nothing was captured (every record is MISSING): "
                f"the forward did not call them on this thread (a block observes the calls made on the thread "
                f"that entered it), or {_COMPILED_SKIPS_HOOKS}")


def capture(model: nn.Module, paths: Union[str, Iterable[str]],
            transforms: Union[TransformSpec, Sequence[TransformSpec]] = "summary", *,
            budget_bytes: Optional[int] = None, on_limit: Union[str, OnLimit] = "skip", backend: Any = None,
            discovery: Optional[CaptureDiscovery] = None, logits: Optional[Union[str, Iterable[str]]] = None,
            output_index: OutputIndex = 0, batch_axis: int = 0, sequence_axis: int = 1) -> ModelCapture:
    """Captures module outputs of the next forward through ``model``::

        with lifecore.torch.capture(model, ["blocks.*.mlp"], "summary", budget_bytes=1 << 20) as records:
            model(tokens)
        records["blocks.0.mlp"].summary   # Summary(count=..., min=..., max=..., mean=..., std=...)

    ``paths`` are module paths or ``fnmatch`` globs over ``model.named_modules()`` (``*``
    crosses dots: ``"blocks.*"`` also matches ``"blocks.0.mlp.fc"``; the root, named ``""``
    there, is not a point: its output is the forward's own result; a path that is a module's
    names that module, brackets and all, before it is read as a glob); a glob keeps the modules
    that return a tensor. A module the forward calls more than once is captured at every call,
    its records keyed ``"<path>#<k>"`` for the k-th (see :func:`discover`); ``"<path>#<k>"``
    as a pattern captures that one call, and a forward calling it more or fewer times than the
    block's discovery saw raises ``CaptureSessionError``. ``transforms`` (one or a list,
    applied to every module): ``"summary"``, ``"tensor"`` (the whole output, host copy in its
    dtype), ``"top_k"`` (the
    :data:`DEFAULT_TOP_K` best of the last row), ``"histogram"`` (:data:`DEFAULT_HISTOGRAM_EDGES`),
    ``"preview"`` (:data:`DEFAULT_PREVIEW` leading elements), or a :class:`CaptureTransform`.

    ``budget_bytes`` bounds the bytes the records keep (the session ledger's retained bytes,
    per step and in all; None: no bound); a record over it is ``SKIPPED`` with skip reason
    ``"limit"`` (``on_limit="skip"``, the default); under ``"fail"`` a plan that cannot fit is
    refused at the forward with ``AdmissionError``, and a capture over what is left fails the
    forward with ``BudgetExceededError``. Nothing over the budget is materialized. ``backend``
    defaults to :class:`TorchBackend`; ``discovery`` (from :func:`discover`) saves the
    discovery forward, which otherwise runs the model once more on the same inputs before
    the captured forward (on deep copies of the arguments other than tensors and plain values,
    such as a cache object, so the captured forward gets them as they were passed; pass it for
    a forward that writes in place into the model's buffers or a tensor argument, a norm in
    training mode, a length tensor it advances (without ``discovery`` the block warns after the
    discovery forward, naming each buffer of a module in training mode and each tensor argument
    it wrote; an inference-mode tensor has no version counter to show it), or where the copies
    cost too much; a forward of an empty
    batch is discovered on its own forward all the same); ``logits`` and ``output_index`` are
    :func:`discover`'s (``logits=None``:
    the matched modules when a ``"top_k"`` is asked, since top candidates are admitted on logits
    only, of batch 1); ``batch_axis`` and ``sequence_axis`` are the first tensor input's axes
    the request's batch and prompt length are read from. The block's own discovery takes every
    output axis at the extent this forward gives it, so outputs of any layout (a convolution's
    [batch, channels, height, width]) are captured. See :class:`ModelCapture` for when the
    session is built. While the block is open the model is its thread's: the hooks are the
    model's, so a forward through it on another thread raises ``CaptureSessionError`` before
    its first module runs, and the block is unchanged; a block on the same model entered on
    another thread raises ``CaptureSessionError`` before it places a hook (blocks may nest on
    one thread). A block serves the asyncio task (the context) it was entered in and the tasks
    made inside it: another task's forward on the same thread passes it by (a worker task made
    before the block included: the block then warns that it captured nothing, naming it).
    Blocks that generators interleave on one thread share each forward, as nested blocks do (a
    generator has no context of its own).

    Raises ``LifecoreTypeError`` for arguments of the wrong type (``output_index``,
    ``backend``, ``batch_axis`` and ``sequence_axis`` included) and for a TorchScript module,
    the model or one a path names exactly (it takes no hooks), and ``InvalidArgumentError``
    for a pattern matching no module, an unknown transform name, a negative budget or an
    unknown ``on_limit`` (``LifecoreOverflowError`` for a budget past 64 bits), each before
    any hook is placed."""
    return ModelCapture(model, paths, transforms, budget_bytes=budget_bytes, on_limit=on_limit, backend=backend,
                        discovery=discovery, logits=logits, output_index=output_index, batch_axis=batch_axis,
                        sequence_axis=sequence_axis)


def run_with_capture(model: nn.Module, inputs: Any, paths: Union[str, Iterable[str]],
                     transforms: Union[TransformSpec, Sequence[TransformSpec]] = "summary", *,
                     budget_bytes: Optional[int] = None, on_limit: Union[str, OnLimit] = "skip",
                     backend: Any = None, discovery: Optional[CaptureDiscovery] = None,
                     logits: Optional[Union[str, Iterable[str]]] = None, output_index: OutputIndex = 0,
                     batch_axis: int = 0, sequence_axis: int = 1,
                     model_kwargs: Optional[Mapping[str, Any]] = None) -> tuple[Any, CapturedModules]:
    """Runs ``model(inputs)`` (a tuple is spread as positional arguments; ``model_kwargs``
    are passed as keywords) under :func:`capture` and returns ``(output, records)``::

        logits, records = run_with_capture(model, tokens, "head", "top_k")

    The arguments after ``inputs`` and the errors are :func:`capture`'s. The forward runs as
    the caller's grad mode has it (wrap the call in ``torch.no_grad()`` for inference)."""
    if model_kwargs is not None and not isinstance(model_kwargs, Mapping):
        raise LifecoreTypeError(f"run_with_capture: argument 'model_kwargs' must be a mapping or None, "
                                f"got {type(model_kwargs).__name__}")
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    captured = ModelCapture(model, paths, transforms, budget_bytes=budget_bytes, on_limit=on_limit,
                            backend=backend, discovery=discovery, logits=logits, output_index=output_index,
                            batch_axis=batch_axis, sequence_axis=sequence_axis, call="run_with_capture")
    with captured as records:
        output = model(*args, **dict(model_kwargs or {}))
    return output, records


# Last: what this module exports answers a call it cannot bind with LifecoreTypeError.
_python_guard.install(__name__)
