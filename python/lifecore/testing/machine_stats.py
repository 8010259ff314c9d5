"""What a lifecycle's state machine did, counted the same way for all three lifecycles.

Each lifecycle keeps one :class:`MachineStats` for every machine of it in the process (its
module's ``STATS``): the CLI reports progress from it, the benchmarks rates, and tests check
the rule mix (``print(STATS.report())`` shows a skewed one).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

__all__ = ["MachineStats", "Step"]

#: One executed step: the rule and its arguments (their reprs, by name).
Step = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class MachineStats:
    """Counters across every machine of one lifecycle in this process.

    - ``lifecycle``: the lifecycle's name (errors and reports name it); ``current``: the rule
      running now (an outcome noted outside a rule of its own counts for it);
    - ``runs``: machines constructed; ``steps``: rules run (a rule that calls another is one
      step); ``rules``: how often each rule ran;
    - ``outcomes``: ``(rule, outcome) -> count``: what a rule noted, and ``err:<kind>`` for
      every call the model and lifecore refused alike;
    - ``events``: the lifecycle's own counters, declared in ``event_names`` and readable as
      attributes (``STATS.graphs_sealed``);
    - ``rule_seconds`` / ``invariant_seconds``: time inside rules and invariants (device,
      model and comparisons; Hypothesis's own machinery excluded);
    - ``trace``: None, or a list that gets every executed step (:data:`Step`): the workload,
      to compare two runs of the same seed;
    - ``on_run_end``: called with the stats after each machine's teardown (progress bars).
    """

    lifecycle: str = ""
    event_names: tuple[str, ...] = ()
    runs: int = 0
    steps: int = 0
    rules: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    events: Counter[str] = field(default_factory=Counter)
    rule_seconds: float = 0.0
    invariant_seconds: float = 0.0
    current: str = ""
    trace: Optional[list[Step]] = None
    on_run_end: Optional[Callable[["MachineStats"], None]] = None

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not fields: a declared event reads as an attribute.
        if name in self.__dict__.get("event_names", ()):
            return self.__dict__["events"][name]
        raise AttributeError(f"{type(self).__name__} of {self.__dict__.get('lifecycle') or 'a machine'!s} "
                             f"has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__.get("event_names", ()):
            self.events[name] = value
        else:
            super().__setattr__(name, value)

    def count(self, event: str, n: int = 1) -> None:
        """Adds ``n`` to one of the lifecycle's declared events."""
        if event not in self.event_names:
            raise ValueError(f"{event!r} is not an event of the {self.lifecycle or 'machine'} statistics "
                             f"(declared: {', '.join(self.event_names) or 'none'})")
        self.events[event] += n

    def note(self, rule: str, outcome: str) -> None:
        """Counts one outcome of ``rule``."""
        self.outcomes[(rule, outcome)] += 1

    def step(self, rule: str, arguments: dict[str, Any]) -> None:
        """Counts one rule run (and traces it when tracing)."""
        self.steps += 1
        self.rules[rule] += 1
        self.current = rule
        if self.trace is not None:
            self.trace.append((rule, tuple(sorted((k, repr(v)) for k, v in arguments.items()))))

    def run_ended(self) -> None:
        """Called at every machine's teardown: runs ``on_run_end`` with these stats, when one is set."""
        if self.on_run_end is not None:
            self.on_run_end(self)

    def reset(self) -> None:
        """Zeroes every counter (and empties the trace, when tracing)."""
        self.runs = self.steps = 0
        self.rules.clear()
        self.outcomes.clear()
        self.events.clear()
        self.rule_seconds = self.invariant_seconds = 0.0
        self.current = ""
        if self.trace is not None:
            self.trace.clear()

    def report(self) -> str:
        """Runs and steps, then each rule with its count and outcomes, then the events."""
        lines = [f"runs {self.runs}, steps {self.steps}"]
        for rule, n in sorted(self.rules.items(), key=lambda kv: -kv[1]):
            outs = {o: c for (r, o), c in self.outcomes.items() if r == rule}
            lines.append(f"  {rule:24} {n:6}  " + ", ".join(f"{o}={c}" for o, c in sorted(outs.items())))
        other = {(r, o): c for (r, o), c in self.outcomes.items() if r not in self.rules}
        for (r, o), c in sorted(other.items()):
            lines.append(f"  {r}/{o} = {c}")
        if self.event_names:
            lines.append("  " + ", ".join(f"{name}={self.events[name]}" for name in self.event_names))
        return "\n".join(lines)
