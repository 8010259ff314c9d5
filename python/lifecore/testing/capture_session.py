"""``CaptureSessionMachine``: drives a CaptureSession and the reference model
(``lifecore.models.capture_session``) with the same operations and compares results,
errors, records and usage after every step.

It has the shape of every lifecycle's machine (:mod:`lifecore.testing.machine`): a capture
backend factory first (and a tensor factory for tensors that backend accepts), ``bind`` /
``run``, its rules counted in ``STATS``, and each refusal compared by kind and by the budget a
limit names (``compared_fields``)::

    import numpy as np
    from lifecore.capture import NumpyBackend

    def numpy_tensor(shape, dtype_class, itemsize):  # the pairs the machine asks for
        return np.ones(shape, {("floating", 4): np.float32, ("integer", 8): np.int64}[(dtype_class, itemsize)])

    CaptureSessionMachine.run(NumpyBackend, tensor_factory=numpy_tensor, seed=0)

The machine compares the ledger, outcomes and refusals with the model's, on tensors of ones: it
does not check a backend's numbers (the session checks a payload's kind, shape, element size
and bounds; compare values with a reference backend yourself), and it checks that a skipped
point never calls the backend only where the backend counts its calls in a ``calls`` list. Where
a tensor can be read on the host through DLPack (NumPy, a torch or JAX CPU tensor), it checks
after every ``observe`` and ``intervene`` that the backend left it holding ones: a transform
must not modify its input, and an intervention returns a new tensor, never the one it was given
modified in place (which the session cannot see when the backend returns another object).

What it expects the session to charge comes from the pure cost model
(:mod:`lifecore.models.capture_cost`), not from the core's cost table the session and the
bundled backends price with: a wrong price in the core disagrees with it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod
from typing import Any, Callable, Optional

import numpy as np
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from ..capture import (
    Axis,
    BackendCapabilities,
    CaptureDiscovery,
    CaptureLimits,
    CapturePhase,
    CapturePlan,
    CaptureRequest,
    CaptureSchedule,
    CaptureSelection,
    CaptureSession,
    CaptureSlice,
    CaptureTransform,
    CaptureUsage,
    InterventionPlan,
    ObservationPoint,
    OnLimit,
    RoutingPolicy,
    interventions,
)
from ..capture.backends import CountingBackend, MockTensor
from ..models import capture_cost
from ..models.capture_cost import NUMPY_REDUCTION_BYTES, TORCH_REDUCTION_BYTES
from ..models import capture_session as model
from .machine import LifecycleMachine, counted, same
from .machine_stats import MachineStats

D_MODEL, VOCAB, PROMPT, EXPERTS, TOP_K = 8, 16, 4, 4, 2
ROUTER = "moe.router#routing"
ITEMSIZE = 4


def _catalog(itemsize: int = 0) -> list[ObservationPoint]:
    hidden = [Axis("batch", "batch"), Axis("seq", "sequence"), Axis("d", D_MODEL)]
    return [
        ObservationPoint("blocks.0.mlp", hidden, itemsize=itemsize),
        ObservationPoint("blocks.1.mlp", hidden, itemsize=itemsize),
        ObservationPoint("logits", [Axis("batch", "batch"), Axis("seq", "sequence"), Axis("vocab", VOCAB)],
                         meaning="logits", itemsize=itemsize),
        ObservationPoint(ROUTER, [Axis("rows", "token_rows"), Axis("experts", EXPERTS)], meaning="routing",
                         routing=RoutingPolicy(EXPERTS, TOP_K)),
    ]


def sample_discovery(artifact_identity: str = "machine-artifact") -> CaptureDiscovery:
    """A small catalog (two hidden points [batch, seq, 8], logits [batch, seq, 16], a
    router with 4 experts, top 2) for tests and examples."""
    return CaptureDiscovery(artifact_identity, _catalog())


PATHS = ["blocks.0.mlp", "blocks.1.mlp", "logits", "unselected.point"]

# The transforms a selection draws, as plain data: the machine builds each CaptureTransform
# from it and prices what it asked for from it, not from what the built object reports (a
# constructor that kept another parameter would otherwise agree with itself).
TRANSFORM_SPECS: dict[str, dict[str, Any]] = {
    "summary": {},
    "preview": {"max_elements": 6},
    "histogram": {"edges": [-1.0, 0.0, 1.0]},
    "slice": {},
}
TRANSFORMS = {
    "summary": CaptureTransform.summary(),
    "preview": CaptureTransform.preview(TRANSFORM_SPECS["preview"]["max_elements"]),
    "histogram": CaptureTransform.histogram(TRANSFORM_SPECS["histogram"]["edges"]),
    "slice": CaptureTransform.slice(),
}
# A slice selection's (axis, start, end, stride): of the hidden points' d, and of the logits.
SLICES = {"hidden": ("d", 1, 7, 2), "logits": ("vocab", 0, 8, 1)}


@dataclass(frozen=True)
class _Asked:
    """What a selection asked for, as the machine drew it: its transform's name, the parameters
    the pure cost model prices it by (from TRANSFORM_SPECS), and the slice (start, end, stride)
    of the last axis, if any."""

    transform: str
    slice: Optional[tuple[int, int, int]] = None
    max_elements: int = 0
    edge_count: int = 0
    count: int = 0

    @classmethod
    def of(cls, transform: str, slice: Optional[tuple[int, int, int]]) -> "_Asked":
        spec = TRANSFORM_SPECS[transform]
        return cls(transform, slice, spec.get("max_elements", 0), len(spec.get("edges", ())), spec.get("count", 0))

    def selected(self, shape: tuple[int, ...]) -> list[int]:
        selected = list(shape)
        if self.slice is not None:
            start, end, stride = self.slice
            selected[2] = (end - start + stride - 1) // stride
        return selected


# Room left above the metadata envelopes, per step and in total: (captures, retained, host, encoded).
_AMPLE_STEP, _AMPLE_TOTAL = (8, 10**6, 10**6, 10**6), (100, 10**7, 10**7, 10**7)
BUDGET_LEVELS = {
    "ample": (_AMPLE_STEP, _AMPLE_TOTAL),
    "ample2": (_AMPLE_STEP, _AMPLE_TOTAL),
    "tight_step_captures": ((1, 10**6, 10**6, 10**6), _AMPLE_TOTAL),
    "tight_step_bytes": ((8, 100, 300, 500), _AMPLE_TOTAL),
    "tight_total_captures": (_AMPLE_STEP, (3, 10**7, 10**7, 10**7)),
    "tight_total_bytes": (_AMPLE_STEP, (100, 1000, 2000, 3000)),
    "envelopes_only": ((0, 0, 0, 0), (0, 0, 0, 0)),
}


#: Every capture-session machine in this process, counted.
STATS = MachineStats("capture session")

TensorFactory = Callable[[tuple[int, ...], str, int], Any]


def _is_torch_backend(backend: Any) -> bool:
    """Whether ``backend`` is lifecore's torch backend (or made from it), without importing torch."""
    return any(c.__name__ == "TorchBackend" and c.__module__.endswith(".torch_backend") for c in type(backend).__mro__)


def _usage(u: CaptureUsage) -> model.Usage:
    return model.Usage(*u.as_tuple())


class CaptureSessionMachine(LifecycleMachine):
    """Construct with ``backend_factory`` (a capture backend; default: the counting mock) and
    ``tensor_factory(shape, dtype_class, itemsize)`` making tensors that backend accepts (default:
    the counting mock's), or bind both with ``bind(backend_factory, tensor_factory=...)``."""

    stats = STATS
    compared_fields = ("budget", "cumulative")

    def __init__(self, backend_factory: Optional[Callable[[], Any]] = None,
                 tensor_factory: Optional[TensorFactory] = None):
        super().__init__()
        self.backend = (self.factory_or_bound(backend_factory) or CountingBackend)()
        self.tensor_factory: TensorFactory = (self.option_or_bound("tensor_factory", tensor_factory)
                                              or (lambda shape, dtype, itemsize: MockTensor(shape, dtype, itemsize)))
        # Known itemsizes (float32): value costs join the admission preflight under "fail".
        self.discovery = CaptureDiscovery("machine-artifact", _catalog(ITEMSIZE),
                                          BackendCapabilities(physical_native_limit=True))
        self.checkpoints: list[tuple[Any, Any]] = []
        self.last_cumulative = (0, 0, 0, 0)
        self.has_routing = self.has_scale = False
        self.asked: dict[str, _Asked] = {}  # selection id -> what it asked for (see _Asked)

    # -- setup -----------------------------------------------------------------------------
    @initialize(
        chosen=st.lists(st.tuples(st.sampled_from(PATHS[:3]), st.sampled_from(sorted(TRANSFORMS)),
                                  st.integers(0, 3), st.integers(1, 3), st.booleans()), min_size=1, max_size=4),
        max_predictions=st.integers(1, 10),
        budgets=st.sampled_from(sorted(BUDGET_LEVELS)),
        on_limit=st.sampled_from(["fail", "skip"]),
        scale_op=st.sampled_from([None, "plain", "evidence"]),
        routing_op=st.sampled_from([None, "plain", "evidence"]),
        # Limits between the transforms' peaks too (about 4,100 to 6,700 bytes here, NumPy's and
        # torch's), so the bound each answers decides which are refused.
        physical=st.sampled_from([None, None, 200, 4400, 5000, 10**6]),
    )
    def setup(self, chosen: list[tuple[str, str, int, int, bool]], max_predictions: int, budgets: str, on_limit: str,
              scale_op: Optional[str], routing_op: Optional[str], physical: Optional[int]) -> None:
        """Admits a random plan on both (one to four selections, budgets at one of ``BUDGET_LEVELS``,
        fail or skip, an optional physical limit), opens the session and, when drawn, enables a scale
        and an expert-exclusion intervention."""
        extra_step, extra_total = BUDGET_LEVELS[budgets]
        selections, model_selections = [], []
        for i, (path, transform, first, every, decode_only) in enumerate(chosen):
            schedule = CaptureSchedule(prefill=not decode_only, first_prediction=first, every=every)
            cut = (SLICES["logits"] if path == "logits" else SLICES["hidden"]) if transform == "slice" else None
            slices = [] if cut is None else [CaptureSlice(*cut)]
            sel = CaptureSelection(f"sel{i}", path, TRANSFORMS[transform], schedule=schedule, slices=slices)
            selections.append(sel)
            self.asked[sel.id] = _Asked.of(transform, None if cut is None else cut[1:])
            width = VOCAB if path == "logits" else D_MODEL
            floors = (self._floor(sel.id, (1, PROMPT, width)), self._floor(sel.id, (1, 1, width)))
            model_selections.append(model.Selection(
                sel.id, path, model.Schedule(not decode_only, True, first, None, every),
                model.envelope(sel.id, path, path, 3), floors=floors))
        self.selections = selections
        ops, model_ops = [], []
        self.has_routing, self.has_scale = routing_op is not None, scale_op is not None
        if scale_op:
            evidence = "summary" if scale_op == "evidence" else None
            ops.append(interventions.scale("scale", "blocks.1.mlp", 0.5, evidence=evidence))
            model_ops.append(model.Operation("scale", "blocks.1.mlp", model.Schedule(),
                                             evidence=None if evidence is None else model.Usage()))
        if routing_op:
            candidates = 4 if routing_op == "evidence" else None
            ops.append(interventions.exclude_experts("route", ROUTER, [3], evidence=candidates))
            model_ops.append(model.Operation("route", ROUTER, model.Schedule(), routing=True,
                                             capture_original=candidates is not None))
        # Every step reserves the selections' and the operations' envelopes: the room a budget
        # level leaves is above both.
        envelopes = sum((s.envelope for s in model_selections), model.Usage()) + sum(
            (o.envelope for o in model_ops), model.Usage())
        per_step = envelopes + model.Usage(*extra_step)
        cumulative = envelopes * max_predictions + model.Usage(*extra_total)
        request = CaptureRequest(1, PROMPT, max_predictions)

        def admit(on_limit: str) -> bool:
            """Admits the plan, then enables the operations, on both; False when refused alike
            (known value costs that cannot fit beside the envelopes under "fail")."""
            limits = CaptureLimits(per_step=CaptureUsage(*per_step.astuple()),
                                   cumulative=CaptureUsage(*cumulative.astuple()),
                                   on_limit=OnLimit.FAIL if on_limit == "fail" else OnLimit.SKIP,
                                   physical_native_bytes=physical)
            admitted = self.both("admit", lambda: model.CaptureSessionModel(model_selections, per_step, cumulative,
                                                                            on_limit, max_predictions),
                                 lambda: CapturePlan(selections, limits).admit(self.discovery, request))
            if admitted.kind == "Admission":
                return False
            self.plan = admitted.actual
            self.session = CaptureSession(self.plan)
            made = self.both("enable_interventions", lambda: model.CaptureSessionModel(
                model_selections, per_step, cumulative, on_limit, max_predictions, operations=model_ops,
                original_route_bytes=TOP_K * 16, physical_native_bytes=physical, routed_rows=(PROMPT, 1)),
                lambda: self._enable(ops))
            if made.kind == "Admission":
                return False
            self.model = made.expected
            return True

        # Known value costs cannot fit under "fail": the same plan under "skip" is admitted.
        if not admit(on_limit):
            assert on_limit == "fail" and admit("skip")
        note(f"plan: {[(s.id, s.path, s.transform.kind) for s in selections]}, ops: {[o.id for o in ops]}")

    # -- helpers ---------------------------------------------------------------------------
    def _enable(self, ops: list[Any]) -> None:
        """Admits and enables ``ops`` on the session (nothing when there are none)."""
        if ops:
            self.session.enable_interventions(InterventionPlan(ops).admit(self.discovery, self.session), self.backend)

    def _shape(self, path: str, phase: Optional[str] = None) -> tuple[int, ...]:
        """The shape of ``path``'s output in ``phase`` (None: the step's)."""
        seq = PROMPT if (phase or self.model.phase) == model.PREFILL else 1
        return (1, seq, VOCAB if path == "logits" else D_MODEL)

    def _floor(self, selection: str, shape: tuple[int, ...]) -> model.Usage:
        """The value cost known at admission: the pure model's floor of what the selection asked."""
        asked = self.asked[selection]
        return capture_cost.transform_floor(asked.transform, prod(asked.selected(shape)), ITEMSIZE,
                                            max_elements=asked.max_elements, edge_count=asked.edge_count,
                                            count=asked.count)

    def _native(self, path: str, shape: tuple[int, ...]) -> dict[str, int]:
        # What the backend documents it answers, from the pure model's bound: torch's backend
        # its own reduction bytes, NumPy's (and the counting backend, which answers as it does)
        # NumPy's.
        reduction = TORCH_REDUCTION_BYTES if _is_torch_backend(self.backend) else NUMPY_REDUCTION_BYTES
        return {sel.id: capture_cost.native_peak(self.asked[sel.id].transform, self.asked[sel.id].selected(shape),
                                                 ITEMSIZE, reduction, max_elements=self.asked[sel.id].max_elements)
                for sel in self.selections if sel.path == path}

    def _costs(self, path: str, shape: tuple[int, ...]) -> dict[str, model.Usage]:
        costs = {}
        for sel in self.selections:
            if sel.path != path:
                continue
            asked = self.asked[sel.id]
            costs[sel.id] = capture_cost.transform_usage(asked.transform, asked.selected(shape), ITEMSIZE,
                                                         max_elements=asked.max_elements, edge_count=asked.edge_count,
                                                         count=asked.count)
        return costs

    def _mark_truncation(self, path: str, shape: tuple[int, ...]) -> None:
        for i, sel in enumerate(self.selections):
            if sel.path == path:
                asked = self.asked[sel.id]
                truncates = asked.transform == "preview" and prod(shape) > asked.max_elements
                self.model.selections[i] = replace(self.model.selections[i], preview_truncates=truncates)

    # -- rules -----------------------------------------------------------------------------
    @rule(data=st.data())
    @counted
    def begin_step(self, data: st.DataObject) -> None:
        """Begins a step at a drawn prediction and phase (mostly the next prediction in its own phase,
        wrong ones included), on both: the refusals (a step still open, a routing control pending, a
        prediction out of range or in the wrong phase, envelopes over budget) must agree."""
        max_p = self.model.max_predictions
        prediction = data.draw(st.sampled_from([self.model.next_prediction] * 6 + list(range(max_p + 1))))
        phase = data.draw(st.sampled_from([None] * 8 + ["prefill", "decode"]))
        phase = phase or (model.PREFILL if prediction == 0 else model.DECODE)
        impl_phase = CapturePhase.PREFILL if phase == model.PREFILL else CapturePhase.DECODE
        self.both("begin_step", lambda: self.model.begin_step(phase, prediction),
                                lambda: self.session.begin_step(impl_phase, prediction))

    @precondition(lambda self: not self.model.step_open and self.model.next_prediction < self.model.max_predictions)
    @rule()
    @counted
    def begin_next_step(self) -> None:
        """Begins the next prediction's step in its own phase (prefill at 0, decode after), when no step
        is open and predictions remain, on both."""
        prediction = self.model.next_prediction
        phase = model.PREFILL if prediction == 0 else model.DECODE
        impl_phase = CapturePhase.PREFILL if prediction == 0 else CapturePhase.DECODE
        self.both("begin_next_step", lambda: self.model.begin_step(phase, prediction),
                                     lambda: self.session.begin_step(impl_phase, prediction))

    @precondition(lambda self: self.model.step_open)
    @rule()
    @counted
    def take_open_step(self) -> None:
        """``take_step`` while a step is open."""
        self.take_step()

    @precondition(lambda self: self.model.step_open)
    @rule(path=st.sampled_from(PATHS), shape_ok=st.sampled_from([True] * 5 + [False]))
    @counted
    def observe_in_step(self, path: str, shape_ok: bool) -> None:
        """``observe`` while a step is open, mostly with the right shape."""
        self.observe(path, shape_ok)

    @precondition(lambda self: self.model.step_open)
    @rule(path=st.sampled_from(PATHS))
    @counted
    def intervene_in_step(self, path: str) -> None:
        """``intervene`` while a step is open."""
        self.intervene(path)

    @precondition(lambda self: self.model.step_open)
    @rule(data=st.data())
    @counted
    def run_hook(self, data: st.DataObject) -> None:
        """What a forward hook does: observe, then intervene, at every point in order."""
        for path in PATHS[:3]:
            if data.draw(st.booleans(), label=f"hook at {path}"):
                self.observe(path, True)
                self.intervene(path)

    @rule(path=st.sampled_from(PATHS), shape_ok=st.booleans())
    @counted
    def observe(self, path: str, shape_ok: bool) -> None:
        """Observes ``path`` (with a wrong shape when ``shape_ok`` is false) on both: whether the backend
        is called, and the refusals, must agree; a point with nothing to capture, or a call that breaks
        a session rule, must not call the backend."""
        shape = self._shape(path)
        if not shape_ok:
            shape = shape[:2] + (shape[2] + 1,)
        self._mark_truncation(path, shape)
        tensor = self.tensor_factory(shape, "floating", 4)
        calls = self._calls()
        costs, native = self._costs(path, shape), self._native(path, shape)
        r = self.both("observe", lambda: self.model.observe(path, costs, shape_ok, native),
                                 lambda: self.session.observe(self.backend, path, tensor))
        self._assert_left_as_given(tensor, "observe", path)
        if r.expected is False or r.kind == "CaptureSession":
            assert self._calls() == calls, "the backend was called for a skipped point"

    @staticmethod
    def _assert_left_as_given(tensor: Any, call: str, path: str) -> None:
        """The tensor still holds the ones it was made with, where the host can read it."""
        try:
            values = np.from_dlpack(tensor)
        except Exception:  # the counting mock's tensors, device memory: nothing to read here
            return
        if values.size and not bool((values == 1).all()):
            raise AssertionError(f"{call} at {path}: the backend modified the tensor it was given (it held ones; a "
                                 f"transform must not write to its input, and intervene returns a new tensor)")

    def _calls(self) -> int:
        calls = getattr(self.backend, "calls", None)
        return len(calls) if calls is not None else 0

    @rule(path=st.sampled_from(PATHS))
    @counted
    def intervene(self, path: str) -> None:
        """Runs the interventions at ``path`` on a tensor of the step's shape, on both: whether a
        replacement is produced, and the refusals (no open step, a point run twice in a step,
        intervene before observe), must agree."""
        tensor = self.tensor_factory(self._shape(path), "floating", 4)
        evidence = capture_cost.transform_usage("summary", self._shape(path), 4)
        r = self.both("intervene", lambda: self.model.intervene(path, evidence),
                                   lambda: self.session.intervene(self.backend, path, tensor))
        self._assert_left_as_given(tensor, "intervene", path)
        self._assert_replacement_agrees(r, "intervene", path,
                                        " (an operation the backend failed, by raising or by changing the tensor's "
                                        "dtype or shape, returns None; the step's records say why)")

    @staticmethod
    def _assert_replacement_agrees(r: Any, call: str, path: str, why: str = "") -> None:
        """Unless both refused: lifecore returned a replacement exactly where the model says one is made."""
        if not r.kind:
            assert (r.actual is not None) == r.expected, (
                f"{call} at {path}: lifecore returned {'a replacement' if r.actual is not None else 'None'}, the "
                f"model {'a replacement' if r.expected else 'None'}{why}")

    @precondition(lambda self: self.has_scale)
    @rule(path=st.sampled_from(["blocks.1.mlp"] * 3 + PATHS), same_phase=st.sampled_from([True] * 3 + [False]))
    @counted
    def reintervene(self, path: str, same_phase: bool) -> None:
        """A recompute in backward at ``path`` (mostly where the plan scales) of a tensor shaped as
        in the step's phase (or, now and then, the other), on both: whether an operation a
        forward of that shape applied applies again, and the refusal where forwards of that
        shape differed, must agree; the session's state is unchanged either way (the rules
        after it compare it)."""
        phase = self.model.phase if same_phase else ({model.PREFILL, model.DECODE} - {self.model.phase}).pop()
        tensor = self.tensor_factory(self._shape(path, phase), "floating", 4)
        r = self.both("reintervene", lambda: self.model.reintervene(path, phase),
                                     lambda: self.session.reintervene(self.backend, path, tensor))
        self._assert_left_as_given(tensor, "reintervene", path)
        self._assert_replacement_agrees(r, "reintervene", path)

    @precondition(lambda self: self.has_routing or self.has_scale)
    @rule()
    @counted
    def finish_interventions(self) -> None:
        """Calls ``finish_interventions`` on both: refused alike when no step is open, a routing control
        is pending, or a scheduled intervention did not complete."""
        self.both("finish_interventions", self.model.finish_interventions, self.session.finish_interventions)

    @precondition(lambda self: self.has_routing)
    @rule(rows=st.sampled_from([0, 1, PROMPT, 2**63]))
    @counted
    def routing_control(self, rows: int) -> None:
        """Asks for the router's routing control for ``rows`` token rows (0, 1, the prompt's, or far too
        many), on both: whether a control is handed out, and the refusals, must agree. A control
        handed out fixes the rows ``routing_applied`` reports."""
        r = self.both("routing_control", lambda: self.model.routing_control(ROUTER, rows),
                                         lambda: self.session.routing_control(ROUTER, rows))
        if not r.kind:
            same(r.actual is None, r.expected is None)
            if r.actual is not None:  # only a control handed out fixes the rows routing_applied reports
                self.rows = rows

    @rule(with_original=st.booleans())
    @counted
    def routing_applied(self, with_original: bool) -> None:
        """Reports a routing result at the router (with or without the original decision) for the rows
        of the last control handed out, on both: an unsolicited or unmatched result, a missing
        original and an evidence budget must be refused alike."""
        rows = getattr(self, "rows", 1) or 1
        ids = self.tensor_factory((rows, TOP_K), "integer", 8)
        coefficients = self.tensor_factory((rows, TOP_K), "floating", 4)
        cost = (capture_cost.transform_usage("full_tensor", [rows, TOP_K], 8)
                + capture_cost.transform_usage("full_tensor", [rows, TOP_K], 4)) * 2
        original = (ids, coefficients) if with_original else None
        routed = (ids, coefficients)
        self.both("routing_applied", lambda: self.model.routing_applied(ROUTER, with_original, cost),
                                     lambda: self.session.routing_applied(self.backend, ROUTER, original, routed))

    @precondition(lambda self: self.has_routing)
    @rule()
    @counted
    def routing_failed(self) -> None:
        """Reports that the router's selector failed (with an over-long, non-ASCII message), on both:
        the pending control's operation, or the point's scheduled routing operations, fail; the
        outcomes must agree."""
        self.both("routing_failed", lambda: self.model.routing_failed(ROUTER),
                                    lambda: self.session.routing_failed(ROUTER, "selector failed " + "é" * 300))

    @rule()
    @counted
    def take_step(self) -> None:
        """Takes the step on both (None when no step is open): the prediction, step and cumulative
        usage, each record's outcome, reason, budget and charge, and each intervention's outcome and
        charge must agree; messages fit 256 bytes, and every record's JSON (an operation's too) fits
        its charged encoded bytes (``exported_json_within_charges``)."""
        r = self.both("take_step", self.model.take_step, self.session.take_step)
        same(r.actual is None, r.expected is None)
        if r.actual is None:
            return
        step, expected = r.actual, r.expected
        same(step.prediction, expected["prediction"])
        same(step.phase, CapturePhase.PREFILL if expected["phase"] == model.PREFILL else CapturePhase.DECODE)
        # One record per selection and per operation, in plan order: a record left out would
        # otherwise never be compared.
        assert [record.selection_id for record in step.records] == list(expected["records"]), step.records
        assert [record.operation_id for record in step.interventions] == list(expected["interventions"]), (
            step.interventions)
        failures = "".join(f"; {r.selection_id}: {r.message}" for r in step.records if r.message) + "".join(
            f"; {r.operation_id}: {r.message}" for r in step.interventions if r.message)
        assert _usage(step.cumulative_usage) == expected["cumulative_usage"], (
            f"cumulative usage {step.cumulative_usage} but the model's is {expected['cumulative_usage']}{failures}")
        assert _usage(step.step_usage) == expected["step_usage"], (
            f"step usage {step.step_usage} but the model's is {expected['step_usage']}{failures}")
        for record in step.records:
            want = expected["records"][record.selection_id]
            assert record.outcome.name == want.outcome, (record, want, record.message)
            if want.outcome == "SKIPPED":
                same(record.skip_reason, want.reason)
            if want.outcome == "FAILED":
                same(record.fail_reason, want.reason)
                assert len(record.message.encode()) <= 256
            if want.budget:
                same(record.budget, want.budget)
            assert _usage(record.charged) == want.charged, (record, want, record.message)
        for record in step.interventions:
            want = expected["interventions"][record.operation_id]
            assert record.outcome.name == want.outcome, (record, want, record.message)
            assert _usage(record.charged) == want.charged, (record, want, record.message)
            assert len(record.message.encode()) <= 256
        self.taken = step

    @rule()
    @counted
    def checkpoint(self) -> None:
        """Checkpoints the session on both (refused alike inside a step, with a routing control pending,
        or after a step that did not complete): the prediction agrees, the checkpoint has stored
        bytes, and it is kept for ``restore``."""
        r = self.both("checkpoint", self.model.checkpoint, lambda: self.session.checkpoint(self.discovery))
        if not r.kind:
            assert r.actual.prediction == r.expected.prediction and r.actual.has_step == r.expected.has_step
            assert (self.session.checkpoint_storage_bytes(self.discovery) or 0) > 0
            self.checkpoints.append((r.actual, r.expected))

    @precondition(lambda self: bool(self.checkpoints))
    @rule(data=st.data(), prepare_only=st.booleans())
    @counted
    def restore(self, data: st.DataObject, prepare_only: bool) -> None:
        """Restores a kept checkpoint on both, or prepares a restore and drops it (which changes
        nothing); a checkpoint of another session (the parent, after a fork) is refused alike. A
        restore republishes no step, moves to the model's next prediction and refunds nothing."""
        # Drawn by index: a failure's steps then print a number, the same from run to run, and
        # not a checkpoint's repr (an address), which would make each a new failure file.
        impl_cp, model_cp = self.checkpoints[data.draw(st.integers(0, len(self.checkpoints) - 1),
                                                       label="checkpoint kept")]
        before = self.session.cumulative_usage().as_tuple()
        if prepare_only:
            # A prepared restore that is dropped changes nothing.
            r = self.both("restore", lambda: self.model.validate_restore(model_cp),
                                     lambda: self.session.prepare_restore(impl_cp).release())
        else:
            r = self.both("restore", lambda: self.model.restore(model_cp), lambda: self.session.restore(impl_cp))
            if not r.kind:
                assert self.session.take_step() is None  # a restore republishes nothing
                same(self.session.next_prediction, self.model.next_prediction)
        same(self.session.cumulative_usage().as_tuple(), before)  # no refund

    @rule(max_predictions=st.sampled_from([None, 2, 8]))
    @counted
    def fork(self, max_predictions: Optional[int]) -> None:
        """Forks the session at a step boundary (optionally with a new prediction limit) on both: the
        child starts with the parent's cumulative usage, and the machine goes on with the child."""
        r = self.both("fork", lambda: self.model.fork(max_predictions),
                              lambda: self.session.fork(self.discovery, max_predictions=max_predictions))
        if not r.kind:
            same(r.actual.cumulative_usage(), self.session.cumulative_usage())
            # Continue on the child; the parent's checkpoints now belong to another session.
            self.session, self.model = r.actual, r.expected

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def usage_matches_model_and_never_decreases(self) -> None:
        """Checks that the session's cumulative usage is the model's and never decreases (no refund,
        across restores and forks)."""
        if not hasattr(self, "model"):
            return
        usage = self.session.cumulative_usage().as_tuple()
        same(model.Usage(*usage), self.model.cumulative_usage())
        assert all(now >= then for now, then in zip(usage, self.last_cumulative))
        self.last_cumulative = usage

    @invariant()
    def position_matches_model(self) -> None:
        """Checks the session's position against the model's after every step, refused calls
        included (a refusal changes nothing): the next prediction, whether a step waits to be
        taken, whether the boundary can be a checkpoint, and the current step's usage."""
        if not hasattr(self, "model"):
            return
        same(self.session.next_prediction, self.model.next_prediction)
        same(self.session.step_pending, self.model.step_open)
        same(self.session.checkpoint_ready, self.model.ready)
        same(_usage(self.session.step_usage()), self.model.ledger.step)

    @invariant()
    def exported_json_within_charges(self) -> None:
        """Checks, for the step last taken, that every record's JSON, selection or operation, fits
        the encoded bytes it was charged, and that all of them together fit the step's encoded
        usage: what a session exports is bounded by its ledger."""
        step, self.taken = getattr(self, "taken", None), None
        if step is None:
            return
        exported = 0
        for record in [*step.records, *step.interventions]:
            size = len(record.to_json().encode())
            assert size <= record.charged.encoded_bytes, (record, size, record.charged)
            exported += size
        assert exported <= step.step_usage.encoded_bytes, (exported, step.step_usage)

    @invariant()
    def no_limit_exceeded(self) -> None:
        """Checks that neither the cumulative usage nor the current step's usage is over the plan's
        limits."""
        if not hasattr(self, "model"):
            return
        limits = self.session.plan.plan.limits
        assert model.Usage(*self.session.cumulative_usage().as_tuple()).first_over(
            model.Usage(*limits.cumulative.as_tuple())) is None
        assert model.Usage(*self.session.step_usage().as_tuple()).first_over(
            model.Usage(*limits.per_step.as_tuple())) is None
