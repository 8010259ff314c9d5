"""Executable specification of a capture session: schedule, ledger, records, the one step
slot, checkpoints, forks, intervention and routing outcomes.

Pure Python, no import of lifecore. Tensor work is abstracted away: callers pass what each
observation would cost (what a backend's estimate returns), and the model says what the
implementation must do: which outcome each record gets, what is charged, which error is
raised. Errors are ``ModelError`` (:mod:`.contract`) carrying the error kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from .contract import ModelError

BUDGETS = ("captures", "retained_bytes", "host_bytes", "encoded_bytes")
PREFILL, DECODE = "prefill", "decode"


@dataclass(frozen=True)
class Usage:
    captures: int = 0
    retained_bytes: int = 0
    host_bytes: int = 0
    encoded_bytes: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(*(a + b for a, b in zip(self.astuple(), other.astuple())))

    def __mul__(self, factor: int) -> "Usage":
        return Usage(*(a * factor for a in self.astuple()))

    def astuple(self) -> tuple[int, int, int, int]:
        return (self.captures, self.retained_bytes, self.host_bytes, self.encoded_bytes)

    def first_over(self, limit: "Usage") -> Optional[str]:
        """The first budget over ``limit`` in the order captures, retained, host, encoded."""
        for name, value, bound in zip(BUDGETS, self.astuple(), limit.astuple()):
            if value > bound:
                return name
        return None


@dataclass(frozen=True)
class Schedule:
    prefill: bool = True
    decode: bool = True
    first: int = 0
    end: Optional[int] = None
    every: int = 1

    def fires(self, phase: str, prediction: int) -> bool:
        if not (self.prefill if phase == PREFILL else self.decode):
            return False
        if prediction < self.first or (self.end is not None and prediction >= self.end):
            return False
        return (prediction - self.first) % self.every == 0


def envelope(selection_id: str, path: str, node_id: str, rank: Optional[int]) -> Usage:
    """The per-step metadata envelope of a selection (rank None = unknown = 32)."""
    strings = len(selection_id.encode()) + len(path.encode()) + len(node_id.encode())
    r = 32 if rank is None else rank
    return Usage(0, 0, 512 + strings + 128 * r, 2048 + 6 * strings + 64 * r)


def operation_envelope(operation_id: str, target: str) -> Usage:
    """The per-step metadata envelope of an intervention or routing operation: its record's
    JSON in every outcome (the longest message, every number at its widest), evidence
    payloads excepted (charged on top when captured)."""
    strings = len(operation_id.encode()) + len(target.encode())
    return Usage(0, 0, 512 + strings, 2048 + 6 * strings)


@dataclass(frozen=True)
class Selection:
    id: str
    path: str
    schedule: Schedule
    envelope: Usage
    preview_truncates: bool = False  # a preview that emits fewer elements than selected
    # The value cost known at admission, per phase (prefill, decode); None = known only at
    # run time. Counted in the preflight only under on_limit "fail".
    floors: tuple[Optional[Usage], Optional[Usage]] = (None, None)


@dataclass(frozen=True)
class Operation:
    id: str
    target: str
    schedule: Schedule
    routing: bool = False
    evidence: Optional[Usage] = None  # evidence requested (default cost of one capture) or None
    capture_original: bool = False   # routing with evidence
    window: tuple[int, Optional[int]] = (0, None)  # routing rows [start, end)

    @property
    def envelope(self) -> Usage:
        return operation_envelope(self.id, self.target)


@dataclass
class Record:
    outcome: str  # CAPTURED, TRUNCATED, SKIPPED, MISSING, FAILED
    reason: Optional[str] = None  # skip reason or fail reason
    budget: Optional[str] = None
    charged: Usage = Usage()


@dataclass(frozen=True)
class Checkpoint:
    owner: int
    prediction: int
    phase: str
    has_step: bool
    usage: Usage


class Ledger:
    """Monotone: a reservation is granted whole or not at all, and never refunded."""

    def __init__(self, per_step: Usage, cumulative: Usage, inherited: Usage = Usage()):
        if inherited.first_over(cumulative):
            raise ModelError("BudgetExceeded", budget=inherited.first_over(cumulative), cumulative=True)
        self.per_step_limit, self.cumulative_limit = per_step, cumulative
        self.step, self.cumulative = Usage(), inherited

    def try_reserve(self, usage: Usage) -> Optional[tuple[str, bool]]:
        over = (self.step + usage).first_over(self.per_step_limit)
        if over:
            return over, False
        over = (self.cumulative + usage).first_over(self.cumulative_limit)
        if over:
            return over, True
        self.step, self.cumulative = self.step + usage, self.cumulative + usage
        return None


_owners = iter(range(1, 1 << 62))


@dataclass
class CaptureSessionModel:
    selections: list[Selection]
    per_step: Usage
    cumulative: Usage
    on_limit: str  # "fail" | "skip"
    max_predictions: int
    inherited: Usage = Usage()
    next_from: int = 0
    operations: list[Operation] = field(default_factory=list)
    original_route_bytes: int = 0   # rows * top_k * 16 for routing with evidence
    physical_native_bytes: Optional[int] = None  # per-capture peak native bytes, checked first
    routed_rows: tuple[int, int] = (2**64 - 1, 2**64 - 1)  # token rows the request routes (prefill, decode)

    def __post_init__(self) -> None:
        # The operations' envelopes are reserved every step beside the selections'; with
        # operations this is the check enabling interventions makes (nothing installed on refusal).
        envelopes = self.envelopes()
        if envelopes.first_over(self.per_step):
            raise ModelError("Admission", "envelopes exceed the per-step limit")
        remaining = max(self.max_predictions - self.next_from, 0)
        if (self.inherited + envelopes * remaining).first_over(self.cumulative):
            raise ModelError("Admission", "envelopes exceed the cumulative limit")
        if self.on_limit == "fail":
            self._preflight_values(envelopes)
        self.owner = next(_owners)
        self.ledger = Ledger(self.per_step, self.cumulative, self.inherited)
        self.prediction, self.phase, self.has_step = 0, PREFILL, False
        self.step_open, self.ready, self.started = False, True, False
        self.records: dict[str, Record] = {}
        self.op_records: dict[str, Record] = {}
        self.observed: set[str] = set()  # the paths observed in the open step
        self.pending: Optional[Operation] = None
        # Per operation id, what the forwards did with it by the shape of the tensor it met (a
        # phase stands for a shape here): applied, or reached and not applied (inactive in the
        # step, or failed). What a recompute reads; kept across steps and restores.
        self.applied_at: dict[str, set[str]] = {}
        self.passed_at: dict[str, set[str]] = {}

    def envelopes(self) -> Usage:
        """What every step reserves first: each selection's and each operation's envelope."""
        return sum((s.envelope for s in self.selections), Usage()) + sum(
            (o.envelope for o in self.operations), Usage())

    def _preflight_values(self, envelopes: Usage) -> None:
        """Known value costs under "fail": each selection beside the envelopes in one step,
        the prefill step's selections together, and every remaining firing in total."""
        prefill = envelopes
        run = self.inherited + envelopes * max(self.max_predictions - self.next_from, 0)
        for s in self.selections:
            for phase, floor in zip((PREFILL, DECODE), s.floors):
                fired = [p for p in range(self.next_from, self.max_predictions)
                         if (p == 0) == (phase == PREFILL) and s.schedule.fires(phase, p)]
                if floor is None or not fired:
                    continue
                if (envelopes + floor).first_over(self.per_step):
                    raise ModelError("Admission", f"{s.id} cannot fit one step")
                if phase == PREFILL:
                    prefill = prefill + floor
                run = run + floor * len(fired)
        if prefill.first_over(self.per_step):
            raise ModelError("Admission", "the prefill step cannot fit")
        if run.first_over(self.cumulative):
            raise ModelError("Admission", "the run cannot fit")

    # -- schedule and step slot ------------------------------------------------------------
    @property
    def next_prediction(self) -> int:
        return self.prediction + 1 if self.has_step else 0

    def begin_step(self, phase: str, prediction: int) -> None:
        if self.step_open:
            raise ModelError("CaptureSession", "previous capture step has not been consumed")
        if self.pending:
            raise ModelError("CaptureSession", "a routing control is still pending")
        if prediction >= self.max_predictions or (phase == PREFILL) != (prediction == 0):
            raise ModelError("InvalidArgument")
        self.ready, self.started = False, True
        self.ledger.step = Usage()
        # All envelopes reserved together: a refused step is charged nothing.
        hit = self.ledger.try_reserve(self.envelopes())
        if hit:
            raise ModelError("BudgetExceeded", budget=hit[0], cumulative=hit[1])
        self.records = {
            s.id: Record("MISSING", charged=s.envelope) if s.schedule.fires(phase, prediction)
            else Record("SKIPPED", "schedule", charged=s.envelope)
            for s in self.selections
        }
        self.op_records = {o.id: Record("MISSING" if o.schedule.fires(phase, prediction) else "INACTIVE",
                                        charged=o.envelope)
                           for o in self.operations}
        self.observed = set()
        self.phase, self.prediction, self.has_step, self.step_open = phase, prediction, True, True

    def observe(self, path: str, costs: dict[str, Usage], shape_ok: bool = True,
                native: Optional[dict[str, int]] = None) -> bool:
        """Returns whether the backend is called. ``costs`` maps selection id -> estimate,
        ``native`` selection id -> native bytes (consulted only under a physical limit)."""
        if not self.step_open:
            raise ModelError("CaptureSession", "no capture step is open")
        here = [s for s in self.selections if s.path == path]
        if any(self.records[s.id].outcome not in ("SKIPPED", "MISSING") for s in here):
            raise ModelError("CaptureSession", "observation emitted twice")
        self.observed.add(path)
        todo = [s for s in here if self.records[s.id].outcome == "MISSING"]
        if not todo:
            return False
        error: Optional[ModelError] = None
        for s in todo:
            record = self.records[s.id]
            if not shape_ok:
                self.records[s.id] = Record("FAILED", "invalid", charged=record.charged)
                error = error or ModelError("InvalidArgument")
                continue
            # The physical limit is checked before the ledger: a refused capture is charged nothing.
            hit: Optional[tuple[str, bool]] = None
            if self.physical_native_bytes is not None and (native or {})[s.id] > self.physical_native_bytes:
                hit = ("physical_native_bytes", False)
            hit = hit or self.ledger.try_reserve(costs[s.id])
            if hit and self.on_limit == "skip":
                self.records[s.id] = Record("SKIPPED", "limit", hit[0], charged=record.charged)
            elif hit:
                self.records[s.id] = Record("FAILED", "limit", hit[0], charged=record.charged)
                error = error or ModelError("BudgetExceeded", budget=hit[0], cumulative=hit[1])
            else:
                outcome = "TRUNCATED" if s.preview_truncates else "CAPTURED"
                self.records[s.id] = Record(outcome, charged=record.charged + costs[s.id])
        if error:
            raise error
        return True

    def take_step(self) -> Optional[dict[str, Any]]:
        if not self.step_open:
            return None
        ok = self.pending is None and all(r.outcome != "FAILED" for r in self.records.values()) and all(
            r.outcome in ("INACTIVE", "APPLIED") for r in self.op_records.values())
        step = {"phase": self.phase, "prediction": self.prediction, "records": dict(self.records),
                "interventions": dict(self.op_records), "step_usage": self.ledger.step,
                "cumulative_usage": self.ledger.cumulative}
        self.records, self.op_records, self.pending = {}, {}, None
        self.step_open, self.ready = False, ok
        return step

    # -- checkpoints and forks -------------------------------------------------------------
    def _require_boundary(self) -> None:
        if self.step_open:
            raise ModelError("CaptureSession", "undelivered capture records")
        if self.pending:
            raise ModelError("CaptureSession", "a routing control is still pending")
        if not self.ready:
            raise ModelError("CaptureSession", "the last step did not complete")

    def checkpoint(self) -> Checkpoint:
        self._require_boundary()
        return Checkpoint(self.owner, self.prediction, self.phase, self.has_step, self.ledger.cumulative)

    def validate_restore(self, cp: Checkpoint) -> None:
        if cp.owner != self.owner:
            raise ModelError("CaptureSession", "checkpoint belongs to another capture session")
        if self.step_open:
            raise ModelError("CaptureSession", "undelivered capture records must be taken before restore")
        if self.pending:
            raise ModelError("CaptureSession", "a routing control is still pending")

    def restore(self, cp: Checkpoint) -> None:
        """Rewinds the position; no refund, nothing republished."""
        self.validate_restore(cp)
        self.prediction, self.phase, self.has_step, self.ready = cp.prediction, cp.phase, cp.has_step, True

    def fork(self, max_predictions: Optional[int] = None) -> "CaptureSessionModel":
        self._require_boundary()
        if (max_predictions if max_predictions is not None else self.max_predictions) <= self.next_prediction:
            raise ModelError("Admission", "leaves no prediction to take")  # a child that could never step
        child = CaptureSessionModel(self.selections, self.per_step, self.cumulative, self.on_limit,
                                    max_predictions if max_predictions is not None else self.max_predictions,
                                    inherited=self.ledger.cumulative, next_from=self.next_prediction,
                                    original_route_bytes=self.original_route_bytes,
                                    physical_native_bytes=self.physical_native_bytes,
                                    routed_rows=self.routed_rows)
        child.prediction, child.phase, child.has_step = self.prediction, self.phase, self.has_step
        return child

    def cumulative_usage(self) -> Usage:
        return self.ledger.cumulative

    # -- interventions ---------------------------------------------------------------------
    def _ops_at(self, path: str, routing: bool) -> list[Operation]:
        return [o for o in self.operations if o.target == path and o.routing == routing]

    def intervene(self, path: str, evidence_cost: Optional[Usage] = None) -> bool:
        """Returns whether a replacement is produced. ``evidence_cost``: one evidence
        capture at this point (before and after are reserved together)."""
        if not self.step_open:
            raise ModelError("CaptureSession", "no capture step is open")
        ops = self._ops_at(path, routing=False)
        if any(self.op_records[o.id].outcome in ("APPLIED", "FAILED") for o in ops):
            raise ModelError("CaptureSession", "intervention point executed more than once in one step")
        for o in ops:  # reached, and not applied this step
            if self.op_records[o.id].outcome == "INACTIVE":
                self.passed_at.setdefault(o.id, set()).add(self.phase)
        active = [o for o in ops if self.op_records[o.id].outcome == "MISSING"]
        if not active:
            return False
        if path not in self.observed:  # captured there or not, the hook observes first
            raise ModelError("CaptureSession", "observe must precede intervene")
        replaced = False
        for o in active:
            record = self.op_records[o.id]
            if o.evidence is not None:
                cost = (evidence_cost if evidence_cost is not None else o.evidence) * 2
                hit = self.ledger.try_reserve(cost)
                if hit and self.on_limit == "fail":
                    self.op_records[o.id] = Record("FAILED", "limit", charged=record.charged)
                    self.passed_at.setdefault(o.id, set()).add(self.phase)
                    continue
                record.charged = record.charged + (Usage() if hit else cost)  # on top of the envelope
            record.outcome = "APPLIED"
            self.applied_at.setdefault(o.id, set()).add(self.phase)
            replaced = True
        return replaced

    def reintervene(self, path: str, phase: str) -> bool:
        """A recompute at ``path`` of a tensor shaped as in ``phase``: whether an operation
        there applies again (one a forward of that shape applied). Refused where forwards of
        that shape differed (one applied it, another reached it and did not). Open step or
        not; nothing recorded or charged."""
        replaced = False
        for o in self._ops_at(path, routing=False):
            applied = phase in self.applied_at.get(o.id, ())
            if applied and phase in self.passed_at.get(o.id, ()):
                raise ModelError("CaptureSession", "forwards of the recompute's shape differed: which one it is "
                                                   "is unknown")
            replaced = replaced or applied
        return replaced

    def finish_interventions(self) -> None:
        if not self.operations:
            return
        if not self.step_open:
            raise ModelError("CaptureSession", "no capture step is open")
        if self.pending:
            raise ModelError("CaptureSession", "a routing control is still pending")
        for o in self.operations:
            if self.op_records[o.id].outcome in ("MISSING", "FAILED"):
                raise ModelError("CaptureSession", f"scheduled intervention {o.id} did not complete")

    def routing_control(self, path: str, token_rows: int) -> Optional[Operation]:
        if not self.step_open:
            raise ModelError("CaptureSession", "no capture step is open")
        ops = self._ops_at(path, routing=True)
        if any(self.op_records[o.id].outcome in ("APPLIED", "FAILED") for o in ops):
            raise ModelError("CaptureSession", "routing point executed more than once in one step")
        active = [o for o in ops if self.op_records[o.id].outcome == "MISSING"]
        if not active:
            return None
        if self.pending:
            raise ModelError("CaptureSession", "a routing control is already pending")
        op = active[-1]
        if token_rows > self.routed_rows[0 if self.phase == PREFILL else 1]:
            raise ModelError("InvalidArgument", "more token rows than the request routes")  # record unchanged
        start, end = op.window
        end = token_rows if end is None else end
        record = self.op_records[op.id]
        if token_rows == 0 or start >= token_rows or end > token_rows:
            self.op_records[op.id] = Record("FAILED", "invalid", charged=record.charged)
            raise ModelError("InvalidArgument")
        if op.capture_original:
            b = token_rows * self.original_route_bytes
            hit = self.ledger.try_reserve(Usage(0, b, b, 0))
            if hit:
                self.op_records[op.id] = Record("FAILED", "limit", charged=record.charged)
                raise ModelError("BudgetExceeded", budget=hit[0], cumulative=hit[1])
            record.charged = record.charged + Usage(0, b, b, 0)
        self.pending = op
        return op

    def routing_applied(self, path: str, with_original: bool, fields_cost: Usage = Usage()) -> None:
        """``fields_cost``: what capturing the four routing fields costs (original and
        effective ids and coefficients), charged only when original evidence was asked for."""
        if not self.operations:
            raise ModelError("CaptureSession", "unsolicited routing result")
        if self.pending is None:
            raise ModelError("CaptureSession", "routing result has no pending control")
        if self.pending.target != path:
            raise ModelError("CaptureSession", "routing result does not match the pending control")
        op, self.pending = self.pending, None
        record = self.op_records[op.id]
        if op.capture_original:
            if not with_original:
                self.op_records[op.id] = Record("FAILED", "invalid", charged=record.charged)
                raise ModelError("InvalidArgument", "requested original routing decision is missing")
            hit = self.ledger.try_reserve(fields_cost)
            if hit:
                self.op_records[op.id] = Record("FAILED", "limit", charged=record.charged)
                raise ModelError("BudgetExceeded", budget=hit[0], cumulative=hit[1])
            record.charged = record.charged + fields_cost
        record.outcome = "APPLIED"

    def routing_failed(self, path: str) -> None:
        if self.pending is not None and self.pending.target == path:
            record = self.op_records[self.pending.id]
            self.op_records[self.pending.id] = Record("FAILED", "native", charged=record.charged)
            self.pending = None
            return
        if not self.operations or not self.step_open:
            return
        for o in self._ops_at(path, routing=True):
            record = self.op_records[o.id]
            if record.outcome == "MISSING":
                self.op_records[o.id] = Record("FAILED", "native", charged=record.charged)
