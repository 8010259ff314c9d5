"""The public API of lifecore found by introspection, and a small world of live, foreign and
destroyed objects to call it on (the bad-call test's receivers and arguments).

Only the world's factory is written by hand (how to reach a device, a stream, a coordinator,
a session, a capture session...); every class, method, property and module function is found
by walking the public modules, and every object a call returns joins the world, so what later
issues add is called too."""

from __future__ import annotations

import ast
import enum
import inspect
import math
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

import lifecore
from lifecore import capture, errors, kernels, sequence
from lifecore.capture import (CapturePhase, CapturePlan, CaptureRequest, CaptureSelection, CaptureSession,
                              CaptureTransform, CountingBackend, InterventionPlan, MockTensor, NumpyBackend,
                              unlimited)
from lifecore.capture import interventions as iv
from lifecore.sequence import AdmissionCoordinator, AdmissionDeferred, Admitted
from lifecore.testing.capture_session import ROUTER, sample_discovery

from backend_roles import EMULATED

PUBLIC_MODULES = (lifecore, sequence, capture, kernels, errors)
PAGE = 4096

# Areas by the module a name is public in: the test reports and marks failures per area.
AREA_OF_MODULE = {"lifecore": "runtime", "lifecore.kernels": "runtime", "lifecore.errors": "runtime",
                  "lifecore.sequence": "sequence", "lifecore.capture": "capture"}


# ---- signatures -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Parameter:
    name: str
    annotation: Optional[ast.expr]
    keyword_only: bool
    optional: bool


_PLACEHOLDER = re.compile(r"\\\d+")


def _ast_of(text: Any) -> Optional[ast.expr]:
    if text is inspect.Parameter.empty or text is None:
        return None
    try:
        return ast.parse(text if isinstance(text, str) else getattr(text, "__name__", str(text)), mode="eval").body
    except SyntaxError:
        return None


def signatures(func: Any) -> list[list[Parameter]]:
    """The parameters of each overload of ``func`` (self / cls excluded)."""
    out = []
    for entry in getattr(func, "__nb_signature__", ()) or ():
        node = ast.parse(_PLACEHOLDER.sub("None", entry[0]) + ": pass").body[0]
        a = node.args
        positional = a.posonlyargs + a.args
        first_default = len(positional) - len(a.defaults)
        params = [Parameter(p.arg, p.annotation, False, i >= first_default) for i, p in enumerate(positional)]
        params += [Parameter(p.arg, p.annotation, True, d is not None) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
        out.append([p for p in params if p.name not in ("self", "cls")])
    if out:
        return out
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return [[]]
    params = []
    for p in sig.parameters.values():
        if p.name in ("self", "cls") or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        params.append(Parameter(p.name, _ast_of(p.annotation), p.kind == p.KEYWORD_ONLY, p.default is not p.empty))
    return [params]


# ---- the API ----------------------------------------------------------------------------------
@dataclass
class Entry:
    """One thing to call: a method or property of a class, a constructor, or a function."""

    owner: str  # "Stream", "sequence" (a module function), ...
    name: str
    area: str
    kind: str  # "method", "property", "static", "constructor", "function"
    target: Any  # the class for methods/properties/constructors, the callable otherwise
    overloads: list[list[Parameter]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.owner}.{self.name}"


def _is_bound_function(value: Any) -> bool:
    return type(value).__name__ in ("nb_func", "nb_method") or inspect.isfunction(value)


def public_classes() -> dict[type, str]:
    """Every public class of the public modules (enums and exception classes excluded: their
    constructors follow Python's enum and exception protocols), with its area."""
    found: dict[type, str] = {}
    for module in PUBLIC_MODULES:
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            if (isinstance(value, type) and not issubclass(value, (enum.Enum, BaseException))
                    and value not in found):
                found[value] = AREA_OF_MODULE[module.__name__]
    return found


def public_api() -> list[Entry]:
    entries: list[Entry] = []
    for cls, area in public_classes().items():
        owner = cls.__name__
        if "__init__" in cls.__dict__ or "__new__" in cls.__dict__ or cls.__init__ is not object.__init__:
            init = cls.__dict__.get("__init__", cls.__init__)
            entries.append(Entry(owner, "__init__", area, "constructor", cls, signatures(init)))
        for name in dir(cls):
            if name.startswith("_"):
                continue
            raw = inspect.getattr_static(cls, name)
            if isinstance(raw, property):
                entries.append(Entry(owner, name, area, "property", cls))
            elif isinstance(raw, (staticmethod, classmethod)) or type(raw).__name__ == "nb_func":
                entries.append(Entry(owner, name, area, "static", getattr(cls, name), signatures(getattr(cls, name))))
            elif _is_bound_function(raw):
                entries.append(Entry(owner, name, area, "method", cls, signatures(raw)))
    for module in PUBLIC_MODULES:
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            if not isinstance(value, type) and callable(value) and _is_bound_function(value):
                entries.append(Entry(module.__name__, name, AREA_OF_MODULE[module.__name__], "function", value,
                                     signatures(value)))
    return entries


# ---- the world --------------------------------------------------------------------------------
class World:
    """Live objects of every reachable kind, plus foreign ones (another device / coordinator)
    and destroyed ones (closed, freed, destroyed). ``observe()`` is everything a refused call
    must leave unchanged."""

    def __init__(self, graphs: str) -> None:
        self.objects: list[Any] = []
        self.devices: list[lifecore.Device] = []
        self.streams: list[lifecore.Stream] = []
        self.coordinators: list[AdmissionCoordinator] = []
        self.capture_sessions: list[CaptureSession] = []
        self._build(graphs)

    def add(self, value: Any) -> None:
        """Adds a returned value (and the lifecore objects in a returned list) to the world."""
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if type(v).__module__.startswith("lifecore") and not isinstance(v, (enum.Enum, BaseException)):
                if not any(v is o for o in self.objects):
                    self.objects.append(v)
                    if isinstance(v, lifecore.Device):
                        self.devices.append(v)
                    elif isinstance(v, lifecore.Stream):
                        self.streams.append(v)
                    elif isinstance(v, AdmissionCoordinator):
                        self.coordinators.append(v)
                    elif isinstance(v, CaptureSession):
                        self.capture_sessions.append(v)

    def _runtime(self, graphs: str, closed: bool) -> None:
        dev = lifecore.Device(EMULATED, graphs=graphs)
        s = dev.stream()
        b, c = s.alloc(256), s.alloc(256)
        g = s.capture(lambda st: st.fill(b, 1))
        dead_graph = s.capture(lambda st: st.copy(c, b))
        dead_graph.destroy()
        freed = s.alloc(64)
        freed.free()
        s.sync()  # its slice is back in the pool now, not at whichever later call collects the stream's work
        state = lifecore.StreamCaptureState()  # the state machine alone, through one window
        state.prepare()
        state.begin()
        ended = state.end()
        views = (b.view("float32", (8, 8)),)  # a typed view (a freed buffer has none: view() refuses it)
        for v in (dev, s, b, c, g, dead_graph, freed, s.profile(), s.capture_state, kernels.scale_f32, state, ended,
                  *views):
            self.add(v)
        if closed:
            dev.close()

    def _sequence(self, device: Optional[lifecore.Device], closed: bool) -> None:
        coord = AdmissionCoordinator(device, domains={"kv": 16 * PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                     max_active_sequences=3)
        self.add(coord)
        first = coord.admit("r1", 20, 64)
        assert isinstance(first, Admitted)
        session = first.resources.open_session()
        session.try_ensure_backing_covers(24)
        frame = session.acquire_frame()
        flight = session.prepare_flight(7)
        unopened = coord.admit("r2", 16, 16)
        table = coord.decode_table(2, 4, pad=-1)
        table.update([session])
        for v in (first, first.resources, session, frame, flight, unopened, unopened.resources,
                  session.backing, coord.capacity(), sequence.ActiveSequenceSlots, sequence.Domain("kv"), table):
            self.add(v)
        self.add(session.try_ensure_backing_covers(28))
        self.add(coord.admit("too-big", 16 * 16 * 16, 16 * 16 * 16))  # rejected: above the domain maximum
        completed = coord.admit("done", 16, 16)
        assert isinstance(completed, Admitted)
        self.add(completed.resources.open_session().try_abort_if_quiescent())
        cancelled = unopened.resources.open_session()
        self.add(cancelled.request_cancel())
        for i in range(4):  # the slot ceiling (3) defers the next admission
            decision = coord.admit(f"d{i}", 16, 16)
            self.add(decision)
            if isinstance(decision, AdmissionDeferred):
                self.add(coord.register_waiter(decision))
                break
        if closed:
            coord.close()

    def _capture(self) -> None:
        discovery = sample_discovery()
        self.add(discovery)
        selections = [CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()),
                      CaptureSelection("p", "logits", CaptureTransform.preview(4))]
        plan = CapturePlan(selections, unlimited())
        admitted = plan.admit(discovery, CaptureRequest(1, 4, 3))
        fresh = CaptureSession(admitted)
        self.add(fresh.observer("blocks.0.mlp", NumpyBackend()))
        stepping = CaptureSession(admitted)
        stepping.begin_step(CapturePhase.PREFILL, 0)
        stepping.observe(NumpyBackend(), "blocks.0.mlp", np.zeros((1, 4, 8), np.float32))
        with_interventions = CaptureSession(admitted)
        ops = InterventionPlan([iv.scale("twice", "blocks.0.mlp", 2.0)])
        admitted_ops = ops.admit(discovery, with_interventions)
        with_interventions.enable_interventions(admitted_ops, NumpyBackend())
        done = CaptureSession(admitted)
        done.begin_step(CapturePhase.PREFILL, 0)
        recording = _RecordingBackend()
        done.observe(recording, "blocks.0.mlp", np.ones((1, 4, 8), np.float32))
        step = done.take_step()
        checkpoint = done.checkpoint(discovery)
        self.add(done.prepare_restore(checkpoint))
        routed = CaptureSession(admitted)
        routing_ops = InterventionPlan([iv.exclude_experts("x", ROUTER, [3], evidence=8),
                                        iv.scale("twice", "blocks.1.mlp", 2.0)])
        routed.enable_interventions(routing_ops.admit(discovery, routed), recording)
        routed.begin_step(CapturePhase.PREFILL, 0)
        self.add(routed.routing_control(ROUTER, 4))
        ids = np.array([[3, 1]] * 4, dtype=np.int64)
        weights = np.full((4, 2), 0.5, np.float32)
        routed.routing_applied(recording, ROUTER, (ids, weights), (ids, weights))
        routed.observe(recording, "blocks.1.mlp", np.ones((1, 4, 8), np.float32))  # the hook observes first
        routed.intervene(recording, "blocks.1.mlp", np.ones((1, 4, 8), np.float32))
        routed.finish_interventions()
        routed_step = routed.take_step()
        self.add(routed_step)
        for record in routed_step.interventions + routed_step.records:
            self.add(record)
        self.add(routed)
        self.add(recording.requests)
        for v in (plan, admitted, fresh, stepping, with_interventions, ops, admitted_ops, done, step, checkpoint,
                  unlimited(), CaptureRequest(1, 4, 3), selections[0], CaptureTransform.summary(),
                  discovery.catalog[0], discovery.capabilities, CountingBackend(), NumpyBackend(),
                  MockTensor((1, 4, 8)), capture.CaptureSlice("d", 0, 2)):
            self.add(v)
        for record in step.records:
            self.add(record)
            self.add(record.payload)

    def _build(self, graphs: str) -> None:
        self.add(lifecore.backends())
        self._runtime(graphs, closed=False)
        self._runtime("software" if graphs == "hardware" else "hardware", closed=False)  # foreign device
        self._runtime(graphs, closed=True)  # destroyed: a closed device's stream, buffers, graphs
        self._sequence(None, closed=False)
        self._sequence(self.devices[0], closed=False)
        self._sequence(None, closed=True)
        self._capture()
        self.harvest()

    def harvest(self, rounds: int = 2) -> None:
        """Adds what the world's objects' properties hold (snapshots, authorities, points...)."""
        for _ in range(rounds):
            for obj in list(self.objects):
                for name in dir(type(obj)):
                    if name.startswith("_") or not isinstance(inspect.getattr_static(type(obj), name), property):
                        continue
                    try:
                        self.add(getattr(obj, name))
                    except errors.LifecoreError:
                        pass

    def instances(self, cls: type) -> list[Any]:
        return [o for o in self.objects if type(o) is cls]

    def observe(self) -> list[Any]:
        """What a refused call must not change: every device's memory accounting, every
        stream's capture state, every coordinator's capacity, every capture session's usage,
        and whether each buffer, graph, profile, session, frame and flight is still alive."""
        out: list[Any] = []
        for d in self.devices:
            out.append(("device", d.closed, None if d.closed else sorted(d.memory_stats().items())))
        for s in self.streams:
            out.append(("stream", repr(s.capture_state)))
        for c in self.coordinators:
            if c.closed:
                out.append(("coordinator", "closed"))
                continue
            cap = c.capacity()
            out.append(("coordinator", cap.used_bytes, cap.active_sequences, cap.slots_epoch, cap.release_epoch,
                        [d.epoch for d in cap.domains], sorted(c.page_memory_stats().items())))
        for cs in self.capture_sessions:
            out.append(("capture", cs.cumulative_usage().as_tuple(), cs.step_usage().as_tuple(), cs.step_pending,
                        cs.next_prediction))
        # Lifecycles: a refused call frees, destroys, stops, closes or moves nothing.
        for o in self.objects:
            if isinstance(o, (lifecore.Buffer, lifecore.Graph)):
                out.append((type(o).__name__, o.alive))
            elif isinstance(o, lifecore.Profile):
                out.append(("Profile", o.stopped))
            elif isinstance(o, sequence.SequenceSession):
                out.append(("SequenceSession", o.phase, o.closed))
            elif isinstance(o, sequence.DecodeTable):
                out.append(("DecodeTable", o.table.tolist()))
            elif isinstance(o, (sequence.AdmittedSequenceResources, sequence.FrameHold, sequence.FlightHold)):
                out.append((type(o).__name__, getattr(o, "closed", None), getattr(o, "finalized", None),
                            getattr(o, "released", None)))
        return out

    def close(self) -> None:
        for d in self.devices:
            d.close()


class _RecordingBackend(NumpyBackend):
    """A NumpyBackend that keeps the requests it receives (for the world to add: it holds no
    reference to the world, so no cycle runs through a session)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Any] = []

    def transform(self, tensor: Any, request: Any) -> Any:
        self.requests.append(request)
        return super().transform(tensor, request)

    def intervene(self, tensor: Any, request: Any) -> Any:
        self.requests.append(request)
        return super().intervene(tensor, request)


# ---- values -----------------------------------------------------------------------------------
class _Opaque:
    """An object of no kind lifecore knows."""


class CallbackStop(Exception):
    """What a test callback raises once its budget is spent: a user's exception, which lifecore
    must pass through unchanged (and clean up after)."""


def budgeted_callback(budget: int = 64) -> Callable[..., None]:
    """A callback that does nothing ``budget`` times, then raises CallbackStop (so a call that
    repeats it 2**32 times, e.g. capture(fn, warmup=2**32), ends quickly)."""
    calls = [0]

    def callback(*args: Any, **kwargs: Any) -> None:
        calls[0] += 1
        if calls[0] > budget:
            raise CallbackStop(f"callback budget of {budget} calls spent")

    return callback


HUGE_AND_ODD: list[Any] = [-1, 0, 2**32, 2**63, 2**64, -(2**63) - 1, 1.5, math.nan, math.inf, -math.inf, True, False]
WRONG_KINDS: list[Any] = [None, "x", "", b"x", [], [None], [1], {}, {1: 4096}, {"kv": None}, (1, 2), _Opaque(),
                          [2**64], {"kv": 2**64}]


def bad_value(rng: random.Random, world: World) -> Any:
    """A wrong type, None, a negative / zero / huge / non-finite number, a bool, or an object
    of another kind (live, foreign or destroyed)."""
    pick = rng.random()
    if pick < 0.4:
        return rng.choice(HUGE_AND_ODD)
    if pick < 0.75:
        return rng.choice(WRONG_KINDS)
    return rng.choice(world.objects)


def plausible_value(rng: random.Random, world: World, annotation: Optional[ast.expr]) -> Any:
    """A value of the annotated type (an object of that class from the world when one exists)."""
    if annotation is None:
        return rng.choice(world.objects)
    if isinstance(annotation, ast.BinOp):
        return plausible_value(rng, world, rng.choice([annotation.left, annotation.right]))
    if isinstance(annotation, ast.Constant):
        return None
    if isinstance(annotation, ast.Subscript):
        outer = ast.unparse(annotation.value)
        inner = annotation.slice
        items = list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]
        if outer.endswith(("Sequence", "list", "Iterable")):
            return [plausible_value(rng, world, items[0]) for _ in range(rng.randint(0, 2))]
        if outer.endswith("tuple"):
            return tuple(plausible_value(rng, world, t) for t in items if not isinstance(t, ast.Constant))
        if outer.endswith(("Mapping", "dict")):
            return {plausible_value(rng, world, items[0]): plausible_value(rng, world, items[-1])}
        if outer.endswith("Callable"):
            return budgeted_callback()
        if outer.endswith("Optional"):
            return plausible_value(rng, world, items[0]) if rng.random() < 0.7 else None
        return rng.choice(world.objects)
    name = ast.unparse(annotation)
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "int":
        return rng.choice([0, 1, 2, 4, 16, 64, 4096])
    if leaf == "float":
        return rng.choice([0.0, 0.5, 1.0, 2.0])
    if leaf == "bool":
        return rng.random() < 0.5
    if leaf == "str":
        return rng.choice(["kv", "blocks.0.mlp", "logits", ROUTER, "r1", "x", "mem_alloc", "fail", "skip", "scale_f32"])
    if leaf in ("bytes", "bytearray"):
        return bytes(rng.choice([0, 4, 256]))
    if leaf == "object" or leaf == "Any":
        return rng.choice(world.objects + [np.zeros((1, 4, 8), np.float32)])
    candidates = [o for o in world.objects if type(o).__name__ == leaf]
    if candidates:
        return rng.choice(candidates)
    for module in PUBLIC_MODULES + (lifecore._core, lifecore._core.capture):
        cls = getattr(module, leaf, None)
        if isinstance(cls, type) and issubclass(cls, enum.Enum):
            return rng.choice(list(cls))
    return rng.choice(world.objects)


def arguments(rng: random.Random, world: World, params: list[Parameter]) -> tuple[list[Any], dict[str, Any], str]:
    """Arguments for one overload with at least one bad value; returns (args, kwargs, what was bad)."""
    if not params:
        return [], {}, ""
    bad_index = rng.randrange(len(params))
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    bad = ""
    skipping = False
    for i, p in enumerate(params):
        if i != bad_index and p.optional and rng.random() < 0.5:
            skipping = True  # later positional arguments go by keyword
            continue
        if i == bad_index or rng.random() < 0.15:
            value = bad_value(rng, world)
            bad += f"{p.name}={_shown(value)} "
        else:
            value = plausible_value(rng, world, p.annotation)
        if p.keyword_only or skipping:
            kwargs[p.name] = value
        else:
            args.append(value)
    return args, kwargs, bad.strip()


def _shown(value: Any) -> str:
    text = repr(value) if not type(value).__module__.startswith("lifecore") else type(value).__name__
    return text if len(text) < 40 else text[:37] + "..."

