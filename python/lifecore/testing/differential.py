"""Differential runs: the same seeded random step sequence on two devices, compared step by step.

A run issues allocations, frees, writes, fills, launches of the built-in kernels, capture
transitions (in and out of order), replays, reads, syncs and the refusals a hardware capture
owes (a read inside a recording, an allocation that becomes a memory node, out-of-order
transitions) to two :class:`lifecore.Device` objects in lockstep. After every step it compares
what the caller can observe: the bytes read, the exception class and its cause (the capture
message, the refusal's cause, the driver status code), the capture state and the device's
graph and window counts. The first difference stops the run and is reported with the whole
step list.

Data stays exactly representable: values are small integers as float32 and the scale factors
are powers of two, so a fused multiply-add and a multiply then add give the same bits on every
device. NaN payloads are hardware-specific, so a read maps every NaN to one quiet NaN before
comparing. Memory nothing has written holds whatever the allocator left there (zeros on the
emulated device, an earlier buffer's values on a GPU): a buffer's contents count as defined once a
write or fill has run on all of it, and a launch's output once all its inputs are defined (a
recorded write, fill or launch counts at each replay); a read of a buffer that is not defined
compares only that it succeeded. What depends on timing rather than behaviour is kept out: a freed slice returns to
the pool once the GPU passes its fence, so frees happen only outside capture windows and each
window starts after ``Device.cleanup()`` has settled the pool; graphs are not replayed into a
recording (a child-graph node, which the emulated device does not model).

Used by ``lifecore fuzz --differential A,B`` and ``python -m lifecore.benchmarks.differential``.
"""

from __future__ import annotations

import hashlib
import random
import struct
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence, get_args

import lifecore
from lifecore._stub_types import GraphsOption

__all__ = ["DeviceSpec", "Step", "Divergence", "DifferentialReport", "parse_specs", "run_differential"]

WORD_SIZES = (4, 16, 64)  # float32 words per buffer: three size classes
SCALES = (1.0, -1.0, 2.0, 0.5, -2.0)
CANONICAL_NAN = 0x7FC00000
OWNERS = (0, 1)


# A spec's graphs part as the mode Device takes: a table made from the typed literal, so a lookup
# turns the text into it (and nothing spells the modes again).
_GRAPHS_OPTIONS: dict[str, GraphsOption] = {mode: mode for mode in get_args(GraphsOption)}


@dataclass(frozen=True)
class DeviceSpec:
    """``backend`` or ``backend/graphs``: a registered backend's name or ``auto``, and
    ``hardware``, ``software`` or ``auto`` (the default: what ``Device(backend)`` picks)."""

    backend: str
    graphs: GraphsOption

    @classmethod
    def parse(cls, text: str) -> "DeviceSpec":
        backend, _, graphs = text.strip().partition("/")
        known = ["auto", *lifecore.backend_names()]
        if backend not in known:
            raise ValueError(f"unknown backend {backend!r} in {text!r}: expected one of {', '.join(known)}")
        mode = _GRAPHS_OPTIONS.get(graphs or "auto")
        if mode is None:
            raise ValueError(f"unknown graphs mode {graphs!r} in {text!r}: expected hardware or software")
        return cls(backend, mode)

    def open(self) -> Any:
        return lifecore.Device(self.backend, graphs=self.graphs)

    def resolved(self, device: Any) -> "DeviceSpec":
        """This spec with ``auto`` replaced by what ``device`` (opened from it) turned out to be."""
        return replace(self, backend=device.backend, graphs=device.graphs)

    def __str__(self) -> str:
        return f"{self.backend}/{self.graphs}"


def parse_specs(text: str) -> tuple[DeviceSpec, DeviceSpec]:
    """``"A,B"`` into two specs (ValueError for anything else)."""
    parts = [p for p in text.split(",") if p.strip()]
    if len(parts) != 2:
        names = ", ".join(["auto", *lifecore.backend_names()])
        raise ValueError(f"expected two devices as A,B (each one of {names}, optionally /hardware or /software), "
                         f"got {text!r}")
    return DeviceSpec.parse(parts[0]), DeviceSpec.parse(parts[1])


@dataclass
class Step:
    index: int
    op: str
    args: dict[str, Any]

    def __str__(self) -> str:
        text = ", ".join(f"{k}={v}" for k, v in self.args.items())
        return f"#{self.index} {self.op}({text})"


Outcome = tuple[Any, ...]


@dataclass
class Divergence:
    step: Step
    outcomes: tuple[Outcome, Outcome]
    steps: list[tuple[Step, Outcome]]  # every step up to and including the divergent one, with A's outcome

    def describe(self, specs: Sequence[DeviceSpec]) -> str:
        lines = [f"divergence at step {self.step}:",
                 f"  {specs[0]}: {self.outcomes[0]}", f"  {specs[1]}: {self.outcomes[1]}", "steps:"]
        lines += [f"  {step}  -> {outcome}" for step, outcome in self.steps]
        return "\n".join(lines)


@dataclass
class DifferentialReport:
    specs: tuple[DeviceSpec, DeviceSpec]
    seeds: list[int] = field(default_factory=list)  # every run begun, the last one perhaps cut off
    completed: int = 0  # runs whose every step was compared
    steps: int = 0
    ops: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)
    reads_compared: int = 0
    graphs_sealed: int = 0
    replays: int = 0
    divergence: Optional[Divergence] = None

    @property
    def identical(self) -> bool:
        return self.divergence is None

    def summary(self) -> str:
        a, b = self.specs
        lines = [f"differential {a} vs {b}: {len(self.seeds)} run(s) (seeds {self.seeds[:1]}..), "
                 f"{self.steps} steps, {self.reads_compared} reads compared, {self.graphs_sealed} graphs sealed, "
                 f"{self.replays} replays",
                 "ops: " + ", ".join(f"{op}={n}" for op, n in sorted(self.ops.items())),
                 "refusals: " + (", ".join(f"{cause}={n}" for cause, n in sorted(self.refusals.items())) or "none")]
        if self.divergence is None:
            lines.append("every step gave identical results on both devices")
        else:
            lines.append(self.divergence.describe(self.specs))
        return "\n".join(lines)


def _canonical_read(data: bytes) -> tuple[str, tuple[float, ...]]:
    words = list(struct.unpack(f"<{len(data) // 4}I", data))
    words = [CANONICAL_NAN if (w & 0x7F800000) == 0x7F800000 and (w & 0x007FFFFF) else w for w in words]
    canonical = struct.pack(f"<{len(words)}I", *words)
    head = struct.unpack(f"<{min(4, len(words))}f", canonical[:16])
    return hashlib.sha256(canonical).hexdigest()[:16], tuple(round(v, 3) for v in head)


def _refusal_cause(error: BaseException) -> str:
    """What a refusal is about, without the backend's own call names."""
    text = str(error)
    if isinstance(error, lifecore.DriverError):
        return f"status {error.code}"
    if isinstance(error, lifecore.CaptureStateError):
        return text
    if isinstance(error, lifecore.CaptureRefusedError):
        for cause in ("memory node", "invalidated", "belongs to owner", "unsupported", "queued"):
            if cause in text:
                return cause
        return "other"
    return ""


#: What a read of a buffer nothing has defined gives (see the module's documentation).
UNDEFINED = ("undefined",)

# What a write, fill or launch does to the definedness of buffers, as it runs or as a graph that
# recorded it replays: (inputs, output); a write or fill has no inputs.
_Effect = tuple[tuple[Any, ...], Any]


class _Runner:
    """One device and the handles the steps refer to by position."""

    def __init__(self, spec: DeviceSpec) -> None:
        self.device = spec.open()
        self.stream = self.device.stream()
        self.buffers: list[tuple[Any, int]] = []  # (Buffer, words)
        self.graphs: list[Any] = []
        # Definedness (see the module's documentation): the ids of the buffers whose every word
        # some write, fill or launch of defined inputs has set; what the open recording would do
        # at a replay; what each sealed graph does (beside self.graphs).
        self.defined: set[int] = set()
        self.recording: list[_Effect] = []
        self.graph_effects: list[list[_Effect]] = []

    def _apply_effects(self, effects: Sequence[_Effect]) -> None:
        for inputs, output in effects:
            if all(id(buf) in self.defined for buf in inputs):
                self.defined.add(id(output))
            else:
                self.defined.discard(id(output))

    def _effect(self, recording: bool, inputs: tuple[Any, ...], output: Any) -> None:
        """A write, fill or launch that succeeded: it runs now, or at each replay of the recording."""
        if recording:
            self.recording.append((inputs, output))
        else:
            self._apply_effects([(inputs, output)])

    def close(self) -> None:
        self.stream.abort_capture()
        self.device.close()

    def observe(self) -> tuple[str, int, int]:
        stats = self.device.memory_stats()
        return (self.stream.capture_state.variant.name, stats["graphs_alive"], stats["windows_active"])

    def apply(self, step: Step) -> Outcome:
        try:
            value = self._do(step)
        except lifecore.LifecoreError as error:
            return ("error", type(error).__name__, _refusal_cause(error)) + self.observe()
        return ("ok", value) + self.observe()

    def _do(self, step: Step) -> Any:
        s, a = self.stream, step.args
        op = step.op
        recording = s.capture_state.variant.name == "CAPTURE"
        if op == "alloc":
            self.buffers.append((s.alloc(4 * a["words"]), a["words"]))
            return None
        if op == "free":
            buf, _ = self.buffers.pop(a["buf"])
            buf.free()
            self.defined.discard(id(buf))  # the next Buffer object may get this one's id
            return None
        if op == "write":
            buf, words = self.buffers[a["buf"]]
            s.write(buf, struct.pack(f"<{words}f", *a["values"][:words]))
            self._effect(recording, (), buf)
            return None
        if op == "fill":
            buf = self.buffers[a["buf"]][0]
            s.fill(buf, lifecore.float_bits(a["value"]))
            self._effect(recording, (), buf)
            return None
        if op == "launch":
            bufs = [self.buffers[i][0] for i in a["bufs"]]
            n = self.buffers[a["bufs"][0]][1]  # every word: one block of 64 threads, n <= 64
            kernels = lifecore.kernels
            if a["kernel"] == "axpy_info_f32":  # y = a x + y
                s.launch(kernels.axpy_info_f32, 1, 64, bufs[:2], info=[n, lifecore.float_bits(a["a"])])
                self._effect(recording, (bufs[0], bufs[1]), bufs[1])
            elif a["kernel"] == "add_f32":  # out = x + y
                s.launch(kernels.add_f32, 1, 64, [n, *bufs[:3]])
                self._effect(recording, (bufs[0], bufs[1]), bufs[2])
            else:  # axpy_f32: y = a x + y; scale_f32: y = a x
                s.launch(getattr(kernels, a["kernel"]), 1, 64, [n, a["a"], *bufs[:2]])
                inputs = (bufs[0],) if a["kernel"] == "scale_f32" else (bufs[0], bufs[1])
                self._effect(recording, inputs, bufs[1])
            return None
        if op == "read":
            buf = self.buffers[a["buf"]][0]
            data = s.read(buf)
            return _canonical_read(data) if id(buf) in self.defined else UNDEFINED
        if op == "sync":
            s.sync()
            return None
        if op == "prepare":
            if self.stream.capture_state.variant.name == "NO_CAPTURE":
                # Freed slices return to the pool when the GPU has passed their fence, which is
                # timing, not behaviour: settle it so every window starts from the same pool.
                self.device.cleanup()
            s.graph_prepare(a["owner"])
            return None
        if op == "begin":
            s.begin_capture()
            self.recording = []
            return None
        if op == "end":
            recorded = self.recording
            try:
                graph = s.end_capture(a["caller"])
            except BaseException:
                if s.capture_state.variant.name != "CAPTURE":  # refused and discarded
                    self.recording = []
                raise
            self.recording = []
            self.graphs.append(graph)
            self.graph_effects.append(recorded)
            return "graph"
        if op == "abort":
            s.abort_capture()
            self.recording = []
            return None
        if op == "replay":
            self.graphs[a["graph"]].replay()
            self._apply_effects(self.graph_effects[a["graph"]])
            return None
        if op == "destroy":
            self.graphs.pop(a["graph"]).destroy()
            self.graph_effects.pop(a["graph"])
            return None
        raise AssertionError(f"unknown step {op}")


def _next_step(rng: random.Random, index: int, runner: _Runner) -> Step:
    """A random step that refers only to handles that exist (the runners agree on them)."""
    variant = runner.stream.capture_state.variant.name
    buffers = runner.buffers
    # Mostly the lifecycle in order (so graphs get sealed and replayed), with every
    # out-of-order transition and every refusal still drawn now and then.
    recording = variant == "CAPTURE"
    choices: list[tuple[str, float]] = [
        ("alloc", 4 if len(buffers) < 8 else 1),
        ("prepare", 3 if variant == "NO_CAPTURE" else 0.3),
        ("begin", 4 if variant == "PREPARE" else 0.3),
        ("end", 3 if recording else 0.3),
        ("abort", 0.3), ("sync", 0.2 if recording else 1)]
    if buffers:
        # Frees only outside windows: inside one, whether a freed slice is back in the pool in
        # time for the next allocation depends on the GPU's progress (see _Runner.apply, prepare).
        choices += [("write", 3), ("fill", 2), ("launch", 8), ("read", 0.4 if recording else 3),
                    ("free", 1 if variant == "NO_CAPTURE" else 0)]
    if runner.graphs and variant != "CAPTURE":  # a graph launched into a capture is not modelled by the emulated device
        choices += [("replay", 4), ("destroy", 1)]
    ops, weights = zip(*choices)
    op = rng.choices(ops, weights)[0]
    if op == "alloc":
        return Step(index, op, {"words": rng.choice(WORD_SIZES)})
    if op in ("free", "read", "fill", "write"):
        args: dict[str, Any] = {"buf": rng.randrange(len(buffers))}
        if op == "fill":
            args["value"] = float(rng.randint(-8, 8))
        if op == "write":
            args["values"] = [float(rng.randint(-8, 8)) for _ in range(buffers[args["buf"]][1])]
        return Step(index, op, args)
    if op == "launch":
        kernel = rng.choice(("axpy_f32", "scale_f32", "add_f32", "axpy_info_f32"))
        words = buffers[rng.randrange(len(buffers))][1]
        same = [i for i, (_, w) in enumerate(buffers) if w == words]
        needed = 3 if kernel == "add_f32" else 2
        picked = [rng.choice(same) for _ in range(needed)]
        return Step(index, op, {"kernel": kernel, "a": rng.choice(SCALES), "bufs": picked})
    if op == "prepare":
        return Step(index, op, {"owner": 0 if rng.random() < 0.85 else rng.choice(OWNERS)})
    if op == "end":
        return Step(index, op, {"caller": 0 if rng.random() < 0.85 else 1})
    if op in ("replay", "destroy"):
        return Step(index, op, {"graph": rng.randrange(len(runner.graphs))})
    return Step(index, op, {})


def run_differential(specs: tuple[DeviceSpec, DeviceSpec], *, steps: int = 200, seed: int = 0,
                     runs: int = 1, report: Optional[DifferentialReport] = None) -> DifferentialReport:
    """Runs ``runs`` sequences of ``steps`` steps (seeds ``seed``, ``seed + 1``, ...) on both devices.

    Stops at the first divergence (``report.divergence``)."""
    report = report or DifferentialReport(specs)
    for run in range(runs):
        run_seed = seed + run
        report.seeds.append(run_seed)
        rng = random.Random(run_seed)
        first, second = _Runner(specs[0]), _Runner(specs[1])
        # The report names what was opened: ``auto`` resolved to the backend and graphs chosen.
        report.specs = (specs[0].resolved(first.device), specs[1].resolved(second.device))
        try:
            if first.device.graphs != second.device.graphs:
                raise ValueError(f"the devices capture differently ({first.device.graphs} vs "
                                 f"{second.device.graphs} graphs): pick the same graphs mode for both")
            history: list[tuple[Step, Outcome]] = []
            for index in range(steps):
                step = _next_step(rng, index, first)
                outcomes = (first.apply(step), second.apply(step))
                history.append((step, outcomes[0]))
                report.steps += 1
                report.ops[step.op] += 1
                if outcomes[0] != outcomes[1]:
                    report.divergence = Divergence(step, outcomes, history)
                    return report
                outcome = outcomes[0]
                if outcome[0] == "error":
                    report.refusals[f"{step.op}: {outcome[1]}" + (f" ({outcome[2]})" if outcome[2] else "")] += 1
                elif step.op == "read" and outcome[1] != UNDEFINED:
                    report.reads_compared += 1  # of defined memory: an undefined read compares no bytes
                elif step.op == "end":
                    report.graphs_sealed += 1
                elif step.op == "replay":
                    report.replays += 1
            report.completed += 1
        finally:
            first.close()
            second.close()
    return report
