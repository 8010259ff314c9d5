"""lifecore.torch.capture and run_with_capture: module outputs by path or glob, as named
transforms, under a byte budget, on a small randomly initialised model. The records are the
session's and the budget is its ledger's: a module past the budget is SKIPPED, a summary equals
the one computed from the module's output directly, and bad arguments are refused before any
hook is placed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from torch import nn  # noqa: E402

from lifecore.capture import CaptureOutcome, CaptureSession, CaptureTransform, OnLimit  # noqa: E402
from lifecore.errors import (  # noqa: E402
    AdmissionError,
    CaptureSessionError,
    InvalidArgumentError,
    LifecoreOverflowError,
    LifecoreTypeError,
)
from lifecore.torch import (  # noqa: E402
    DEFAULT_HISTOGRAM_EDGES,
    DEFAULT_TOP_K,
    CapturedModules,
    ModuleCapture,
    capture,
    discover,
    run_with_capture,
)

pytestmark = pytest.mark.no_sanitizer

D, VOCAB, TOKENS, BLOCKS = 8, 50, 5, 3


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(D, D), nn.GELU())
        self.norm = nn.LayerNorm(D)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.norm(h + self.mlp(h))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = nn.Linear(D, VOCAB)
        self.forwards = 0
        self.fail_after: int | None = None  # raise after this many blocks

    def forward(self, tokens: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        self.forwards += 1
        h = self.embed(tokens) * scale
        for i, block in enumerate(self.blocks):
            if self.fail_after == i:
                raise RuntimeError("broken block")
            h = block(h)
        logits: torch.Tensor = self.head(h)
        return logits


@pytest.fixture
def lm() -> TinyLM:
    torch.manual_seed(0)
    return TinyLM().eval()


@pytest.fixture
def tokens() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randint(0, VOCAB, (1, TOKENS))


def outputs_of(model: nn.Module, paths: list[str], *args: object) -> dict[str, torch.Tensor]:
    """The modules' outputs from a plain forward hook: what a capture is compared with."""
    seen: dict[str, torch.Tensor] = {}
    modules = dict(model.named_modules())
    handles = [modules[p].register_forward_hook(
        lambda module, inputs, output, p=p: seen.__setitem__(p, output.detach().clone())) for p in paths]
    try:
        with torch.no_grad():
            model(*args)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def no_hooks(model: nn.Module) -> bool:
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_a_glob_captures_each_matching_module_in_module_order(lm, tokens):
    with capture(lm, ["blocks.*.mlp"], "summary", budget_bytes=1 << 20) as records, torch.no_grad():
        assert len(records) == 0  # filled when the forward returns
        lm(tokens)
        assert list(records) == ["blocks.0.mlp", "blocks.1.mlp", "blocks.2.mlp"]
    assert isinstance(records, CapturedModules) and no_hooks(lm)
    assert all(isinstance(m, ModuleCapture) and m.outcome == CaptureOutcome.CAPTURED for m in records.values())
    # "*" crosses dots (fnmatch): "blocks.*" also reaches the submodules of each block.
    with capture(lm, "blocks.*", "summary") as everything:
        lm(tokens)
    assert "blocks.1.mlp.0" in everything and "blocks.2.norm" in everything and "blocks" not in everything


def test_the_captured_summary_equals_one_computed_directly(lm, tokens):
    paths = ["blocks.0.mlp", "blocks.2.norm"]
    direct = outputs_of(lm, paths, tokens)
    with capture(lm, paths, "summary") as records, torch.no_grad():
        lm(tokens)
    for path in paths:
        summary, values = records[path].summary, direct[path].double()
        assert summary is not None
        assert (summary.count, summary.nonfinite) == (values.numel(), 0)
        assert (summary.min, summary.max) == (values.min().item(), values.max().item())
        assert summary.mean == pytest.approx(values.mean().item(), rel=1e-6, abs=1e-7)
        assert summary.std == pytest.approx(values.std(unbiased=False).item(), rel=1e-6)


def test_run_with_capture_returns_the_output_and_the_records(lm, tokens):
    with torch.no_grad():
        expected = lm(tokens)
        output, records = run_with_capture(lm, tokens, "head", ["top_k", "tensor", "histogram"])
    assert torch.equal(output, expected) and no_hooks(lm)
    head = records["head"]
    assert head.candidates is not None and head.tensor is not None and head.histogram is not None
    assert head.candidates.ids.tolist() == torch.topk(expected[0, -1], DEFAULT_TOP_K).indices.tolist()
    assert head.tensor.dtype == expected.dtype and torch.equal(head.tensor, expected)
    assert head.histogram.bin_edges.tolist() == list(DEFAULT_HISTOGRAM_EDGES)
    inside = ((expected >= DEFAULT_HISTOGRAM_EDGES[0]) & (expected <= DEFAULT_HISTOGRAM_EDGES[-1])).sum().item()
    assert head.histogram.counts.sum() == inside
    assert head.summary is None  # no summary was asked
    assert head.payload is not None and head.payload.kind == "candidates"  # the first transform's
    # Keywords and a tuple of positional inputs reach the forward.
    halved, _ = run_with_capture(lm, (tokens, 0.5), "head", "summary")
    scaled, _ = run_with_capture(lm, tokens, "head", "summary", model_kwargs={"scale": 0.5})
    assert torch.equal(halved, scaled) and not torch.equal(halved, output)


def test_the_records_are_the_sessions_and_the_budget_is_its_ledgers(lm, tokens):
    region = TOKENS * D * 4  # one block's float32 output
    with capture(lm, "blocks.*.mlp", "tensor", budget_bytes=region * 2 + region // 2) as records:
        lm(tokens)
    first, second, third = records.values()
    assert (first.outcome, second.outcome, third.outcome) == (
        CaptureOutcome.CAPTURED, CaptureOutcome.CAPTURED, CaptureOutcome.SKIPPED)
    assert third.skip_reason == "limit" and third.payload is None and third.tensor is None
    assert first.skip_reason is None and first.tensor is not None and first.tensor.shape == (1, TOKENS, D)
    session, step = records.session, records.step
    assert isinstance(session, CaptureSession) and step is not None
    assert session.cumulative_usage().retained_bytes == 2 * region  # charged by the ledger, within the budget
    assert [r.selection_id for m in records.values() for r in m.records] == [r.selection_id for r in step.records]
    assert [r.outcome for r in step.records] == [m.outcome for m in records.values()]
    assert session.plan.plan.limits.on_limit == OnLimit.SKIP


def test_a_zero_budget_skips_everything_and_fail_refuses(lm, tokens):
    with capture(lm, "blocks.*.mlp", ["summary", "tensor"], budget_bytes=0) as records:
        lm(tokens)
    assert [m.outcome for m in records.values()] == [CaptureOutcome.SKIPPED] * BLOCKS
    assert all(m.summary is None and m.tensor is None for m in records.values())
    assert records.session is not None and records.session.cumulative_usage().retained_bytes == 0
    region = TOKENS * D * 4
    lm.forwards = 0
    with pytest.raises(AdmissionError, match="exceed"):  # under "fail" a plan that cannot fit is refused
        run_with_capture(lm, tokens, "blocks.*.mlp", "tensor", budget_bytes=3 * region - 1, on_limit="fail")
    assert no_hooks(lm) and lm.forwards == 1  # the discovery's forward; the captured one never ran
    _, records = run_with_capture(lm, tokens, "blocks.*.mlp", "tensor", budget_bytes=3 * region, on_limit="fail")
    assert [m.outcome for m in records.values()] == [CaptureOutcome.CAPTURED] * BLOCKS


def test_several_transforms_per_module_each_read_by_kind(lm, tokens):
    edges = CaptureTransform.histogram([-1.0, 0.0, 1.0])
    with capture(lm, "blocks.1.norm", ["summary", edges, "preview"]) as records:
        lm(tokens)
    norm = records["blocks.1.norm"]
    assert [r.selection_id for r in norm.records] == [
        "blocks.1.norm:summary", "blocks.1.norm:histogram", "blocks.1.norm:preview"]
    assert norm.summary is not None and norm.histogram is not None and norm.tensor is not None
    assert norm.histogram.bin_edges.tolist() == [-1.0, 0.0, 1.0] and norm.tensor.shape == (16,)
    assert "summary=CAPTURED" in repr(norm)


def test_tensor_reads_the_whole_tensor_when_a_preview_is_asked_beside_it(lm, tokens):
    # The first record with a tensor payload was read: a preview given first hid the whole one.
    for transforms in (["preview", "tensor"], ["tensor", "preview"]):
        with capture(lm, "head", transforms) as records, torch.no_grad():
            logits = lm(tokens)
        head = records["head"]
        assert head.tensor is not None and tuple(head.tensor.shape) == tuple(logits.shape), transforms
        assert torch.equal(head.tensor, logits)
    with capture(lm, "head", "preview") as records, torch.no_grad():
        lm(tokens)
    assert records["head"].tensor is not None and records["head"].tensor.shape == (16,)  # a preview alone


def test_a_given_discovery_saves_the_discovery_forward(lm, tokens):
    with capture(lm, "head", "summary") as records:
        lm(tokens)
    assert lm.forwards == 2 and len(records) == 1  # the discovery's forward, then the captured one
    discovery = discover(lm, tokens)
    lm.forwards = 0
    for _ in range(2):
        _, records = run_with_capture(lm, tokens, "head", "summary", discovery=discovery)
    assert lm.forwards == 2 and records["head"].outcome == CaptureOutcome.CAPTURED


def test_one_forward_per_block_and_a_failed_forward_is_drained(lm, tokens):
    with pytest.raises(CaptureSessionError, match="already captured one forward"):
        with capture(lm, "head", "summary") as records:
            lm(tokens)
            lm(tokens)
    assert list(records) == ["head"] and no_hooks(lm)
    discovery = discover(lm, tokens)
    lm.fail_after = 1
    with pytest.raises(RuntimeError, match="broken block"):  # the discovery's forward fails: nothing began
        with capture(lm, "blocks.*.mlp", "summary") as records:
            lm(tokens)
    assert no_hooks(lm) and len(records) == 0 and records.session is None
    with pytest.raises(RuntimeError, match="broken block"):
        with capture(lm, "blocks.*.mlp", "summary", discovery=discovery) as records:
            lm(tokens)
    assert no_hooks(lm)
    assert records["blocks.0.mlp"].outcome == CaptureOutcome.CAPTURED
    assert records["blocks.1.mlp"].outcome == CaptureOutcome.MISSING  # the step never reached it


@pytest.mark.parametrize("arguments,error,words", [
    ({"paths": "blocks.*.attn"}, InvalidArgumentError, "'blocks.*.attn' matches no module"),
    ({"paths": []}, InvalidArgumentError, "names no module"),
    ({"paths": 3}, LifecoreTypeError, "argument 'paths'"),
    ({"paths": "head", "transforms": "mean"}, InvalidArgumentError, "unknown transform 'mean'"),
    ({"paths": "head", "transforms": 7}, LifecoreTypeError, "argument 'transforms'"),
    ({"paths": "head", "transforms": []}, InvalidArgumentError, "argument 'transforms' names no transform"),
    ({"paths": "head", "budget_bytes": -1}, InvalidArgumentError, "'budget_bytes' must be >= 0"),
    ({"paths": "head", "budget_bytes": 1.5}, LifecoreTypeError, "'budget_bytes' must be an int"),
    ({"paths": "head", "budget_bytes": True}, LifecoreTypeError, "'budget_bytes' must be an int"),
    ({"paths": "head", "budget_bytes": 2**64}, LifecoreOverflowError, "64 bits"),
    ({"paths": "head", "on_limit": "drop"}, InvalidArgumentError, "'on_limit'"),
    ({"paths": "head", "discovery": "x"}, LifecoreTypeError, "'discovery'"),
    ({"paths": "head", "logits": 3}, LifecoreTypeError, "'logits'"),
    # These were read only at the forward: a TypeError or ValueError from deep inside it.
    ({"paths": "head", "batch_axis": "0"}, LifecoreTypeError, "argument 'batch_axis' must be an int"),
    ({"paths": "head", "sequence_axis": 1.0}, LifecoreTypeError, "argument 'sequence_axis' must be an int"),
    ({"paths": "head", "output_index": 1.0}, LifecoreTypeError,
     "argument 'output_index' must be an int \\(a position\\), a str \\(a key\\), or a mapping"),
    ({"paths": "head", "output_index": {"head": 0.0}}, LifecoreTypeError, "argument 'output_index'"),
    # An integer of NumPy's or torch's is an axis; a bool of any library is not.
    ({"paths": "head", "batch_axis": torch.tensor(False)}, LifecoreTypeError, "argument 'batch_axis' must be an int"),
    ({"paths": "head", "sequence_axis": torch.tensor([1, 2])}, LifecoreTypeError, "'sequence_axis' must be an int"),
    ({"paths": "head", "output_index": torch.tensor(True)}, LifecoreTypeError, "argument 'output_index'"),
    ({"paths": "head", "batch_axis": torch.tensor(1)}, InvalidArgumentError, "name the same axis \\(1\\)"),
])
def test_bad_arguments_are_refused_before_any_hook(lm, arguments, error, words):
    with pytest.raises(error, match=words):
        capture(lm, **arguments)
    with pytest.raises(error, match=words):
        run_with_capture(lm, torch.zeros(1, TOKENS, dtype=torch.long), **arguments)
    assert no_hooks(lm) and lm.forwards == 0
    with pytest.raises(LifecoreTypeError, match="torch.nn.Module"):
        capture(object(), "head")  # type: ignore[arg-type]


def test_discover_and_attach_refuse_axes_and_indices_of_the_wrong_type(lm, tokens):
    # discover(batch_axis="0") once ran and gave a discovery without a batch axis.
    for arguments, words in (({"batch_axis": "0"}, "'batch_axis'"), ({"sequence_axis": True}, "'sequence_axis'"),
                             ({"output_index": 0.0}, "'output_index'")):
        with pytest.raises(LifecoreTypeError, match=f"discover: argument {words}"):
            discover(lm, tokens, **arguments)
    assert no_hooks(lm) and lm.forwards == 0
    from lifecore.capture import CapturePlan, CaptureRequest, unlimited
    from lifecore.torch import attach

    session = CaptureSession(CapturePlan([], unlimited()).admit(discover(lm, tokens), CaptureRequest(1, TOKENS, 1)))
    with pytest.raises(LifecoreTypeError, match="attach: argument 'output_index'"):
        attach(session, lm, output_index=[0])  # type: ignore[arg-type]
    assert no_hooks(lm)


def test_a_module_that_returns_no_tensor_is_named(lm, tokens):
    with pytest.raises(InvalidArgumentError, match="module 'blocks' returned no tensor"):
        run_with_capture(lm, tokens, "blocks", "summary")  # a ModuleList is never called
    assert no_hooks(lm)
    with pytest.raises(KeyError, match="no module 'head' in these records"):
        run_with_capture(lm, tokens, "embed", "summary")[1]["head"]


def test_nested_blocks_each_capture_the_one_real_forward(lm, tokens):
    direct = outputs_of(lm, ["blocks.0.mlp", "head", "blocks.1.norm"], tokens)
    # On one model: neither block's discovery forward is observed or drained by the other.
    with capture(lm, "blocks.0.mlp", "summary") as outer, capture(lm, "head", "summary") as inner, \
            torch.no_grad():
        lm(tokens)
    assert no_hooks(lm)
    assert outer["blocks.0.mlp"].outcome == inner["head"].outcome == CaptureOutcome.CAPTURED
    assert outer["blocks.0.mlp"].summary.max == direct["blocks.0.mlp"].max().item()
    assert inner["head"].summary.max == direct["head"].max().item()
    # On a module inside the other's model: the inner block begins in the middle of the forward.
    block = lm.blocks[1]
    with capture(lm, "blocks.*.norm", "summary") as outer, capture(block, "norm", "summary") as inner, \
            torch.no_grad():
        lm(tokens)
    assert no_hooks(lm)
    assert [m.outcome for m in outer.values()] == [CaptureOutcome.CAPTURED] * BLOCKS
    assert outer["blocks.1.norm"].summary.max == inner["norm"].summary.max == direct["blocks.1.norm"].max().item()


@pytest.mark.parametrize("channels", [16, 3], ids=["channels", "channels-equal-to-the-input"])
def test_outputs_whose_axes_are_not_batch_and_sequence_are_captured(channels):
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), nn.ReLU(), nn.Conv2d(channels, 4, 3, padding=1))
    images = torch.randn(2, 3, 8, 8)
    direct = outputs_of(cnn, ["0", "2"], images)
    with torch.no_grad():
        _, records = run_with_capture(cnn, images, ["0", "2"], ["summary", "tensor"])
    assert no_hooks(cnn)
    for path in ("0", "2"):
        assert records[path].outcome == CaptureOutcome.CAPTURED
        assert torch.equal(records[path].tensor, direct[path])
        assert records[path].summary.max == direct[path].max().item()
    # The generation path's discover() labels axis 1 a sequence only where it is the input's:
    # 16 channels are not the input's 3, so they are a known extent.
    assert [a.name for a in discover(cnn, images).point("0").axes][:2] == ["batch", "seq" if channels == 3 else "d1"]


def test_an_empty_sequence_is_captured_as_empty(lm):
    empty = torch.zeros(1, 0, dtype=torch.long)
    with torch.no_grad():
        _, records = run_with_capture(lm, empty, "blocks.0.mlp", ["summary", "tensor"])
    captured = records["blocks.0.mlp"]
    assert captured.outcome == CaptureOutcome.CAPTURED
    assert captured.summary.count == 0 and tuple(captured.tensor.shape) == (1, 0, D)


@pytest.mark.parametrize("transform", ["summary", "histogram", "top_k"])
def test_complex_outputs_are_refused_not_reduced_to_their_real_part(transform):
    """A complex output (rotary embeddings as complex numbers, say) was summarized, binned or
    ranked by its real part under a torch UserWarning, and recorded CAPTURED; then it failed the
    forward part-way. Its discovery calls it UNKNOWN now, and the plan refuses it before the
    captured forward runs."""
    model = nn.Sequential(nn.Identity())
    values = torch.arange(1.0, 25.0).reshape(1, 2, 12) * (1 + 2j)
    with pytest.raises(InvalidArgumentError, match="^run_with_capture: '0': '0' returned complex values"):
        run_with_capture(model, values, "0", transform)
    assert not model[0]._forward_hooks and not model._forward_pre_hooks  # the block was left whole


@pytest.mark.parametrize("transform", ["summary", "histogram", "top_k"])
def test_an_output_turned_complex_after_discovery_fails_the_observation_not_reduced(transform):
    """Real in the discovery's forward, complex in the captured one: the backend refuses to reduce
    it at the forward (the observation fails, naming why), and the block is left whole."""

    class TurnsComplex(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return x if self.calls == 1 else x * (1 + 2j)

    model = nn.Sequential(TurnsComplex())
    with pytest.raises(CaptureSessionError, match="complex") as caught:
        run_with_capture(model, torch.arange(1.0, 25.0).reshape(1, 2, 12), "0", transform)
    assert isinstance(caught.value.__cause__, InvalidArgumentError)
    assert model[0].calls == 2
    assert not model[0]._forward_hooks and not model._forward_pre_hooks


def test_numpy_and_torch_integers_are_axes_and_output_positions(lm, tokens):
    """batch_axis, sequence_axis and output_index took only Python ints: a NumPy or torch
    integer (what an engine's config often holds) was refused. They capture as the ints do."""
    np = pytest.importorskip("numpy")
    with capture(lm, "head", "summary") as plain, torch.no_grad():
        lm(tokens)
    for batch, sequence, index in ((np.int64(0), np.int32(1), np.int16(0)), (torch.tensor(0), torch.tensor(1),
                                                                              {"head": np.uint8(0)})):
        with capture(lm, "head", "summary", batch_axis=batch, sequence_axis=sequence, output_index=index) as records, \
                torch.no_grad():
            lm(tokens)
        assert records["head"].outcome == CaptureOutcome.CAPTURED
        assert records["head"].summary == plain["head"].summary
        assert discover(lm, tokens, batch_axis=batch, sequence_axis=sequence, output_index=index).catalog
