"""Every ```python block of README.md (and docs/backends.md) runs as written.

Blocks run in order, one namespace per ``##`` section (so a block may use what an earlier
block of its section defined). A block whose first line is ``# needs a GPU`` runs where the CUDA backend has a device and
skips with that reason elsewhere; one whose first line is ``# needs writable NumPy views`` runs
where ``numpy.from_dlpack`` gives writable views (NumPy 2.2.5 or later, see numpy_views.py); a
block that imports torch skips where torch is missing or under the sanitizer build (torch
does not load with the ASan runtime preloaded, like the ``no_sanitizer`` tests).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
from pathlib import Path

import pytest

import lifecore

from numpy_views import WRITABLE_VIEWS, WRITABLE_VIEWS_REASON

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, ROOT / "docs" / "backends.md"]
NEEDS_GPU = "# needs a GPU"
NEEDS_WRITABLE_VIEWS = "# needs writable NumPy views"
USES_TORCH = re.compile(r"^\s*(import torch|from torch\b|from lifecore\.torch\b|import lifecore\.torch)", re.M)


def python_blocks(text: str, prefix: str = "") -> list[tuple[str, int, str]]:
    """(section title, index within the section, source) for each ```python block."""
    blocks: list[tuple[str, int, str]] = []
    section, counts = prefix, {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = prefix + line[3:].strip()
        elif line.strip() == "```python":
            end = i + 1
            while lines[end].strip() != "```":
                end += 1
            counts[section] = counts.get(section, 0) + 1
            blocks.append((section, counts[section], "\n".join(lines[i + 1:end]) + "\n"))
            i = end
        i += 1
    return blocks


BLOCKS = [block for path in DOCS
          for block in python_blocks(path.read_text(encoding="utf-8"), "" if path == README else f"{path.name}: ")]
NAMESPACES: dict[str, dict] = {}


@pytest.fixture(scope="module", autouse=True)
def _sections_end_with_the_module():
    """What the sections made (devices, buffers, a torch tensor on lifecore memory) goes when
    this module's tests end: kept until the interpreter exits, a buffer a torch tensor holds is
    reported leaked."""
    yield
    NAMESPACES.clear()


def test_every_area_has_runnable_examples():
    sections = {section for section, _, _ in BLOCKS}
    for title in ("Graph capture", "Sequence sessions", "Capture sessions", "Backends", "Errors",
                  "Checking it on your machine"):
        assert title in sections, f"README.md has no python example under '## {title}'"


@pytest.mark.parametrize("section,index,source", BLOCKS, ids=[f"{s}-{i}" for s, i, _ in BLOCKS])
def test_readme_block_runs(section: str, index: int, source: str):
    if source.lstrip().startswith(NEEDS_GPU) and "cuda" not in lifecore.available_backends():
        pytest.skip("no CUDA device: the example needs a GPU")
    if source.lstrip().startswith(NEEDS_WRITABLE_VIEWS) and not WRITABLE_VIEWS:
        pytest.skip(WRITABLE_VIEWS_REASON)
    if USES_TORCH.search(source):
        if importlib.util.find_spec("torch") is None:
            pytest.skip("torch is not installed")
        if os.environ.get("LIFECORE_SANITIZED"):
            pytest.skip("torch does not load under the sanitizer build")
    namespace = NAMESPACES.setdefault(section, {"__name__": f"readme_{index}"})
    code = compile(source, f"{section}, block {index}", "exec")
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, namespace)


@pytest.mark.time_limit(300)
@pytest.mark.no_sanitizer
def test_the_machine_examples_pass_as_a_user_runs_them(tmp_path):
    """The state-machine examples of "Checking it on your machine", run as a user runs them: a
    script of their own, from an empty folder, with Hypothesis's own settings (more examples
    than the suite's quick profile). The suite's profile once hid a seed-0 failure there."""
    import subprocess
    import sys

    section = "Checking it on your machine"
    sources = [source for title, _, source in BLOCKS
               if title == section and not source.lstrip().startswith(NEEDS_GPU)]
    assert sources, f"no runnable python example under '## {section}'"
    script = tmp_path / "check_my_machine.py"
    script.write_text("\n".join(sources), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_PROFILE"}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=280,
                            cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert re.search(r"runs \d+, steps \d+", result.stdout), result.stdout

