"""Type-check the README's python examples and examples/*.py (or, with ``--package``, the installed
package itself) with ``mypy --strict``.

Each ```python block of README.md becomes one module; blocks of one ``##`` section are joined
in order (a block may use what an earlier block of its section defined), as tests/test_readme.py
runs them. Every block is checked, those marked ``# needs a GPU`` too: types do not need a
device. Prints mypy's report; the exit status is mypy's (0: no errors). With ``--package`` it
checks the installed package's own source instead.

    python tools/check_typing.py
    python tools/check_typing.py --package
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
EXAMPLES = ROOT / "examples"


def readme_sections(text: str) -> dict[str, str]:
    """Section title -> the section's python blocks, joined in order."""
    sections: dict[str, list[str]] = {}
    section = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        elif line.strip() == "```python":
            end = i + 1
            while lines[end].strip() != "```":
                end += 1
            sections.setdefault(section, []).append("\n".join(lines[i + 1:end]) + "\n")
            i = end
        i += 1
    return {title: "\n".join(blocks) for title, blocks in sections.items()}


def module_name(title: str) -> str:
    return "readme_" + (re.sub(r"\W+", "_", title).strip("_").lower() or "top")


def run_mypy(extra: list[str] | None = None, cache_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    """mypy --strict over the README's sections and examples/*.py, from the running interpreter
    (so it sees the lifecore installed there). With ``cache_dir`` the sections are written there
    and mypy keeps its cache there, so a later run with the same options re-analyses only what
    changed (numpy's and torch's stubs take most of a cold run); without it, all is fresh."""
    with tempfile.TemporaryDirectory() as fresh:
        work = Path(fresh) if cache_dir is None else cache_dir
        sources = work / "sources"
        sources.mkdir(parents=True, exist_ok=True)
        files = []
        for title, source in readme_sections(README.read_text(encoding="utf-8")).items():
            path = sources / f"{module_name(title)}.py"
            if not path.exists() or path.read_text(encoding="utf-8") != source:
                path.write_text(source, encoding="utf-8")
            files.append(str(path))
        files += sorted(str(p) for p in EXAMPLES.glob("*.py"))
        # Only torch may be missing (its examples skip then); a missing lifecore is an error.
        config = work / "mypy.ini"
        config.write_text("[mypy]\nuntyped_calls_exclude = torch\n[mypy-torch.*]\nignore_missing_imports = True\n", encoding="utf-8")
        # A missing torch is Any to mypy, and subclassing its nn.Module is then an error in a
        # README example that is right where torch is installed.
        without_torch = ["--allow-subclassing-any"] if importlib.util.find_spec("torch") is None else []
        # Blocks of a section are separate snippets joined here: a name may be rebound to
        # another type by a later block.
        command = [sys.executable, "-m", "mypy", "--strict", "--config-file", str(config),
                   "--allow-redefinition-new", "--local-partial-types", *without_torch,
                   "--cache-dir", str(work / "cache"), *(extra or []), *files]
        result = subprocess.run(command, capture_output=True, text=True, cwd=work)
        # Name the README section, not the file it was written to.
        result.stdout = result.stdout.replace(str(sources) + "/", "README.md:")
        return result


def run_mypy_on_package(cache_dir: Path) -> subprocess.CompletedProcess[str]:
    """mypy --strict over the installed lifecore package itself (its modules, the reference
    models, the state machines and the benchmarks it ships), from the running interpreter. An
    ignore comment that a torch or NumPy version other than the pinned one no longer needs is
    not an error here (``--no-warn-unused-ignores``): the package is checked as users have it."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    config = cache_dir / "mypy-package.ini"
    # Calls into torch and Hypothesis are as typed as the installed version makes them (an older
    # Hypothesis leaves run_state_machine_as_test untyped): not the package's to answer for.
    config.write_text("[mypy]\nuntyped_calls_exclude = torch,hypothesis\n[mypy-torch.*]\nignore_missing_imports = True\n",
                      encoding="utf-8")
    without_torch = ["--allow-subclassing-any"] if importlib.util.find_spec("torch") is None else []
    command = [sys.executable, "-m", "mypy", "--strict", "--no-warn-unused-ignores", "--config-file", str(config),
               *without_torch, "--cache-dir", str(cache_dir / "package-cache"), "-p", "lifecore"]
    # Run from the cache folder: the installed package is checked, never a source tree beside it.
    return subprocess.run(command, capture_output=True, text=True, cwd=cache_dir)


def main() -> int:
    if sys.argv[1:] == ["--package"]:
        with tempfile.TemporaryDirectory() as fresh:
            result = run_mypy_on_package(Path(fresh))
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        return result.returncode
    result = run_mypy(sys.argv[1:])
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
