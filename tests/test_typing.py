"""The README's python examples and examples/*.py pass ``mypy --strict`` against the installed
stubs (tools/check_typing.py), and the check sees lifecore's types (a wrong one fails it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import check_typing  # noqa: E402


def _has_stubs() -> bool:
    spec = importlib.util.find_spec("lifecore")
    return spec is not None and spec.origin is not None and (Path(spec.origin).parent / "_core" / "__init__.pyi").exists()


pytestmark = [pytest.mark.time_limit(300),
              pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed"),
              pytest.mark.skipif(not _has_stubs(), reason="this build of lifecore ships no stubs (e.g. the sanitizer build)")]


def test_readme_and_examples_pass_mypy_strict():
    result = check_typing.run_mypy()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout


def test_the_check_sees_lifecore_types(tmp_path: Path):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        "from lifecore.sequence import AdmissionCoordinator, FrameHold\n"
        "coordinator = AdmissionCoordinator(None, domains={'kv': 4096}, page_bytes=4096,\n"
        "                                   tokens_per_page=16, max_active_sequences=1)\n"
        "with coordinator as entered:\n"
        "    hold: FrameHold = entered\n",   # __enter__ returns the coordinator, not a FrameHold
        encoding="utf-8")
    result = check_typing.run_mypy([str(wrong)])
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'expression has type "AdmissionCoordinator", variable has type "FrameHold"' in result.stdout
