#!/usr/bin/env python3
"""Mutation testing over the C++ core (``cpp/src``): how many small, wrong changes do the tests catch?

What it does
------------
1. Copies the tracked (and untracked, not ignored) files of this tree into a scratch directory.
   Every mutant is applied to that copy only; the tree you run it from is never written.
2. Finds every mutation site in ``cpp/src`` (comments, string and character literals and
   preprocessor lines are masked out first) for these fixed operators:

   =========  ==============================================================================
   operator   change
   =========  ==============================================================================
   ``lt``     ``a < b``  -> ``a <= b``   (relational comparisons move to their boundary
   ``le``     ``a <= b`` -> ``a < b``     neighbour: an off-by-one the tests must see)
   ``gt``     ``a > b``  -> ``a >= b``
   ``ge``     ``a >= b`` -> ``a > b``
   ``eq``     ``a == b`` -> ``a != b``   (equality comparisons are negated)
   ``ne``     ``a != b`` -> ``a == b``
   ``and``    ``&&`` -> ``||``
   ``or``     ``||`` -> ``&&``
   ``not``    ``!x`` -> ``x``            (a dropped negation)
   ``true``   ``return true;`` -> ``return false;``
   ``false``  ``return false;`` -> ``return true;``
   ``throw``  ``throw X(...);`` -> ``;`` (a dropped throw statement; also a statement calling
              one of the core's ``[[noreturn]]`` raising helpers: ``raise(...)``,
              ``raise_limit``, ``throw_status``, ``refuse``, ``wrong_kind``, ``out_of_range``)
   =========  ==============================================================================

   ``<``, ``>``, ``<=``, ``>=``, ``&&`` and ``||`` count only with white space on both sides,
   so template brackets, shifts, ``->`` and ``T&&`` references are not taken for operators.
3. Shuffles the sites with a fixed seed and takes them in that order. For each: apply the one
   change, rebuild incrementally (its own build directory, ccache), run the C++ test programs
   and then pytest with ``-x`` and the quick derandomized Hypothesis profile (the test files of
   the mutated area first, so a kill comes early), under a per-mutant time limit, then restore
   the source. A mutant is *killed* (a test failed or a test program crashed), *timeout* (the
   limit expired: counted as killed), *survived*, or *build-failed* (not counted: the next site
   is drawn instead) until ``--mutants`` mutants have been counted. With ``--sanitize`` a
   survivor is also run through the C++ test programs built with ASan + UBSan, as CI does
   (undefined behaviour a Release build tolerates, e.g. a negative shift, then kills it).
4. Writes a table and a JSON report and prints the kill rate, with and without the mutants judged
   equivalent in ``--equivalent`` (a JSON object: mutant id -> reason).

The package under test is imported from the scratch directory through ``PYTHONPATH``; the
installed package of the interpreter is not touched. Sources are restored in a ``finally``
block, also on SIGINT / SIGTERM; the scratch directory is removed at the end unless ``--keep``.

Usage::

    python tools/mutate.py                         # 60 mutants, seed 8
    python tools/mutate.py --mutants 120 --seed 3  # more
    python tools/mutate.py --rerun build/mutation-report.json   # only the survivors of a report
    python tools/mutate.py --list                  # print the sites and exit
    python tools/mutate.py --under cpp/src/sequence --tests tests/test_sequence_machine.py
                                                   # what the state machine alone catches there

See docs/mutation-testing.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
CORE = "cpp/src"

# Test files tried first for a mutant in each part of the core (the rest follow).
AREA_TESTS = {
    "runtime": ("test_runtime_", "test_stream_", "test_differential"),
    "driver": ("test_runtime_", "test_backend_", "test_stream_"),
    "sequence": ("test_sequence_",),
    "capture": ("test_capture_",),
}


@dataclasses.dataclass
class Mutant:
    path: str      # relative to the tree root
    start: int     # character offsets of the replaced text
    end: int
    line: int
    column: int
    operator: str
    original: str
    replacement: str

    @property
    def ident(self) -> str:
        return f"{self.path}:{self.line}:{self.column}:{self.operator}"


# ----------------------------------------------------------------------------------------------
# Finding sites


def mask(source: str) -> str:
    """The source with comments, string/char literals and preprocessor lines blanked (same length)."""
    out = list(source)
    i, n = 0, len(source)

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    at_line_start = True
    while i < n:
        c = source[i]
        if at_line_start and c == "#":
            j = i
            while True:  # a directive continues over backslash-newlines
                e = source.find("\n", j)
                if e < 0:
                    e = n
                    break
                if e > 0 and source[e - 1] == "\\":
                    j = e + 1
                    continue
                break
            blank(i, e)
            i = e
            continue
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if source.startswith("//", i):
            e = source.find("\n", i)
            e = n if e < 0 else e
            blank(i, e)
            i = e
        elif source.startswith("/*", i):
            e = source.find("*/", i + 2)
            e = n if e < 0 else e + 2
            blank(i, e)
            i = e
        elif c == "R" and source.startswith('R"', i) and (i == 0 or not (source[i - 1].isalnum() or source[i - 1] == "_")):
            open_paren = source.find("(", i + 2)
            delimiter = source[i + 2:open_paren]
            e = source.find(")" + delimiter + '"', open_paren)
            e = n if e < 0 else e + len(delimiter) + 2
            blank(i, e)
            i = e
        elif c == '"' or (c == "'" and not (i > 0 and source[i - 1].isalnum() and source[i - 1] not in "LuU8")):
            j = i + 1
            while j < n and source[j] != c:
                j += 2 if source[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        else:
            i += 1
    return "".join(out)


_SPACED = {  # operator -> (pattern over masked text, replacement)
    "lt": (re.compile(r"(?<=\s)<(?=\s)"), "<="),
    "le": (re.compile(r"(?<=\s)<=(?=\s)"), "<"),
    "gt": (re.compile(r"(?<=\s)>(?=\s)"), ">="),
    "ge": (re.compile(r"(?<=\s)>=(?=\s)"), ">"),
    "eq": (re.compile(r"(?<![=!<>])==(?!=)"), "!="),
    "ne": (re.compile(r"!=(?!=)"), "=="),
    "and": (re.compile(r"(?<=\s)&&(?=\s)"), "||"),
    "or": (re.compile(r"(?<=\s)\|\|(?=\s)"), "&&"),
    "not": (re.compile(r"(?<![\w)\]!])!(?!=)(?=[\w(*!:])"), ""),
    "true": (re.compile(r"\breturn\s+true\s*;"), "return false;"),
    "false": (re.compile(r"\breturn\s+false\s*;"), "return true;"),
}
OPERATORS = tuple(_SPACED) + ("throw",)
# A dropped throw: a `throw` statement, or a statement calling one of the core's [[noreturn]]
# raising helpers (most errors are raised through them rather than by a bare `throw`).
THROWING = re.compile(r"\bthrow\b|\b(?:raise|raise_limit|throw_status|refuse|wrong_kind|out_of_range)(?=\()")


def _throw_statement_end(masked: str, start: int) -> int | None:
    depth = 0
    for k in range(start, len(masked)):
        ch = masked[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return None  # `throw` inside an expression (e.g. a conditional): not a statement
        elif ch == ";" and depth == 0:
            return k + 1
    return None


def find_sites(tree: Path) -> list[Mutant]:
    sites: list[Mutant] = []
    for file in sorted((tree / CORE).rglob("*")):
        if file.suffix not in (".cpp", ".hpp"):
            continue
        rel = file.relative_to(tree).as_posix()
        source = file.read_text()
        masked = mask(source)
        found: list[tuple[int, int, str, str]] = []
        for operator, (pattern, replacement) in _SPACED.items():
            for m in pattern.finditer(masked):
                if operator in ("eq", "ne") and re.search(r"operator\s*$", masked[:m.start()][-20:]):
                    continue  # the declaration of an operator, not a comparison
                if operator in ("lt", "gt", "le", "ge") and masked[max(0, m.start() - 9):m.start()].rstrip().endswith("template"):
                    continue
                found.append((m.start(), m.end(), operator, replacement))
        for m in THROWING.finditer(masked):
            end = _throw_statement_end(masked, m.start())
            if end is None:
                continue
            before = masked[:m.start()].rstrip()
            if before and before[-1] not in ";{}:)":  # only a throw that starts a statement
                continue
            found.append((m.start(), end, "throw", ";"))
        for start, end, operator, replacement in sorted(found):
            line = source.count("\n", 0, start) + 1
            column = start - (source.rfind("\n", 0, start) + 1) + 1
            sites.append(Mutant(rel, start, end, line, column, operator, source[start:end], replacement))
    return sites


# ----------------------------------------------------------------------------------------------
# The scratch tree, its build and its tests


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float | None = None) -> tuple[int, str, bool]:
    """Runs a command in its own process group; returns (status, output, timed out)."""
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, errors="replace", start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
        return process.returncode, output, False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return -9, output or "", True
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise


def copy_tree(destination: Path, ref: str | None) -> None:
    """The working tree's files (tracked, and untracked but not ignored), or a commit's."""
    destination.mkdir(parents=True)
    if ref:
        archive = subprocess.run(["git", "archive", "--format=tar", ref], cwd=ROOT, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(destination)], input=archive.stdout, check=True)
        return
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        source = ROOT / rel
        if source.is_file():
            target = destination / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


@contextlib.contextmanager
def build_lock(path: str | None) -> Iterator[None]:
    """Holds an exclusive lock on `path` (when given): builds sharing it take turns."""
    if not path:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def wheel_packages(tree: Path) -> dict[str, str]:
    """The wheel's layout, as pyproject.toml maps it: installed package path -> source folder
    ("lifecore" -> "python/lifecore", "lifecore/models" -> "models", ...). Read from the one
    table of plain ``"key" = "value"`` lines, so the site the tests import is what pip installs."""
    packages: dict[str, str] = {}
    inside = False
    for line in (tree / "pyproject.toml").read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            inside = line == "[tool.scikit-build.wheel.packages]"
        elif inside and "=" in line:
            key, _, value = line.partition("=")
            packages[key.strip().strip('"')] = value.strip().strip('"')
    if "lifecore" not in packages:
        sys.exit("pyproject.toml maps no 'lifecore' package under [tool.scikit-build.wheel.packages]")
    return packages


class Workspace:
    def __init__(self, tree: Path, jobs: int, profile: str, test_timeout: float, lock: str | None) -> None:
        self.tree = tree
        self.lock = lock
        self.build = tree / "build" / "mutate"
        self.site = tree / "build" / "mutate-site"
        self.jobs = jobs
        self.env = dict(os.environ, PYTHONPATH=str(self.site), HYPOTHESIS_PROFILE=profile,
                        LIFECORE_TEST_TIMEOUT=str(test_timeout), PYTHONDONTWRITEBYTECODE="1")
        # Paths relative to the scratch tree: a later campaign's unchanged files hit ccache.
        self.build_env = dict(os.environ, CCACHE_BASEDIR=str(tree), CCACHE_NOHASHDIR="1")

    def configure(self) -> None:
        import nanobind  # type: ignore[import-untyped]  # the build needs it anyway

        command = ["cmake", "-S", str(self.tree), "-B", str(self.build), "-G", "Ninja", "-DSKBUILD=ON",
                   "-DLIFECORE_BUILD_TESTS=ON", "-DLIFECORE_STUBS=OFF", "-DCMAKE_BUILD_TYPE=Release",
                   "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", f"-DPython_EXECUTABLE={sys.executable}",
                   f"-Dnanobind_DIR={nanobind.cmake_dir()}"]
        status, output, _ = run(command, self.tree, self.build_env)
        if status:
            sys.exit(f"configure failed:\n{output}")
        # The shortest package first: each folder is copied into the one that holds it.
        for package, source in sorted(wheel_packages(self.tree).items(), key=lambda item: item[0].count("/")):
            shutil.copytree(self.tree / source, self.site / package)

    def compile(self, timeout: float) -> tuple[bool, str]:
        with build_lock(self.lock):
            status, output, timed_out = run(["cmake", "--build", str(self.build), f"-j{self.jobs}"], self.tree,
                                            self.build_env, timeout=timeout)
        if status or timed_out:
            return False, output
        for module in self.build.glob("_core*.so"):
            link = self.site / "lifecore" / module.name
            if not link.exists():
                link.symlink_to(module)
        return True, output

    def sanitizer_check(self, timeout: float) -> tuple[str, str]:
        """Builds the C++ test programs with ASan + UBSan (as CI does) and runs them.

        Returns ("killed", program) when one fails, ("survived", "") when all pass, or
        ("build-failed", output) when the instrumented build fails."""
        sanitized = self.tree / "build" / "mutate-sanitize"
        if not (sanitized / "build.ninja").exists():
            command = ["cmake", "-S", str(self.tree), "-B", str(sanitized), "-G", "Ninja", "-DLIFECORE_BUILD_TESTS=ON",
                       "-DLIFECORE_SANITIZE=ON", "-DCMAKE_BUILD_TYPE=Debug", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
            status, output, _ = run(command, self.tree, self.build_env)
            if status:
                return "build-failed", output[-2000:]
        with build_lock(self.lock):
            status, output, timed_out = run(["cmake", "--build", str(sanitized), f"-j{self.jobs}"], self.tree,
                                            self.build_env, timeout=timeout)
        if status or timed_out:
            return "build-failed", output[-2000:]
        env = dict(self.env, ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
        status, output, timed_out = run(["ctest", "--test-dir", str(sanitized), "--timeout", "300"], self.tree, env,
                                        timeout=timeout)
        if timed_out:
            return "killed", "C++ test programs under ASan + UBSan (timeout)"
        if status:
            failed = re.findall(r"\d+ - (\S+) \(", output) or ["a C++ test program"]
            return "killed", f"{failed[0]} under ASan + UBSan"
        return "survived", ""

    def test(self, first: tuple[str, ...], deadline: float, only: tuple[str, ...] = ()) -> tuple[str, str, str]:
        """Runs the C++ test programs, then pytest; returns (outcome, killer, output tail). With
        ``only`` (pytest paths) just those run, and no C++ program: what they alone catch."""
        if not only:
            remaining = deadline - time.monotonic()
            status, output, timed_out = run(["ctest", "--test-dir", str(self.build), "--stop-on-failure",
                                             "--timeout", "120"], self.tree, self.env, timeout=max(remaining, 1))
            if timed_out:
                return "timeout", "C++ test programs", output[-2000:]
            if status:
                failed = re.findall(r"\d+ - (\S+) \(", output) or ["a C++ test program"]
                return "killed", failed[0], output[-2000:]
        files = sorted(p.relative_to(self.tree).as_posix() for p in (self.tree / "tests").glob("test_*.py"))
        ordered = [f for f in files if Path(f).name.startswith(first)] + [f for f in files if not Path(f).name.startswith(first)]
        ordered = list(only) or ordered
        remaining = deadline - time.monotonic()
        status, output, timed_out = run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                         "-rf", *ordered], self.tree, self.env, timeout=max(remaining, 1))
        if timed_out:
            return "timeout", "pytest", output[-2000:]
        if status == 0:
            return "survived", "", output[-500:]
        failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.M)
        if not failed:
            crashed = re.search(r'File "[^"]*?(tests/\S+\.py)", line \d+ in (\w+)', output)
            failed = [f"{crashed.group(1)}::{crashed.group(2)} (process ended)" if crashed else f"pytest exit {status}"]
        return "killed", failed[0], output[-2000:]


# ----------------------------------------------------------------------------------------------
# The campaign


class Restorer:
    """Puts a mutated file back: on success, on failure and on SIGINT / SIGTERM."""

    def __init__(self) -> None:
        self.pending: tuple[Path, str] | None = None

    def apply(self, file: Path, mutated: str) -> None:
        self.pending = (file, file.read_text())
        file.write_text(mutated)

    def restore(self) -> None:
        if self.pending:
            file, original = self.pending
            file.write_text(original)
            self.pending = None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def area_of(path: str) -> tuple[str, ...]:
    parts = Path(path).parts
    return AREA_TESTS.get(parts[2] if len(parts) > 2 else "", ())


def sites_of(tree: Path, args: argparse.Namespace) -> list[Mutant]:
    return [s for s in find_sites(tree) if not args.under or s.path.startswith(tuple(args.under))]


def print_sites(sites: list[Mutant]) -> int:
    for site in sites:
        print(f"{site.ident:60} {site.original!r:>24} -> {site.replacement!r}")
    print(f"{len(sites)} sites", file=sys.stderr)
    return 0


def campaign(args: argparse.Namespace) -> int:
    if args.list and not args.ref:  # the tree on disk: nothing to copy, no git checkout needed
        return print_sites(sites_of(ROOT, args))
    equivalent: dict[str, str] = {}
    if args.equivalent and Path(args.equivalent).exists():
        equivalent = json.loads(Path(args.equivalent).read_text())

    scratch = Path(tempfile.mkdtemp(prefix="lifecore-mutate-"))
    tree = scratch / "tree"
    signal.signal(signal.SIGTERM, _interrupt)
    restorer = Restorer()
    results: list[dict[str, object]] = []
    build_failed: list[dict[str, object]] = []
    started = time.monotonic()
    try:
        copy_tree(tree, args.ref)
        sites = sites_of(tree, args)
        only = tuple(args.tests or ())
        if args.list:
            return print_sites(sites)
        if args.only:
            by_id = {s.ident: s for s in sites}
            wanted = [w for w in args.only.split(",") if w]
            unknown = [w for w in wanted if w not in by_id]
            if unknown:
                sys.exit(f"unknown mutant ids: {unknown}")
            order = [by_id[w] for w in wanted]
            target = len(order)
        elif args.rerun:
            earlier = json.loads(Path(args.rerun).read_text())
            wanted = [r["id"] for r in earlier["mutants"] if r["outcome"] == "survived"]
            by_id = {s.ident: s for s in sites}
            missing = [w for w in wanted if w not in by_id]
            if missing:
                print(f"warning: {len(missing)} mutants of {args.rerun} no longer exist: {missing}", file=sys.stderr)
            order = [by_id[w] for w in wanted if w in by_id]
            target = len(order)
        else:
            order = list(sites)
            random.Random(args.seed).shuffle(order)
            target = args.mutants
        print(f"{len(sites)} sites in {CORE}; seed {args.seed}; {target} mutants wanted", flush=True)

        workspace = Workspace(tree, args.jobs, args.profile, args.test_timeout, args.build_lock)
        workspace.configure()
        ok, output = workspace.compile(timeout=3600)
        if not ok:
            sys.exit(f"the unmutated tree does not build:\n{output[-3000:]}")
        t0 = time.monotonic()
        outcome, killer, output = workspace.test((), time.monotonic() + args.baseline_timeout, only)
        baseline = time.monotonic() - t0
        if outcome != "survived":
            sys.exit(f"the unmutated tree fails its tests ({outcome}: {killer}):\n{output}")
        if args.sanitize:
            verdict, detail = workspace.sanitizer_check(3600)
            if verdict != "survived":
                sys.exit(f"the unmutated tree fails its sanitizer check ({verdict}): {detail}")
        limit = args.mutant_timeout or max(120.0, 3 * baseline)
        print(f"baseline: tests pass in {baseline:.0f} s; per-mutant test limit {limit:.0f} s", flush=True)

        for mutant in order:
            if len(results) >= target:
                break
            file = tree / mutant.path
            source = file.read_text()
            restorer.apply(file, source[:mutant.start] + mutant.replacement + source[mutant.end:])
            t0 = time.monotonic()
            try:
                built, build_output = workspace.compile(timeout=args.build_timeout)
                build_seconds = time.monotonic() - t0
                if not built:
                    build_failed.append({"id": mutant.ident, "original": mutant.original, "replacement": mutant.replacement})
                    print(f"  build-failed {mutant.ident} (drawing another)", flush=True)
                    continue
                outcome, killer, _ = workspace.test(area_of(mutant.path), time.monotonic() + limit, only)
                if outcome == "survived" and args.sanitize:
                    verdict, detail = workspace.sanitizer_check(args.build_timeout)
                    if verdict == "killed":
                        outcome, killer = "killed", detail
                    elif verdict == "build-failed":
                        print(f"  the sanitizer build failed for {mutant.ident}: {detail[-300:]}", flush=True)
            finally:
                restorer.restore()
            record = {"id": mutant.ident, "file": mutant.path, "line": mutant.line, "operator": mutant.operator,
                      "original": mutant.original, "replacement": mutant.replacement, "outcome": outcome,
                      "killed_by": killer, "build_seconds": round(build_seconds, 1),
                      "seconds": round(time.monotonic() - t0, 1)}
            results.append(record)
            print(f"[{len(results):3}/{target}] {outcome:8} {mutant.ident:55} {mutant.original.strip()[:30]!r} -> "
                  f"{mutant.replacement!r}  {killer}  ({record['seconds']} s)", flush=True)
            write_report(args, results, build_failed, equivalent, started)
    except KeyboardInterrupt as interruption:
        print(f"interrupted ({interruption}); sources restored", file=sys.stderr)
    finally:
        restorer.restore()
        if results:
            write_report(args, results, build_failed, equivalent, started, final=True)
        if args.keep:
            print(f"scratch tree kept: {tree}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


def write_report(args: argparse.Namespace, results: list[dict[str, object]], build_failed: list[dict[str, object]],
                 equivalent: dict[str, str], started: float, final: bool = False) -> None:
    killed = [r for r in results if r["outcome"] in ("killed", "timeout")]
    survived = [r for r in results if r["outcome"] == "survived"]
    judged = [r for r in survived if r["id"] in equivalent]
    total = len(results)
    counted = total - len(judged)
    summary = {
        "seed": args.seed, "mutants": total, "killed": len(killed),
        "killed_by_timeout": sum(1 for r in killed if r["outcome"] == "timeout"),
        "survived": len(survived), "build_failed_redrawn": len(build_failed),
        "kill_rate": round(len(killed) / total, 4) if total else None,
        "equivalent": len(judged),
        "kill_rate_without_equivalent": round(len(killed) / counted, 4) if counted else None,
        "minutes": round((time.monotonic() - started) / 60, 1),
    }
    for r in results:
        if r["id"] in equivalent:
            r["equivalent"] = equivalent[r["id"]]
    report = {"summary": summary, "mutants": results, "build_failed": build_failed}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if not final:
        return
    lines = [f"| # | mutant | change | outcome | killed by |", "|---|---|---|---|---|"]
    for k, r in enumerate(results, 1):
        change = f"`{str(r['original']).strip()[:40]}` → `{r['replacement']}`".replace("|", "\\|")
        outcome = str(r["outcome"]) + (" (equivalent)" if r["id"] in equivalent else "")
        lines.append(f"| {k} | {r['id']} | {change} | {outcome} | {r['killed_by']} |")
    table = "\n".join(lines)
    Path(args.table).write_text(table + "\n")
    print(table)
    print(json.dumps(summary))
    print(f"kill rate: {len(killed)}/{total} = {100 * len(killed) / total:.1f} %"
          + (f"; without the {len(judged)} judged equivalent: {len(killed)}/{counted} = "
             f"{100 * len(killed) / counted:.1f} %" if judged and counted else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mutants", type=int, default=60, help="mutants to count (build failures are redrawn)")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2, help="build parallelism")
    parser.add_argument("--profile", default="ci-sanitize", help="Hypothesis profile (quick and derandomized)")
    parser.add_argument("--test-timeout", type=float, default=60, help="each test's own limit, seconds")
    parser.add_argument("--mutant-timeout", type=float, default=0, help="tests of one mutant, seconds (0: 3x baseline)")
    parser.add_argument("--build-timeout", type=float, default=900)
    parser.add_argument("--baseline-timeout", type=float, default=1800)
    parser.add_argument("--equivalent", default=str(ROOT / "tools" / "mutation-equivalent.json"),
                        help="JSON object: mutant id -> why it is equivalent")
    parser.add_argument("--rerun", help="an earlier JSON report: run only its survivors")
    parser.add_argument("--json", default=str(ROOT / "build" / "mutation-report.json"))
    parser.add_argument("--table", default=str(ROOT / "build" / "mutation-report.md"))
    parser.add_argument("--build-lock", help="a lock file: hold it while building (to take turns with other builds)")
    parser.add_argument("--ref", help="test this commit's tree (e.g. the base branch) instead of the working tree")
    parser.add_argument("--only", help="comma-separated mutant ids to run (in this order)")
    parser.add_argument("--sanitize", action="store_true",
                        help="a survivor also runs the C++ test programs built with ASan + UBSan (as CI does)")
    parser.add_argument("--under", action="append", metavar="PATH",
                        help="only sites in files under this path (e.g. cpp/src/sequence; repeatable)")
    parser.add_argument("--tests", action="append", metavar="PYTEST_PATH",
                        help="run only these pytest paths and no C++ test program (repeatable): what, say, "
                             "the state machines alone catch")
    parser.add_argument("--list", action="store_true", help="print the mutation sites and exit")
    parser.add_argument("--keep", action="store_true", help="keep the scratch tree")
    return campaign(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
