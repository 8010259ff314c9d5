"""A session attached to a model while a discovery's forward runs through it, a session
attached twice, and the errors of capture's, discover's and attach's arguments (what a review
as an interpretability-tool author found)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from torch import nn  # noqa: E402

from lifecore.capture import (  # noqa: E402
    CapturePhase,
    CaptureRequest,
    CaptureSelection,
    CaptureSession,
    CaptureTransform,
    InterventionOutcome,
    interventions as iv,
)
from lifecore.errors import InvalidArgumentError, LifecoreTypeError  # noqa: E402
from lifecore.torch import attach, capture, discover  # noqa: E402

from torch_capture_helpers import intervening_session  # noqa: E402

pytestmark = pytest.mark.no_sanitizer


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.Linear(8, 8)
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.attn(h)
        return h + self.mlp(h)


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 8)
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(8, 50)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


@pytest.fixture
def lm() -> TinyLM:
    torch.manual_seed(0)
    return TinyLM().eval()


@pytest.fixture
def tokens() -> torch.Tensor:
    return torch.randint(0, 50, (1, 5), generator=torch.Generator().manual_seed(1))


def zeroing_session(lm: TinyLM, tokens: torch.Tensor, observe: bool) -> CaptureSession:
    """A session that zeroes blocks.0.mlp's output (and captures it, when ``observe``)."""
    selections = [CaptureSelection("mlp0", "blocks.0.mlp", CaptureTransform.full_tensor())] if observe else []
    return intervening_session(discover(lm, tokens), CaptureRequest(1, 5, 2), [iv.zero("z", "blocks.0.mlp")],
                               *selections)


def zeroed_reference(lm: TinyLM, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits and blocks.1.mlp's output of a forward with blocks.0.mlp zeroed by hand."""
    seen = {}
    handles = [lm.blocks[0].mlp.register_forward_hook(lambda m, a, out: torch.zeros_like(out)),
               lm.blocks[1].mlp.register_forward_hook(lambda m, a, out: seen.setdefault("mlp1", out.detach()))]
    try:
        with torch.no_grad():
            logits = lm(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return logits, seen["mlp1"]


@pytest.mark.parametrize("observe", [False, True])
def test_a_capture_block_inside_an_attach_leaves_the_attached_step_to_the_real_forward(lm, tokens, observe):
    # Before: the block's discovery forward ran the attached session's hooks, so the real
    # forward failed ("intervention point executed more than once in one step", or
    # "observation emitted twice"), and the step reported what the discovery forward did.
    session = zeroing_session(lm, tokens, observe)
    expected_logits, expected_mlp1 = zeroed_reference(lm, tokens)
    with attach(session, lm), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        with capture(lm, "blocks.1.mlp", "tensor") as records:  # no discovery=: one more forward
            logits = lm(tokens)
        step = session.take_step()
    torch.testing.assert_close(logits, expected_logits, rtol=0, atol=0)
    assert step.interventions[0].outcome == InterventionOutcome.APPLIED
    # The block saw the real forward, with the attached session's zero in force upstream.
    torch.testing.assert_close(torch.as_tensor(records["blocks.1.mlp"].tensor), expected_mlp1, rtol=0, atol=0)
    if observe:  # observed once, in the real forward, before its zero (a point observes, then intervenes)
        assert step.records[0].outcome.name == "CAPTURED"
        assert torch.count_nonzero(torch.as_tensor(step.records[0].payload.tensor)) == 40


def test_discover_inside_an_attach_runs_no_attached_hook(lm, tokens):
    session = zeroing_session(lm, tokens, observe=True)
    expected_logits, _ = zeroed_reference(lm, tokens)
    with attach(session, lm), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        again = discover(lm, tokens)  # a forward of lifecore's own: the attached step stands aside
        assert {p.path for p in again.catalog} >= {"blocks.0.mlp", "head"}
        torch.testing.assert_close(lm(tokens), expected_logits, rtol=0, atol=0)
        step = session.take_step()
    assert step.interventions[0].outcome == InterventionOutcome.APPLIED
    assert step.records[0].outcome.name == "CAPTURED"


def test_a_session_attached_twice_to_one_model_is_refused_until_the_first_is_detached(lm, tokens):
    # Before: the second attach placed a second set of hooks, and the next forward failed
    # with "observation emitted twice".
    session = zeroing_session(lm, tokens, observe=True)
    first = attach(session, lm)
    hooks = len(lm.blocks[0].mlp._forward_hooks)
    with pytest.raises(InvalidArgumentError, match="^attach: the session is already attached to this TinyLM"):
        attach(session, lm)
    assert len(lm.blocks[0].mlp._forward_hooks) == hooks  # nothing was placed
    other = zeroing_session(lm, tokens, observe=False)
    with attach(other, lm):  # another session on the same model is no repeat
        pass
    first.detach()
    with attach(session, lm), torch.no_grad():  # once detached, the session attaches again
        session.begin_step(CapturePhase.PREFILL, 0)
        lm(tokens)
        assert session.take_step().records[0].outcome.name == "CAPTURED"


@pytest.mark.parametrize("on_limit", [1, 1.0, None, b"skip"])
def test_capture_names_a_wrong_type_of_on_limit_a_type_error(lm, on_limit):
    with pytest.raises(LifecoreTypeError, match="^capture: argument 'on_limit' must be 'skip', 'fail' or an OnLimit"):
        capture(lm, "head", on_limit=on_limit)
    with pytest.raises(InvalidArgumentError, match="argument 'on_limit'"):
        capture(lm, "head", on_limit="sometimes")  # a str that is not a policy is a bad value


def test_discover_and_attach_name_themselves_and_the_argument_given(lm, tokens):
    with pytest.raises(LifecoreTypeError, match="^discover: argument 'identity' must be a str or None, got int"):
        discover(lm, tokens, identity=3)
    session = zeroing_session(lm, tokens, observe=True)
    with pytest.raises(InvalidArgumentError, match="^attach: the session names 'blocks.0.mlp' as one point"):
        attach(session, lm, calls={"blocks.0.mlp": 2})
    assert not lm.blocks[0].mlp._forward_hooks  # nothing was left hooked
