"""lifecore.torch on modules whose output is a container: a dict, a ModelOutput-like mapping
(an ordered dict whose fields are attributes too and whose int index is positional), or a
namedtuple. ``output_index`` selects by key (a str) or by position (an int, for a tuple and
for a ModelOutput-like mapping); a replacement goes back into a container of the same type,
the other elements passing through; a missing key or an element that is not a tensor is
refused with a message naming the module, the selection and what the output holds."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Optional

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from torch import nn  # noqa: E402

from lifecore.capture import (  # noqa: E402
    CapturePhase,
    CaptureRequest,
    CaptureSchedule,
    CaptureSelection,
    CaptureTransform,
    InterventionOutcome,
    interventions as iv,
)
from lifecore.errors import InvalidArgumentError, LifecoreTypeError  # noqa: E402
from lifecore.torch import attach, capture, discover  # noqa: E402

from capture_builders import session_for  # noqa: E402
from torch_capture_helpers import intervening_session, prefill_step  # noqa: E402

pytestmark = pytest.mark.no_sanitizer

D, TOKENS = 4, 3


@dataclasses.dataclass
class LayerOutput(collections.OrderedDict):
    """Behaves as a ModelOutput: the fields set are its keys (in field order) and attributes,
    an int index is a position among them, and setting a key sets the attribute too."""

    hidden: Optional[torch.Tensor] = None
    gate: Optional[torch.Tensor] = None
    note: Optional[str] = None

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                self[field.name] = value

    def __getitem__(self, key: Any) -> Any:
        return self.to_tuple()[key] if isinstance(key, int) else super().__getitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(self[k] for k in self.keys())


class Returns(nn.Module):
    """Returns its input's (hidden = x + 3, gate = x * 2) in a container made by ``wrap``."""

    def __init__(self, wrap: Any) -> None:
        super().__init__()
        self.wrap = wrap

    def forward(self, x: torch.Tensor) -> Any:
        return self.wrap(x + 3.0, x * 2.0)


class Reads(nn.Module):
    """Reads the pair by key (a mapping), by position (a tuple) or by attribute (a ModelOutput
    or a namedtuple)."""

    def __init__(self, wrap: Any, by: str) -> None:
        super().__init__()
        self.pair = Returns(wrap)
        self.by = by

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.pair(x)
        if self.by == "key":
            return out["hidden"] + out["gate"]
        if self.by == "position":
            return out[0] + out[1]
        return out.hidden + out.gate


Pair = collections.namedtuple("Pair", "hidden gate")
CONTAINERS = {
    "dict": (lambda h, g: {"hidden": h, "gate": g, "note": "kept"}, "key"),
    "model output": (lambda h, g: LayerOutput(hidden=h, gate=g, note="kept"), "attribute"),
    "model output by key": (lambda h, g: LayerOutput(hidden=h, gate=g, note="kept"), "key"),
    "namedtuple": (lambda h, g: Pair(h, g), "attribute"),
}


def zero_at(model: nn.Module, x: torch.Tensor, output_index: Any, path: str = "pair") -> tuple[Any, torch.Tensor]:
    """(the step, the output) of one forward that captures and then zeroes ``path`` at ``output_index``."""
    discovery = discover(model, x, output_index=output_index)
    session = intervening_session(discovery, CaptureRequest(1, TOKENS, 1),
                                  [iv.zero("z", path, schedule=CaptureSchedule(decode=False))],
                                  CaptureSelection("s", path, CaptureTransform.summary()))
    with torch.no_grad():
        return prefill_step(session, model, x, output_index=output_index)


@pytest.mark.parametrize("container", list(CONTAINERS))
@pytest.mark.parametrize("output_index", ["gate", {"pair": "gate"}])
def test_a_key_selects_the_element_observed_and_replaced_in_a_container_of_the_same_type(container, output_index):
    wrap, by = CONTAINERS[container]
    model, x = Reads(wrap, by), torch.ones(1, TOKENS, D)
    rebuilt: list[Any] = []
    model.pair.register_forward_hook(lambda m, a, out: rebuilt.append(out))
    step, out = zero_at(model, x, output_index)
    assert step.record("s").payload.mean == 2.0  # the gate was observed
    assert step.interventions[0].outcome == InterventionOutcome.APPLIED
    assert torch.equal(out, x + 3.0)  # the gate was zeroed; the hidden state passed through
    replaced = rebuilt[-1]
    assert type(replaced) is type(wrap(x, x))
    if container != "namedtuple":
        assert replaced["note"] == "kept" and list(replaced.keys()) == ["hidden", "gate", "note"]


def test_an_int_is_a_position_in_a_model_output_as_its_own_index_is():
    model, x = Reads(CONTAINERS["model output"][0], "attribute"), torch.ones(1, TOKENS, D)
    step, out = zero_at(model, x, 0)
    assert step.record("s").payload.mean == 4.0  # the first field, hidden = x + 3
    assert torch.equal(out, x * 2.0)


def test_capture_selects_a_mapping_output_by_key():
    model, x = Reads(CONTAINERS["dict"][0], "key"), torch.ones(1, TOKENS, D)
    with capture(model, "pair", "summary", output_index="hidden") as records, torch.no_grad():
        model(x)
    assert records["pair"].summary.mean == 4.0


def test_a_plain_dict_has_no_position_so_its_default_is_unchanged():
    model, x = Reads(CONTAINERS["dict"][0], "key"), torch.ones(1, TOKENS, D)
    assert "pair" not in {p.path for p in discover(model, x).catalog}  # not observed under 0, as before
    assert "pair" in {p.path for p in discover(model, x, output_index="gate").catalog}


@pytest.mark.parametrize("container, output_index, message", [
    ("dict", 0, r"output of pair is a dict, selected by key .* not by position 0 \(its keys: 'hidden', 'gate'"),
    ("model output", "missing", r"output of pair has no key 'missing' \(its keys: 'hidden', 'gate', 'note'\)"),
    ("model output", "note", r"output of pair at output_index 'note' is a str, not a tensor"),
    ("model output", 5, r"output of pair has no position 5 \(3 fields set\) \(its keys: 'hidden', 'gate', 'note'"),
])
def test_a_selection_with_no_tensor_there_is_refused_naming_what_the_output_holds(container, output_index, message):
    wrap, by = CONTAINERS[container]
    model, x = Reads(wrap, by), torch.ones(1, TOKENS, D)
    discovery = discover(model, x, output_index="gate")
    session = session_for(CaptureSelection("s", "pair", CaptureTransform.summary()),
                          discovery=discovery, request=CaptureRequest(1, TOKENS, 1))
    with attach(session, model, output_index=output_index), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        with pytest.raises(InvalidArgumentError, match=message):
            model(x)
        session.take_step()


def test_a_key_on_a_plain_tuple_is_refused_and_a_namedtuple_field_is_a_key():
    model, x = Reads(lambda h, g: (h, g), "position"), torch.ones(1, TOKENS, D)
    assert "pair" not in {p.path for p in discover(model, x, output_index="gate").catalog}
    model = Reads(CONTAINERS["namedtuple"][0], "attribute")
    assert "pair" in {p.path for p in discover(model, x, output_index="gate").catalog}


@pytest.mark.parametrize("bad", [1.0, None, {"pair": 1.5}, {1: "gate"}, True])
def test_an_output_index_of_the_wrong_type_is_refused_before_the_forward(bad):
    model, x = Reads(CONTAINERS["dict"][0], "key"), torch.ones(1, TOKENS, D)
    with pytest.raises(LifecoreTypeError, match="output_index"):
        discover(model, x, output_index=bad)



def test_discover_refuses_an_output_index_that_names_a_module_with_no_tensor_there():
    """A mapping names modules by path: one whose output holds no tensor there is an error
    naming what the output holds, not a point dropped in silence (a single index for every
    module still keeps only the modules that have one)."""
    model = Reads(CONTAINERS["namedtuple"][0], "attribute")
    x = torch.zeros(1, TOKENS, 4)
    with pytest.raises(InvalidArgumentError, match=r"discover: argument 'output_index' names 'pair', but the output "
                                                   r"of pair"):
        discover(model, x, output_index={"pair": 5})
    assert "pair" not in {p.path for p in discover(model, x, output_index=5).catalog}
    assert "pair" in {p.path for p in discover(model, x, output_index={"pair": 1}).catalog}


def test_a_capture_block_names_what_a_module_returned_where_its_output_index_finds_no_tensor():
    """The block's own discovery saw the output: the error says what it holds, as attach's and
    discover's do (it said only "returned no tensor ... or was not called")."""
    model = Reads(CONTAINERS["namedtuple"][0], "attribute")
    x = torch.zeros(1, TOKENS, 4)
    with pytest.raises(InvalidArgumentError, match=r"capture: module 'pair' returned no tensor at its output_index: "
                                                   r"the output of pair"):
        with capture(model, "pair", "summary", output_index=5):
            model(x)
    with capture(model, "pair", "summary", output_index=1) as records:  # the block is usable after
        model(x)
    assert list(records) == ["pair"]
