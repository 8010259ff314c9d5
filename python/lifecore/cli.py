"""The ``lifecore`` command: ``info``, ``check``, ``fuzz`` (also ``fuzz --differential A,B``), ``bench`` and ``demo``.

``lifecore check`` is what to run after ``pip install .``: it lists the backends, runs each
lifecycle's short differential state machine (graph capture on every available backend, the
registry's first with both graph kinds; sequence sessions on host pages and on every available
backend; capture sessions on the counting and the numpy capture backends), times a short replay
benchmark, prints a summary and a coverage table (every transition and outcome of each
lifecycle, and how often the run exercised it), and exits 0 only when every check passed.
``--require cuda`` (or any backend, repeatable) makes a backend that cannot open a device here a
usage error, so a GPU job does not pass on the mock alone.

A failing machine run is reproducible: its seed, the falsifying steps Hypothesis found, the
reproduction blob and the command that replays it are printed and saved to a file. Every list
of backends here comes from the registry (``lifecore.backends()``). Hypothesis is imported only
by the commands that need it, so ``lifecore info`` works without it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import io
import json
import math
import os
import random
import re
import secrets
import shlex
import shutil
import signal
import sys
import tempfile
import textwrap
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence, Union, TextIO, cast, get_args

import lifecore
from lifecore._stub_types import GraphsMode

LIFECYCLES = ("graph", "sequence", "capture")
HOST = "host"  # the sequence target on host page memory
CAPTURE_BACKENDS = ("counting", "numpy")
BLOB = re.compile(r"@reproduce_failure\(\s*(['\"])([^'\"]+)\1\s*,\s*b(['\"])([^'\"]*)\3\s*\)")


@dataclass
class Target:
    """One thing a lifecycle's machine runs against, named as the tables print it."""

    lifecycle: str
    label: str
    make: Callable[[], Any]  # builds one machine (imports Hypothesis on first call)
    machine: Callable[[], Any]  # the machine class (imported lazily)

    def replay_args(self) -> list[str]:
        return ["--lifecycle", self.lifecycle, "--target", self.label]


@dataclass
class CheckResult:
    name: str
    target: str
    passed: bool
    detail: str
    lifecycle: str = ""
    rules: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    failure: Optional[dict[str, Any]] = None
    # What a passing row must not hide (a run that tested almost nothing), also after the table.
    warnings: list[str] = field(default_factory=list)
    incomplete: bool = False  # an interrupt ended it before its runs did

    @property
    def word(self) -> str:
        """The result column: PASS, FAIL, or INCOMPLETE for a target an interrupt cut short."""
        return "PASS" if self.passed else ("INCOMPLETE" if self.incomplete and self.failure is None else "FAIL")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"check": self.name, "target": self.target, "passed": self.passed, "detail": self.detail}
        if self.lifecycle:
            out["lifecycle"] = self.lifecycle
            out["rules"] = dict(self.rules)
            out["outcomes"] = {f"{r}: {o}": n for (r, o), n in self.outcomes.items()}
        if self.warnings:
            out["warnings"] = list(self.warnings)
        if self.incomplete:
            out["incomplete"] = True
        if self.failure is not None:
            out["failure"] = self.failure
        return out


def _width() -> int:
    """The terminal's columns (``COLUMNS`` when set); off a terminal, lines are not wrapped, so
    a log keeps one line per row."""
    return shutil.get_terminal_size((10_000, 24)).columns


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], flex: int = -1, width: Optional[int] = None) -> str:
    """Columns padded to their widest cell; when the table is wider than ``width`` (default:
    the terminal), column ``flex`` is narrowed and its cells wrapped onto further lines."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    flex %= len(headers)
    room = (width or _width()) - 1 - sum(w for i, w in enumerate(widths) if i != flex) - 2 * (len(headers) - 1)
    widths[flex] = max(min(widths[flex], room), len(headers[flex]), 12)

    def lines_of(row: Sequence[str]) -> list[str]:
        wrapped = textwrap.wrap(row[flex], widths[flex], break_on_hyphens=False) or [""]
        out = []
        for k, part in enumerate(wrapped):
            line = [(c if k == 0 else "") if i != flex else part for i, c in enumerate(row)]
            out.append("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
        return out

    lines = lines_of(list(headers)) + ["  ".join("-" * w for w in widths)]
    for row in cells:
        lines += lines_of(row)
    return "\n".join(lines)


def _backend_rows() -> list[dict[str, Any]]:
    return [{"backend": i.name, "available": bool(i.available), "driver": i.driver_version or None,
             "device": i.device_name or None, "reason": i.reason or None} for i in lifecore.backends()]


def backends_table(width: Optional[int] = None) -> str:
    rows = [[r["backend"], "yes" if r["available"] else "no", r["driver"] or "-", r["device"] or "-", r["reason"] or "-"]
            for r in _backend_rows()]
    return _table(["backend", "available", "driver", "device", "reason / notes"], rows, width=width)


#: The exit status when the report could not be written (standard output or the --json file, on
#: a full disk say): EX_IOERR of sysexits.h, not 1, which says that a check failed.
EXIT_OUTPUT = 74
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


class _OutputError(Exception):
    """A file the command was asked to write could not be written (exit ``EXIT_OUTPUT``, one line)."""


class _StdoutError(_OutputError):
    """Writing to standard output failed with something other than a closed pipe."""


class _Stdout:
    """Standard output, except that a write error other than a closed pipe (a full disk,
    ``>/dev/full``) raises ``_StdoutError``: an output that failed, not a check; a closed pipe
    stays a BrokenPipeError (exit 141, quietly)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def _failed(self, error: OSError) -> _StdoutError:
        return _StdoutError(f"cannot write to standard output: {error.strerror or error}")

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise self._failed(error) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as error:
            raise self._failed(error) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, which CI runners send on a timeout or a cancel, raised in the main thread as
    Ctrl-C is: it unwinds the same way (Hypothesis takes neither for a failure), and the command
    ends with a message and ``EXIT_TERMINATED``."""


# The interrupts signalled during this command, kept beside their raise: Python drops an
# exception raised while a garbage-collector callback runs (Hypothesis has one), so a signal
# landing there would be lost and the run would go on. Each run's start raises one again.
_signalled: list[type[KeyboardInterrupt]] = []


def _on_sigterm(signum: int, frame: Any) -> None:
    # A second SIGTERM while the first one's report is written ends the process at once.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _signalled.append(_Terminated)
    raise _Terminated


def _on_sigint(signum: int, frame: Any) -> None:
    _signalled.append(KeyboardInterrupt)
    raise KeyboardInterrupt


def _quiet_lost_interrupt(report: Callable[[Any], object], unraisable: Any) -> None:
    """The unraisable-exception hook while a command runs: an interrupt raised inside a
    garbage-collector callback is one ``_signalled`` keeps and raises again, so Python's
    "Exception ignored in" report of it (a traceback in a CI log) is left out. Anything else goes
    to ``report``, the hook that was there before."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _signalled:
        return
    report(unraisable)


def _raise_signalled() -> None:
    """Raises the first interrupt signalled during this command, where its own raise was lost."""
    if _signalled:
        raise _signalled[0]()


class _Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during one target's runs: ``result`` is that target's row, saying what
    the interrupt cut short, and ``failure`` the failure found there that was being shrunk (not
    saved) or None; ``seed`` the run's seed."""

    def __init__(self, cause: KeyboardInterrupt, result: CheckResult, failure: Optional[dict[str, Any]],
                 seed: int) -> None:
        super().__init__()
        self.terminated = isinstance(cause, _Terminated)
        self.result, self.failure, self.seed = result, failure, seed


def _exit_status(interrupt: KeyboardInterrupt) -> int:
    terminated = isinstance(interrupt, _Terminated) or getattr(interrupt, "terminated", False)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


@contextlib.contextmanager
def temporary_hypothesis_storage() -> Iterator[None]:
    """Points Hypothesis's storage (where it caches the constants of the code it tests, as
    ``.hypothesis/`` in the current folder by default) at a temporary folder removed at the end,
    so a run leaves nothing behind but its failure files; a folder the user chose with
    ``HYPOTHESIS_STORAGE_DIRECTORY`` is left to Hypothesis."""
    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        yield
        return
    try:
        from hypothesis.configuration import set_hypothesis_home_dir
    except ImportError:  # no Hypothesis (the command says so), or one without the setting
        yield
        return
    with tempfile.TemporaryDirectory(prefix="lifecore-hypothesis-", ignore_cleanup_errors=True) as folder:
        set_hypothesis_home_dir(folder)
        try:
            yield
        finally:
            set_hypothesis_home_dir(None)  # back to Hypothesis's own choice


def _write_json(path: str, data: Any) -> None:
    """``path`` or, for ``-``, standard output."""
    if path == "-":
        json.dump(data, sys.stdout, indent=2)
        print()
        return
    try:
        with open(path, "w") as out:
            json.dump(data, out, indent=2)
            out.write("\n")
    except OSError as error:
        raise _OutputError(f"cannot write --json {path}: {error.strerror or error}") from None


def _json_path_error(path: Optional[str]) -> Optional[str]:
    """Why ``--json PATH`` could not be written (None when it can be tried), checked before a
    run rather than after it."""
    if path is None or path == "-":
        return None
    folder = os.path.dirname(path) or "."
    if os.path.isdir(path):
        return f"argument --json: {path} is a folder"
    if not os.path.isdir(folder):
        return f"argument --json: there is no folder {folder} to write {path} in"
    # A folder that exists may still refuse the file (read-only, a /proc): tried now, and a
    # file the try made is removed again (the run writes it at the end).
    existed = os.path.exists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as error:
        return f"argument --json: cannot write {path}: {error.strerror or error}"
    if not existed:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return None


def report_stream(json_path: Optional[str]) -> TextIO:
    """Where a command's text report goes: standard output, or, with ``--json -`` (standard
    output carries the JSON alone), standard error, and nowhere when that is closed (``2>&-``)."""
    if json_path != "-":
        return sys.stdout
    return sys.stderr if sys.stderr is not None else io.StringIO()


def _failure_dir_error(directory: str) -> Optional[str]:
    """Why failure files could not be saved in ``directory`` (None when they can), checked before
    a run without leaving anything behind: a file can be written there, or, for a folder still
    to be made (when a failure is saved), in the nearest folder above it that exists (a link
    that leads nowhere is not a folder, and nothing can be made through it)."""
    name = directory if directory not in ("", ".") else ". (the current folder)"
    try:
        if os.path.lexists(directory) and not os.path.isdir(directory):
            return f"argument --failure-dir: {name} is not a folder"
        existing = Path(os.path.abspath(directory))
        while not os.path.lexists(existing):
            existing = existing.parent
        if not existing.is_dir():
            return f"argument --failure-dir: cannot save failures in {name}: {existing} is not a folder"
        with tempfile.TemporaryDirectory(dir=existing):  # what saving makes there: a folder, or a file
            pass
    except OSError as error:  # a folder above it that cannot be searched, a current folder removed
        return f"argument --failure-dir: cannot save failures in {name}: {error.strerror or error}"
    return None


class _Runs:
    """How each machine run of one target ended, told apart when its teardown calls
    ``on_run_end``: Hypothesis tears a machine down in a ``finally``, so an exception that
    ended the run is still in flight there.

    - ``runs``: examples Hypothesis generated and ran to the end or to a failure, what
      ``--examples`` counts;
    - ``discarded``: examples Hypothesis threw away unfinished (no rule could run, or it drew
      too much data) and generated another in place of; their steps ran (``discarded_steps``),
      but they are not runs, and the line counts their steps apart;
    - ``replays``: every run after the first failure: Hypothesis replaying variations of it
      while it shrinks and explains it;
    - ``short``: runs that ended before ``steps`` steps without failing: Hypothesis ends some
      runs early by design, and a run once the data it drew nears its size limit.
    """

    def __init__(self, stats: Any, steps: int = 0) -> None:
        self.runs = self.discarded = self.replays = self.short = 0
        self.discarded_steps = 0  # steps the discarded examples ran
        self.started = self.ended = 0  # machines made, and torn down
        self.failed = False
        self.first_failure: Optional[BaseException] = None  # what the first failing run raised
        self.steps_asked = steps
        self.steps_at_start = self.steps_at_end = stats.steps
        # An exception the caller is handling around the whole run is none of its runs' own.
        self.outer = sys.exc_info()[1]
        self.on_end: Optional[Callable[["_Runs", Any], None]] = None

    def __call__(self, stats: Any) -> None:
        from hypothesis.errors import StopTest, UnsatisfiedAssumption

        self.ended += 1
        error = sys.exc_info()[1]
        if error is self.outer:
            error = None
        ran, self.steps_at_end = stats.steps - self.steps_at_end, stats.steps
        if self.failed:
            self.replays += 1
        elif isinstance(error, (StopTest, UnsatisfiedAssumption)):  # Hypothesis's "invalid example"
            self.discarded += 1
            self.discarded_steps += ran
        else:
            self.runs += 1
            self.failed = error is not None and not isinstance(error, KeyboardInterrupt)
            if self.failed:
                self.first_failure = error
            elif error is None and ran < self.steps_asked:
                self.short += 1
        if self.on_end is not None:
            self.on_end(self, stats)

    def steps(self, ran: int) -> tuple[int, str]:
        """Of ``ran`` steps (the discarded examples' among them): the runs' own, and how a row
        says them, with the discarded examples' apart when there were any."""
        own = ran - self.discarded_steps
        apart = f" (+{self.discarded_steps} in discarded examples)" if self.discarded_steps else ""
        return own, f"{own} step{'' if own == 1 else 's'}{apart}"

    def counted(self, of: Optional[int] = None) -> str:
        """The runs (``of`` the examples asked for, when given), and the discarded examples beside
        them when there were any."""
        return (f"{self.runs}{f' of {of}' if of is not None else ''} run{'' if (of or self.runs) == 1 else 's'}"
                + (f" (+{self.discarded} discarded by Hypothesis)" if self.discarded else ""))

    def may_stop(self) -> bool:
        """Whether the time budget may end the run here, before another machine is made: only
        once one has run, and only while no failure was seen (one is shrunk and saved however
        long that takes). A machine that was made but not torn down through ``on_run_end``
        (its construction or its teardown raised) may have failed, so it keeps the run going."""
        return self.started > 0 and self.started == self.ended and not self.failed


class _BudgetSpent(KeyboardInterrupt):
    """Raised where the next machine would be made once ``--max-seconds`` is spent. Hypothesis
    ends a run on a KeyboardInterrupt without taking it for a failure, shrinking or replaying
    anything, and would report any other exception raised there as a failure (or a flaky test)."""


def _deadline(max_seconds: Optional[float], start: Optional[float] = None) -> Optional[float]:
    """When a ``--max-seconds`` budget started at ``start`` (``time.perf_counter``, now by
    default) ends; None without a budget."""
    if max_seconds is None:
        return None
    return (time.perf_counter() if start is None else start) + max_seconds


def _budget_share(deadline: Optional[float], targets_left: int) -> Optional[float]:
    """The seconds one target gets of a budget ending at ``deadline`` (``time.perf_counter``):
    an equal share of what is left, so a target that ends early leaves its time to the others."""
    if deadline is None:
        return None
    return max(deadline - time.perf_counter(), 0.0) / max(targets_left, 1)


def _run_status(done: int, replays: int, steps: int, total: int, deadline: Optional[float]) -> str:
    """How far a target's runs are: ``N/M runs[ +R replays shrinking a failure], S steps[, T s left]``."""
    shrinking = f" +{replays} replays shrinking a failure" if replays else ""
    left = f", {max(deadline - time.perf_counter(), 0.0):.0f} s left" if deadline is not None else ""
    return f"{min(done, total)}/{total} runs{shrinking}, {steps} steps{left}"


class _RunDisplay:
    """How far a target's runs are, shown on stderr (the one current when it is made) after
    every machine run (``_Runs.on_end``) or differential run (``show``)."""

    def __init__(self, label: str, total: int, deadline: Optional[float] = None,
                 stream: Optional[TextIO] = None) -> None:
        self.label, self.total = label, max(total, 1)
        self.deadline = deadline  # the end of the time budget (time.perf_counter), if any
        self.stream = sys.stderr if stream is None else stream

    def __call__(self, runs: _Runs, stats: Any) -> None:
        self.show(runs.runs, runs.replays, stats.steps - runs.steps_at_start)

    def show(self, done: int, replays: int, steps: int) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        pass


class _Progress(_RunDisplay):
    """A one-line progress bar, redrawn within the terminal's width: a longer line would wrap
    onto a new one at every redraw, and a shorter one is padded over the last."""

    def __init__(self, label: str, total: int, deadline: Optional[float] = None, stream: Optional[TextIO] = None,
                 width: int = 30) -> None:
        super().__init__(label, total, deadline, stream)
        self.width = width
        self.drawn = 0  # characters of the line last drawn

    def show(self, done: int, replays: int, steps: int) -> None:
        """Draws the bar for ``done`` runs, ``replays`` shrinking a failure and ``steps`` steps."""
        filled = self.width * min(done, self.total) // self.total
        status = _run_status(done, replays, steps, self.total, self.deadline)
        line = f"{self.label:<32} [{'#' * filled}{'.' * (self.width - filled)}] {status}"
        room = self._columns() - 1
        if len(line) > room:  # the bar and the label's padding go first, the status last
            line = f"{self.label} {status}"
            if len(line) > room:
                line = f"{self.label[:max(room - len(status) - 1, 0)]} {status}".strip()[:room]
        self.stream.write("\r" + line.ljust(self.drawn))
        self.drawn = len(line)
        self.stream.flush()

    def finish(self) -> None:
        self.stream.write("\n")
        self.stream.flush()

    def _columns(self) -> int:
        """The width of the terminal the bar is drawn on (its stream's, not standard output's)."""
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            return shutil.get_terminal_size().columns


class _Heartbeat(_RunDisplay):
    """Off a terminal (a CI log): a plain status line at most every ``interval`` seconds, so a
    long run shows it is alive (CI services stop a job that prints nothing for ten minutes).
    The clock is the process's, across targets: each target's own would let a run of many
    short targets print nothing at all."""

    interval = 60.0
    _last = time.perf_counter()  # when the process last printed one (or this module was loaded)

    def show(self, done: int, replays: int, steps: int) -> None:
        """A status line for ``done`` runs, ``replays`` shrinking a failure and ``steps`` steps,
        when the interval has passed since the process's last one."""
        now = time.perf_counter()
        if now - _Heartbeat._last < self.interval:
            return
        _Heartbeat._last = now
        self.stream.write(f"{self.label}: {_run_status(done, replays, steps, self.total, self.deadline)}\n")
        self.stream.flush()


def _progress_for(label: str, total: int, deadline: Optional[float]) -> Optional[_RunDisplay]:
    """A bar on a terminal, a heartbeat in a log, nothing where stderr is closed (``2>&-``)."""
    if sys.stderr is None:
        return None
    try:
        on_terminal = sys.stderr.isatty()
    except (AttributeError, ValueError):  # not a file, or a closed one
        return None
    return _Progress(label, total, deadline) if on_terminal else _Heartbeat(label, total, deadline)


# Hypothesis keeps a tree of every choice a run of it made, to draw new ones (about 7 KB a
# step); over a long fuzz it grew by about 13 MB a second, without bound. So the examples go in
# batches, each a fresh Hypothesis run whose tree goes with it, of at most this many examples
# and steps. But never fewer examples than the floor: a fresh run's first example is always
# its simplest (whatever the seed), so a batch of one would run that one example every time.
# (A run stops where its drawn data nears Hypothesis's limit, a few hundred steps, so a batch
# at the floor stays far below the steps it was sized for.)
EXAMPLES_PER_BATCH = 1000
STEPS_PER_BATCH = 50_000
LEAST_EXAMPLES_PER_BATCH = 100


def _batches(seed: int, examples: int, steps: int) -> Iterator[tuple[int, int]]:
    """(Hypothesis seed, examples) of each batch: the first is ``seed`` itself (a run that fits
    one batch is one Hypothesis run, as it always was), each later one a seed derived from
    ``seed`` and the batch's number, so the same seed runs the same batches."""
    per_batch = min(EXAMPLES_PER_BATCH, max(LEAST_EXAMPLES_PER_BATCH, STEPS_PER_BATCH // max(steps, 1)))
    batch = 0
    while examples > 0:
        size = min(examples, per_batch)
        derived = seed if batch == 0 else int.from_bytes(
            hashlib.sha256(f"lifecore batch {batch} of seed {seed}".encode()).digest()[:8], "big")
        yield derived, size
        examples -= size
        batch += 1


def _machine_settings(examples: int, steps: int, explain: bool, setup_steps: int = 0) -> Any:
    from hypothesis import HealthCheck, Phase, settings

    # The explain phase re-runs a failure many times to annotate it: worth it in a long fuzz
    # run, not in a quick check. One failure per run, so there is one blob to replay.
    phases = list(Phase) if explain else [p for p in Phase if p is not Phase.explain]
    # ``--steps`` counts the rules a run executes; Hypothesis also counts the @initialize rules
    # (``setup_steps``), so without them ``--steps 1`` would run only the set-up and no step.
    return settings(max_examples=examples, stateful_step_count=steps + setup_steps, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=True, phases=phases,
                    report_multiple_bugs=False)


# ---------------------------------------------------------------- targets
# A graph target's graphs part as the mode Device takes: a table made from the typed literal, so
# a lookup turns the text into it (and nothing spells the modes again).
_GRAPHS_MODES: dict[str, GraphsMode] = {mode: mode for mode in get_args(GraphsMode)}


def _graph_target(backend: str, graphs: GraphsMode) -> Target:
    def machine() -> type:
        from lifecore.testing import StreamCaptureMachine
        return StreamCaptureMachine

    return Target("graph", f"{backend}/{graphs}", lambda: machine()(lambda: lifecore.Device(backend, graphs=graphs)),
                  machine)


def _sequence_target(backend: str) -> Target:
    def machine() -> type:
        from lifecore.testing import SequenceSessionMachine
        return SequenceSessionMachine

    def make() -> Any:
        from lifecore.sequence import AdmissionCoordinator
        name = None if backend == HOST else backend
        return machine()(lambda **kw: AdmissionCoordinator(name, **kw))

    return Target("sequence", backend, make, machine)


def _numpy_tensor(shape: Any, dtype: str, itemsize: int) -> Any:
    import numpy as np
    return np.ones(shape, dtype={("floating", 4): np.float32, ("integer", 8): np.int64}[(dtype, itemsize)])


def _capture_target(backend: str) -> Target:
    def machine() -> type:
        from lifecore.testing import CaptureSessionMachine
        return CaptureSessionMachine

    def make() -> Any:
        if backend == "numpy":
            from lifecore.capture import NumpyBackend
            return machine()(NumpyBackend, _numpy_tensor)
        from lifecore.capture import CountingBackend
        return machine()(CountingBackend)

    return Target("capture", backend, make, machine)


def _capture_backends() -> list[str]:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return ["counting"]
    return list(CAPTURE_BACKENDS)


def _resolve(backend: str) -> str:
    """A backend name for ``auto``: the one a device opened with it gets."""
    if backend != "auto":
        return backend
    device = lifecore.Device("auto")
    try:
        return str(device.backend)
    finally:
        device.close()


def _machine_targets() -> list[tuple[str, GraphsMode]]:
    """Every available backend, in registry order: the first with both graph kinds, the others
    with the graphs their device picks."""
    names = lifecore.available_backends()
    targets: list[tuple[str, GraphsMode]] = [(names[0], "hardware"), (names[0], "software")] if names else []
    for name in names[1:]:
        device = lifecore.Device(name)
        try:
            targets.append((name, device.graphs))
        finally:
            device.close()
    return targets


def _check_targets(lifecycles: Sequence[str]) -> list[Target]:
    targets: list[Target] = []
    if "graph" in lifecycles:
        targets += [_graph_target(b, g) for b, g in _machine_targets()]
    if "sequence" in lifecycles:
        targets += [_sequence_target(b) for b in [HOST, *lifecore.available_backends()]]
    if "capture" in lifecycles:
        targets += [_capture_target(b) for b in _capture_backends()]
    return targets


def _lifecycle_of_target(label: str) -> Optional[str]:
    """The one lifecycle a target label can belong to (host and a bare backend are sequence
    targets, counting and numpy capture targets, BACKEND/MODE a graph target); None when the
    label names none, so the default lifecycle's parse says what is wrong with it."""
    if label in CAPTURE_BACKENDS:
        return "capture"
    if "/" in label:
        return "graph"
    if label == HOST or label == "auto" or label in lifecore.backend_names():
        return "sequence"
    return None


def _parse_target(lifecycle: str, label: str) -> Target:
    """The target a label names (as the tables print it); ValueError when it names none."""
    if lifecycle == "graph":
        backend, _, graphs = label.partition("/")
        mode = _GRAPHS_MODES.get(graphs)
        if mode is None:
            raise ValueError(f"a graph target is BACKEND/hardware or BACKEND/software, got {label!r}")
        # auto resolved here, so the table and a saved replay command name the backend that ran.
        return _graph_target(_resolve(_backend_name(backend)), mode)
    if lifecycle == "sequence":
        if label == HOST:
            return _sequence_target(HOST)
        if label.partition("/")[2] in ("hardware", "software") or label in ("hardware", "software"):
            raise ValueError(f"a sequence target is {HOST} or a backend ({_backend_choices()}), got {label!r}: "
                             f"BACKEND/hardware and BACKEND/software name graph targets (--lifecycle graph)")
        try:
            return _sequence_target(_resolve(_backend_name(label)))
        except argparse.ArgumentTypeError as error:
            raise ValueError(f"a sequence target is {HOST} or a backend: {error}") from None
    if label not in CAPTURE_BACKENDS:
        raise ValueError(f"a capture target is one of {', '.join(CAPTURE_BACKENDS)}, got {label!r}")
    return _capture_target(label)


# ---------------------------------------------------------------- running and reporting
def _counted_rules(machine: type) -> list[str]:
    """The machine's rules that its statistics count, in the order the class declares them."""
    from lifecore.testing.machine import counted

    from hypothesis.stateful import INITIALIZE_RULE_MARKER, RULE_MARKER

    counted_code = counted(lambda self: None).__code__
    names: dict[str, None] = {}
    for klass in reversed(machine.__mro__):
        for value in vars(klass).values():
            rule = getattr(value, RULE_MARKER, None) or getattr(value, INITIALIZE_RULE_MARKER, None)
            if rule is not None and getattr(rule.function, "__code__", None) is counted_code:
                names[rule.function.__name__] = None
    return list(names)


def _where(error: BaseException) -> str:
    """Where the error was raised (file:line, function and source line), so a failure whose
    message is empty still names the check that failed."""
    frames = traceback.extract_tb(error.__traceback__)
    # The machines' same() raises for its caller: the check that failed is the caller's line.
    while len(frames) > 1 and frames[-1].name == "same" and frames[-1].filename.endswith("machine.py"):
        frames.pop()
    if not frames:
        return ""
    last = frames[-1]
    source = f": {last.line.strip()}" if last.line else ""
    return f" (at {os.path.basename(last.filename)}:{last.lineno} in {last.name}{source})"


def _replay_command(target: Target, examples: int, steps: int, seed: int, blob: Optional[str],
                    failure_dir: str, recorded_by: Optional[str] = None) -> str:
    """The command that runs ``target``'s machine again with the same seed (and ``blob``: the one
    failing example, as the decorator naming the Hypothesis that ``recorded_by`` it when known,
    so a replay that does not reproduce can say whether the version or the code changed),
    saving what it finds where the first run did."""
    command = ["lifecore", "fuzz", *target.replay_args(), "--examples", str(examples), "--steps", str(steps),
               "--seed", str(seed)]
    if blob:
        # Double quotes: the shell quotes the argument once, in single quotes, with nothing to escape.
        command += ["--reproduce", f'@reproduce_failure("{recorded_by}", b"{blob}")' if recorded_by else blob]
    if failure_dir not in (".", ""):
        # Absolute, through its links as the save went: the replay saves beside the failure from
        # whatever folder it is run in.
        command += ["--failure-dir", os.path.realpath(failure_dir)]
    return shlex.join(command)


def _failure(target: Target, error: BaseException, seed: int, examples: int, steps: int,
             failure_dir: str) -> dict[str, Any]:
    notes = [str(n) for n in getattr(error, "__notes__", ())]
    text = "\n".join(notes)
    found = BLOB.search(text)
    steps_text = [n for n in notes if "@reproduce_failure" not in n]
    message = f"{type(error).__name__}: {str(error).strip() or '(no message)'}{_where(error)}"
    failure: dict[str, Any] = {"lifecycle": target.lifecycle, "target": target.label, "seed": seed,
                               "error": message, "steps": "\n".join(steps_text).strip(),
                               "blob": found.group(4) if found else None,
                               "hypothesis": found.group(2) if found else None}
    failure["command"] = _replay_command(target, examples, steps, seed, failure["blob"], failure_dir,
                                         failure["hypothesis"])
    return failure


def _same_text(path: Path, text: str) -> bool:
    try:
        return path.read_text() == text
    except (OSError, UnicodeDecodeError):  # unreadable: not known to be the same, so kept
        return False


def _save_failure(failure: dict[str, Any], directory: str, *, replay: bool = False) -> tuple[str, bool]:
    """Saves the failure's text in ``directory``: the path, and whether it was written (False:
    a file there already held this very text, and was left as it was).

    A failure file is the evidence of a failure, so none is ever written over: a replay
    (``--reproduce``) saves under ``...-replay.txt``, never the name of the file it came from,
    and a text that differs from the one already under a name goes to the next free one
    (``-2``, ``-3``, ...)."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", failure["target"]).strip("-")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    text = _failure_text(failure) + "\n"
    stem = f"lifecore-failure-{failure['lifecycle']}-{slug}-seed{failure['seed']}" + ("-replay" if replay else "")
    number = 1
    while True:
        path = folder / (f"{stem}.txt" if number == 1 else f"{stem}-{number}.txt")
        if not path.exists():
            break
        if _same_text(path, text):
            return str(path), False
        number += 1
    # Written aside and renamed into place: an interrupt (Ctrl-C) or a full disk never leaves a
    # truncated failure file, whose replay line would replay something else.
    # Made as open() makes a file (0666 less the umask), not 0600 as a temporary file is: a
    # failure file is for others too (CI artifacts, a shared folder).
    part = folder / f".lifecore-saving-{os.getpid()}-{secrets.token_hex(4)}.tmp"
    try:
        with os.fdopen(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "w") as file:
            file.write(text)
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return str(path), True


def _failure_text(failure: dict[str, Any]) -> str:
    blob = (f"@reproduce_failure({failure['hypothesis']!r}, b{failure['blob']!r})" if failure["blob"]
            else "(none: Hypothesis printed no blob)")
    return "\n".join([
        f"FAILED {failure['lifecycle']} machine on {failure['target']}, seed {failure['seed']}",
        failure["error"],
        "falsifying steps:",
        textwrap.indent(failure["steps"] or "(none reported)", "    "),
        f"reproduction blob: {blob}",
        f"replay: {failure['command']}",
    ])


def _thin_run_warning(runs: _Runs, stopped: bool) -> Optional[str]:
    """What to say of a passing target that ran fewer than 2 runs: Hypothesis's first run is its
    simplest example, whatever the seed, and Hypothesis offers no way to skip it."""
    if runs.runs >= 2:
        return None
    instead = ("a larger --max-seconds (or fewer targets)" if stopped else "--examples 2 or more")
    return (f"only {runs.runs} run{'' if runs.runs == 1 else 's'}, and Hypothesis's first run is its simplest "
            f"example (the first rule that can run, repeated) whatever the seed: give {instead}")


def _short_runs_note(runs: _Runs, ran: int) -> str:
    """Why fewer steps ran than --steps asked of every run ("" when none ended early)."""
    if not runs.short:
        return ""
    if runs.runs == 1:
        return f"; the run stopped at {ran} of {runs.steps_asked} steps (Hypothesis's data limit per run)"
    return (f"; {runs.short} of {runs.runs} runs ended before {runs.steps_asked} steps (Hypothesis ends some "
            "runs early by design, and any run at its data limit)")


def _interrupt_behind(error: BaseException) -> Optional[KeyboardInterrupt]:
    """The interrupt an error stands for, if any: Hypothesis turns a KeyboardInterrupt (Ctrl-C,
    SIGTERM, the budget's stop) that lands as a run begins, before its runner exists, into an
    AssertionError of its own, with the interrupt as its context. A signal this command took
    counts too: its own raise may have been lost (see ``_signalled``)."""
    seen: set[int] = set()
    cause: Optional[BaseException] = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return _signalled[0]() if _signalled else None


def _run_target(target: Target, examples: int, steps: int, seed: int, *, progress: bool, explain: bool = False,
                reproduce: Optional[str] = None, recorded_by: Optional[str] = None, failure_dir: str = ".",
                max_seconds: Optional[float] = None,
                out: Optional[TextIO] = None) -> CheckResult:
    """Runs one target's machine; its row. Ctrl-C or SIGTERM raises ``_Interrupted`` with the
    row of what ran, naming a failure that was being shrunk (it is not saved)."""
    from hypothesis import __version__ as hypothesis_version
    from hypothesis import reproduce_failure
    from hypothesis import seed as hypothesis_seed
    from hypothesis.errors import DidNotReproduce
    from hypothesis.reporting import with_reporter
    from hypothesis.stateful import run_state_machine_as_test

    out = sys.stdout if out is None else out
    stats = target.machine().stats
    start = time.perf_counter()
    deadline = _deadline(max_seconds, start)
    # Redraws belong on a terminal: in a log file they are only noise, and a line a minute says enough.
    label = f"{target.lifecycle} {target.label}"
    bar = _progress_for(label, examples, deadline) if progress else None
    runs = _Runs(stats, steps)
    runs.on_end = bar
    steps_before = stats.steps
    rules_before, outcomes_before = Counter(stats.rules), Counter(stats.outcomes)
    stopped = False  # by the time budget

    def make() -> Any:
        _raise_signalled()
        if deadline is not None and runs.may_stop() and time.perf_counter() >= deadline:
            raise _BudgetSpent
        runs.started += 1
        return target.make()

    stats.on_run_end = runs
    result = CheckResult("state machine", f"{target.lifecycle} {target.label}", True, "", target.lifecycle)
    reported: list[str] = []  # what Hypothesis reports instead of attaching it as notes (a replay's steps)
    try:
        try:
            with with_reporter(lambda value: reported.append(str(value))):
                # The same seed and settings execute the same steps (batch by batch); a blob
                # replays one exact example, in one batch.
                for batch_seed, batch_examples in _batches(seed, 1 if reproduce else examples, steps):
                    runner = hypothesis_seed(batch_seed)(make)
                    if reproduce:
                        runner = reproduce_failure(hypothesis_version, reproduce.encode())(runner)
                    # Hypothesis calls the factory it is given; recent releases annotate it as a class.
                    run_state_machine_as_test(cast(Any, runner),
                                              settings=_machine_settings(examples if reproduce else batch_examples,
                                                                         steps, explain,
                                                                         target.machine().setup_steps()))
        except _BudgetSpent:
            stopped = True
        except DidNotReproduce as error:
            # A blob replays only under the Hypothesis that recorded it: say which one this is, or,
            # recorded by this one, that the failure is gone (what runs changed, not the version).
            if recorded_by is None:
                version = (f"a blob replays only under the Hypothesis version that recorded it (the saved failure "
                           f"names it); this is {hypothesis_version}")
            elif recorded_by != hypothesis_version:
                version = f"it was recorded by Hypothesis {recorded_by}, and this is {hypothesis_version}"
            else:
                version = (f"it was recorded by this Hypothesis, {hypothesis_version}: the failure no longer "
                           f"happens, so what runs changed since (the library, its model or the machine), or "
                           f"the replay differs from the failure's command (its --target or --steps)")
            result.passed, result.detail = False, f"the blob did not reproduce a failure ({version}): {error}"
        except Exception as error:  # a failed invariant or comparison, after shrinking
            interrupt = _interrupt_behind(error)
            if isinstance(interrupt, _BudgetSpent):
                stopped = True
            elif interrupt is not None:
                raise interrupt from None  # Ctrl-C or SIGTERM: no failure, nothing saved
            else:
                if bar is not None:
                    bar.finish()
                    bar = None
                failure = _failure(target, error, seed, examples, steps, failure_dir)
                if not failure["steps"]:
                    failure["steps"] = "\n".join(r for r in reported if "@reproduce_failure" not in r).strip()
                if reproduce and not failure["blob"]:
                    failure["blob"], failure["hypothesis"] = reproduce, hypothesis_version
                    failure["command"] = _replay_command(target, examples, steps, seed, reproduce, failure_dir,
                                                         hypothesis_version)
                written = False
                try:
                    failure["saved"], written = _save_failure(failure, failure_dir, replay=bool(reproduce))
                except OSError as save_error:  # the failure is still printed in full, replay command included
                    failure["saved"] = None
                    failure["not_saved"] = f"{save_error.strerror or save_error}: {save_error.filename or failure_dir}"
                print(_failure_text(failure), file=out)
                print(f"saved: {failure['saved']}{'' if written else ' (already there with this text, left as it was)'}\n"
                      if failure["saved"] else f"not saved ({failure['not_saved']})\n",
                      file=out, flush=True)
                result.passed, result.failure = False, failure
                result.detail = failure["error"].splitlines()[0] + (f" (seed {seed}; replay: see {failure['saved']})"
                                                                    if failure["saved"] else f" (seed {seed}; not saved)")
        finally:
            stats.on_run_end = None
            if bar is not None:
                bar.finish()
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM (the budget's own stop is caught above)
        raise _interrupted(interrupt, target, runs, result, examples, steps, seed,
                           Counter(stats.rules) - rules_before, Counter(stats.outcomes) - outcomes_before,
                           failure_dir) from None
    result.rules = Counter(stats.rules) - rules_before
    result.outcomes = Counter(stats.outcomes) - outcomes_before
    if result.passed and result.failure is None and not result.detail:
        ran = stats.steps - steps_before
        result.passed = ran > 0
        seconds = time.perf_counter() - start
        counted, steps_text = runs.steps(ran)
        result.detail = (f"{runs.counted(examples if stopped else None)}, {steps_text} in {seconds:.1f} s, "
                         "every invariant held" if ran else "the machine ran no step")
        if stopped:
            result.detail += "; the --max-seconds budget ended the run"
        if ran:
            result.detail += _short_runs_note(runs, counted)
        warning = None if reproduce or not ran else _thin_run_warning(runs, stopped)
        if warning:
            result.warnings.append(warning)
            result.detail += f"; WARNING: {warning}"
    return result


def _interrupted(interrupt: KeyboardInterrupt, target: Target, runs: _Runs, result: CheckResult, examples: int,
                 steps: int, seed: int, rules: Counter[Any], outcomes: Counter[Any],
                 failure_dir: str) -> _Interrupted:
    """The ``_Interrupted`` for an interrupt during ``target``'s runs: its row says how far they
    got, or that a failure found there was being shrunk (or saved) and is lost, with the command
    that finds it again."""
    result.passed, result.incomplete, result.rules, result.outcomes = False, True, rules, outcomes
    if result.failure is not None:  # found, shrunk, saved and printed: only what came after was cut short
        return _Interrupted(interrupt, result, None, seed)
    if not runs.failed:
        result.detail = f"interrupted after {runs.counted()}, {runs.steps(runs.steps_at_end - runs.steps_at_start)[1]}"
        return _Interrupted(interrupt, result, None, seed)
    error = runs.first_failure
    said = f"{type(error).__name__}: {str(error).strip() or '(no message)'}".splitlines()[0] if error else "a failure"
    command = _replay_command(target, examples, steps, seed, None, failure_dir)
    failure = {"lifecycle": target.lifecycle, "target": target.label, "seed": seed, "error": said,
               "shrunk": False, "saved": None, "command": command}
    result.failure = failure
    result.detail = (f"{said} (seed {seed}; interrupted while it was shrunk or saved: not saved; "
                     f"rerun: {command})")
    return _Interrupted(interrupt, result, failure, seed)


def _coverage(results: Sequence[CheckResult], lifecycle: str,
              machine: type) -> tuple[list[str], list[tuple[str, str, list[int]]]]:
    """One lifecycle's transitions and outcomes, how often each target ran them: the targets,
    and a row per transition or outcome as (key, label, counts). An outcome's key is
    "<transition> -> <outcome>" (the same outcome of two transitions is two rows); its label is
    how the table shows it, indented under its transition."""
    mine = [r for r in results if r.lifecycle == lifecycle]
    rules = _counted_rules(machine)
    rules += sorted({rule for r in mine for rule in r.rules} - set(rules))
    outcomes = sorted({key for r in mine for key in r.outcomes})
    rows: list[tuple[str, str, list[int]]] = []
    for rule in rules:
        rows.append((rule, rule, [r.rules[rule] for r in mine]))
        rows += [(f"{rule} -> {o}", f"  -> {o}", [r.outcomes[(rule, o)] for r in mine])
                 for (ru, o) in outcomes if ru == rule]
    rows += [(f"{ru} -> {o}", f"{ru} -> {o}", [r.outcomes[(ru, o)] for r in mine])
             for (ru, o) in outcomes if ru not in rules]
    return [r.target.split(" ", 1)[1] for r in mine], rows


def _coverage_json(results: Sequence[CheckResult], machines: dict[str, type]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for lifecycle, machine in machines.items():
        targets, rows = _coverage(results, lifecycle, machine)
        out[lifecycle] = {"targets": targets, "rows": {key: counts for key, _, counts in rows}}
    return out


def _print_coverage(results: Sequence[CheckResult], machines: dict[str, type], seed: int, out: TextIO) -> None:
    for lifecycle, machine in machines.items():
        targets, rows = _coverage(results, lifecycle, machine)
        if not targets:
            continue
        # The machine's declared rules: a note it counts beside them (a row some runs show and
        # others do not) is in the table, not in the total, so the total is the same every run.
        declared = set(_counted_rules(machine))
        transitions = [(key, counts) for key, _, counts in rows if key in declared]
        missed = [key for key, counts in transitions if not any(counts)]
        summary = (f"coverage: {lifecycle} (seed {seed}): {len(transitions) - len(missed)} of {len(transitions)} "
                   "transitions exercised" + (f"; never: {', '.join(missed)}" if missed else ""))
        print("\n" + textwrap.fill(summary, _width() - 1, subsequent_indent="  "), file=out)
        print(_table(["transition / outcome", *targets], [[label, *counts] for _, label, counts in rows], flex=0),
              file=out)


def _seed(given: Optional[int], out: TextIO) -> int:
    """The run's seed: the given one, or a fresh one, printed so the run can be repeated."""
    if given is not None:
        return given
    chosen = random.SystemRandom().randrange(2**32)
    print(f"seed {chosen} (pass --seed {chosen} to repeat this run)", file=out)
    return chosen


def _lifecycles(choice: str) -> list[str]:
    return list(LIFECYCLES) if choice == "all" else [choice]


def cmd_info(args: argparse.Namespace) -> int:
    if args.json:
        _write_json(args.json, {"version": lifecore.__version__, "backends": _backend_rows()})
        if args.json == "-":
            return 0
    print(f"lifecore {lifecore.__version__}")
    print(backends_table())
    return 0


def _missing_hypothesis(command: str) -> bool:
    """Says so on stderr when Hypothesis, a dependency the state machines run on, is missing: a
    broken install, exit status 2 for check and fuzz alike, before anything runs."""
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        print(f"lifecore {command} needs hypothesis, a dependency of lifecore that is not installed here "
              f"(pip install hypothesis)", file=sys.stderr)
        return True
    return False


def _backends_detail(infos: Sequence[Any]) -> str:
    """The ``backends`` row: each backend, and why one that is unavailable is."""
    return ", ".join(f"{i.name}: available" if i.available
                     else f"{i.name}: unavailable ({i.reason or 'no reason given'})" for i in infos)


def _results_table(results: Sequence[CheckResult]) -> str:
    return _table(["check", "target", "result", "detail"], [[r.name, r.target, r.word, r.detail] for r in results])


def _print_warnings(results: Sequence[CheckResult], out: TextIO) -> None:
    """The warnings of passing rows again after the table, where a CI log's reader looks."""
    for r in results:
        for warning in r.warnings:
            print(f"\nwarning: {r.name} {r.target}: {warning}", file=out)


def _print_interrupted(results: Sequence[CheckResult], interrupt: KeyboardInterrupt, out: TextIO) -> None:
    """The table of what ran before an interrupt, the interrupted target last."""
    if isinstance(interrupt, _Interrupted):
        results = [*results, interrupt.result]
    if results:
        print("\n" + _results_table(results), file=out, flush=True)


def cmd_check(args: argparse.Namespace) -> int:
    if _missing_hypothesis("check"):
        return 2
    out = report_stream(args.json)
    print(f"lifecore {lifecore.__version__}", file=out)
    print(backends_table(), file=out)
    print(file=out)
    results: list[CheckResult] = []
    infos = lifecore.backends()
    results.append(CheckResult("backends", "all", any(i.available for i in infos), _backends_detail(infos)))
    lifecycles = _lifecycles(args.lifecycle)
    machines: dict[str, type] = {}
    seed = _seed(args.seed, out)

    def report(incomplete: Optional[KeyboardInterrupt] = None) -> dict[str, Any]:
        """The --json report; after an interrupt, of the checks that ran, marked incomplete."""
        done = [*results, incomplete.result] if isinstance(incomplete, _Interrupted) else results
        data: dict[str, Any] = {"version": lifecore.__version__, "seed": seed, "lifecycles": lifecycles,
                                "backends": _backend_rows(),
                                "passed": incomplete is None and all(r.passed for r in done),
                                "incomplete": incomplete is not None}
        if incomplete is not None:
            data["interrupted_by"] = "SIGTERM" if _exit_status(incomplete) == EXIT_TERMINATED else "SIGINT"
        data["checks"] = [r.to_json() for r in done]
        data["coverage"] = _coverage_json(done, machines)
        return data

    try:
        try:
            targets = _check_targets(lifecycles)
        except lifecore.LifecoreError as error:
            targets = []
            results.append(CheckResult("open the available backends", "all", False, str(error)))
        deadline = _deadline(args.max_seconds)
        for i, target in enumerate(targets):
            machines.setdefault(target.lifecycle, target.machine())
            results.append(_run_target(target, args.examples, args.steps, seed, progress=True,
                                       failure_dir=args.failure_dir or ".",
                                       max_seconds=_budget_share(deadline, len(targets) - i), out=out))
        if "graph" in lifecycles:
            results.append(_replay_check())
    except KeyboardInterrupt as interrupt:  # what finished stands: its table, and the JSON marked incomplete
        _print_interrupted(results, interrupt, out)
        if args.json:
            try:
                _write_json(args.json, report(interrupt))
            except _OutputError as error:  # said, and the interrupt still decides the exit status
                print(f"lifecore check: {error}", file=sys.stderr)
        raise

    print(file=out)
    print(_results_table(results), file=out)
    _print_coverage(results, machines, seed, out)
    failed = [r for r in results if not r.passed]
    if args.json:
        _write_json(args.json, report())
    _print_warnings(results, out)
    if failed:
        print(f"\n{len(failed)} check(s) failed: " + ", ".join(f"{r.name} ({r.target})" for r in failed), file=out)
        return 1
    print("\nevery check passed", file=out)
    return 0


def _replay_check() -> CheckResult:
    try:
        from lifecore.benchmarks.graph_replay import replay_vs_eager

        # 1,000 nodes: on the mock a replay is one work item, and the two thread wake-ups around it
        # (the worker's and the sync's) can cost tens of microseconds on a virtual machine; over
        # 100 nodes they swamped the replay and the figure read about 1x.
        replay = replay_vs_eager(lambda: lifecore.Device("auto"), sizes=(1000,), rounds=5, warmup=1,
                                 min_batch_s=0.002, frameworks=False)
        run = replay["runs"][0]
        eager, graph, ratio = run["eager"].summary, run["replay"].summary, run.ratios[0].summary
        return CheckResult(
            "replay benchmark", replay["target"], bool(run.facts["correct"]),
            f"N={run.facts['N']}: eager {eager.median / 1e3:.2f} us per launch, replay {graph.median / 1e3:.3f} us "
            f"per node, {ratio.median:.1f}x [{ratio.q1:.1f} .. {ratio.q3:.1f}]"
            + ("" if run.facts["correct"] else "; REPLAY RESULT WRONG"))
    except Exception as error:
        return CheckResult("replay benchmark", "auto", False, f"{type(error).__name__}: {error}")


def cmd_differential(args: argparse.Namespace) -> int:
    """``lifecore fuzz --differential A,B``: the same seeded steps on two devices, compared."""
    from lifecore.testing.differential import DifferentialReport, parse_specs, run_differential

    runs = args.examples if args.examples is not None else 5
    deadline = _deadline(args.max_seconds)
    stopped = False
    try:
        specs = parse_specs(args.differential)
        for spec in specs:  # an unavailable backend is refused as --backend refuses it, not run
            _backend_name(spec.backend)
        # One seeded run at a time into one report (what runs=N does), so the budget can end it
        # between runs.
        report = DifferentialReport(specs)
        bar = _progress_for(f"differential {args.differential}", runs, deadline)
        try:
            for run in range(runs):
                if run and deadline is not None and time.perf_counter() >= deadline:
                    stopped = True
                    break
                run_differential(specs, steps=args.steps, seed=(args.seed or 0) + run, runs=1, report=report)
                if bar is not None:  # the runs compared, and every step
                    bar.show(report.completed, 0, report.steps)
                if report.divergence is not None:
                    break
        except KeyboardInterrupt:  # what was compared stands, said before the interrupt's message
            if bar is not None:
                bar.finish()
            print(report.summary())
            if len(report.seeds) > report.completed:  # cut off in a run: its steps so far are counted above
                print(f"interrupted in run {len(report.seeds)} of {runs}: {report.completed} compared in full (the "
                      f"counts above include the steps the interrupted run compared)")
            else:
                print(f"interrupted after {report.completed} of {runs} runs compared")
            raise
        if bar is not None:
            bar.finish()
    except (ValueError, argparse.ArgumentTypeError) as error:
        print(f"lifecore fuzz --differential: {error}", file=sys.stderr)
        return 2
    print(report.summary())
    if stopped:
        print(f"the --max-seconds budget ended the run after {len(report.seeds)} of {runs} runs")
    return 0 if report.identical else 1


def cmd_fuzz(args: argparse.Namespace) -> int:
    if args.reproduce is not None and not args.reproduce.strip():
        # An unset variable in a CI script ("--reproduce $BLOB") must not pass as a fuzz run.
        return _usage_error("fuzz", "argument --reproduce: the blob is empty")
    recorded_by = None  # the Hypothesis version that recorded the blob, where the argument says
    if args.reproduce is not None and (whole := BLOB.search(args.reproduce)):
        # The line a failure prints ("reproduction blob: @reproduce_failure(...)", or the
        # decorator alone, however spaced): its version and its blob.
        recorded_by, args.reproduce = whole.group(2), whole.group(4)
        if not args.reproduce:
            return _usage_error("fuzz", "argument --reproduce: the blob is empty")
    if args.differential:
        ignored = [name for name, value in (("--lifecycle", args.lifecycle), ("--backend", args.backend),
                                            ("--graphs", args.graphs), ("--target", args.target),
                                            ("--reproduce", args.reproduce), ("--failure-dir", args.failure_dir))
                   if value is not None]
        if ignored:
            return _usage_error("fuzz", f"--differential runs the graph steps on the two devices it names "
                                        f"(A,B, each optionally /hardware or /software): {', '.join(ignored)} "
                                        f"would be ignored")
        return cmd_differential(args)
    if args.target is not None and (args.backend is not None or args.graphs is not None):
        return _usage_error("fuzz", "--target names the backend (and graphs) itself: drop --backend and --graphs")
    args.failure_dir = args.failure_dir or "."
    if args.target is not None:
        # The results table's form, "<lifecycle> <target>", names its lifecycle itself.
        word, space, rest = args.target.strip().partition(" ")
        if space and word in LIFECYCLES:
            if args.lifecycle is not None and args.lifecycle != word:
                return _usage_error("fuzz", f"--target {args.target!r} is a {word} target, and --lifecycle "
                                            f"{args.lifecycle} names another: drop one")
            args.lifecycle, args.target = word, rest.strip()
        elif args.lifecycle is None:
            args.lifecycle = _lifecycle_of_target(args.target)
            if args.lifecycle is None:
                return _usage_error("fuzz", f"--target {args.target!r} names no target: a graph target is "
                                            f"BACKEND/hardware or BACKEND/software, a sequence target {HOST} or a "
                                            f"backend, a capture target {' or '.join(CAPTURE_BACKENDS)} (backends: "
                                            f"{_backend_choices()})")
    args.lifecycle = args.lifecycle or "graph"
    if args.graphs is not None and "graph" not in _lifecycles(args.lifecycle):
        return _usage_error("fuzz", f"--graphs chooses the graph lifecycle's devices, and --lifecycle "
                                    f"{args.lifecycle} runs no graph machine: drop --graphs")
    if args.backend is not None and _lifecycles(args.lifecycle) == ["capture"]:
        return _usage_error("fuzz", "--backend chooses the graph and sequence lifecycles' devices, and --lifecycle "
                                    "capture runs on no device (its targets are the counting and numpy capture "
                                    "backends): drop --backend")
    args.backend = args.backend or _default_backend()
    args.graphs = args.graphs or "both"
    if args.examples is None:
        args.examples = 100
    if _missing_hypothesis("fuzz"):
        return 2
    lifecycles = _lifecycles(args.lifecycle)
    if args.target is not None:
        if len(lifecycles) != 1:
            return _usage_error("fuzz", f"--target names a target of one lifecycle, and --lifecycle {args.lifecycle} "
                                        "names several: give one (graph, sequence or capture)")
        try:
            targets = [_parse_target(lifecycles[0], args.target)]
        except (ValueError, argparse.ArgumentTypeError) as error:
            return _usage_error("fuzz", str(error))
        if args.reproduce:
            problem = _blob_error(args.reproduce)
            if problem:
                return _usage_error("fuzz", f"argument --reproduce: {problem}")
    else:
        if args.reproduce:
            return _usage_error("fuzz", "--reproduce replays one target: give --target (a target names its "
                                        "lifecycle, as \"graph mock/software\" or \"host\" do); the replay line "
                                        "of a saved failure has it")
        backend = _resolve(args.backend)
        targets = []
        if "graph" in lifecycles:
            graphs: list[GraphsMode] = ["hardware", "software"] if args.graphs == "both" else [args.graphs]
            targets += [_graph_target(backend, g) for g in graphs]
        if "sequence" in lifecycles:
            targets += [_sequence_target(b) for b in dict.fromkeys([HOST, backend])]
        if "capture" in lifecycles:
            targets += [_capture_target(b) for b in _capture_backends()]
    seed = _seed(args.seed, sys.stdout)
    deadline = _deadline(args.max_seconds)
    results: list[CheckResult] = []
    try:
        for i, t in enumerate(targets):
            results.append(_run_target(t, args.examples, args.steps, seed, progress=True, explain=not args.reproduce,
                                       reproduce=args.reproduce, recorded_by=recorded_by,
                                       failure_dir=args.failure_dir,
                                       max_seconds=_budget_share(deadline, len(targets) - i)))
    except KeyboardInterrupt as interrupt:  # what finished stands
        _print_interrupted(results, interrupt, sys.stdout)
        raise
    print(_results_table(results))
    _print_warnings(results, sys.stdout)
    return 0 if all(r.passed for r in results) else 1


def _blob_error(blob: str) -> Optional[str]:
    """Why Hypothesis cannot decode a reproduction blob (None when it can): a blob it cannot
    read is a bad argument, not a failure of the machine it was meant to replay."""
    from hypothesis.errors import InvalidArgument

    try:
        from hypothesis.core import decode_failure
    except ImportError:  # pragma: no cover - a Hypothesis without it decodes the blob when it replays
        return None
    try:
        decode_failure(blob.encode())
    except InvalidArgument as error:
        return str(error)
    except Exception as error:  # pragma: no cover - anything else it may raise on bytes it cannot read
        return f"cannot decode the blob {blob!r}: {error}"
    return None


def _usage_error(command: str, message: str) -> int:
    print(f"usage: lifecore {command} ...\nlifecore {command}: error: {message}", file=sys.stderr)
    return 2


def _false_correctness(figures: Any, where: str = "") -> list[str]:
    """Every ``...correct`` field of the figures that is false, by its path."""
    found = []
    if isinstance(figures, dict):
        for key, value in figures.items():
            path = f"{where}.{key}" if where else str(key)
            if str(key).endswith("correct") and value is False:
                found.append(path)
            else:
                found += _false_correctness(value, path)
    elif isinstance(figures, list):
        for i, value in enumerate(figures):
            found += _false_correctness(value, f"{where}[{i}]")
    return found


def cmd_bench(args: argparse.Namespace) -> int:
    from lifecore.benchmarks import capture, capture_cycle, graph_replay, sequence, state_machine
    from lifecore.benchmarks.harness import format_run

    def factory() -> Any:
        return lifecore.Device(args.backend)

    out = report_stream(args.json)
    quick = args.quick
    rounds, warmup, batch = (5, 1, 0.001) if quick else (15, 2, 0.005)
    lifecycles = _lifecycles(args.lifecycle)
    figures: dict[str, Any] = {}
    if "graph" in lifecycles:
        replay = graph_replay.replay_vs_eager(factory, rounds=rounds, warmup=warmup, min_batch_s=batch)
        figures["graph_replay"] = graph_replay.to_json(replay)
        for run in replay["runs"]:
            print(format_run(run), file=out)
        for name, reason in replay["skipped"].items():
            print(f"({name} skipped: {reason})", file=out)
        cycles = capture_cycle.capture_cycle_vs_model(factory, rounds=rounds, warmup=warmup, min_batch_s=batch)
        figures["capture_cycle"] = [run.to_json() for run in cycles]
        for run in cycles:
            print(format_run(run), file=out)
        try:
            import hypothesis  # noqa: F401
        except ImportError:
            print("(state-machine rate skipped: hypothesis is not installed)", file=out)
        else:
            reference = _default_backend()
            machine = state_machine.machine_throughput(lambda: lifecore.Device(reference), examples=5 if quick else 20,
                                                       rounds=2 if quick else 3, backend=reference)
            figures["state_machine"] = machine.to_json()
            print(format_run(machine), file=out)
    if "sequence" in lifecycles:
        timing: dict[str, Any] = dict(rounds=3, warmup=1, min_batch_s=0.003) if quick else {}
        runs = [sequence.lifecycles(live=1000 if quick else sequence.LIVE, **timing), sequence.decode_steps(**timing)]
        figures["sequence"] = [run.to_json() for run in runs]
        for run in runs:
            print(format_run(run), file=out)
    if "capture" in lifecycles:
        timing = dict(rounds=3, warmup=1, min_batch_s=0.002) if quick else {}
        observe = capture.observe(**timing)
        figures["capture"] = [observe.to_json()]
        print(format_run(observe), file=out)
    if args.json:
        _write_json(args.json, figures)
    wrong = _false_correctness(figures)
    if wrong:
        print(f"\ncorrectness FAILED: {', '.join(wrong)}", file=out)
        return 1
    return 0


def _torch_device_error(text: str) -> Optional[str]:
    """Why the demo cannot run on the torch device ``text`` (None when it can): cpu, or cuda
    where this torch has a CUDA device."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError) as error:
        return f"not a torch device: {text!r} ({error})"
    if device.type not in ("cpu", "cuda"):
        return f"the demo runs on cpu or cuda, got {text!r}"
    if device.type == "cuda" and not torch.cuda.is_available():
        return f"{text!r}, but this torch has no CUDA device"
    return None


def cmd_demo(args: argparse.Namespace) -> int:
    try:
        from lifecore.engine.demo import run_demo
    except ImportError as error:
        print(f"lifecore demo: {error}", file=sys.stderr)
        return 1
    problem = _torch_device_error(args.device)
    if problem:
        return _usage_error("demo", f"argument --device: {problem}")
    if args.json in (None, "-"):
        run_demo(args.preset, args.requests, args.seed, args.device, args.capture, args.json == "-")
    else:  # the table on the terminal, the JSON in a file
        _write_json(args.json, run_demo(args.preset, args.requests, args.seed, args.device, args.capture))
    return 0


def _whole_number(text: str) -> int:
    """An argparse type's int; anything else exits 2 with the usage."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def positive_int(text: str) -> int:
    """argparse type: an int of at least 1 (a bad value exits 2 with the usage); the benchmark
    modules' counts take it too, so they refuse what ``lifecore check`` refuses."""
    value = _whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


MAX_DEMO_REQUESTS = 100_000  # the engine demo's own bound (lifecore.engine.demo.MAX_REQUESTS), kept here
# so that parsing arguments imports no torch


def _demo_requests(text: str) -> int:
    """argparse type: the demo's request count, 1 to MAX_DEMO_REQUESTS (its requests are all
    built before it serves one)."""
    value = positive_int(text)
    if value > MAX_DEMO_REQUESTS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_DEMO_REQUESTS:,}, got {value:,}")
    return value


def _torch_seed(text: str) -> int:
    """argparse type: a seed torch.manual_seed takes (-2**63 to 2**64 - 1)."""
    value = _whole_number(text)
    if not -(2**63) <= value < 2**64:
        raise argparse.ArgumentTypeError(f"must be between -2**63 and 2**64 - 1, got {value}")
    return value


def _positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds above 0 (a bad value exits 2 with the usage)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds above 0, got {text!r}")
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


def _required_backend(text: str) -> str:
    """argparse type for check --require: a registered backend that can open a device here."""
    if text == "auto":
        raise argparse.ArgumentTypeError("name a backend to require (auto always finds the emulated backend)")
    return _backend_name(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lifecore", description="lifecore: lifecycles for GPU inference runtimes")
    parser.add_argument("--version", action="version", version=f"lifecore {lifecore.__version__}")
    default_backend, choices = _default_backend(), _backend_choices()
    lifecycle_choices = [*LIFECYCLES, "all"]
    json_help = "also write the results as JSON to PATH ('-': standard output, the report going to stderr)"
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="list the backends (name, available, driver, device, reason)")
    info.add_argument("--json", metavar="PATH", default=None, help="write the table as JSON ('-': standard output)")
    info.set_defaults(func=cmd_info)
    check = sub.add_parser("check", help="backends, each lifecycle's short state-machine run, coverage, a replay "
                                         "benchmark")
    check.add_argument("--lifecycle", choices=lifecycle_choices, default="all",
                       help="which lifecycle's machines to run (default all)")
    check.add_argument("--examples", type=positive_int, default=25, help="machine runs per target (default 25)")
    check.add_argument("--steps", type=positive_int, default=50, help="steps per machine run (default 50)")
    check.add_argument("--seed", type=int, default=None,
                       help="make the machine runs reproducible (default: a fresh seed, printed)")
    check.add_argument("--max-seconds", metavar="SECONDS", type=_positive_seconds, default=None,
                       help="stop starting machine runs once SECONDS have passed, the targets sharing them (the "
                            "run under way finishes; a failure found is still shrunk and saved); default: no limit")
    check.add_argument("--failure-dir", metavar="DIR", default=None,
                       help="where a failure's seed, steps, blob and replay command are saved (default .)")
    check.add_argument("--json", metavar="PATH", default=None, help=json_help)
    check.add_argument("--require", metavar="BACKEND", type=_required_backend, action="append", default=[],
                       help="fail (exit 2, saying why) unless BACKEND can open a device here; repeatable. Without "
                            "it, check runs the backends that are available and lists the others")
    check.set_defaults(func=cmd_check)
    fuzz = sub.add_parser("fuzz", help="a longer state-machine run")
    # None when not given, so an option another one overrides is refused rather than ignored.
    fuzz.add_argument("--lifecycle", choices=lifecycle_choices, default=None,
                      help="which lifecycle's machines to run (default graph, or the lifecycle --target names)")
    fuzz.add_argument("--backend", type=_backend_name, default=None,
                      help=f"{choices} (default {default_backend}); the sequence machine also runs on host pages")
    fuzz.add_argument("--graphs", default=None, choices=["hardware", "software", "both"], help="default both")
    fuzz.add_argument("--target", default=None,
                      help="one target, as the tables name it (BACKEND/GRAPHS for graph, host or BACKEND for "
                           f"sequence, {' or '.join(CAPTURE_BACKENDS)} for capture), with its lifecycle or not "
                           "('graph mock/software'): it names its lifecycle, so --lifecycle may be left out")
    fuzz.add_argument("--examples", type=positive_int, default=None,
                      help="machine runs (default 100); with --differential, seeded runs (default 5)")
    fuzz.add_argument("--steps", type=positive_int, default=100, help="steps per run (default 100)")
    fuzz.add_argument("--max-seconds", metavar="SECONDS", type=_positive_seconds, default=None,
                      help="stop starting runs once SECONDS have passed, the targets sharing them (the run under "
                           "way finishes; a failure found is still shrunk and saved); default: no limit")
    fuzz.add_argument("--seed", type=int, default=None,
                      help="default: a fresh seed, printed; with --differential, the first run's seed (default 0)")
    fuzz.add_argument("--reproduce", metavar="BLOB", default=None,
                      help="replay the one example a failure's reproduction blob names (with its --target); "
                           "the blob, or the whole @reproduce_failure(...) line a failure prints")
    fuzz.add_argument("--failure-dir", metavar="DIR", default=None,
                      help="where a failure's seed, steps, blob and replay command are saved (default .; "
                           "not with --differential, which saves nothing)")
    fuzz.add_argument("--differential", metavar="A,B", default=None,
                      help=f"run the same seeded random steps on two devices ({choices}; "
                           "optionally /hardware or /software) and exit 1 on the first difference")
    fuzz.set_defaults(func=cmd_fuzz)
    bench = sub.add_parser("bench", help="the benchmarks of the three lifecycles (sides interleaved in one run, "
                                         "medians with quartiles); exits 1 when a result is wrong")
    bench.add_argument("--lifecycle", choices=lifecycle_choices, default="all",
                       help="which lifecycle's benchmarks to run (default all)")
    bench.add_argument("--backend", type=_backend_name, default=default_backend,
                       help=f"{choices} (default {default_backend})")
    bench.add_argument("--quick", action="store_true", help="fewer repetitions")
    bench.add_argument("--json", metavar="PATH", default=None, help=json_help)
    bench.set_defaults(func=cmd_bench)
    demo = sub.add_parser("demo", help="the reference engine serving random requests on lifecore (needs torch), "
                                       "then a summary table")
    demo.add_argument("--preset", choices=["tiny", "gpt2-small"], default="tiny", help="the model (default tiny)")
    demo.add_argument("--requests", type=_demo_requests, default=64,
                      help=f"requests to serve (default 64, at most {MAX_DEMO_REQUESTS:,})")
    demo.add_argument("--seed", type=_torch_seed, default=0, help="weights and requests (default 0)")
    demo.add_argument("--device", default="cpu", help="a torch device: cpu (default) or cuda; graphs on cuda")
    demo.add_argument("--capture", action="store_true",
                      help="capture per-layer summaries under a byte budget (the step then runs eagerly)")
    demo.add_argument("--json", metavar="PATH", nargs="?", const="-", default=None,
                      help="write the summary as JSON to PATH ('-', or no PATH: standard output, the JSON alone)")
    demo.set_defaults(func=cmd_demo)
    return parser


#: The commands that run Hypothesis, whose storage goes to a temporary folder for the run.
HYPOTHESIS_COMMANDS = ("check", "fuzz", "bench")


def _interrupt_message(command: str, interrupt: KeyboardInterrupt) -> str:
    """What an interrupted command says on stderr: a failure that was found and is lost is named,
    with the command that finds it again (what was saved before stands)."""
    how = "terminated (SIGTERM)" if _exit_status(interrupt) == EXIT_TERMINATED else "interrupted"
    failure = interrupt.failure if isinstance(interrupt, _Interrupted) else None
    if failure is None:
        seed = f" (seed {interrupt.seed})" if isinstance(interrupt, _Interrupted) else ""
        return f"lifecore {command}: {how}, the run is incomplete{seed}"
    return (f"lifecore {command}: {how} while a failure found on {failure['lifecycle']} {failure['target']} "
            f"(seed {failure['seed']}: {failure['error']}) was being shrunk; it is NOT saved. "
            f"Rerun it with: {failure['command']}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    stdout = sys.stdout
    if stdout is not None:
        sys.stdout = _Stdout(stdout)
    try:
        return _main(argv)
    finally:
        sys.stdout = stdout


def _main(argv: Optional[Sequence[str]]) -> int:
    try:
        args = build_parser().parse_args(argv)
    except _StdoutError as error:  # --help or --version to a full disk
        print(f"lifecore: {error}", file=sys.stderr)
        _silence_stdout()
        return EXIT_OUTPUT
    # Where the results go is checked first: a run is not wasted on a path it cannot write.
    problem = _json_path_error(getattr(args, "json", None))
    if problem is None and hasattr(args, "failure_dir") and not getattr(args, "differential", None):
        problem = _failure_dir_error(args.failure_dir or ".")
    if problem:
        return _usage_error(args.command, problem)
    # SIGTERM (a CI runner's timeout or cancel) ends the run as Ctrl-C does; only the main
    # thread may set a handler (main() called from another thread keeps the default).
    main_thread = threading.current_thread() is threading.main_thread()
    _signalled.clear()
    sigterm = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    # Ctrl-C as Python raises it, remembered too; where SIGINT is ignored (a job started in the
    # background) it stays so.
    sigint = (signal.signal(signal.SIGINT, _on_sigint)
              if main_thread and signal.getsignal(signal.SIGINT) is signal.default_int_handler else None)
    # Only the main thread takes signals, and the hook is the process's: set from there alone.
    unraisable_hook = sys.unraisablehook
    if main_thread:
        sys.unraisablehook = functools.partial(_quiet_lost_interrupt, unraisable_hook)
    try:
        with temporary_hypothesis_storage() if args.command in HYPOTHESIS_COMMANDS else contextlib.nullcontext():
            status = int(args.func(args))
        if sys.stdout is not None:
            sys.stdout.flush()  # a write error surfaces here, not in the interpreter's flush at exit
        return status
    except lifecore.LifecoreError as error:
        print(f"lifecore {args.command}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    except _OutputError as error:
        print(f"lifecore {args.command}: {error}", file=sys.stderr)
        if isinstance(error, _StdoutError):
            _silence_stdout()
        return EXIT_OUTPUT
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM: what was printed and saved stands
        print(f"\n{_interrupt_message(args.command, interrupt)}", file=sys.stderr)
        return _exit_status(interrupt)
    except BrokenPipeError:
        # The reader of standard output went away (`lifecore check | head`): no traceback, and not
        # 1, which says a check failed, but 141, the status of a process that SIGPIPE ended.
        _silence_stdout()
        return 141
    finally:
        if main_thread:
            sys.unraisablehook = unraisable_hook
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
        if sigint is not None:
            signal.signal(signal.SIGINT, sigint)


def _silence_stdout() -> None:
    """Points standard output at the null device, so that the interpreter's flush at exit finds
    no broken pipe to report."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # standard output is no file (a test's capture)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
