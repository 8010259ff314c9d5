"""lifecore.torch on a module called more than once in one forward (a layer shared across
depth, as ALBERT applies one layer N times, or a mixture-of-experts block used twice): the
discovery names each call a point of its own (``"layer#0"``, ``"layer#1"``, ...), and the
records, budgets, interventions and routing controls of every call are exact and apart. A
forward that calls the module more or fewer times than the attachment expects is refused with
a message naming the module and the counts; a module called once keeps its plain path."""

from __future__ import annotations

from typing import Optional

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from torch import nn  # noqa: E402

from lifecore.capture import (  # noqa: E402
    CaptureOutcome,
    CapturePhase,
    CaptureRequest,
    CaptureSchedule,
    CaptureSelection,
    CaptureTransform,
    InterventionOutcome,
    InterventionPlan,
    interventions as iv,
)
from lifecore.errors import CaptureSessionError, InvalidArgumentError, LifecoreTypeError  # noqa: E402
from lifecore.torch import (  # noqa: E402
    TorchBackend,
    attach,
    call_counts,
    capture,
    discover,
    route,
)

from capture_builders import session_for  # noqa: E402
from torch_capture_helpers import intervening_session, prefill_step  # noqa: E402

pytestmark = pytest.mark.no_sanitizer

D, VOCAB, TOKENS, LOOPS, EXPERTS, TOP_K = 8, 30, 5, 3, 4, 2


class Shared(nn.Module):
    """One layer applied ``loops`` times over the hidden state, then a head called once."""

    def __init__(self, loops: int = LOOPS) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.layer = nn.Linear(D, D)
        self.head = nn.Linear(D, VOCAB)
        self.loops = loops

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for _ in range(self.loops):
            h = torch.tanh(self.layer(h))
        return self.head(h)


@pytest.fixture
def model() -> Shared:
    torch.manual_seed(0)
    return Shared().eval()


@pytest.fixture
def tokens() -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, TOKENS), generator=torch.Generator().manual_seed(1))


def plain_run(model: nn.Module, module: nn.Module, tokens: torch.Tensor,
              halve: Optional[int] = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The output of a forward, and what a plain forward hook sees at each call of ``module``
    (halving call ``halve``'s output, when given, as an intervention would)."""
    seen: list[torch.Tensor] = []

    def hook(module: nn.Module, args: object, out: torch.Tensor) -> Optional[torch.Tensor]:
        seen.append(out.detach().clone())
        return out * 0.5 if len(seen) - 1 == halve else None

    handle = module.register_forward_hook(hook)
    try:
        with torch.no_grad():
            output = model(tokens)
    finally:
        handle.remove()
    return output, seen


def test_the_discovery_names_each_call_of_a_shared_module_and_keeps_a_single_call_plain(model, tokens):
    points = {p.path: p for p in discover(model, tokens).catalog}
    assert [f"layer#{k}" for k in range(LOOPS)] == [p for p in points if p.startswith("layer")]
    assert "head" in points and "embed" in points  # called once: the plain path, as before
    assert [a.size for a in points["layer#2"].axes] == ["batch", "sequence", D]
    assert call_counts(discover(model, tokens)) == {"layer": LOOPS}


def test_each_call_is_observed_apart_and_equals_what_a_plain_hook_sees(model, tokens):
    discovery = discover(model, tokens)
    selections = [CaptureSelection(f"c{k}", f"layer#{k}", CaptureTransform.full_tensor()) for k in range(LOOPS)]
    session = session_for(*selections, discovery=discovery, request=CaptureRequest(1, TOKENS, 2))
    expected = plain_run(model, model.layer, tokens)[1]
    with attach(session, model, calls=call_counts(discovery)), torch.no_grad():
        for prediction, phase in enumerate([CapturePhase.PREFILL, CapturePhase.DECODE]):
            session.begin_step(phase, prediction)
            model(tokens if prediction == 0 else tokens[:, -1:])  # the counts start again each forward
            step = session.take_step()
            assert [r.outcome for r in step.records] == [CaptureOutcome.CAPTURED] * LOOPS
            if prediction == 0:
                for k in range(LOOPS):
                    torch.testing.assert_close(step.record(f"c{k}").payload.tensor, expected[k])


def test_an_intervention_at_one_call_changes_that_call_only(model, tokens):
    discovery = discover(model, tokens)
    session = intervening_session(discovery, CaptureRequest(1, TOKENS, 1), [iv.scale("half", "layer#1", 0.5)],
                                  CaptureSelection("seen", "layer#2", CaptureTransform.full_tensor()))
    expected, calls = plain_run(model, model.layer, tokens, halve=1)
    with torch.no_grad():
        clean = model(tokens)
        step, patched = prefill_step(session, model, tokens)
    assert step.interventions[0].outcome == InterventionOutcome.APPLIED
    torch.testing.assert_close(patched, expected)
    assert not torch.allclose(patched, clean)
    # the third call saw the second call's halved output go through the layer
    torch.testing.assert_close(step.record("seen").payload.tensor, calls[2])


def test_a_forward_calling_the_module_once_more_than_expected_is_refused_at_that_call(model, tokens):
    discovery = discover(model, tokens)
    session = session_for(CaptureSelection("c0", "layer#0", CaptureTransform.summary()),
                          discovery=discovery, request=CaptureRequest(1, TOKENS, 2))
    model.loops = LOOPS + 1
    with attach(session, model, calls={"layer": LOOPS}), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        with pytest.raises(CaptureSessionError, match=r"'layer' was called 4 times in one forward.*expects 3"):
            model(tokens)
        session.take_step()
    # Without calls=, a call past those the session names passes unobserved.
    with attach(session, model), torch.no_grad():
        session.begin_step(CapturePhase.DECODE, 1)
        model(tokens[:, -1:])
        assert session.take_step().record("c0").outcome == CaptureOutcome.CAPTURED


def test_a_forward_calling_the_module_fewer_times_than_expected_is_refused_when_it_returns(model, tokens):
    discovery = discover(model, tokens)
    session = session_for(CaptureSelection("c0", "layer#0", CaptureTransform.summary()),
                          discovery=discovery, request=CaptureRequest(1, TOKENS, 2))
    model.loops = LOOPS - 1
    with attach(session, model, calls={"layer": LOOPS}), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        with pytest.raises(CaptureSessionError, match=r"'layer' was called 2 times in the forward.*expects 3"):
            model(tokens)
        assert session.take_step().record("c0").outcome == CaptureOutcome.CAPTURED
    # Without calls=, the attachment expects the calls the session names: here call 2.
    session = session_for(CaptureSelection("c2", "layer#2", CaptureTransform.summary()),
                          discovery=discovery, request=CaptureRequest(1, TOKENS, 1))
    with attach(session, model), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        with pytest.raises(CaptureSessionError, match=r"'layer' was called 2 times.*layer#2"):
            model(tokens)
        assert session.take_step().record("c2").outcome == CaptureOutcome.MISSING


@pytest.mark.parametrize("loops", [LOOPS + 1, LOOPS - 1], ids=["more", "fewer"])
def test_a_block_whose_forward_calls_the_module_otherwise_than_its_discovery_says_which(tokens, loops):
    # A capture block counts a module's calls in its own discovery forward: the refusal said
    # "as calls= says" and told the caller to pass calls= to attach(), which a block never saw.
    torch.manual_seed(0)
    model = Shared().eval()
    forwards = []

    def after_the_discovery(module, args):
        forwards.append(len(forwards))
        if len(forwards) == 2:  # the block's pre-hook ran the discovery first: this is the captured forward
            module.loops = loops

    with pytest.raises(CaptureSessionError) as raised, torch.no_grad():
        with capture(model, "layer", "summary"):
            handle = model.register_forward_pre_hook(after_the_discovery)
            try:
                model(tokens)
            finally:
                handle.remove()
    text = str(raised.value)
    assert f"'layer' was called {loops} times" in text and "expects 3" in text
    assert "discovery forward" in text and "calls=" not in text


def test_calls_that_contradict_the_session_or_the_model_are_refused_at_attach(model, tokens):
    discovery = discover(model, tokens)
    session = session_for(CaptureSelection("c2", "layer#2", CaptureTransform.summary()),
                          discovery=discovery, request=CaptureRequest(1, TOKENS, 1))
    with pytest.raises(InvalidArgumentError, match="layer#2.*2 calls"):
        attach(session, model, calls={"layer": 2})
    with pytest.raises(InvalidArgumentError, match="no module 'nope'"):
        attach(session, model, calls={"nope": 2})
    for bad in ({"layer": 0}, {"layer": True}, ["layer"], {"layer": 2.0}):
        with pytest.raises((InvalidArgumentError, LifecoreTypeError), match="calls"):
            attach(session, model, calls=bad)
    head = session_for(CaptureSelection("h", "head", CaptureTransform.summary()),
                       discovery=discovery, request=CaptureRequest(1, TOKENS, 1))
    with pytest.raises(InvalidArgumentError, match="'head' as one point.*head#0"):
        attach(head, model, calls={"head": 2})
    assert not model.layer._forward_hooks and not model._forward_hooks  # nothing was left hooked


def test_capture_by_module_gives_every_call_and_by_call_gives_one(model, tokens):
    expected = plain_run(model, model.layer, tokens)[1]
    with capture(model, ["layer", "head"], "tensor") as records, torch.no_grad():
        model(tokens)
    assert list(records) == [f"layer#{k}" for k in range(LOOPS)] + ["head"]
    for k in range(LOOPS):
        torch.testing.assert_close(records[f"layer#{k}"].tensor, expected[k])
    with capture(model, "layer#1", "tensor") as records, torch.no_grad():
        model(tokens)
    assert list(records) == ["layer#1"]
    torch.testing.assert_close(records["layer#1"].tensor, expected[1])
    with pytest.raises(InvalidArgumentError, match="layer#7"):
        with capture(model, "layer#7", "tensor"), torch.no_grad():
            model(tokens)


def test_a_block_inside_the_forward_leaves_the_outer_count_where_it_was(tokens):
    # The inner block begins at the head, after the layer's calls: its discovery runs the head
    # once more with the outer block stepped aside, and the outer block's count carries on.
    torch.manual_seed(0)
    model = Shared().eval()
    model.head = nn.Sequential(nn.Linear(D, VOCAB))
    with capture(model, "layer", "summary") as outer, capture(model.head, "0", "summary") as inner, \
            torch.no_grad():
        model(tokens)
    assert [outer[f"layer#{k}"].outcome for k in range(LOOPS)] == [CaptureOutcome.CAPTURED] * LOOPS
    assert inner["0"].outcome == CaptureOutcome.CAPTURED


def test_a_budget_is_charged_per_call(model, tokens):
    one_call = TOKENS * D * 4
    with capture(model, "layer", "tensor", budget_bytes=2 * one_call) as records, torch.no_grad():
        model(tokens)
    assert [records[f"layer#{k}"].outcome for k in range(LOOPS)] == [CaptureOutcome.CAPTURED] * 2 + [
        CaptureOutcome.SKIPPED]
    assert records["layer#2"].skip_reason == "limit"


class Narrowing(nn.Module):
    """A shared projection applied to the whole sequence, then to its last two positions."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(D, D)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.proj(self.proj(h)[:, -2:])


def test_each_call_has_its_own_shape():
    model, h = Narrowing(), torch.randn(1, TOKENS, D)
    with capture(model, "proj", "tensor") as records, torch.no_grad():
        model(h)
    assert records["proj#0"].tensor.shape == (1, TOKENS, D) and records["proj#1"].tensor.shape == (1, 2, D)


class TopK(nn.Module):
    """A mixture-of-experts selector taking part in routing control, used twice per forward."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(D, EXPERTS)
        self.routing_hook = None
        self.ids: list[torch.Tensor] = []

    def routing_policy(self):
        return EXPERTS, TOP_K

    def set_routing_hook(self, hook):
        self.routing_hook = hook

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        scores = self.router(h.reshape(-1, D))
        ids, coefficients = (self.routing_hook.select if self.routing_hook is not None else route)(scores, TOP_K)
        self.ids.append(ids)
        return h * coefficients.sum(-1).reshape(h.shape[:-1] + (1,))


class TwiceRouted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.moe = TopK()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.moe(self.moe(self.embed(tokens)) + 1.0)


def test_a_routing_control_applies_to_the_one_call_it_names(tokens):
    torch.manual_seed(0)
    model = TwiceRouted().eval()
    discovery = discover(model, tokens)
    assert {"moe#0#routing", "moe#1#routing"} <= {p.path for p in discovery.catalog}
    with torch.no_grad():
        model(tokens)
    favourite = int(torch.mode(model.moe.ids[1][:, 0]).values)
    model.moe.ids.clear()
    ops = [iv.exclude_experts("no_fav", "moe#1#routing", [favourite], schedule=CaptureSchedule(decode=False))]
    session = intervening_session(discovery, CaptureRequest(1, TOKENS, 1), ops)
    with torch.no_grad():
        step, _ = prefill_step(session, model, tokens, calls=call_counts(discovery))
    assert step.interventions[0].outcome == InterventionOutcome.APPLIED
    first, second = model.moe.ids
    assert favourite not in second.flatten().tolist()
    torch.testing.assert_close(first, route(model.moe.router(model.embed(tokens).reshape(-1, D)), TOP_K)[0])
    assert model.moe.routing_hook is None  # detached


def test_an_intervention_enabled_after_attach_reaches_its_call_observed_there_too(model, tokens):
    discovery = discover(model, tokens)
    session = session_for(CaptureSelection("c1", "layer#1", CaptureTransform.full_tensor()),
                          discovery=discovery, request=CaptureRequest(1, TOKENS, 1))
    expected, calls = plain_run(model, model.layer, tokens, halve=1)
    with torch.no_grad(), attach(session, model, calls=call_counts(discovery)) as attachment:
        ops = [iv.scale("half", "layer#1", 0.5)]
        session.enable_interventions(InterventionPlan(ops).admit(discovery, session), TorchBackend())
        session.begin_step(CapturePhase.PREFILL, 0)
        patched = model(tokens)
        session.finish_interventions()
        step = session.take_step()
        assert len(model.layer._forward_hooks) == 1  # one counting hook, its call 1 upgraded in place
    assert step.interventions[0].outcome == InterventionOutcome.APPLIED
    torch.testing.assert_close(step.record("c1").payload.tensor, calls[1])  # before the intervention
    torch.testing.assert_close(patched, expected)
    assert not attachment.attached and not model._forward_hooks and not model._forward_pre_hooks


@pytest.mark.parametrize("name, clash", [("layer#0", "call 0 of module 'layer'"),
                                         ("layer#routing", "the routing point of module 'layer'")])
def test_a_module_named_as_another_modules_call_is_refused(model, tokens, name, clash):
    """A module named "layer#0" beside "layer" (called three times) had the name discover gives
    layer's first call: the point was resolved to the module named so, and layer's first call
    was never observed. The model is refused before any hook, naming both."""
    model.add_module(name, nn.Identity())
    for make in (lambda: discover(model, tokens), lambda: capture(model, "head", "summary"),
                 lambda: attach(session_for(), model)):
        with pytest.raises(InvalidArgumentError, match=f"module '{name}' of Shared has the name lifecore gives {clash}"):
            make()
    assert not model._forward_hooks and not model.layer._forward_hooks
    delattr(model, name)
    assert discover(model, tokens).catalog  # renamed away: discovered again


def test_which_module_names_clash_with_lifecore_point_names():
    from lifecore._torch_calls import name_collision

    def clash(*paths):
        found = name_collision(["", *paths], "#routing")
        return found and found[1]

    assert clash("layer", "layer#0") == "call 0 of module 'layer'"
    assert clash("moe", "moe#routing") == "the routing point of module 'moe'"
    assert clash("moe", "moe#1#routing") == "the routing point of call 1 of module 'moe'"
    assert clash("#routing") == "the routing point of module ''"  # a routed root has that point
    # Names no point of lifecore's takes: a root child "#0" (the root has no calls), "a#b",
    # "a#01" (a call is spelled "#1"), "layer#0" with no module "layer".
    for paths in (("#0",), ("a", "a#b"), ("a", "a#01"), ("layer#0",), ("moe#0#routing",)):
        assert clash(*paths) is None, paths
