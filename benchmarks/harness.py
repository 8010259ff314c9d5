"""The one harness every lifecore benchmark uses.

Sides run interleaved in one process (A B A B ... with two sides, A B C A B C ... with
more), so drift on a shared machine hits every side alike. Each round times one batch of
each side with ``time.perf_counter_ns``; a sample is nanoseconds per unit of work (a launch, a
node, a step, a lifecycle), one sample per side and round. A figure is the median of its
samples and its spread the interquartile range: the first and third quartiles, linearly
interpolated between the sorted samples (numpy's default method). A ratio is taken per round
(this round's A over this round's B) and reported the same way, so it carries its own spread; a
round where either time is not positive has none (left out, counted, and said beside it).

The formatter prints only what was measured here (medians, quartiles, rounds) and facts the
benchmark counted or checked itself (``Run.facts``); ``Run.to_json`` gives the same figures
with every sample.

    run = compare(eager, replay, names=("eager", "replay"), rounds=15)
    print(format_run(run))
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, Union

__all__ = ["Side", "Summary", "Measurement", "Ratio", "Run", "interleave", "compare", "measure", "format_run",
           "format_duration", "SPREAD"]

Clock = Callable[[], int]
SPREAD = "interquartile range: first and third quartiles, linear interpolation between sorted samples"
MAX_INNER = 1 << 20


@dataclass
class Side:
    """One thing to time: ``fn`` does ``per`` units of work per call. ``before`` / ``after`` run
    around every batch, outside the timed span (e.g. attach hooks, then remove them)."""

    fn: Callable[[], object]
    per: int = 1
    unit: str = "call"
    rate: bool = False  # also print units per second
    before: Optional[Callable[[], object]] = None
    after: Optional[Callable[[], object]] = None

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"Side: fn must be callable, got {type(self.fn).__name__}")
        if isinstance(self.per, bool) or not isinstance(self.per, int) or self.per < 1:
            raise ValueError(f"Side: per must be a whole number of at least 1, got {self.per!r}")


def _json_number(value: float) -> Optional[float]:
    """A figure as strict JSON holds it: null for a round (or a summary) with no ratio."""
    return None if value != value else value


@dataclass(frozen=True)
class Summary:
    """Median and quartiles of a list of samples."""

    median: float
    q1: float
    q3: float

    @classmethod
    def of(cls, values: Sequence[float]) -> "Summary":
        if not values:
            raise ValueError("Summary.of: no samples")
        if len(values) == 1:
            return cls(values[0], values[0], values[0])
        q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
        return cls(median, q1, q3)

    def to_json(self) -> dict[str, Optional[float]]:
        return {"median": _json_number(self.median), "q1": _json_number(self.q1), "q3": _json_number(self.q3)}


@dataclass(frozen=True)
class Measurement:
    """One side's samples: nanoseconds per unit, one per round."""

    name: str
    samples_ns: tuple[float, ...]
    unit: str = "call"
    per: int = 1
    inner: int = 1  # calls per timed batch
    rate: bool = False

    @property
    def summary(self) -> Summary:
        return Summary.of(self.samples_ns)

    @property
    def rate_summary(self) -> Summary:
        """Units per second, of each round's rate (with an even count of rounds the median of
        the rates is not the rate of the median time). A round of no time (a coarse clock) has
        no rate: then the times' quartiles are turned into rates (swapped: a longer time is a
        lower rate), an infinite one where a time is not positive."""
        if all(ns > 0 for ns in self.samples_ns):
            return Summary.of([_per_second(ns) for ns in self.samples_ns])
        s = self.summary
        return Summary(_per_second(s.median), _per_second(s.q3), _per_second(s.q1))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"unit": self.unit, "per": self.per, "inner": self.inner,
                               **{f"{k}_ns": v for k, v in self.summary.to_json().items()},
                               "samples_ns": list(self.samples_ns)}
        if self.rate:
            out["per_second"] = self.rate_summary.to_json()
        return out


@dataclass(frozen=True)
class Ratio:
    """``numerator`` over ``denominator``, per round. A round where either time is not positive
    (a derived side below the noise, a coarse clock's zero) has no ratio: its sample is NaN,
    left out of the summary and counted (``undefined_rounds``)."""

    numerator: str
    denominator: str
    samples: tuple[float, ...]

    @property
    def name(self) -> str:
        return f"{self.numerator} / {self.denominator}"

    @property
    def defined(self) -> tuple[float, ...]:
        """The rounds' ratios where both times were positive."""
        return tuple(r for r in self.samples if r == r)

    @property
    def undefined_rounds(self) -> int:
        return len(self.samples) - len(self.defined)

    @property
    def summary(self) -> Summary:
        """Of the defined rounds; all NaN when no round is."""
        defined = self.defined
        return Summary.of(defined) if defined else Summary(float("nan"), float("nan"), float("nan"))

    def to_json(self) -> dict[str, Any]:
        return {"numerator": self.numerator, "denominator": self.denominator, **self.summary.to_json(),
                "undefined_rounds": self.undefined_rounds, "samples": [_json_number(r) for r in self.samples]}


@dataclass
class Run:
    """What one interleaved run measured, plus the benchmark's own counted or checked facts."""

    title: str
    rounds: int
    warmup: int
    measurements: dict[str, Measurement]
    ratios: list[Ratio] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Measurement:
        return self.measurements[name]

    def ratio(self, numerator: str, denominator: str) -> Ratio:
        """Adds (and returns) the per-round ratio of two sides' times per unit (NaN in a round
        where either is not positive: see Ratio)."""
        a, b = self._side(numerator), self._side(denominator)
        ratio = Ratio(numerator, denominator, tuple(x / y if x > 0 and y > 0 else float("nan")
                                                    for x, y in zip(a.samples_ns, b.samples_ns)))
        self.ratios.append(ratio)
        return ratio

    def difference(self, name: str, minuend: str, *subtrahends: str, unit: Optional[str] = None,
                   per: int = 1) -> Measurement:
        """Adds (and returns) a side derived per round: ``minuend`` minus the ``subtrahends``
        (times per unit; e.g. a step with an observe minus the same step without), divided by
        ``per`` (a forward's extra time over its points, say, with ``unit="point"``)."""
        first = self._side(minuend)
        others = [self._side(s) for s in subtrahends]
        samples = tuple((x - sum(o.samples_ns[i] for o in others)) / per for i, x in enumerate(first.samples_ns))
        derived = Measurement(name, samples, unit or first.unit, first.per * per, first.inner)
        self.measurements[name] = derived
        return derived

    def _side(self, name: str) -> Measurement:
        if name not in self.measurements:
            raise KeyError(f"{self.title}: no side named {name!r} (sides: {', '.join(self.measurements)})")
        return self.measurements[name]

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "rounds": self.rounds, "warmup": self.warmup, "spread": SPREAD,
                "sides": {name: m.to_json() for name, m in self.measurements.items()},
                "ratios": {r.name: r.to_json() for r in self.ratios}, "facts": dict(self.facts)}


def _per_second(ns: float) -> float:
    return 1e9 / ns if ns > 0 else float("inf")


def _count(name: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be a whole number of at least {least}, got {value!r}")
    return value


def _batch(side: Side, calls: int, clock: Clock) -> int:
    """Nanoseconds for ``calls`` calls of the side (``before`` / ``after`` outside the span)."""
    if side.before is not None:
        side.before()
    fn = side.fn
    try:
        start = clock()
        for _ in range(calls):
            fn()
        return clock() - start
    finally:
        if side.after is not None:
            side.after()


def interleave(sides: Mapping[str, Union[Side, Callable[[], object]]], *, rounds: int = 15, warmup: int = 2,
               inner: Union[None, int, Mapping[str, int]] = None, min_batch_s: float = 0.002,
               clock: Clock = time.perf_counter_ns, title: str = "") -> Run:
    """Times every side once per round, in the order given, ``warmup`` unrecorded rounds first.

    ``inner``: calls per timed batch, one number for all sides or one per side; None picks it
    per side by doubling until a batch lasts ``min_batch_s`` (those batches count as warmup)."""
    if not sides:
        raise ValueError("interleave: no sides to time")
    rounds, warmup = _count("rounds", rounds, 1), _count("warmup", warmup, 0)
    if not min_batch_s > 0:
        raise ValueError(f"min_batch_s must be positive, got {min_batch_s!r}")
    prepared = {name: s if isinstance(s, Side) else Side(s) for name, s in sides.items()}
    if isinstance(inner, Mapping):
        unknown = set(inner) - set(prepared)
        if unknown:
            raise ValueError(f"inner names sides that do not exist: {', '.join(sorted(unknown))}")
        missing = set(prepared) - set(inner)
        if missing:
            raise ValueError(f"inner gives no count for: {', '.join(sorted(missing))}")
        calls = {name: _count(f"inner[{name!r}]", inner[name], 1) for name in prepared}
    elif inner is not None:
        calls = dict.fromkeys(prepared, _count("inner", inner, 1))
    else:
        calls = {}
        floor = int(min_batch_s * 1e9)
        for name, side in prepared.items():
            n = 1
            while _batch(side, n, clock) < floor and n < MAX_INNER:
                n *= 2
            calls[name] = n
    samples: dict[str, list[float]] = {name: [] for name in prepared}
    for index in range(warmup + rounds):
        for name, side in prepared.items():
            elapsed = _batch(side, calls[name], clock)
            if index >= warmup:
                samples[name].append(elapsed / (calls[name] * side.per))
    measurements = {name: Measurement(name, tuple(samples[name]), side.unit, side.per, calls[name], side.rate)
                    for name, side in prepared.items()}
    return Run(title, rounds, warmup, measurements)


def compare(a: Union[Side, Callable[[], object]], b: Union[Side, Callable[[], object]], *, rounds: int = 15,
            warmup: int = 2, inner: Union[None, int, Mapping[str, int]] = None, min_batch_s: float = 0.002,
            names: tuple[str, str] = ("A", "B"), clock: Clock = time.perf_counter_ns, title: str = "") -> Run:
    """A and B interleaved (A B A B ...); the run carries the per-round ratio A / B."""
    if len(names) != 2 or names[0] == names[1]:
        raise ValueError(f"compare: names must be two different names, got {names!r}")
    run = interleave({names[0]: a, names[1]: b}, rounds=rounds, warmup=warmup, inner=inner,
                     min_batch_s=min_batch_s, clock=clock, title=title)
    run.ratio(*names)
    return run


def measure(fn: Union[Side, Callable[[], object]], *, rounds: int = 15, warmup: int = 2, inner: Optional[int] = None,
            min_batch_s: float = 0.002, name: str = "time", clock: Clock = time.perf_counter_ns,
            title: str = "") -> Run:
    """One side alone (when there is nothing to set beside it)."""
    return interleave({name: fn}, rounds=rounds, warmup=warmup, inner=inner, min_batch_s=min_batch_s,
                      clock=clock, title=title)


# Beside a derived time, or a ratio of one, whose median is not positive: no time is negative,
# so the figure says only that the run was too noisy to resolve it (rerun with more rounds).
NOT_POSITIVE = "not positive: below this run's noise, no measurement"
# Beside one whose median is positive but whose quartiles reach zero or below: a figure, but
# one this run's noise is as large as.
WITHIN_NOISE = "its spread reaches zero or below: within this run's noise"


# Beside a ratio no round of which had both times positive.
NO_RATIO = "no round had both times positive: below this run's noise, no measurement"


def _noise_note(s: Any) -> str:
    if s.median <= 0:
        return f"  ({NOT_POSITIVE})"
    return f"  ({WITHIN_NOISE})" if s.q1 <= 0 else ""


def _ratio_note(run: Run, ratio: Ratio) -> str:
    """What a ratio's figure rests on: the rounds left out, and an operand (a derived side)
    that is itself below or within this run's noise, which the ratio of two such figures hides."""
    if not ratio.defined:
        return f"  ({NO_RATIO})"
    notes = []
    if ratio.undefined_rounds:
        notes.append(f"{ratio.undefined_rounds} of {len(ratio.samples)} rounds left out: a time not positive")
    for name in (ratio.numerator, ratio.denominator):
        s = run.measurements[name].summary
        if s.median <= 0 or s.q1 <= 0:
            state = "not positive" if s.median <= 0 else "within this run's noise"
            notes.append(f"'{name}' is {state}")
    return f"  ({'; '.join(notes)})" if notes else ""


def format_duration(ns: float) -> str:
    """A time in the unit that keeps three significant figures readable (ns, us, ms, s)."""
    magnitude = abs(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if magnitude >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def format_run(run: Run) -> str:
    """The run as text: each side's median time per unit [quartiles], each ratio likewise,
    then the facts. Nothing is printed that the run did not measure or count."""
    rounds = f"{run.rounds} rounds" + (" interleaved" if len(run.measurements) > 1 else "")  # one side: nothing to interleave
    lines = [f"{run.title} ({rounds}, median [q1 .. q3])" if run.title else f"({rounds}, median [q1 .. q3])"]
    rows: list[tuple[str, str]] = []
    for m in run.measurements.values():
        s = m.summary
        text = (f"{format_duration(s.median)} per {m.unit}  "
                f"[{format_duration(s.q1)} .. {format_duration(s.q3)}]")
        if m.rate:
            r = m.rate_summary
            text += f"   {_number(r.median)} {m.unit}s/s [{_number(r.q1)} .. {_number(r.q3)}]"
        text += _noise_note(s)  # only a difference of sides (derived) can be: what it measures drowned in noise
        rows.append((m.name, text))
    for ratio in run.ratios:
        s = ratio.summary
        figure = f"{s.median:.3g}x  [{s.q1:.3g} .. {s.q3:.3g}]" if ratio.defined else "-"
        rows.append((ratio.name, figure + _ratio_note(run, ratio)))
    width = max(len(name) for name, _ in rows)
    lines += [f"  {name.ljust(width)}  {text}" for name, text in rows]
    if run.facts:
        lines.append("  " + ", ".join(f"{k}: {v}" for k, v in run.facts.items()))
    return "\n".join(lines)
