"""The ``lifecore`` command: ``info``, ``check``, ``fuzz`` (also ``fuzz --differential A,B``) and ``bench``.

``lifecore check`` is what to run after ``pip install .``: it lists the backends, runs a short
graph-capture state machine (differential against the reference model) on every available
backend (the registry's first, the mock, with both graph kinds), times a short replay benchmark
on the best available backend, prints a summary, and exits 0 only when every check passed.
Every list of backends here comes from the registry (``lifecore.backends()``). Hypothesis is imported only by the commands
that need it, so ``lifecore info`` works without it.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence, TextIO

import lifecore


@dataclass
class CheckResult:
    name: str
    target: str
    passed: bool
    detail: str


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def backends_table() -> str:
    rows = []
    for info in lifecore.backends():
        version = info.driver_version or "-"
        rows.append([info.name, "yes" if info.available else "no", version, info.device_name or "-",
                     info.reason or "-"])
    return _table(["backend", "available", "driver", "device", "reason / notes"], rows)


class _Progress:
    """A one-line progress bar on stderr, redrawn after every machine run."""

    def __init__(self, label: str, total: int, stream: TextIO = sys.stderr, width: int = 30) -> None:
        self.label, self.total, self.stream, self.width = label, max(total, 1), stream, width
        self.runs_at_start: Optional[int] = None

    def __call__(self, stats: Any) -> None:
        if self.runs_at_start is None:
            self.runs_at_start = stats.runs - 1
        done = min(stats.runs - self.runs_at_start, self.total)
        filled = self.width * done // self.total
        self.stream.write(f"\r{self.label:<24} [{'#' * filled}{'.' * (self.width - filled)}] "
                          f"{done}/{self.total} runs, {stats.steps} steps")
        self.stream.flush()

    def finish(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def _machine_settings(examples: int, steps: int, explain: bool) -> Any:
    from hypothesis import HealthCheck, Phase, settings

    # The explain phase re-runs a failure many times to annotate it: worth it in a long fuzz
    # run, not in a quick check.
    phases = list(Phase) if explain else [p for p in Phase if p is not Phase.explain]
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=True, phases=phases)


def _run_machine(backend: str, graphs: str, examples: int, steps: int, seed: Optional[int],
                 progress: bool, explain: bool = False) -> CheckResult:
    from lifecore.testing import STATS, run_stream_capture_machine

    target = f"{backend}/{graphs}"
    # Redraws belong on a terminal: in a log file they are only noise.
    bar = _Progress(f"machine {target}", examples) if progress and sys.stderr.isatty() else None
    steps_before, start = STATS.steps, time.perf_counter()
    STATS.on_run_end = bar
    try:
        run_stream_capture_machine(lambda: lifecore.Device(backend, graphs=graphs),
                                   settings=_machine_settings(examples, steps, explain), seed=seed)
    except Exception as error:  # a failed invariant or comparison, after shrinking
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return CheckResult("state machine", target, False, f"{type(error).__name__}: {detail}"[:160])
    finally:
        STATS.on_run_end = None
        if bar is not None:
            bar.finish()
    ran = STATS.steps - steps_before
    seconds = time.perf_counter() - start
    return CheckResult("state machine", target, ran > 0, f"{ran} steps in {seconds:.1f} s, every invariant held")


def _machine_targets() -> list[tuple[str, str]]:
    """Every available backend, in registry order: the first with both graph kinds, the others
    with the graphs their device picks."""
    names = lifecore.available_backends()
    targets = [(names[0], "hardware"), (names[0], "software")] if names else []
    for name in names[1:]:
        device = lifecore.Device(name)
        try:
            targets.append((name, device.graphs))
        finally:
            device.close()
    return targets


def cmd_info(args: argparse.Namespace) -> int:
    print(f"lifecore {lifecore.__version__}")
    print(backends_table())
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    print(f"lifecore {lifecore.__version__}")
    print(backends_table())
    print()
    results: list[CheckResult] = []
    infos = lifecore.backends()
    results.append(CheckResult("backends", "all", any(i.available for i in infos),
                               ", ".join(f"{i.name}: {'available' if i.available else 'unavailable'}" for i in infos)))
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        results.append(CheckResult("state machine", "-", False, "hypothesis is not installed"))
    else:
        try:
            targets = _machine_targets()
        except lifecore.LifecoreError as error:
            targets = []
            results.append(CheckResult("open the available backends", "all", False, str(error)[:160]))
        for backend, graphs in targets:
            results.append(_run_machine(backend, graphs, args.examples, args.steps, args.seed, progress=True))
    try:
        from lifecore.benchmarks.graph_replay import replay_vs_eager

        replay = replay_vs_eager(lambda: lifecore.Device("auto"), sizes=(100,), rounds=5, warmup=1,
                                 min_batch_s=0.002, frameworks=False)
        run = replay["runs"][0]
        eager, graph, ratio = run["eager"].summary, run["replay"].summary, run.ratios[0].summary
        results.append(CheckResult(
            "replay benchmark", replay["target"], bool(run.facts["correct"]),
            f"N={run.facts['N']}: eager {eager.median / 1e3:.2f} us per launch, replay {graph.median / 1e3:.3f} us "
            f"per node, {ratio.median:.1f}x [{ratio.q1:.1f} .. {ratio.q3:.1f}]"
            + ("" if run.facts["correct"] else "; REPLAY RESULT WRONG")))
    except Exception as error:
        results.append(CheckResult("replay benchmark", "auto", False, f"{type(error).__name__}: {error}"[:160]))

    print()
    print(_table(["check", "target", "result", "detail"],
                 [[r.name, r.target, "PASS" if r.passed else "FAIL", r.detail] for r in results]))
    failed = [r for r in results if not r.passed]
    if failed:
        print(f"\n{len(failed)} check(s) failed: " + ", ".join(f"{r.name} ({r.target})" for r in failed))
        return 1
    print("\nevery check passed")
    return 0


def cmd_differential(args: argparse.Namespace) -> int:
    """``lifecore fuzz --differential A,B``: the same seeded steps on two devices, compared."""
    from lifecore.testing.differential import parse_specs, run_differential

    try:
        specs = parse_specs(args.differential)
        report = run_differential(specs, steps=args.steps, seed=args.seed or 0,
                                  runs=args.examples if args.examples is not None else 5)
    except ValueError as error:
        print(f"lifecore fuzz --differential: {error}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0 if report.identical else 1


def cmd_fuzz(args: argparse.Namespace) -> int:
    if args.differential:
        return cmd_differential(args)
    if args.examples is None:
        args.examples = 100
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        print("lifecore fuzz needs hypothesis (pip install hypothesis)", file=sys.stderr)
        return 2
    graphs = ["hardware", "software"] if args.graphs == "both" else [args.graphs]
    results = [_run_machine(args.backend, g, args.examples, args.steps, args.seed, progress=True, explain=True)
               for g in graphs]
    print(_table(["check", "target", "result", "detail"],
                 [[r.name, r.target, "PASS" if r.passed else "FAIL", r.detail] for r in results]))
    return 0 if all(r.passed for r in results) else 1


def cmd_bench(args: argparse.Namespace) -> int:
    import json

    from lifecore.benchmarks import capture_cycle, graph_replay, state_machine
    from lifecore.benchmarks.harness import format_run

    def factory() -> Any:
        return lifecore.Device(args.backend)

    quick = args.quick
    rounds, warmup, batch = (5, 1, 0.001) if quick else (15, 2, 0.005)
    figures: dict[str, Any] = {}
    replay = graph_replay.replay_vs_eager(factory, rounds=rounds, warmup=warmup, min_batch_s=batch)
    figures["graph_replay"] = graph_replay.to_json(replay)
    for run in replay["runs"]:
        print(format_run(run))
    for name, reason in replay["skipped"].items():
        print(f"({name} skipped: {reason})")
    cycles = capture_cycle.capture_cycle_vs_model(factory, rounds=rounds, warmup=warmup, min_batch_s=batch)
    figures["capture_cycle"] = [run.to_json() for run in cycles]
    for run in cycles:
        print(format_run(run))
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        print("(state-machine rate skipped: hypothesis is not installed)")
    else:
        reference = _default_backend()
        machine = state_machine.machine_throughput(lambda: lifecore.Device(reference), examples=5 if quick else 20,
                                                   rounds=2 if quick else 3, backend=reference)
        figures["state_machine"] = machine.to_json()
        print(format_run(machine))
    if args.json == "-":
        json.dump(figures, sys.stdout, indent=2)
        print()
    elif args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)
    return 0


def _positive_int(text: str) -> int:
    """argparse type: an int of at least 1 (a bad value exits 2 with the usage)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _default_backend() -> str:
    """The registry's first available backend (the mock, which is always there)."""
    names = lifecore.available_backends()
    return names[0] if names else "auto"


def _backend_choices() -> str:
    return ", ".join(["auto", *lifecore.backend_names()])


def _backend_name(text: str) -> str:
    """argparse type: 'auto' or a registered backend that can open a device here."""
    if text == "auto":
        return text
    known = {info.name: info for info in lifecore.backends()}
    if text not in known:
        raise argparse.ArgumentTypeError(f"unknown backend {text!r} (known: {_backend_choices()})")
    if not known[text].available:
        raise argparse.ArgumentTypeError(f"backend {text!r} is not available here: {known[text].reason}")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lifecore", description="lifecore: lifecycles for GPU inference runtimes")
    parser.add_argument("--version", action="version", version=f"lifecore {lifecore.__version__}")
    default_backend, choices = _default_backend(), _backend_choices()
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="list the backends (name, available, driver, device, reason)").set_defaults(func=cmd_info)
    check = sub.add_parser("check", help="backends, a short state-machine run and a replay benchmark")
    check.add_argument("--examples", type=_positive_int, default=25, help="machine runs per target (default 25)")
    check.add_argument("--steps", type=_positive_int, default=50, help="steps per machine run (default 50)")
    check.add_argument("--seed", type=int, default=None, help="make the machine runs reproducible")
    check.set_defaults(func=cmd_check)
    fuzz = sub.add_parser("fuzz", help="a longer state-machine run")
    fuzz.add_argument("--backend", type=_backend_name, default=default_backend,
                      help=f"{choices} (default {default_backend})")
    fuzz.add_argument("--graphs", default="both", choices=["hardware", "software", "both"])
    fuzz.add_argument("--examples", type=_positive_int, default=None,
                      help="machine runs (default 100); with --differential, seeded runs (default 5)")
    fuzz.add_argument("--steps", type=_positive_int, default=100, help="steps per run (default 100)")
    fuzz.add_argument("--seed", type=int, default=None)
    fuzz.add_argument("--differential", metavar="A,B", default=None,
                      help=f"run the same seeded random steps on two devices ({choices}; "
                           "optionally /hardware or /software) and exit 1 on the first difference")
    fuzz.set_defaults(func=cmd_fuzz)
    bench = sub.add_parser("bench", help="the graph-capture benchmarks (sides interleaved in one run, medians with quartiles)")
    bench.add_argument("--backend", type=_backend_name, default=default_backend,
                       help=f"{choices} (default {default_backend})")
    bench.add_argument("--quick", action="store_true", help="fewer repetitions")
    bench.add_argument("--json", metavar="PATH", default=None, help="also write the figures as JSON ('-': standard output)")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except lifecore.LifecoreError as error:
        print(f"lifecore {args.command}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
