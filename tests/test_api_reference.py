"""tools/api_reference.py walks the public API: every name it finds in lifecore.testing,
lifecore.errors, lifecore.sequence and the native capture, runtime and driver types has a
docstring, a planted undocumented name is found (a class, a method, a property, an attribute,
a nanobind-style property whose only text is its getter's signature, a dataclass's generated
one-line docstring), and the reference it renders lists every name."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import lifecore.errors

SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "api_reference.py"


@pytest.fixture(scope="module")
def api():
    if not SCRIPT.exists():
        pytest.skip("tools/api_reference.py is not part of this tree")
    spec = importlib.util.spec_from_file_location("lifecore_api_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["lifecore_api_reference"] = module
    spec.loader.exec_module(module)
    return module


def _defined_in(entry, prefixes: tuple[str, ...]) -> bool:
    """Whether the entry's top-level object comes from one of the modules (a name re-exported
    by ``lifecore`` is walked under ``lifecore``, where it is first exported)."""
    obj = getattr(importlib.import_module(entry.module), entry.qualname.split(".")[0])
    return getattr(obj, "__module__", "").startswith(prefixes)


# The modules whose every public name must be documented (a native class counts by the
# extension module that defines it).
DOCUMENTED_MODULES = ("lifecore.testing", "lifecore.errors", "lifecore.sequence", "lifecore._core.sequence",
                      "lifecore._core.capture", "lifecore._core.runtime", "lifecore._core.driver")


def test_every_name_of_the_documented_modules_is_documented(api):
    pytest.importorskip("hypothesis")  # the machines import it on first use
    entries = [e for e in api.walk() if _defined_in(e, DOCUMENTED_MODULES)]
    names = {e.qualname for e in entries}
    # The walk reached what it must judge: the machines' rules and invariants, the errors' attributes,
    # the sequence API's native methods, properties and enums, and its Python dataclass fields.
    for expected in ("StreamCaptureMachine.agrees_with_the_model", "SequenceSessionMachine.preempt",
                     "CaptureSessionMachine.no_limit_exceeded", "LifecycleMachine.option_or_bound",
                     "MachineStats.run_ended", "DriverError.code", "DriverError.lifecore_status",
                     "DriverError.driver_message", "BudgetExceededError.budget", "BudgetExceededError.cumulative",
                     "SequenceSession.step", "SequenceSession.phase", "AdmissionCoordinator.capacity",
                     "AdmissionCoordinator.register_waiter", "SessionPhase", "PreemptionReport.victims",
                     "preempt_for", "CaptureSession.begin_step", "CaptureRecord.budget", "OnLimit",
                     "CaptureUsage.captures", "BufferView.dtype", "Device.closed"):
        assert expected in names, f"the walk did not reach {expected}"
    undocumented = [f"{e.module}.{e.qualname} ({e.kind})" for e in entries if not e.doc]
    assert not undocumented, "public names without a docstring:\n" + "\n".join(undocumented)


def test_module_constants_are_walked_with_the_text_their_source_gives(api):
    """The kernels, capacity sources, presets and defaults a module exports are public names
    too: each is listed, with its type, and documented by its assignment's docstring or
    ``#:`` comments, or by the exporting module's docstring item naming it."""
    entries = {(e.module, e.qualname): e for e in api.walk()}
    kernel = entries[("lifecore.kernels", "axpy_f32")]
    assert kernel.kind == "constant" and kernel.signature.startswith("axpy_f32: Kernel = ")
    assert kernel.doc.startswith("``axpy_f32(n: u32, a: f32, x: const ptr, y: ptr)``: ``y = a*x + y``")
    source = entries[("lifecore.sequence", "PhysicalMemory")]
    assert source.kind == "constant" and source.doc.startswith("The physical-memory source")
    for module, name in (("lifecore.sequence", "ActiveSequenceSlots"), ("lifecore.testing", "STATS")):
        assert entries[(module, name)].kind == "constant" and entries[(module, name)].doc, name
    if ("lifecore.engine", "PRESETS") in entries:  # lifecore.engine needs torch
        assert "``tiny``" in entries[("lifecore.engine", "PRESETS")].doc
    assert "### `axpy_f32` (constant)" in api.render(list(entries.values()))


def test_error_attributes_are_walked_with_their_own_docs(api):
    entries = {e.qualname: e for e in api.walk()}
    for name in ("code", "status", "lifecore_status", "call", "driver_message"):
        entry = entries[f"DriverError.{name}"]
        assert entry.kind == "attribute" and entry.signature.startswith(f"{name}: ")
        assert entry.doc and not entry.doc.startswith("Attributes:"), entry  # its own docstring
    assert entries["BudgetExceededError.cumulative"].signature == "cumulative: bool"
    # The declarations are class defaults: an error raised by Python code still reads them.
    assert (lifecore.errors.DriverError("x").code, lifecore.errors.BudgetExceededError("x").budget) == (0, "")


class nb_method:  # noqa: N801 - named as nanobind names its function type, which the walker recognises
    """Stands in for a nanobind getter: its ``__doc__`` is its signature only."""

    __name__ = ""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc

    def __call__(self, instance: object) -> int:
        return 0


class Planted:  # no docstring, so nothing names ``named_attribute`` either
    documented_attribute: int = 0
    """Has an attribute docstring."""
    #: Has a ``#:`` comment.
    commented_attribute: int = 0
    bare_attribute: int = 0
    named_attribute: int = 0

    def documented_method(self) -> None:
        """Has a docstring."""

    def bare_method(self) -> None:
        pass

    @property
    def bare_property(self) -> int:
        return 0

    signature_only_property = property(nb_method("(self) -> int"))
    documented_nanobind_property = property(nb_method("(self) -> int\n\nHas text after its signature."))


@dataclass
class PlantedRecord:
    field: int = 0


class DocumentedPlanted:
    """Names ``named_attribute`` in its docstring."""

    named_attribute: int = 0


@pytest.fixture
def planted(monkeypatch):
    errors = lifecore.errors
    for cls in (Planted, PlantedRecord, DocumentedPlanted):
        monkeypatch.setattr(errors, cls.__name__, cls, raising=False)
    monkeypatch.setattr(errors, "__all__", [*errors.__all__, "Planted", "PlantedRecord", "DocumentedPlanted"])


def test_a_planted_undocumented_name_is_found(api, planted):
    missing = set(api.missing())
    prefix = "lifecore.errors."
    for name in ("Planted", "Planted.bare_method", "Planted.bare_property", "Planted.bare_attribute",
                 "Planted.named_attribute", "Planted.signature_only_property", "PlantedRecord",
                 "PlantedRecord.field"):
        assert prefix + name in missing, f"{name} has no docstring but the walker did not list it"
    for name in ("Planted.documented_method", "Planted.documented_attribute", "Planted.commented_attribute",
                 "Planted.documented_nanobind_property", "DocumentedPlanted", "DocumentedPlanted.named_attribute"):
        assert prefix + name not in missing, f"{name} is documented but the walker listed it"
    entries = {e.qualname: e for e in api.walk()}
    assert entries["Planted.documented_nanobind_property"].doc == "Has text after its signature."
    assert entries["Planted.commented_attribute"].doc == "Has a ``#:`` comment."
    # The command exits 1 and names them.
    assert api.main(["--missing"]) == 1


def test_render_lists_every_walked_name(api, planted):
    entries = api.walk()
    text = api.render(entries)
    headings = {line.split("`")[1] for line in text.splitlines() if line.startswith("#") and "`" in line}
    for entry in entries:
        assert entry.qualname in headings, f"{entry.module}.{entry.qualname} is not in the reference"
    modules = {e.module for e in entries}
    assert modules <= headings and "lifecore.errors" in modules
    assert "Has text after its signature." in text


def test_every_python_name_of_capture_and_torch_is_documented(api):
    """The names lifecore.capture and lifecore.torch define in Python (backends, the short path,
    the attachment); their native classes count by the extension module."""
    pytest.importorskip("torch", reason="torch is not installed")
    entries = [e for e in api.walk() if _defined_in(e, ("lifecore.capture", "lifecore.torch"))]
    names = {e.qualname for e in entries}
    for expected in ("CountingBackend.estimate", "MockTensor.generation", "NumpyBackend.transform",
                     "TorchBackend.intervene", "TorchAttachment.detach", "StepResult.step", "capture",
                     "run_with_capture", "ModuleCapture.summary", "CapturedModules.step"):
        assert expected in names, f"the walk did not reach {expected}"
    undocumented = [f"{e.module}.{e.qualname} ({e.kind})" for e in entries if not e.doc]
    assert not undocumented, "public names without a docstring:\n" + "\n".join(undocumented)


def test_every_public_name_is_documented(api):
    """The whole public API, every module the walker knows (lifecore.torch and lifecore.engine
    where torch is installed): no name without a docstring."""
    pytest.importorskip("hypothesis")
    assert api.missing() == [], "public names without a docstring (python tools/api_reference.py --missing)"


def test_the_api_reference_lists_every_public_name(api):
    """docs/api.md is generated from the docstrings: it names every public name the walk finds
    (regenerate with python tools/api_reference.py --write)."""
    pytest.importorskip("hypothesis")
    pytest.importorskip("torch")  # the reference is written with the torch modules in it
    text = api.API_MD.read_text(encoding="utf-8")
    absent = [f"{e.module}.{e.qualname}" for e in api.walk() if f"`{e.qualname}`" not in text]
    assert absent == [], "docs/api.md is out of date: run python tools/api_reference.py --write"
