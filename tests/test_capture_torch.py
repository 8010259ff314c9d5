"""lifecore.torch on a tiny randomly initialised transformer with one mixture-of-experts layer."""

from __future__ import annotations

import collections
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from torch import nn  # noqa: E402

from lifecore.capture import (  # noqa: E402
    Axis,
    CaptureDiscovery,
    CaptureOutcome,
    CapturePhase,
    CapturePlan,
    CaptureRequest,
    CaptureSchedule,
    CaptureSelection,
    CaptureSession,
    CaptureSlice,
    CaptureTransform,
    InterventionOutcome,
    InterventionPlan,
    ObservationPoint,
    interventions as iv,
    unlimited,
)
from lifecore.errors import CaptureSessionError, ClosedError, InvalidArgumentError  # noqa: E402

from capture_builders import session_for  # noqa: E402
from torch_capture_helpers import intervening_session, prefill_step  # noqa: E402

pytestmark = pytest.mark.no_sanitizer

D, HEADS, VOCAB, TOKENS, EXPERTS, TOP_K = 32, 4, 50, 6, 4, 2


class MoE(nn.Module):
    """Top-k mixture of experts taking part in routing control."""

    def __init__(self):
        super().__init__()
        self.router = nn.Linear(D, EXPERTS)
        self.experts = nn.ModuleList(nn.Linear(D, D) for _ in range(EXPERTS))
        self.routing_hook = None
        self.last_ids = None

    def routing_policy(self):
        return EXPERTS, TOP_K

    def set_routing_hook(self, hook):
        self.routing_hook = hook

    def forward(self, x):
        from lifecore.torch import route

        rows = x.reshape(-1, D)
        scores = self.router(rows)
        select = self.routing_hook.select if self.routing_hook is not None else route
        ids, coefficients = select(scores, TOP_K)
        self.last_ids = ids
        out = torch.zeros_like(rows)
        for k in range(TOP_K):
            for e in range(EXPERTS):
                chosen = ids[:, k] == e
                if chosen.any():
                    out[chosen] += coefficients[chosen, k, None].to(rows.dtype) * self.experts[e](rows[chosen])
        return out.reshape(x.shape)


class Block(nn.Module):
    def __init__(self, moe: bool):
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.mlp = MoE() if moe else nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))

    def forward(self, x):
        h = self.ln(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln(x))


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList([Block(False), Block(True)])
        self.lm_head = nn.Linear(D, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(x)


@pytest.fixture
def model():
    torch.manual_seed(0)
    return TinyTransformer().eval()


@pytest.fixture
def tokens():
    return torch.randint(0, VOCAB, (1, TOKENS), generator=torch.Generator().manual_seed(1))


def discovery_of(model, tokens):
    from lifecore.torch import discover

    return discover(model, tokens, logits=["lm_head"])


def test_discovery_names_modules_with_symbolic_axes_and_the_router(model, tokens):
    discovery = discovery_of(model, tokens)
    points = {p.path: p for p in discovery.catalog}
    assert [a.size for a in points["blocks.0.mlp"].axes] == ["batch", "sequence", D]
    assert points["lm_head"].meaning == "logits"
    router = points["blocks.1.mlp#routing"]
    assert (router.routing.num_experts, router.routing.top_k) == (EXPERTS, TOP_K)
    assert discovery.artifact_identity == discovery_of(model, tokens).artifact_identity


def test_discovery_refuses_logits_it_cannot_mark_before_the_forward(model, tokens):
    """``logits`` was iterated as given: a str marked its characters, an unknown path or a
    non-str marked nothing, and a top-candidates plan was then refused for want of logits. A
    str is one path now, as ``paths`` reads one."""
    from lifecore.errors import LifecoreTypeError
    from lifecore.torch import discover

    calls = []
    handle = model.register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        for bad in ([5], None, 3, b"lm_head"):
            with pytest.raises(LifecoreTypeError, match="'logits'"):
                discover(model, tokens, logits=bad)
        with pytest.raises(InvalidArgumentError, match="lm_haed"):
            discover(model, tokens, logits=["lm_head", "lm_haed"])
        with pytest.raises(InvalidArgumentError, match="lm_haed"):
            discover(model, tokens, logits="lm_haed")
        assert not calls  # every refusal came before the forward
    finally:
        handle.remove()
    marked = discover(model, tokens, logits="lm_head")
    assert [p.meaning for p in marked.catalog if p.path == "lm_head"] == ["logits"]
    assert calls == []  # refused before the forward
    assert {p.path for p in discover(model, tokens, logits=("lm_head",)).catalog if p.meaning == "logits"} == {"lm_head"}


def test_discovery_counts_negative_axes_from_the_end_as_the_request_does(model, tokens):
    """A negative ``batch_axis`` / ``sequence_axis`` matched no axis (the discovery's axes stayed
    fixed, while the request read them as Python indices); equal ones dropped the sequence."""
    from lifecore.torch import discover

    def axes(**where):
        return [a.size for a in {p.path: p for p in discover(model, tokens, **where).catalog}["blocks.0.mlp"].axes]

    assert axes(batch_axis=-3, sequence_axis=-2) == axes() == ["batch", "sequence", D]
    with pytest.raises(InvalidArgumentError, match="sequence_axis"):
        discover(model, tokens, batch_axis=1, sequence_axis=1)


def test_summaries_at_every_block_match_plain_hooks(model, tokens):
    discovery = discovery_of(model, tokens)
    paths = ["blocks.0.mlp", "blocks.1.mlp", "blocks.0", "blocks.1"]
    session = session_for(*[CaptureSelection(p, p, CaptureTransform.summary()) for p in paths],
                          CaptureSelection("top", "lm_head", CaptureTransform.top_candidates(3)),
                          discovery=discovery, request=CaptureRequest(1, TOKENS, 2))
    seen = {}
    manual = [model.get_submodule(p).register_forward_hook(
        lambda m, a, out, p=p: seen.__setitem__(p, out.detach().clone())) for p in paths]
    with torch.no_grad():
        step, logits = prefill_step(session, model, tokens)
    for h in manual:
        h.remove()
    for record in step.records[:4]:
        value = seen[record.selection_id].double()
        assert record.outcome == CaptureOutcome.CAPTURED
        assert record.payload.mean == pytest.approx(value.mean().item(), rel=1e-6, abs=1e-9)
        assert record.payload.max == pytest.approx(value.max().item())
    top = step.records[4].payload
    assert top.candidate_ids.tolist() == torch.topk(logits[0, -1], 3).indices.tolist()


def test_an_intervention_replaces_the_module_output_for_downstream_modules(model, tokens):
    discovery = discovery_of(model, tokens)
    patch = torch.zeros(1, 2, D)
    ops = [iv.replace("patch", "blocks.0.mlp", patch.numpy(), slices=[CaptureSlice("seq", 1, 3)]),
           iv.scale("half", "blocks.0.mlp", 0.5)]
    session = intervening_session(discovery, CaptureRequest(1, TOKENS, 1), ops)
    with torch.no_grad():
        expected_hook = model.blocks[0].mlp.register_forward_hook(
            lambda m, a, out: torch.cat([out[:, :1], torch.zeros_like(out[:, 1:3]), out[:, 3:]], dim=1) * 0.5)
        expected = model(tokens)
        expected_hook.remove()
        clean = model(tokens)
        step, patched = prefill_step(session, model, tokens)
    assert [r.outcome for r in step.interventions] == [InterventionOutcome.APPLIED] * 2
    torch.testing.assert_close(patched, expected)
    assert not torch.allclose(patched, clean)


def session_backend():
    from lifecore.torch import TorchBackend

    return TorchBackend()


def test_moe_routing_control_excludes_an_expert_and_records_both_decisions(model, tokens):
    from lifecore.torch import attach, route

    discovery = discovery_of(model, tokens)
    with torch.no_grad():
        model(tokens)
    favourite = int(torch.mode(model.blocks[1].mlp.last_ids[:, 0]).values)
    ops = [iv.exclude_experts("no_fav", "blocks.1.mlp#routing", [favourite], evidence=16,
                              schedule=CaptureSchedule(decode=False))]
    session = intervening_session(discovery, CaptureRequest(1, TOKENS, 2), ops)
    with attach(session, model), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        model(tokens)
        session.finish_interventions()
        step = session.take_step()
        assert favourite not in model.blocks[1].mlp.last_ids.flatten().tolist()
        session.begin_step(CapturePhase.DECODE, 1)
        model(tokens[:, -1:])  # not scheduled in decode: ordinary routing
        assert session.take_step().interventions[0].outcome == InterventionOutcome.INACTIVE
    record = step.interventions[0]
    assert record.outcome == InterventionOutcome.APPLIED
    original_ids, _, effective_ids, _ = record.evidence
    assert original_ids.tensor.dtype == torch.int64  # routing ids keep their dtype
    assert favourite in original_ids.tensor.ravel().tolist()
    assert favourite not in effective_ids.tensor.ravel().tolist()
    assert model.blocks[1].mlp.routing_hook is None  # detached
    ids, coefficients = route(torch.randn(3, EXPERTS), TOP_K)
    assert ids.shape == (3, TOP_K) and torch.allclose(coefficients.sum(-1), torch.ones(3))


def test_a_failing_selector_fails_the_routing_record(model, tokens, monkeypatch):
    import lifecore.torch as lt

    discovery = discovery_of(model, tokens)
    session = intervening_session(discovery, CaptureRequest(1, TOKENS, 1),
                                  [iv.bias_routing_scores("bias", "blocks.1.mlp#routing", [0], [1.0])])

    def broken(scores, top_k, control=None):
        raise RuntimeError("selector exploded")

    with lt.attach(session, model), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        monkeypatch.setattr(lt, "route", broken)
        with pytest.raises(RuntimeError, match="exploded"):
            model.blocks[1].mlp.routing_hook.select(torch.randn(TOKENS, EXPERTS), TOP_K)
        with pytest.raises(CaptureSessionError, match="did not complete"):
            session.finish_interventions()
        record = session.take_step().interventions[0]
    assert record.outcome == InterventionOutcome.FAILED and "selector exploded" in record.message


def test_forced_experts_apply_to_the_window_rows(model, tokens):
    from lifecore.torch import attach

    discovery = discovery_of(model, tokens)
    ops = [iv.force_experts("force", "blocks.1.mlp#routing", [[0, 1]] * 2, slices=[CaptureSlice("rows", 0, 2)])]
    session = intervening_session(discovery, CaptureRequest(1, TOKENS, 1), ops)
    with attach(session, model), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        model(tokens)
        assert model.blocks[1].mlp.last_ids[:2].tolist() == [[0, 1], [0, 1]]
        session.finish_interventions()
        session.take_step()


def test_detach_removes_every_hook_and_bad_paths_attach_nothing(model, tokens):
    from lifecore.torch import attach

    discovery = discovery_of(model, tokens)
    session = session_for(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()),
                          discovery=discovery, request=CaptureRequest(1, TOKENS, 1))
    attachment = attach(session, model)
    assert len(model.blocks[0].mlp._forward_hooks) == 1
    with pytest.raises(CaptureSessionError, match="no capture step"):
        model(tokens)  # hooks outside a step are refused, not silently ignored
    attachment.detach()
    assert len(model.blocks[0].mlp._forward_hooks) == 0 and not attachment.attached
    with pytest.raises(ClosedError, match=r"^TorchAttachment.__enter__: the attachment is detached"):
        with attachment:
            pass
    model(tokens)
    with pytest.raises(InvalidArgumentError, match="no module"):
        attach(session, model, paths=["blocks.0.mlp", "blocks.9"])
    assert len(model.blocks[0].mlp._forward_hooks) == 0


def test_torch_summaries_and_histograms_handle_non_finite_values():
    from lifecore.capture import Axis, CaptureDiscovery, ObservationPoint
    from lifecore.torch import TorchBackend

    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("n", 6)])])
    session = session_for(CaptureSelection("s", "p", CaptureTransform.summary()),
                          CaptureSelection("h", "p", CaptureTransform.histogram([0.0, 1.0, 2.0])),
                          discovery=discovery, request=CaptureRequest(1, 1, 1))
    x = torch.tensor([0.5, 1.0, 2.0, float("nan"), float("inf"), 1.5], dtype=torch.float16)
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(TorchBackend(), "p", x)
    s, h = session.take_step().records
    assert (s.payload.count, s.payload.nonfinite, s.payload.min, s.payload.max) == (6, 2, 0.5, 2.0)
    assert h.payload.counts.tolist() == [1, 3]  # numpy's convention: the last bin is closed


def test_a_nan_logit_is_never_a_better_candidate_than_a_number_as_with_numpy():
    from lifecore.capture import NumpyBackend
    from lifecore.torch import TorchBackend

    discovery = CaptureDiscovery("m", [ObservationPoint("logits", [Axis("vocab", 6)], meaning="logits")])
    logits = [float("nan"), 1.0, 5.0, float("-inf"), 3.0, float("nan")]
    found = {}
    for backend, tensor in ((TorchBackend(), torch.tensor(logits)), (NumpyBackend(), np.array(logits))):
        session = session_for(CaptureSelection("top", "logits", CaptureTransform.top_candidates(3)),
                              discovery=discovery, request=CaptureRequest(1, 1, 1))
        session.begin_step(CapturePhase.PREFILL, 0)
        session.observe(backend, "logits", tensor)
        candidates = session.take_step().records[0].payload.candidates
        found[type(backend).__name__] = (candidates.ids.tolist(), candidates.scores.tolist())
    assert found["TorchBackend"] == found["NumpyBackend"] == ([2, 4, 1], [5.0, 3.0, 1.0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_are_summarized_on_the_device(model, tokens):
    from lifecore.torch import attach

    model, tokens = model.cuda(), tokens.cuda()
    discovery = discovery_of(model, tokens)
    session = session_for(CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary()),
                          discovery=discovery, request=CaptureRequest(1, TOKENS, 1))
    with attach(session, model), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        model(tokens)
        record = session.take_step().records[0]
    assert record.outcome == CaptureOutcome.CAPTURED
    assert record.charged.host_bytes < 512 + 100 + 3 * 128 + TOKENS * D * 4  # only the statistics crossed


def test_grouped_routing_keeps_the_best_groups_and_scales_coefficients():
    from lifecore.capture import RoutingPolicy
    from lifecore.torch import route

    policy = RoutingPolicy(8, 2, scoring="sigmoid", groups=4, topk_groups=1, epsilon=1e-12, scale=2.5)
    scores = torch.randn(16, 8, generator=torch.Generator().manual_seed(3))
    ids, coefficients = route(scores, 2, policy=policy)
    groups = ids // 2
    assert torch.equal(groups[:, 0], groups[:, 1])  # both experts from the one kept group
    best = scores.reshape(16, 4, 2).max(-1).values.argmax(-1)
    assert torch.equal(groups[:, 0], best)
    assert torch.allclose(coefficients.sum(-1), torch.full((16,), 2.5))
    plain_ids, plain_coefficients = route(scores, 2)  # no policy: plain top-k with softmax, as before
    assert torch.equal(plain_ids, torch.topk(scores, 2).indices)
    assert torch.allclose(plain_coefficients, torch.softmax(torch.topk(scores, 2).values, -1))


def test_forced_experts_outside_the_best_groups_get_their_softmax_coefficients():
    # Forcing overrides the group choice: a forced expert's coefficient comes from its own
    # score, not from the -inf its group gets when it is not among the best groups.
    from lifecore.capture import RoutingPolicy
    from lifecore.torch import ROUTING_SUFFIX, route

    policy = RoutingPolicy(4, 2, groups=2, topk_groups=1, scale=2.0)
    target = "moe" + ROUTING_SUFFIX
    discovery = CaptureDiscovery("forced-groups", [
        ObservationPoint(target, [Axis("rows", "token_rows"), Axis("experts", 4)], meaning="routing",
                         routing=policy)])
    session = CaptureSession(CapturePlan([], unlimited()).admit(discovery, CaptureRequest(1, 2, 1)))
    plan = InterventionPlan([iv.force_experts("force", target, [[2, 3], [2, 3]])])
    session.enable_interventions(plan.admit(discovery, session), session_backend())
    session.begin_step(CapturePhase.PREFILL, 0)
    control = session.routing_control(target, 2)
    scores = torch.tensor([[5.0, 4.0, 0.0, 1.0], [5.0, 4.0, 1.0, 0.0]])  # group 0 is the best in both rows
    ids, coefficients = route(scores, 2, control)
    assert ids.tolist() == [[2, 3], [2, 3]]
    assert torch.isfinite(coefficients).all(), coefficients
    assert torch.allclose(coefficients, 2.0 * torch.softmax(scores[:, 2:], -1))
    session.routing_applied(session_backend(), target, None, (ids, coefficients))
    session.finish_interventions()
    session.take_step()


def test_a_selector_whose_policy_differs_from_discovery_fails_before_routing(model, tokens):
    from lifecore.capture import RoutingPolicy
    from lifecore.torch import attach

    discovery = discovery_of(model, tokens)
    session = intervening_session(discovery, CaptureRequest(1, TOKENS, 1),
                                  [iv.exclude_experts("x", "blocks.1.mlp#routing", [0])])
    moe = model.blocks[1].mlp
    moe.routing_policy = lambda: RoutingPolicy(EXPERTS, TOP_K, scale=2.0)  # changed since discovery
    with attach(session, model), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        with pytest.raises(InvalidArgumentError, match="does not match"):
            model(tokens)
        record = session.take_step().interventions[0]
    assert record.outcome == InterventionOutcome.FAILED and "does not match" in record.message


class TwoOutputs(nn.Module):
    """Returns (hidden, gate), both [batch, seq, D]; the parent consumes both."""

    def forward(self, x):
        return x + 3.0, x * 2.0


class UsesBoth(nn.Module):
    def __init__(self):
        super().__init__()
        self.pair = TwoOutputs()

    def forward(self, x):
        hidden, gate = self.pair(x)
        return hidden + gate


@pytest.mark.parametrize("output_index", [1, {"pair": 1}])
def test_output_index_selects_the_tuple_element_that_is_observed_and_replaced(output_index):
    from lifecore.torch import discover

    model = UsesBoth()
    x = torch.ones(1, TOKENS, D)
    discovery = discover(model, x, output_index=output_index)
    session = intervening_session(discovery, CaptureRequest(1, TOKENS, 1),
                                  [iv.zero("zero_gate", "pair", schedule=CaptureSchedule(decode=False))],
                                  CaptureSelection("gate", "pair", CaptureTransform.summary()))
    with torch.no_grad():
        step, out = prefill_step(session, model, x, output_index=output_index)
    assert step.record("gate").payload.mean == 2.0  # the second element was observed
    assert torch.equal(out, x + 3.0)  # the gate was zeroed; the first element passed through unchanged


Pair = collections.namedtuple("Pair", "hidden gate")


class NamedOutputs(nn.Module):
    """Returns a namedtuple; the parent reads its fields by name."""

    def forward(self, x):
        return Pair(x + 3.0, x * 2.0)


class ReadsFields(nn.Module):
    def __init__(self):
        super().__init__()
        self.pair = NamedOutputs()

    def forward(self, x):
        out = self.pair(x)
        return out.hidden + out.gate


def test_an_intervention_on_a_namedtuple_output_keeps_its_type():
    from lifecore.torch import discover

    model = ReadsFields()
    x = torch.ones(1, TOKENS, D)
    discovery = discover(model, x)
    session = intervening_session(discovery, CaptureRequest(1, TOKENS, 1),
                                  [iv.scale("half", "pair", 0.5, schedule=CaptureSchedule(decode=False))])
    with torch.no_grad():
        _, out = prefill_step(session, model, x)
    assert torch.equal(out, (x + 3.0) * 0.5 + x * 2.0)  # the hidden field was scaled, the gate passed


def test_the_first_tensor_stays_the_default_and_a_bad_index_is_refused():
    from lifecore.torch import attach, discover

    model = UsesBoth()
    x = torch.ones(1, TOKENS, D)
    discovery = discover(model, x)
    session = session_for(CaptureSelection("h", "pair", CaptureTransform.summary()),
                          discovery=discovery, request=CaptureRequest(1, TOKENS, 2))
    with attach(session, model), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        model(x)
        assert session.take_step().record("h").payload.mean == 4.0  # x + 3, the first element
    with attach(session, model, output_index=5), torch.no_grad():
        session.begin_step(CapturePhase.DECODE, 1)
        with pytest.raises(InvalidArgumentError, match="output_index 5"):
            model(x[:, :1])
        session.take_step()


@pytest.mark.parametrize("observed_too", [False, True])
def test_interventions_enabled_after_attach_are_hooked_at_the_next_forward(model, tokens, observed_too):
    from lifecore.torch import attach

    discovery = discovery_of(model, tokens)
    selections = [CaptureSelection("s", "blocks.0.mlp", CaptureTransform.summary())] if observed_too else []
    session = session_for(*selections, discovery=discovery, request=CaptureRequest(1, TOKENS, 1))
    with torch.no_grad():
        expected_hook = model.blocks[0].mlp.register_forward_hook(lambda m, a, out: out * 0.5)
        expected = model(tokens)
        expected_hook.remove()
        clean = model(tokens)
        attachment = attach(session, model)  # before any intervention plan exists
        ops = [iv.scale("half", "blocks.0.mlp", 0.5)]
        session.enable_interventions(InterventionPlan(ops).admit(discovery, session), session_backend())
        with attachment:
            session.begin_step(CapturePhase.PREFILL, 0)
            patched = model(tokens)
            session.finish_interventions()
            step = session.take_step()
            assert len(model.blocks[0].mlp._forward_hooks) == 1  # upgraded in place, not doubled
            assert len(model._forward_pre_hooks) == 0  # nothing more can arrive: the root hook is gone
    assert step.interventions[0].outcome == InterventionOutcome.APPLIED
    if observed_too:
        assert step.record("s").outcome == CaptureOutcome.CAPTURED
    torch.testing.assert_close(patched, expected)
    assert not torch.allclose(patched, clean) and not attachment.attached


def test_routing_enabled_after_attach_reaches_the_selector(model, tokens):
    from lifecore.torch import attach

    discovery = discovery_of(model, tokens)
    session = session_for(discovery=discovery, request=CaptureRequest(1, TOKENS, 1))
    with torch.no_grad(), attach(session, model):
        ops = [iv.exclude_experts("x", "blocks.1.mlp#routing", [0])]
        session.enable_interventions(InterventionPlan(ops).admit(discovery, session), session_backend())
        session.begin_step(CapturePhase.PREFILL, 0)
        model(tokens)
        session.finish_interventions()
        assert 0 not in model.blocks[1].mlp.last_ids.flatten().tolist()
        assert session.take_step().interventions[0].outcome == InterventionOutcome.APPLIED
    assert model.blocks[1].mlp.routing_hook is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32,
                                   torch.int64, torch.bool], ids=str)
def test_torch_tensor_payloads_are_host_tensors_in_the_source_dtype(dtype):
    import json

    from lifecore.capture import Axis, CaptureDiscovery, ObservationPoint
    from lifecore.torch import TorchBackend

    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("r", 2), Axis("c", 3)])])
    session = session_for(CaptureSelection("full", "p", CaptureTransform.full_tensor()),
                          CaptureSelection("rows", "p", CaptureTransform.slice(), slices=[CaptureSlice("c", 1, 3)]),
                          CaptureSelection("head", "p", CaptureTransform.preview(4)),
                          discovery=discovery, request=CaptureRequest(1, 1, 1))
    x = (torch.arange(6).reshape(2, 3) - 2).to(dtype)
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(TorchBackend(), "p", x)
    step = session.take_step()
    for record, want in zip(step.records, (x, x[:, 1:3], x.reshape(-1)[:4])):
        kept = record.payload.tensor
        assert isinstance(kept, torch.Tensor) and kept.dtype == dtype and kept.device.type == "cpu"
        assert torch.equal(kept, want) and kept.data_ptr() != x.data_ptr()  # a copy, never a view
        assert record.charged.retained_bytes == record.payload.nbytes == want.numel() * want.element_size()
        assert len(record.to_json()) <= record.charged.encoded_bytes
        assert json.loads(record.to_json())["payload"]["values"] == [
            v if dtype != torch.bool else bool(v) for v in want.reshape(-1).tolist()]


def _full_tensor_record(x):
    from lifecore.capture import Axis, CaptureDiscovery, ObservationPoint
    from lifecore.torch import TorchBackend

    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("n", x.shape[0])])])
    session = session_for(CaptureSelection("v", "p", CaptureTransform.full_tensor()),
                          discovery=discovery, request=CaptureRequest(1, 1, 1))
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(TorchBackend(), "p", x)
    return session.take_step().records[0]


def test_a_torch_payload_resized_in_place_is_never_read_from_freed_memory():
    import json

    record = _full_tensor_record(torch.arange(4, dtype=torch.float32))
    kept = record.payload.tensor
    kept.resize_(1_000_000)  # a new storage; the one the payload was built on is freed
    with pytest.raises(CaptureSessionError, match="changed its shape, dtype or place"):
        record.to_json()
    kept.resize_(4).fill_(7.0)  # the payload's shape again: its values are read where they are now
    assert json.loads(record.to_json())["payload"]["values"] == [7.0] * 4
    kept.data = torch.zeros(4, dtype=torch.float64)
    with pytest.raises(CaptureSessionError, match="changed"):
        record.to_json()


def test_a_torch_view_of_a_larger_storage_is_kept_as_a_copy():
    from lifecore.capture import CapturePayload

    big = torch.zeros(1_000_000, dtype=torch.float64)
    payload = CapturePayload.from_array(big[2:4])
    assert payload.nbytes == 16 and payload.tensor.untyped_storage().nbytes() == 16
    whole = torch.zeros(2, dtype=torch.float64)
    assert CapturePayload.from_array(whole).tensor is whole  # its own storage: kept as given


def test_torch_payloads_of_a_tensor_that_requires_grad_keep_no_history():
    from lifecore.capture import Axis, CaptureDiscovery, ObservationPoint
    from lifecore.torch import TorchBackend

    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis("n", 4)])])
    session = session_for(CaptureSelection("v", "p", CaptureTransform.full_tensor()),
                          CaptureSelection("s", "p", CaptureTransform.summary()),
                          discovery=discovery, request=CaptureRequest(1, 1, 1))
    x = torch.ones(4, requires_grad=True) * 2
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(TorchBackend(), "p", x)
    values, summary = session.take_step().records
    assert not values.payload.tensor.requires_grad and values.payload.tensor.tolist() == [2.0] * 4
    assert summary.payload.summary.mean == 2.0


class _Asked:
    """TorchBackend keeping the requests its summary short form was asked."""

    def __init__(self):
        from lifecore.torch import TorchBackend

        self.inner, self.requests = TorchBackend(), []

    def summary_statistics(self, tensor, request):
        self.requests.append(request)
        return self.inner.summary_statistics(tensor, request)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _TransformOnly:
    """TorchBackend without the short form: every summary goes through transform."""

    def __init__(self):
        from lifecore.torch import TorchBackend

        self.inner = TorchBackend()

    def __getattr__(self, name):
        if name == "summary_statistics":
            raise AttributeError(name)
        return getattr(self.inner, name)


def _summary_of(backend, x, slices=()):
    from lifecore.capture import Axis, CaptureDiscovery, ObservationPoint

    discovery = CaptureDiscovery("m", [ObservationPoint("p", [Axis(f"a{i}", None) for i in range(x.dim())])])
    session = session_for(CaptureSelection("s", "p", CaptureTransform.summary(), slices=list(slices)),
                          discovery=discovery, request=CaptureRequest(1, 1, 1))
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(backend, "p", x)
    return session.take_step().record("s")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_the_summary_short_form_gives_what_transform_gives(dtype):
    torch.manual_seed(0)
    x = torch.randn(3, 4).to(dtype)
    asked = _Asked()
    short, full = _summary_of(asked, x), _summary_of(_TransformOnly(), x)
    assert len(asked.requests) == 1 and short.outcome == full.outcome == CaptureOutcome.CAPTURED
    assert short.payload.summary == full.payload.summary
    values = x.double() if dtype == torch.float64 else x.float()
    assert short.payload.summary.count == 12 and short.payload.summary.nonfinite == 0
    assert short.payload.summary.min == values.min().item() and short.payload.summary.max == values.max().item()
    assert short.payload.summary.std == pytest.approx(values.std(unbiased=False).item())
    part = _summary_of(_Asked(), x, slices=[CaptureSlice("a1", 1, 3)])
    assert part.payload.summary.count == 6 and part.payload.summary.max == values[:, 1:3].max().item()


def test_the_summary_short_form_answers_directly_and_refuses_what_it_cannot_answer():
    from lifecore.capture import Axis, CaptureDiscovery, ObservationPoint
    from lifecore.errors import LifecoreTypeError

    asked = _Asked()
    x = torch.tensor([[1.0, 2.0], [3.0, 5.0]])
    _summary_of(asked, x)
    request, backend = asked.requests[0], asked.inner
    assert backend.summary_statistics(x, request) == [1.0, 5.0, 2.75, pytest.approx(1.479019945774904)]
    # Non-finite values: the full payload, with their count.
    payload = backend.summary_statistics(torch.tensor([[1.0, float("nan")], [float("inf"), 5.0]]), request)
    assert (payload.summary.count, payload.summary.nonfinite, payload.summary.max) == (4, 2, 5.0)
    # An empty region (asked directly; the session never asks): count 0, no values.
    empty = backend.summary_statistics(torch.zeros(0, 2), request)
    assert empty.summary.count == 0 and empty.summary.nonfinite == 0
    with pytest.raises(LifecoreTypeError, match="TorchBackend.summary_statistics"):
        backend.summary_statistics([1.0, 2.0], request)
    kept = []

    class Keep(type(backend)):
        def transform(self, tensor, request):
            kept.append(request)
            return super().transform(tensor, request)

    session = session_for(CaptureSelection("h", "p", CaptureTransform.histogram([0.0, 1.0])),
                          discovery=CaptureDiscovery("m", [ObservationPoint("p", [Axis("n", 2)])]),
                          request=CaptureRequest(1, 1, 1))
    session.begin_step(CapturePhase.PREFILL, 0)
    session.observe(Keep(), "p", torch.tensor([0.5, 0.7]))
    assert len(kept) == 1
    with pytest.raises(ValueError, match="SUMMARY request"):
        backend.summary_statistics(torch.tensor([0.5, 0.7]), kept[0])


def test_a_summary_whose_std_overflows_is_captured_with_it(monkeypatch):
    # On a device float32 accumulation can overflow the std of finite values: the short form is
    # only for four finite statistics, so the payload carries the infinite std, as transform does.
    x = torch.tensor([[1.0, 2.0], [3.0, 5.0]])
    monkeypatch.setattr(torch.Tensor, "std", lambda self, *args, **kwargs: torch.tensor(float("inf")))
    for backend in (_Asked(), _TransformOnly()):
        record = _summary_of(backend, x)
        assert record.outcome == CaptureOutcome.CAPTURED
        summary = record.payload.summary
        assert (summary.count, summary.nonfinite, summary.max, summary.mean) == (4, 0, 5.0, 2.75)
        assert summary.std == float("inf")


class _Chain(nn.Module):
    """Two linear layers; the first's output is intervened on, gradients flow through both."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(D, D)
        self.second = nn.Linear(D, D)

    def forward(self, x):
        return self.second(self.first(x))


_PREFILL = CaptureSchedule(decode=False)


def _rows_zeroed(out):
    return torch.cat([torch.zeros_like(out[:, :2]), out[:, 2:]], dim=1)


# Each operation is made when its test runs: a parameter's value lives as long as the session,
# and a lifecore object still alive at exit shows in the leak report of the sanitizer run.
@pytest.mark.parametrize("make_op, edit", [
    (lambda: iv.scale("op", "first", 0.5, schedule=_PREFILL), lambda out: out * 0.5),
    (lambda: iv.add("op", "first", np.full((1, TOKENS, D), 0.25), schedule=_PREFILL), lambda out: out + 0.25),
    (lambda: iv.zero("op", "first", slices=[CaptureSlice("seq", 0, 2)], schedule=_PREFILL), _rows_zeroed),
    (lambda: iv.replace("op", "first", np.zeros((1, 2, D)), slices=[CaptureSlice("seq", 0, 2)], schedule=_PREFILL),
     _rows_zeroed),
], ids=["scale", "add", "zero_rows", "replace_rows"])
def test_an_intervention_under_autograd_keeps_the_gradient_of_what_it_did_not_replace(make_op, edit):
    op = make_op()
    from lifecore.torch import discover

    torch.manual_seed(0)
    model = _Chain()
    x = torch.randn(1, TOKENS, D)
    discovery = discover(model, x)
    session = intervening_session(discovery, CaptureRequest(1, TOKENS, 1), [op])
    # The same edit by a plain hook, with autograd: the gradients the intervened model must give.
    handle = model.first.register_forward_hook(lambda m, a, out: edit(out))
    model(x).square().sum().backward()
    handle.remove()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    _, out = prefill_step(session, model, x)  # with autograd on
    assert out.requires_grad  # the graph reaches back through the intervened module
    out.square().sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, expected[name], msg=name)


def test_a_capture_at_an_intervened_module_is_the_value_before_the_intervention_and_says_so():
    """The hook observes, then intervenes: the record holds the module's own output and its
    position says so (READ_ONLY would claim interventions do not change that value)."""
    from lifecore.capture import PointPosition
    from lifecore.torch import discover

    torch.manual_seed(0)
    model = _Chain()
    x = torch.randn(1, TOKENS, D)
    discovery = discover(model, x)
    assert {p.position for p in discovery.catalog if p.meaning != "routing"} == {PointPosition.BEFORE_INTERVENTION}
    session = intervening_session(discovery, CaptureRequest(1, TOKENS, 1),
                                  [iv.scale("triple", "first", 3.0, schedule=_PREFILL)],
                                  CaptureSelection("first", "first", CaptureTransform.full_tensor()),
                                  CaptureSelection("second", "second", CaptureTransform.full_tensor()))
    with torch.no_grad():
        own = model.first(x)
        step, out = prefill_step(session, model, x)
    first = step.record("first")
    assert first.position == PointPosition.BEFORE_INTERVENTION
    assert torch.equal(first.payload.tensor, own)  # not own * 3
    assert torch.equal(step.record("second").payload.tensor, out)  # downstream sees the effect
    torch.testing.assert_close(out, model.second(own * 3.0))


@pytest.mark.parametrize("policy", [None, "sigmoid"])
def test_route_coefficients_carry_the_gradient_to_the_router_scores(policy):
    from lifecore.capture import RoutingPolicy
    from lifecore.torch import route

    torch.manual_seed(0)
    routing = RoutingPolicy(EXPERTS, TOP_K, scoring="sigmoid", scale=2.5) if policy else None
    scores = torch.randn(5, EXPERTS, requires_grad=True)
    weights = torch.randn(5, TOP_K)
    ids, coefficients = route(scores, TOP_K, policy=routing)
    with torch.no_grad():
        assert torch.equal(route(scores, TOP_K, policy=routing)[1], coefficients.detach())
    assert coefficients.requires_grad
    (coefficients * weights).sum().backward()
    reference = scores.detach().clone().requires_grad_(True)
    chosen = torch.gather(reference, 1, ids)
    if policy:
        chosen = torch.sigmoid(chosen)
        expected = chosen / (chosen.sum(-1, keepdim=True) + routing.epsilon) * 2.5
    else:
        expected = torch.softmax(chosen, dim=-1)
    (expected * weights).sum().backward()
    torch.testing.assert_close(scores.grad, reference.grad)


def test_a_routing_control_under_autograd_leaves_the_router_its_gradient(model, tokens):
    from lifecore.torch import attach

    discovery = discovery_of(model, tokens)
    session = intervening_session(discovery, CaptureRequest(1, TOKENS, 1),
                                  [iv.exclude_experts("no0", "blocks.1.mlp#routing", [0], schedule=_PREFILL)])
    with attach(session, model):
        session.begin_step(CapturePhase.PREFILL, 0)
        model(tokens).square().sum().backward()
        session.finish_interventions()
        assert session.take_step().interventions[0].outcome == InterventionOutcome.APPLIED
    router = model.blocks[1].mlp.router.weight.grad
    assert router is not None and bool(router.abs().sum() > 0)


@pytest.mark.parametrize("arguments, error, words", [
    (([[1.0, 2.0]], 1), "LifecoreTypeError", "'scores' must be a Tensor"),
    ((torch.tensor([[1, 2]]), 1), "LifecoreTypeError", "floating-point"),
    ((torch.randn(4), 1), "InvalidArgumentError", r"\[rows, experts\]"),
    ((torch.randn(2, 4), True), "LifecoreTypeError", "'top_k' must be an int"),
    ((torch.randn(2, 4), 2.0), "LifecoreTypeError", "'top_k' must be an int"),
    ((torch.randn(2, 4), 0), "InvalidArgumentError", "between 1 and the 4 experts"),
    ((torch.randn(2, 4), 5), "InvalidArgumentError", "between 1 and the 4 experts"),
    ((torch.randn(2, 4), -1), "InvalidArgumentError", "between 1 and the 4 experts"),
    ((torch.randn(2, 4), 1, "control"), "LifecoreTypeError", "'control' must be a GroupSelectionControl"),
    ((torch.randn(2, 4), 1, None, 3), "LifecoreTypeError", "'policy' must be a RoutingPolicy"),
])
def test_route_refuses_what_it_cannot_route_with_lifecore_errors(arguments, error, words):
    """A router's bad input says what is wrong instead of torch's AttributeError or
    RuntimeError from deep inside the selection."""
    import lifecore.errors
    from lifecore.torch import route

    with pytest.raises(getattr(lifecore.errors, error), match=words):
        route(*arguments)


def test_attach_and_a_routing_hook_refuse_what_is_no_backend_at_once(model, tokens):
    """Given something that is no backend, attach and RoutingHook refuse at the call instead of
    failing at the next forward."""
    import lifecore.torch as lt
    from lifecore.errors import LifecoreTypeError

    discovery = discovery_of(model, tokens)
    session = intervening_session(discovery, CaptureRequest(1, TOKENS, 1),
                                  [iv.bias_routing_scores("bias", "blocks.1.mlp#routing", [0], [1.0])])
    with pytest.raises(LifecoreTypeError, match="'backend' must be a capture backend"):
        lt.attach(session, model, backend=5)
    assert model.blocks[1].mlp.routing_hook is None  # nothing was hooked
    for bad, words in ((dict(session=5), "'session' must be a CaptureSession"),
                       (dict(backend=5), "'backend' must be a capture backend"),
                       (dict(path=5), "'path' must be a str"),
                       (dict(policy=5), "'policy' must be a RoutingPolicy")):
        given = dict(session=session, backend=lt.TorchBackend(), path="blocks.1.mlp", policy=None) | bad
        with pytest.raises(LifecoreTypeError, match=words):
            lt.RoutingHook(**given)


# ---- a new user's review: what capture() and the torch backend got wrong ----

def test_the_tensor_of_a_module_is_the_whole_copy_when_a_flat_preview_comes_first() -> None:
    # Before: a preview that cut nothing (8 elements, under 16) was CAPTURED, and read first.
    from lifecore.torch import capture

    m = nn.Sequential(nn.Linear(4, 8)).eval()
    x = torch.randn(1, 1, 4)
    with torch.no_grad(), capture(m, "0", ["preview", "tensor"]) as records:
        y = m(x)
    assert [r.outcome for r in records["0"].records] == [CaptureOutcome.CAPTURED] * 2
    assert records["0"].tensor.shape == y.shape and torch.equal(records["0"].tensor, y)


def test_a_forward_on_another_thread_during_a_capture_block_is_refused_and_changes_nothing() -> None:
    # Before: the block's hooks, which are the model's, captured the other thread's forward as
    # the block's own (or failed it with a message about "the block").
    import threading

    from lifecore.torch import capture

    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8)).eval()
    x = torch.randn(1, 3, 4)
    errors: list = []

    block = capture(m, "2", "tensor")

    def other_thread() -> None:
        try:
            with torch.no_grad():
                m(torch.zeros(1, 3, 4))
        except CaptureSessionError as error:
            errors.append(error)
        try:
            # torch registers the block's with_kwargs pre-hook as a plain one first: a forward in
            # that window calls it without kwargs, and it must refuse all the same.
            block._begin(m, (torch.zeros(1, 3, 4),))
        except CaptureSessionError as error:
            errors.append(error)

    with torch.no_grad(), block as records:
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        y = m(x)  # the block's own forward, after the other thread's
    assert len(errors) == 2
    assert all("on another thread" in str(e) and "block is unchanged" in str(e) for e in errors)
    assert records["2"].outcome == CaptureOutcome.CAPTURED and torch.equal(records["2"].tensor, y)
    with torch.no_grad():
        m(x)  # the block closed: the model is every thread's again, and runs no hook


@pytest.mark.parametrize("meets", ["the discovery", "the captured forward"])
def test_a_forward_another_thread_began_before_the_block_opened_passes_its_hooks_by(meets: str) -> None:
    # Before: only the block's root pre-hook checked the thread; a forward already past it met
    # the discovery's hooks (a plan with the other forward's calls) or the block's observers
    # (its outputs observed into the block's session, both forwards failed).
    from lifecore.torch import capture

    block_thread = threading.get_ident()
    at_gate, go_on, other_done = threading.Event(), threading.Event(), threading.Event()
    block_calls = [0]

    class Gated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if threading.get_ident() != block_thread:
                at_gate.set()
                go_on.wait(10)  # held here, past the root's pre-hooks, until the block's forward is under way
            else:
                block_calls[0] += 1  # 1: the discovery's forward; 2: the captured one
                if block_calls[0] == (1 if meets == "the discovery" else 2):
                    go_on.set()
                    other_done.wait(10)  # the other forward runs its modules now, inside the block's
            return self.inner(x)

    m = Gated().eval()
    x, other_x = torch.randn(1, 3, 4), torch.randn(2, 5, 4)
    other: dict = {}

    def other_forward() -> None:
        try:
            with torch.no_grad():
                other["y"] = m(other_x)
        except BaseException as error:  # noqa: BLE001 - reported below
            other["error"] = error
        other_done.set()

    thread = threading.Thread(target=other_forward)
    thread.start()
    assert at_gate.wait(10)
    with torch.no_grad(), capture(m, ["inner.0", "inner.2"], "tensor") as records:
        y = m(x)
    thread.join(10)
    assert "error" not in other, other.get("error")
    with torch.no_grad():
        assert torch.equal(other["y"], m.inner(other_x))
    assert sorted(records) == ["inner.0", "inner.2"]  # the block's own calls, once each
    assert records["inner.2"].outcome == CaptureOutcome.CAPTURED and torch.equal(records["inner.2"].tensor, y)
    assert records["inner.0"].tensor.shape == (1, 3, 8)
    assert not any(mod._forward_hooks or mod._forward_pre_hooks for mod in m.modules())


def test_a_module_only_a_worker_thread_calls_is_refused_naming_the_thread() -> None:
    # A forward that hands submodules to a thread pool: a block observes its own thread's calls
    # (another thread's cannot be told apart from another caller's), and says so where a module
    # it was asked for was called only there (before: "returned no tensor ... or was not called").
    from concurrent.futures import ThreadPoolExecutor

    from lifecore.torch import capture, discover

    pool = ThreadPoolExecutor(2)

    class FanOut(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.head = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            fa, fb = pool.submit(self.a, x), pool.submit(self.b, x)
            return self.head(fa.result() + fb.result())

    m, x = FanOut().eval(), torch.randn(1, 3, 8)
    try:
        with torch.no_grad():
            assert [p.path for p in discover(m, x).catalog] == ["head"]
            with pytest.raises(InvalidArgumentError, match=r"module 'a' was called on another thread than the "
                                                           r"block's .* attach\(\) a session, which observes every "
                                                           r"thread"):
                with capture(m, ["a", "head"], "tensor"):
                    m(x)
            assert not any(mod._forward_hooks or mod._forward_pre_hooks for mod in m.modules())
            with capture(m, "head", "tensor") as records:  # its own thread's calls, as before
                y = m(x)
            assert records["head"].outcome == CaptureOutcome.CAPTURED and torch.equal(records["head"].tensor, y)
    finally:
        pool.shutdown()


def test_a_block_on_a_model_another_thread_holds_is_refused_and_no_hook_is_left() -> None:
    # Two threads each opening blocks on one model: the second block's hooks were placed while
    # the first thread's forward walked the model's hook tables, and a removal that met a table
    # changing under it raised and left hooks behind, which refused every later forward.
    from lifecore.torch import capture

    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8)).eval()
    x = torch.randn(1, 3, 4)
    refused: list = []
    entered = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with torch.no_grad(), capture(m, "2", "summary") as records:
            entered.set()
            release.wait(10)
            m(x)
        assert records["2"].outcome == CaptureOutcome.CAPTURED

    thread = threading.Thread(target=holder)
    thread.start()
    assert entered.wait(10)
    hooks = (len(m._forward_pre_hooks), len(m._forward_hooks))
    try:
        with capture(m, "0", "summary"):
            pass
    except CaptureSessionError as error:
        refused.append(error)
    finally:
        release.set()
        thread.join()
    assert len(refused) == 1 and "open on this Sequential" in str(refused[0]) and "Nothing was placed" in str(refused[0])
    assert hooks == (1, 1)  # the holder's two, as they were
    assert not any(mod._forward_hooks or mod._forward_pre_hooks for mod in m.modules())
    with torch.no_grad(), capture(m, "0", "summary") as records:  # the model is every thread's again
        m(x)
    assert records["0"].outcome == CaptureOutcome.CAPTURED


def test_blocks_racing_on_two_threads_leave_no_hook_behind() -> None:
    from lifecore.torch import capture

    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8)).eval()
    x = torch.randn(1, 3, 4)
    unexpected: list = []

    def loop() -> None:
        for _ in range(150):
            try:
                with torch.no_grad(), capture(m, ["0", "2"], "summary"):
                    m(x)
            except CaptureSessionError:
                pass  # the other thread's block held the model
            except RuntimeError as error:  # torch walking its hook tables as the other thread changed one
                if "mutated during iteration" not in str(error):
                    unexpected.append(error)
            except BaseException as error:  # noqa: BLE001 - reported below
                unexpected.append(error)

    threads = [threading.Thread(target=loop) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert unexpected == []
    assert not any(mod._forward_hooks or mod._forward_pre_hooks for mod in m.modules())
    with torch.no_grad():
        m(x)


def test_a_wrong_backend_is_refused_before_the_model_runs() -> None:
    # Before: capture() took it, and the error came at the forward, after the discovery's own
    # forward had run the model once.
    import lifecore
    from lifecore.torch import capture

    calls = []
    m = nn.Sequential(nn.Linear(4, 4))
    m.register_forward_hook(lambda *args: calls.append(1))
    with pytest.raises(lifecore.LifecoreTypeError, match=r"^capture: argument 'backend' must be a capture backend"):
        capture(m, "0", "summary", backend=object())
    assert calls == []


def test_top_candidates_of_a_point_not_marked_as_logits_say_so() -> None:
    from lifecore.errors import AdmissionError
    from lifecore.torch import capture, discover

    m = nn.Sequential(nn.Linear(4, 12)).eval()
    x = torch.randn(1, 3, 4)
    with pytest.raises(AdmissionError, match=r"point '0' is not marked as logits .*discover\(\.\.\., logits="):
        with torch.no_grad(), capture(m, "0", "top_k", discovery=discover(m, x)):
            m(x)


def test_a_scale_factor_past_the_dtype_fails_the_operation_and_says_why() -> None:
    # Before: 1e39 is finite, so admitted; in float32 it is inf, and every output became inf or NaN.
    from lifecore.torch import discover

    m = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 6)).eval()
    x = torch.randn(1, 3, 4)
    discovery = discover(m, x)
    session = intervening_session(discovery, CaptureRequest(1, 3, 1), [iv.scale("s", "0", 1e39)])
    with torch.no_grad(), pytest.raises(CaptureSessionError, match=r"scheduled intervention s at 0 did not complete: "
                                                                   r"it failed \(.*scale factor of 's' is not finite "
                                                                   r"in torch.float32"):
        prefill_step(session, m, x)
