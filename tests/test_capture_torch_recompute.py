"""Capture under activation checkpointing: a forward that autograd runs again in backward
(``torch.utils.checkpoint``, both variants) observes nothing again and applies again what the
captured forward applied, so records are those of the one forward and gradients those of the
model as the forward ran it (the same edit by a plain hook gives them)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from lifecore.capture import (  # noqa: E402
    CaptureOutcome,
    CapturePhase,
    CaptureRequest,
    CaptureSchedule,
    CaptureSelection,
    CaptureTransform,
    InterventionOutcome,
    interventions as iv,
)
from lifecore.errors import CaptureSessionError  # noqa: E402
from lifecore.torch import RoutingHook, TorchBackend, attach, capture, discover  # noqa: E402

from torch_capture_helpers import intervening_session  # noqa: E402

pytestmark = pytest.mark.no_sanitizer

D, ROWS = 8, 3
PREFILL_ONLY = CaptureSchedule(decode=False)


class Checkpointed(nn.Module):
    """``inner`` and ``middle`` run inside a checkpointed region (recomputed in backward);
    ``twice`` is called twice there when ``repeat`` is set."""

    def __init__(self, reentrant: bool, repeat: bool = False):
        super().__init__()
        self.first, self.inner, self.middle, self.last = (nn.Linear(D, D) for _ in range(4))
        self.reentrant, self.repeat = reentrant, repeat

    def region(self, h):
        h = torch.tanh(self.inner(h))
        if self.repeat:
            h = self.inner(h)
        return self.middle(h)

    def forward(self, x):
        h = self.first(x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the reentrant variant's note on inputs without grad
            h = checkpoint(self.region, h, use_reentrant=self.reentrant)
        return self.last(h)


def grads(model):
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def assert_same_grads(got, expected):
    assert got.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], msg=name)


def hooks_on(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.fixture(params=[False, True], ids=["non_reentrant", "reentrant"])
def reentrant(request):
    return request.param


@pytest.mark.parametrize("backward_in_block", [True, False], ids=["backward_in_block", "backward_after"])
def test_a_capture_block_records_the_forward_once_and_leaves_the_gradients_alone(reentrant, backward_in_block):
    torch.manual_seed(0)
    model = Checkpointed(reentrant).eval()
    x = torch.randn(1, ROWS, D, requires_grad=True)
    model(x).square().sum().backward()
    expected = grads(model)
    with torch.no_grad():
        inner = model.inner(model.first(x))
    model.zero_grad(set_to_none=True)
    with capture(model, ["inner", "middle"], "tensor") as records:
        out = model(x)
        if backward_in_block:
            out.square().sum().backward()
    if not backward_in_block:
        out.square().sum().backward()
    assert sorted(records) == ["inner", "middle"]
    assert all(r.outcome == CaptureOutcome.CAPTURED for r in records.values())
    torch.testing.assert_close(torch.as_tensor(records["inner"].tensor), inner)
    assert_same_grads(grads(model), expected)
    assert hooks_on(model) == 0


def test_a_whole_model_run_again_in_backward_is_not_a_second_forward():
    """The root itself recomputed (a checkpoint around the whole model): the block's one step
    is the forward it captured, not a second forward refused."""
    torch.manual_seed(1)
    model = Checkpointed(False).eval()
    x = torch.randn(1, ROWS, D, requires_grad=True)
    checkpoint(model, x, use_reentrant=False).sum().backward()
    expected = grads(model)
    model.zero_grad(set_to_none=True)
    discovery = discover(model, x)
    with capture(model, "middle", "summary", discovery=discovery) as records:
        checkpoint(model, x, use_reentrant=False).sum().backward()
    assert records["middle"].outcome == CaptureOutcome.CAPTURED
    assert_same_grads(grads(model), expected)


@pytest.mark.parametrize("backward_in_step", [True, False], ids=["backward_in_step", "backward_after_step"])
@pytest.mark.parametrize("make_op, edit", [
    (lambda: iv.scale("op", "inner", 0.5, schedule=PREFILL_ONLY), lambda out: out * 0.5),
    (lambda: iv.add("op", "inner", np.full((1, ROWS, D), 0.25), schedule=PREFILL_ONLY), lambda out: out + 0.25),
], ids=["scale", "add"])
def test_an_intervention_is_applied_again_in_the_recompute_so_the_gradients_are_the_forwards(
        reentrant, backward_in_step, make_op, edit):
    torch.manual_seed(2)
    model = Checkpointed(reentrant).eval()
    x = torch.randn(1, ROWS, D, requires_grad=True)
    # The same edit by a plain hook (which the recompute runs again too): the gradients the
    # intervened model has. Without the edit in the recompute, `middle`'s would differ.
    handle = model.inner.register_forward_hook(lambda m, a, out: edit(out))
    model(x).square().sum().backward()
    handle.remove()
    expected = grads(model)
    model.zero_grad(set_to_none=True)
    discovery = discover(model, x)
    session = intervening_session(discovery, CaptureRequest(1, ROWS, 1), [make_op()],
                                  CaptureSelection("seen", "middle", CaptureTransform.summary()))
    with attach(session, model):
        session.begin_step(CapturePhase.PREFILL, 0)
        out = model(x)
        if backward_in_step:
            out.square().sum().backward()
        session.finish_interventions()
        step = session.take_step()
        if not backward_in_step:
            out.square().sum().backward()
    assert [r.outcome for r in step.interventions] == [InterventionOutcome.APPLIED]
    assert [r.outcome for r in step.records] == [CaptureOutcome.CAPTURED]
    assert_same_grads(grads(model), expected)
    assert hooks_on(model) == 0


def test_a_per_call_intervention_in_a_recompute_is_refused_naming_why():
    torch.manual_seed(3)
    model = Checkpointed(False, repeat=True).eval()
    x = torch.randn(1, ROWS, D, requires_grad=True)
    discovery = discover(model, x)
    assert {p.path for p in discovery.catalog} >= {"inner#0", "inner#1"}
    session = intervening_session(discovery, CaptureRequest(1, ROWS, 1),
                                  [iv.scale("op", "inner#1", 0.5, schedule=PREFILL_ONLY)])
    with attach(session, model):
        session.begin_step(CapturePhase.PREFILL, 0)
        out = model(x)
        session.finish_interventions()
        session.take_step()
        with pytest.raises(CaptureSessionError, match=r"reached 'inner', whose calls \[1\] applied an intervention per "
                                                      r"call"):
            out.sum().backward()
    assert hooks_on(model) == 0
    model(x).sum().backward()  # the model is as it was


def test_a_per_call_observation_in_a_recompute_is_passed_over():
    torch.manual_seed(4)
    model = Checkpointed(False, repeat=True).eval()
    x = torch.randn(1, ROWS, D, requires_grad=True)
    with capture(model, "inner", "summary") as records:
        model(x).sum().backward()
    assert sorted(records) == ["inner#0", "inner#1"]


def test_a_per_call_intervention_that_applied_nothing_does_not_block_a_recompute():
    torch.manual_seed(3)
    model = Checkpointed(False, repeat=True).eval()
    x = torch.randn(1, ROWS, D, requires_grad=True)
    model(x).square().sum().backward()
    expected = grads(model)
    model.zero_grad(set_to_none=True)
    session = intervening_session(discover(model, x), CaptureRequest(1, ROWS, 2),
                                  [iv.scale("op", "inner#1", 0.5, schedule=CaptureSchedule(prefill=False))])
    with attach(session, model):
        session.begin_step(CapturePhase.PREFILL, 0)
        model(x).square().sum().backward()  # inactive in prefill: nothing to apply again
        step = session.take_step()
    assert [r.outcome for r in step.interventions] == [InterventionOutcome.INACTIVE]
    assert_same_grads(grads(model), expected)


def test_a_routing_hook_in_a_backward_routes_by_its_policy_until_a_control_was_in_force():
    """A routing control applies once per step: asked for in backward where one was in force,
    it is refused rather than routing the recompute otherwise than the forward; where none ever
    was, the hook routes as the module would without it."""
    from lifecore.torch import route

    torch.manual_seed(5)
    model = Checkpointed(False).eval()
    x = torch.randn(1, ROWS, D, requires_grad=True)
    session = intervening_session(discover(model, x), CaptureRequest(1, ROWS, 1), [])
    hook = RoutingHook(session, TorchBackend(), "router")
    scores = torch.randn(ROWS, 4)
    routed = []
    y = (x * 2).sum()
    x.register_hook(lambda grad: routed.append(hook.select(scores, 2)))
    y.backward()
    expected = route(scores, 2)
    assert all(torch.equal(a, b) for a, b in zip(routed[0], expected))
    hook.controlled = True  # as after a control was handed out in a forward
    x.grad = None
    y = (x * 2).sum()
    with pytest.raises(CaptureSessionError, match="routed 'router', where a routing control was in force"):
        y.backward()


def test_a_prefill_only_intervention_is_not_applied_to_a_decode_steps_recompute():
    """The step whose graph is backpropagated applied nothing (the operation is prefill-only):
    its recompute applies nothing either, after the prefill that did apply it."""
    torch.manual_seed(6)
    model = Checkpointed(False).eval()
    x, token = torch.randn(1, ROWS, D), torch.randn(1, 1, D, requires_grad=True)
    model(token).square().sum().backward()
    expected = grads(model)
    model.zero_grad(set_to_none=True)
    session = intervening_session(discover(model, x), CaptureRequest(1, ROWS, 2),
                                  [iv.scale("op", "inner", 0.5, schedule=PREFILL_ONLY)])
    with attach(session, model):
        session.begin_step(CapturePhase.PREFILL, 0)
        with torch.no_grad():
            model(x)
        session.take_step()
        session.begin_step(CapturePhase.DECODE, 1)
        out = model(token)
        session.take_step()
        out.square().sum().backward()
    assert_same_grads(grads(model), expected)


def test_a_restore_keeps_the_recompute_of_a_graph_built_before_it():
    torch.manual_seed(7)
    model = Checkpointed(False).eval()
    x = torch.randn(1, ROWS, D, requires_grad=True)
    handle = model.inner.register_forward_hook(lambda m, a, out: out * 0.5)
    model(x).square().sum().backward()
    handle.remove()
    expected = grads(model)
    model.zero_grad(set_to_none=True)
    discovery = discover(model, x)
    session = intervening_session(discovery, CaptureRequest(1, ROWS, 1),
                                  [iv.scale("op", "inner", 0.5, schedule=PREFILL_ONLY)])
    with attach(session, model):
        checkpoint_ = session.checkpoint(discovery)
        session.begin_step(CapturePhase.PREFILL, 0)
        out = model(x)
        session.take_step()
        session.restore(checkpoint_)
        out.square().sum().backward()
    assert_same_grads(grads(model), expected)


def test_discover_does_not_count_a_recompute_inside_the_forward_as_a_call():
    """A forward that takes a gradient through a checkpointed part of itself (forces from an
    energy) runs that part again inside the forward: discover sees each module called once, as
    the capture block's hooks do."""

    class Energy(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner, self.out = nn.Linear(D, D), nn.Linear(D, 1)

        def energy(self, x):
            return self.out(torch.tanh(self.inner(x))).sum()

        def forward(self, x):
            with torch.enable_grad():
                x = x.detach().requires_grad_(True)
                e = checkpoint(self.energy, x, use_reentrant=False)
                (force,) = torch.autograd.grad(e, x, create_graph=True)
            return force

    torch.manual_seed(8)
    model = Energy().eval()
    x = torch.randn(1, ROWS, D)
    assert {p.path for p in discover(model, x).catalog} == {"inner", "out"}
    with capture(model, "inner", "summary") as records:
        model(x)
    assert records["inner"].outcome == CaptureOutcome.CAPTURED
