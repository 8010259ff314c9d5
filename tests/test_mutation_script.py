"""tools/mutate.py's site finder and its source restoration, without building anything: which
text counts as an operator (never comments, strings, raw strings, preprocessor lines, template
brackets, shifts, arrows or rvalue references), the one replacement of each operator, what a
dropped throw removes, ids stable for a file, and a mutated file always put back."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "mutate.py"


@pytest.fixture(scope="module")
def mutate():
    if not SCRIPT.exists():
        pytest.skip("tools/mutate.py is not part of this tree")
    spec = importlib.util.spec_from_file_location("lifecore_mutate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["lifecore_mutate"] = module
    spec.loader.exec_module(module)
    return module


SOURCE = r'''#include <vector>
#define LIMIT(a) ((a) < 3 && !(a))
// a < b && c in a comment
/* if (x == y) return true; */
namespace n {
template <typename T> bool f(std::vector<T> v, int a, int b, T&& t) {
  const char* s = "a < b || c == d";
  const char c = '!';
  auto raw = R"X(x != y && !z)X";
  int shifted = a << 2 >> 1;
  auto* p = &v; p->size();
  if (a < b && b <= 9 || a > b) return true;
  if (a >= 0 && a == b && a != 4) return false;
  if (!ok(a)) throw Error("bad");
  raise(ErrorKind::InvalidArgument, "x " + std::to_string(a));
  return 1'000 == a;
}
void raise(ErrorKind kind);
}
'''


def test_sites_are_found_only_in_code(tmp_path, mutate) -> None:
    source_dir = tmp_path / "cpp" / "src" / "part"
    source_dir.mkdir(parents=True)
    (source_dir / "file.cpp").write_text(SOURCE)
    sites = mutate.find_sites(tmp_path)
    found = [(s.line, s.operator, s.original, s.replacement) for s in sites]
    assert found == [
        (12, "lt", "<", "<="), (12, "and", "&&", "||"), (12, "le", "<=", "<"), (12, "or", "||", "&&"),
        (12, "gt", ">", ">="), (12, "true", "return true;", "return false;"),
        (13, "ge", ">=", ">"), (13, "and", "&&", "||"), (13, "eq", "==", "!="), (13, "and", "&&", "||"),
        (13, "ne", "!=", "=="), (13, "false", "return false;", "return true;"),
        (14, "not", "!", ""), (14, "throw", 'throw Error("bad");', ";"),
        (15, "throw", 'raise(ErrorKind::InvalidArgument, "x " + std::to_string(a));', ";"),
        (16, "eq", "==", "!="),
    ]
    ids = {s.ident for s in sites}
    assert len(ids) == len(sites)  # one id per site
    assert all(s.ident.startswith("cpp/src/part/file.cpp:") for s in sites)
    for site in sites:
        assert SOURCE[site.start:site.end] == site.original


def test_masking_keeps_offsets_and_lines(mutate) -> None:
    masked = mutate.mask(SOURCE)
    assert len(masked) == len(SOURCE)
    assert masked.count("\n") == SOURCE.count("\n")
    assert "a < b || c == d" not in masked and "x != y" not in masked and "LIMIT" not in masked


def test_a_mutated_file_is_restored(tmp_path, mutate) -> None:
    file = tmp_path / "f.cpp"
    file.write_text("return a < b;\n")
    restorer = mutate.Restorer()
    with pytest.raises(KeyboardInterrupt):
        try:
            restorer.apply(file, "return a <= b;\n")
            assert file.read_text() == "return a <= b;\n"
            raise KeyboardInterrupt
        finally:
            restorer.restore()
    assert file.read_text() == "return a < b;\n"
    restorer.restore()  # idempotent
    assert file.read_text() == "return a < b;\n"


def test_the_sample_is_fixed_by_the_seed(tmp_path, mutate) -> None:
    import random

    source_dir = tmp_path / "cpp" / "src" / "part"
    source_dir.mkdir(parents=True)
    (source_dir / "file.cpp").write_text(SOURCE)
    sites = mutate.find_sites(tmp_path)

    def sample(seed):
        order = list(sites)
        random.Random(seed).shuffle(order)
        return [s.ident for s in order]

    assert sample(8) == sample(8)
    assert sorted(sample(8)) == sorted(sample(3))


def test_under_keeps_only_the_sites_of_those_paths() -> None:
    """``--under`` narrows a campaign to one part of the core (with ``--tests``, what one
    state machine alone catches there)."""
    import subprocess

    listed = subprocess.run([sys.executable, str(SCRIPT), "--under", "cpp/src/sequence", "--list"],
                            capture_output=True, text=True, check=True)
    ids = [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]
    assert ids and all(i.startswith("cpp/src/sequence/") for i in ids), ids[:5]


def test_the_site_is_laid_out_as_the_wheel_installs_it(mutate) -> None:
    # Every package the wheel installs (the benchmarks too, which tests import) is copied into
    # the site the mutants' tests import; a missing one failed the unmutated suite.
    root = SCRIPT.parent.parent
    packages = mutate.wheel_packages(root)
    assert packages["lifecore"] == "python/lifecore"
    assert packages["lifecore/models"] == "models"
    assert packages["lifecore/benchmarks"] == "benchmarks"
    for source in packages.values():
        assert (root / source).is_dir(), source


def test_listing_needs_no_git_checkout(tmp_path) -> None:
    # A campaign's unmutated suite runs in a copy of the tree that is not a git checkout, and
    # test_under_keeps_only_the_sites_of_those_paths lists sites there.
    import shutil
    import subprocess

    root = SCRIPT.parent.parent
    shutil.copytree(root / "tools", tmp_path / "tools")
    shutil.copytree(root / "cpp" / "src" / "sequence", tmp_path / "cpp" / "src" / "sequence")
    listed = subprocess.run([sys.executable, str(tmp_path / "tools" / "mutate.py"), "--list"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert listed.stdout.splitlines() and all(line.startswith("cpp/src/sequence/") for line in listed.stdout.splitlines())


def test_every_mutant_judged_equivalent_names_a_current_site() -> None:
    """An id is path:line:column:operator, so it goes stale when its file changes above it, and a
    report would then count that mutant as a plain survivor. Moved? Find the line again in
    ``tools/mutate.py --list`` and update tools/mutation-equivalent.json (or drop the entry)."""
    import json
    import subprocess

    if not SCRIPT.exists():
        pytest.skip("tools/mutate.py is not part of this tree")
    judged = json.loads((SCRIPT.parent / "mutation-equivalent.json").read_text(encoding="utf-8"))
    listed = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True, check=True)
    sites = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    assert sorted(set(judged) - sites) == []
