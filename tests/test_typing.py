"""The README's python examples and examples/*.py pass ``mypy --strict`` against the installed
stubs (tools/check_typing.py), and the check sees lifecore's types (a wrong one fails it)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Callable

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


@pytest.fixture(scope="module")
def mypy_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for every strict run here: the README's sections and mypy's cache stay, so each
    run after the first re-analyses only its own snippet (a cold run spends ~18 s on stubs)."""
    return tmp_path_factory.mktemp("mypy-strict")


MypyOn = Callable[[str, str], "subprocess.CompletedProcess[str]"]


def _revealed(stdout: str) -> list[str]:
    """The types mypy's reveal_type lines show, in order."""
    return [line.split("Revealed type is ", 1)[1] for line in stdout.splitlines() if "Revealed type" in line]


@pytest.fixture
def mypy_on(tmp_path: Path, mypy_work: Path) -> MypyOn:
    """mypy --strict's result on a snippet: mypy_on(name, source) writes it to `name` in tmp_path."""

    def run(name: str, source: str):
        code = tmp_path / name
        code.write_text(source, encoding="utf-8")
        return check_typing.run_mypy([str(code)], cache_dir=mypy_work)

    return run


def test_readme_and_examples_pass_mypy_strict(mypy_work: Path):
    result = check_typing.run_mypy(cache_dir=mypy_work)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout


def test_the_installed_package_passes_mypy_strict(mypy_work: Path):
    # Its own modules, the reference models, the state machines and the benchmarks it ships:
    # a user's mypy follows lifecore's types into all of them. Checked against the stubs of the
    # dependencies CI pins: NumPy 1.x's make a bare np.ndarray an error, and without torch its
    # modules type as Any.
    import numpy

    if int(numpy.__version__.split(".")[0]) < 2:
        pytest.skip(f"NumPy {numpy.__version__}: the package is type-checked against NumPy 2's stubs")
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: the package is type-checked with torch's types")
    result = check_typing.run_mypy_on_package(mypy_work)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout


def test_the_check_sees_lifecore_types(mypy_on: MypyOn):
    result = mypy_on("wrong.py",
        "from lifecore.sequence import AdmissionCoordinator, FrameHold\n"
        "coordinator = AdmissionCoordinator(None, domains={'kv': 4096}, page_bytes=4096,\n"
        "                                   tokens_per_page=16, max_active_sequences=1)\n"
        "with coordinator as entered:\n"
        "    hold: FrameHold = entered\n")   # __enter__ returns the coordinator, not a FrameHold
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'expression has type "AdmissionCoordinator", variable has type "FrameHold"' in result.stdout


def test_values_a_user_reads_are_typed_as_what_they_are(mypy_on: MypyOn):
    # These were typed `object`: indexing a block table, or calling a str method on a skip
    # reason, failed mypy --strict although the code is right.
    result = mypy_on("reads.py",
        "from lifecore.capture import Axis, CapturePayload, CaptureRecord\n"
        "from lifecore._core.capture import ResolvedSlice\n"
        "from lifecore.sequence import AdmissionCoordinator, SequenceSession\n"
        "def rows(c: AdmissionCoordinator, sessions: list[SequenceSession]) -> int:\n"
        "    table = c.block_table(sessions, 8)\n"
        "    first: int = int(table[0, 0])\n"
        "    return first + int(c.decode_table(2, 8).table[1, 0])\n"
        "def why(record: CaptureRecord) -> str:\n"
        "    reason = record.skip_reason or record.fail_reason or record.budget or ''\n"
        "    return reason.upper()\n"
        "def kind(payload: CapturePayload) -> str:\n"
        "    return (payload.kind or 'none').title()\n"
        "def extent(axis: Axis) -> int:\n"
        "    size = axis.size\n"
        "    return size if isinstance(size, int) else len(size)\n"
        "def region(s: ResolvedSlice) -> slice:\n"
        "    return s.as_slice()\n")
    assert result.returncode == 0, result.stdout + result.stderr


def test_arrays_the_stream_takes_are_typed_as_taken(mypy_on: MypyOn):
    # Stream.write takes any C-contiguous buffer-protocol object (the README's "Buffers as
    # tensors"), but its stub said bytes | bytearray | memoryview: writing a NumPy array failed
    # mypy --strict although it runs.
    result = mypy_on("arrays.py",
        "import numpy as np\n"
        "import lifecore\n"
        "def roundtrip(stream: lifecore.Stream, buf: lifecore.Buffer) -> None:\n"
        "    stream.write(buf, np.arange(16, dtype=np.float32))\n"
        "    stream.read_into(buf, np.empty(16, np.float32))\n")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_installed_package_type_checks(tmp_path: Path):
    """mypy over the installed lifecore, its generated stubs among it: a stub that names what it
    never defines, or an override the stub gets wrong (__eq__, __reduce__), fails it."""
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n[mypy-torch.*]\nignore_missing_imports = True\n", encoding="utf-8")
    command = [sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir", str(tmp_path / "cache"),
               "-p", "lifecore"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_what_may_be_none_or_a_plain_value_is_typed_so(mypy_on: MypyOn):
    # A decision's snapshot and deferral are None in the other outcomes; the testing machines
    # were Any to a type checker; statistics were a bare dict. Each line below is wrong.
    result = mypy_on("wrong_reads.py",
        "import lifecore\n"
        "from lifecore.sequence import BackingDecision\n"
        "from lifecore.testing import StreamCaptureMachine\n"
        "def pages(d: BackingDecision) -> int:\n"
        "    return d.snapshot.pages\n"
        "def action(d: BackingDecision) -> object:\n"
        "    return d.deferred.action\n"
        "def run() -> None:\n"
        "    StreamCaptureMachine.run(lambda: lifecore.Device('mock'), seed='not a seed')\n"
        "def pool(device: lifecore.Device) -> str:\n"
        "    return device.memory_stats()['pool_bytes']\n")
    assert result.returncode == 1, result.stdout + result.stderr
    for wrong in ('Item "None" of "BackingSnapshot | None" has no attribute "pages"',
                  'Item "None" of "AdmissionDeferred | None" has no attribute "action"',
                  'Argument "seed" to "run" of "LifecycleMachine" has incompatible type "str"',
                  'Incompatible return value type (got "int", expected "str")'):
        assert wrong in result.stdout, result.stdout


def test_a_block_table_is_typed_as_what_it_returns(mypy_on: MypyOn):
    # block_table returned Any: a new int32 array for out=None, else the `out` it filled.
    result = mypy_on("tables.py",
        "import numpy as np\n"
        "import lifecore\n"
        "from lifecore.sequence import AdmissionCoordinator, SequenceSession\n"
        "def tables(c: AdmissionCoordinator, rows: list[SequenceSession], buffer: lifecore.Buffer) -> None:\n"
        "    reveal_type(c.block_table(rows, 8))\n"
        "    reveal_type(c.block_table(rows, 8, buffer))\n"
        "    reveal_type(c.block_table(rows, 8, out=np.zeros((2, 8), np.int32)))\n"
        "    wrong: lifecore.Buffer = c.block_table(rows, 8)\n")
    assert result.returncode == 1, result.stdout + result.stderr
    revealed = _revealed(result.stdout)
    assert len(revealed) == 3, result.stdout
    int32 = ("numpy.int32", "_32Bit")  # as the installed NumPy's stubs spell it
    assert revealed[0].startswith('"numpy.ndarray[') and any(name in revealed[0] for name in int32), revealed
    assert revealed[1] == '"lifecore._core.runtime.Buffer"', revealed
    # The type of the `out` given, its shape as this mypy and NumPy spell it (tuple[int, int], or
    # literals; NumPy 1.x's stubs type no shape: Any).
    assert revealed[2].startswith(('"numpy.ndarray[tuple[', '"numpy.ndarray[Any, ')), revealed
    assert any(name in revealed[2] for name in int32), revealed
    out = result.stdout
    assert 'variable has type "Buffer")' in out and "Incompatible types in assignment" in out, out


def test_a_devices_modes_are_typed_as_the_strings_it_takes(mypy_on: MypyOn):
    # Device(graphs=, capture_mode=) took any str: a misspelt mode type-checked and failed only
    # when the line ran. The modes it reports are the same literals.
    result = mypy_on("modes.py",
        "import lifecore\n"
        "def modes(device: lifecore.Device) -> None:\n"
        "    lifecore.Device('mock', graphs='software', capture_mode='relaxed').close()\n"
        "    reveal_type(device.graphs)\n"
        "    reveal_type(device.capture_mode)\n"
        "    lifecore.Device('mock', graphs='sofware')\n"
        "    lifecore.Device('mock', capture_mode='threadlocal')\n")
    assert result.returncode == 1, result.stdout + result.stderr
    revealed = _revealed(result.stdout)
    assert len(revealed) == 2, result.stdout
    # The literals, however this mypy spells their union (Literal['a'] | Literal['b'], or one Literal).
    for shown, names in zip(revealed, (("hardware", "software"), ("thread_local", "global", "relaxed"))):
        assert "Literal[" in shown and "str" not in shown, revealed
        assert all(f"'{name}'" in shown for name in names) and shown.count("'") == 2 * len(names), revealed
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 2 and all(":6:" in e or ":7:" in e for e in errors), result.stdout
    assert 'Argument "graphs" to "Device" has incompatible type "Literal[\'sofware\']"' in result.stdout, result.stdout
    assert 'Argument "capture_mode" to "Device" has incompatible type' in result.stdout, result.stdout


def test_a_star_import_gives_the_errors_to_a_type_checker(mypy_on: MypyOn):
    # lifecore.__all__ spread errors.__all__, which mypy does not evaluate: after
    # `from lifecore import *` it called CaptureStateError undefined.
    result = mypy_on("star.py", "from lifecore import *\n"
                                          "def refused(error: Exception) -> bool:\n"
                                          "    return isinstance(error, (CaptureStateError, ClosedError))\n")
    assert result.returncode == 0, result.stdout + result.stderr


def test_what_runs_type_checks_and_what_is_refused_at_run_time_does_not(tmp_path: Path, mypy_on: MypyOn):
    # The stubs took `object` or `Any` where the call takes little (a str passed as data, a
    # table or a token array), a module __getattr__ made any misspelled import Any, a payload's
    # tensor hid its None, and NumPy integers, which every call takes, were refused.
    good = mypy_on("good.py",
        "import numpy as np\n"
        "import lifecore\n"
        "from lifecore import kernels\n"
        "from lifecore.capture import CapturePayload, Histogram, Summary, Candidates\n"
        "from lifecore.errors import AdmissionError, CaptureRefusedError, DeviceLostError\n"
        "from lifecore.sequence import AdmissionCoordinator, SequenceSession, step_all\n"
        "def run(s: lifecore.Stream, b: lifecore.Buffer, c: AdmissionCoordinator, rows: list[SequenceSession],\n"
        "        session: SequenceSession) -> None:\n"
        "    s.write(b, np.zeros(4, np.uint8))\n"
        "    s.write(b, bytearray(4))\n"
        "    s.launch(kernels.axpy_f32, np.int32(1), (np.int64(4),), [np.int64(4), 2.0, b, b])\n"
        "    s.launch(kernels.axpy_info_f32, 1, 4, [b, b], info=np.array([16, 0], np.uint32))\n"
        "    b.view('float32', np.array([4]))\n"
        "    step_all(rows, np.ones(len(rows), np.int64))\n"
        "    session.step(np.int64(16))\n"
        "    c.block_table(rows, 4, np.zeros((len(rows), 4), np.int32))\n"
        "    c.block_table(rows, np.int32(4), pad=np.int32(-1))\n"
        "    c.admit('r', np.int64(16), np.int64(64))\n"
        "    session.try_ensure_backing_covers(np.int64(32), np.int64(2))\n"
        "    c.decode_table(np.int64(2), np.int64(4), pad=np.int32(-1))\n"
        "    c.grow_domain('kv', np.uint64(1 << 20))\n"
        "    s.alloc(np.int64(64))\n"
        "    step_all(tuple(rows), range(16, 16 + len(rows)))\n"
        "    lifecore.float_bits(np.float32(0.5))\n"
        "    s.launch(kernels.axpy_f32, [1], [4], [4, 2.0, b, b])\n"
        "def tensor_of(p: CapturePayload) -> object:\n"
        "    t = p.tensor\n"
        "    return None if t is None else t.shape\n"
        "def why(e: CaptureRefusedError, a: AdmissionError, lost: DeviceLostError) -> str:\n"
        "    return e.cause + e.status + e.call + str(e.code) + e.lifecore_status + a.path + lost.reason\n")
    assert good.returncode == 0, good.stdout + good.stderr
    bad = mypy_on("bad.py",
        "import numpy as np\n"
        "import lifecore\n"
        "from lifecore import kernels\n"
        "from lifecore.capture import CapturePayload\n"
        "from lifecore.sequence import AdmissionCoordinator, SequenceSession, step_all\n"
        "import lifecore.capture\n"
        "import lifecore.testing\n"
        "def run(s: lifecore.Stream, b: lifecore.Buffer, c: AdmissionCoordinator, rows: list[SequenceSession],\n"
        "        p: CapturePayload, cs: lifecore.capture.CaptureSession) -> object:\n"
        "    s.write(b, 'text')\n"
        "    s.read_into(b, 'text')\n"
        "    s.fill('text', 1)\n"
        "    s.launch(kernels.axpy_f32, 1, 4, ['text', b])\n"
        "    step_all(rows, '1')\n"
        "    c.block_table(rows, 4, 'not a table')\n"
        "    lifecore.capture.NumpyBackendd()\n"
        "    lifecore.testing.SequenceSessionMachin\n"
        "    cs.observe('numpy', 'p', np.zeros(4))\n"
        "    return p.tensor.shape\n")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    flagged = {int(line.split(":")[1]) for line in bad.stdout.splitlines() if line.startswith(str(tmp_path / "bad.py"))
               and ": error:" in line}
    assert flagged == set(range(10, 20)), bad.stdout
