"""What an interpretability user's review of capture blocks found: "top_k" ranked the last
sequence of logits whose batch the model made itself; a discovery forward that wrote into the
model's buffers (a spectral norm in training mode) or into a tensor argument (a length a
static cache advances) did so silently; a block that saw no forward (a model torch.compile
compiled before it) gave empty records without a word; an 8-bit float output stopped the
forward half-way under "tensor"; a module path with brackets was read as a glob; a dataclass
output was said to hold no tensor; a discovery of another model went unremarked; warnings
pointed into torch's source."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from torch import nn  # noqa: E402

from lifecore import AdmissionError, InvalidArgumentError  # noqa: E402
from lifecore.torch import capture, discover  # noqa: E402

pytestmark = pytest.mark.no_sanitizer  # torch does not load with the ASan runtime preloaded


class ListInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 16)

    def forward(self, inputs: list) -> torch.Tensor:
        return self.head(inputs[0])


class Guided(nn.Module):  # classifier-free guidance: the model stacks cond and uncond rows
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cat([x, torch.zeros_like(x)]))


@pytest.mark.parametrize("make, inputs", [(ListInput, lambda: [torch.randn(2, 3, 4)]),
                                          (Guided, lambda: torch.randn(1, 3, 4))])
def test_top_k_refuses_logits_holding_more_than_one_sequence(make, inputs) -> None:
    # Before: admitted (the first top-level tensor said batch 1, or there was none) and CAPTURED
    # with the last sequence's candidates.
    model, x = make().eval(), inputs()
    with pytest.raises(AdmissionError, match=r"capture: top candidates of 'head:top_k' need unsliced logits with "
                                             r"batch 1: point 'head' has extent 2 at batch_axis 0 \(its shape \[2, 3, "
                                             r"16\]\): the last row ranked would be the last sequence's"):
        with capture(model, "head", "top_k"), torch.no_grad():
            model(x)
    assert not model._forward_hooks and not model._forward_pre_hooks and not model.head._forward_hooks


def test_top_k_ranks_logits_of_one_sequence_given_in_a_list() -> None:
    model = ListInput().eval()
    with capture(model, "head", "top_k") as records, torch.no_grad():
        logits = model([torch.randn(1, 3, 4)])
    assert records["head"].candidates.ids.tolist() == torch.topk(logits[0, -1], 10).indices.tolist()


def test_top_k_ranks_sequence_first_logits_of_one_sequence() -> None:
    # [tokens, batch 1, vocab] (nn.Transformer's layout): admitted, the last token ranked.
    model = nn.Sequential(nn.Linear(4, 16)).eval()
    with capture(model, "0", "top_k", batch_axis=1, sequence_axis=0) as records, torch.no_grad():
        logits = model(torch.randn(3, 1, 4))
    assert records["0"].candidates.ids.tolist() == torch.topk(logits[-1, 0], 10).indices.tolist()


class StaticCache(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj, self.head = nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, cache: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
        n = int(length)
        cache[:, n:n + x.shape[1]] = self.proj(x)
        length += x.shape[1]
        return self.head(cache[:, :n + x.shape[1]].sum(1, keepdim=True))


def test_a_discovery_forward_that_writes_a_tensor_argument_warns_naming_it() -> None:
    model, x = StaticCache().eval(), torch.randn(1, 2, 4)
    cache, length = torch.zeros(1, 8, 4), torch.zeros((), dtype=torch.long)
    with pytest.warns(UserWarning, match=r"capture: the discovery forward lifecore runs before the captured one wrote "
                                         r"in place into argument 1, argument 2, so the captured forward runs on what "
                                         r"it wrote .*discovery=") as caught:
        with capture(model, ["head"], "tensor"), torch.no_grad():
            model(x, cache, length)
    assert int(length) == 4  # what the warning says: both forwards advanced it
    assert caught[0].filename == __file__  # the user's line, not torch's
    # With a discovery made beforehand on scratch tensors, nothing is said and one forward runs.
    d = discover(model, x, torch.zeros(1, 8, 4), torch.zeros((), dtype=torch.long))
    cache, length = torch.zeros(1, 8, 4), torch.zeros((), dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with capture(model, ["head"], "tensor", discovery=d), torch.no_grad():
            model(x, cache, length)
    assert int(length) == 2


class SlotCache(nn.Module):  # gpt-fast's static cache: a buffer slot written with the step's values
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("cache", torch.zeros(1, 8, 4))

    def forward(self, x: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        self.cache[:, at] = self.proj(x)
        return self.cache.sum(1)


def test_an_eval_model_writing_its_cache_slots_again_is_not_warned_of() -> None:
    model = SlotCache().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with capture(model, ["proj"], "tensor") as records, torch.no_grad():
            out = model(torch.randn(1, 2, 4), torch.tensor([0, 1]))
    assert records["proj"].tensor is not None and out.shape == (1, 4)


def test_a_spectral_norm_in_training_mode_is_named_and_dropout_is_not() -> None:
    model = nn.Sequential(nn.utils.parametrizations.spectral_norm(nn.Linear(4, 4)), nn.ReLU())
    with pytest.warns(UserWarning, match=r"wrote in place into buffer '0.parametrizations.weight.0._u'"):
        with capture(model, ["1"], "summary"), torch.no_grad():
            model(torch.randn(1, 3, 4))
    # Dropout draws what it would without the block (the random state is put back): no warning.
    dropping = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    x = torch.randn(1, 3, 4)
    torch.manual_seed(5)
    expected = dropping(x)
    torch.manual_seed(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with capture(dropping, ["1"], "tensor") as records:
            out = dropping(x)
    assert torch.equal(out, expected) and torch.equal(records["1"].tensor, expected)


class OwnCall(nn.Module):  # calls its forward itself: forward hooks never run
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.unused = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.forward(x)


def test_a_block_that_sees_no_forward_warns_that_nothing_was_captured() -> None:
    model, x = OwnCall().eval(), torch.randn(1, 3, 4)
    with pytest.warns(UserWarning, match=r"capture: the block closed without a forward through OwnCall reaching its "
                                         r"hooks, so nothing was captured: a model torch.compile compiled before the "
                                         r"block .* overrides __call__") as caught:
        with capture(model, ["lin"], "tensor") as records, torch.no_grad():
            model(x)
    assert dict(records) == {} and caught[0].filename == __file__
    # A block whose forward raised says nothing more: the exception is the news.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ZeroDivisionError):
            with capture(model, ["lin"], "tensor"):
                1 / 0


# What capture() says where the compiler is loaded, as any compiled model loads it, of a module
# (or the modules of a glob) the forward never called: the refusal names what compiling does.
UNCALLED = [
    (lambda: nn.Linear(4, 4), "unused", r"module 'unused' returned no tensor in the forward .*or was not called"),
    (lambda: nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)]), "unused.*",
     r"'unused\.\*' matches \['unused.0', 'unused.1'\] but none of them returned a tensor .*"),
]


@pytest.mark.parametrize("unused, path, words", UNCALLED, ids=["module", "glob"])
def test_a_module_not_called_names_what_compiling_does_once_the_compiler_is_loaded(unused, path, words) -> None:
    torch.compile(nn.Linear(2, 2), backend="eager")  # loads torch._dynamo, as any compiled model does
    model = nn.Module()
    model.lin, model.unused = nn.Linear(4, 4), unused()
    model.forward = lambda x: model.lin(x)  # type: ignore[method-assign]
    with pytest.raises(InvalidArgumentError, match=words + r"; a model torch.compile compiled before the block "
                                                           r"skips hooks added after it"):
        with capture(model, [path], "tensor"), torch.no_grad():
            model(torch.randn(1, 3, 4))


def test_an_eight_bit_float_is_refused_before_the_forward_for_payloads_that_keep_values() -> None:
    dtype = getattr(torch, "float8_e4m3fn", None)
    if dtype is None:
        pytest.skip("this torch has no float8_e4m3fn")

    class Quantized(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin, self.to8 = nn.Linear(4, 4), Cast(dtype)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.to8(self.lin(x)).float()

    model, x = Quantized().eval(), torch.randn(1, 3, 4)
    ran = []
    model.lin.register_forward_hook(lambda *a: ran.append(1))
    for kind in ("tensor", "preview"):
        ran.clear()
        with pytest.raises(AdmissionError, match=r"of 'to8:\w+' keeps values in their own type, but point 'to8' holds "
                                                 r"8-bit floats \(float8\), which a payload cannot keep"):
            with capture(model, ["to8"], kind), torch.no_grad():
                model(x)
        assert ran == [1]  # the discovery forward only: the captured forward never started
    with capture(model, ["to8"], "summary") as records, torch.no_grad():
        model(x)
    assert records["to8"].summary is not None


class Cast(nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.dtype)


def test_a_path_with_brackets_names_its_module() -> None:
    model = nn.Module()
    model.d = nn.ModuleDict({"layer[0]": nn.Linear(4, 4)})
    model.forward = lambda x: model.d["layer[0]"](x)  # type: ignore[method-assign]
    with capture(model, ["d.layer[0]"], "tensor") as records, torch.no_grad():
        out = model(torch.randn(1, 3, 4))
    assert torch.equal(records["d.layer[0]"].tensor, out)


@dataclasses.dataclass
class Out:
    hidden: torch.Tensor


class Returns(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> Out:
        return Out(self.lin(x))


def test_a_dataclass_output_is_named_as_one() -> None:
    model = nn.Sequential(Returns())
    with pytest.raises(InvalidArgumentError, match=r"output of 0 is a dataclass \(Out\), whose fields output_index "
                                                   r"does not select"):
        with capture(model, ["0"], "tensor", output_index="hidden"), torch.no_grad():
            model(torch.randn(1, 3, 4))


def test_a_discovery_named_its_own_way_is_not_compared() -> None:
    model, x = nn.Sequential(nn.Linear(4, 4)).eval(), torch.randn(1, 3, 4)
    d = discover(model, x, identity="my-model-v1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with capture(model, ["0"], "tensor", discovery=d) as records, torch.no_grad():
            model(x)
    assert records["0"].tensor is not None


def test_a_discovery_of_another_model_is_warned_of_before_the_forward() -> None:
    model, x = nn.Sequential(nn.Linear(4, 12), nn.Linear(12, 16)).eval(), torch.randn(1, 3, 4)
    d = discover(model, x)
    model[1] = nn.Linear(12, 8)
    with pytest.warns(UserWarning, match=r"capture: the discovery's artifact_identity is not this Sequential's") as w:
        block = capture(model, ["0", "1"], "tensor", discovery=d)
    assert w[0].filename == __file__
    with pytest.raises(InvalidArgumentError, match=r"axis 'd2' has extent 8, expected 16"):
        with block, torch.no_grad():
            model(x)


def test_records_and_attachments_print_why_and_what() -> None:
    from lifecore.capture import (CaptureDiscovery, CapturePlan, CaptureRequest, CaptureSelection, CaptureSession,
                                  CaptureTransform, unlimited)
    from lifecore.torch import attach

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with capture(model, ["0", "1"], "tensor", budget_bytes=60) as records, torch.no_grad():
        model(torch.randn(1, 3, 4))
    assert repr(records["0"]) == "ModuleCapture('0', tensor=CAPTURED)"
    assert repr(records["1"]) == "ModuleCapture('1', tensor=SKIPPED(limit retained_bytes))"
    d: CaptureDiscovery = discover(model, torch.randn(1, 3, 4))
    session = CaptureSession(CapturePlan([CaptureSelection("a", "0", CaptureTransform.summary())],
                                         unlimited()).admit(d, CaptureRequest(1, 3, 1)))
    attachment = attach(session, model)
    assert repr(attachment) == f"TorchAttachment(Sequential, 1 point(s) hooked, session {session.id})"
    attachment.detach()
    assert repr(attachment) == f"TorchAttachment(Sequential, detached, session {session.id})"
    # A slice transform has no slices to take in a block: refused before any hook.
    with pytest.raises(InvalidArgumentError, match=r"capture: a slice transform needs the slices of a "
                                                   r"CaptureSelection, which a block has no way to give"):
        capture(model, "0", CaptureTransform.slice())
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_top_k_refuses_a_built_batch_with_a_discovery_given_too() -> None:
    # Before: a discovery made beforehand had a fixed extent 2 at the batch axis, not the batch,
    # so admission took it and ranked the uncond row's logits, CAPTURED.
    model, x = Guided().eval(), torch.randn(1, 3, 4)
    given = discover(model, x, logits=["head"])
    with pytest.raises(AdmissionError, match=r"point 'head' has extent 2 at batch_axis 0 .*the last row ranked would "
                                             r"be the last sequence's$"):
        with capture(model, "head", "top_k", discovery=given), torch.no_grad():
            model(x)
    assert not model._forward_hooks and not model._forward_pre_hooks and not model.head._forward_hooks


class Squeezed(nn.Module):  # one sequence's logits with no batch axis: [tokens, vocab]
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x[0])


def test_logits_with_no_batch_axis_are_named_as_what_a_discovery_would_read() -> None:
    model, x = Squeezed().eval(), torch.randn(1, 5, 4)
    with pytest.raises(AdmissionError, match=r"extent 5 at batch_axis 0 .*; if that axis is the sequence \(logits "
                                             r"with no batch axis\), pass discovery=lifecore.torch.discover"):
        with capture(model, "head", "top_k"), torch.no_grad():
            model(x)
    with capture(model, "head", "top_k", discovery=discover(model, x, logits=["head"])) as records, torch.no_grad():
        logits = model(x)
    assert records["head"].candidates.ids.tolist() == torch.topk(logits[-1], 10).indices.tolist()


class Skips(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, skip: bool = False) -> torch.Tensor:
        return x if skip else self.lin(x)


def test_a_forward_that_reaches_no_selected_point_warns_that_nothing_was_captured() -> None:
    # Before: the root's hooks ran (as a model compiled before the block runs them), the
    # points' did not, and every record read MISSING without a word.
    model, x = Skips().eval(), torch.randn(1, 3, 4)
    given = discover(model, x)
    with pytest.warns(UserWarning, match=r"capture: the forward through Skips reached none of the 1 selected points' "
                                         r"hooks, so nothing was captured \(every record is MISSING\): the forward "
                                         r"did not call them on this thread .*, or a model torch.compile compiled "
                                         r"before the block skips hooks"):
        with capture(model, ["lin"], "tensor", discovery=given) as records, torch.no_grad():
            model(x, skip=True)
    assert records["lin"].outcome.name == "MISSING"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a point reached: nothing to say
        with capture(model, ["lin"], "tensor", discovery=given) as records, torch.no_grad():
            model(x)
    assert records["lin"].outcome.name == "CAPTURED"


def test_a_model_compiled_before_the_block_is_warned_of_when_its_points_go_unseen() -> None:
    model, x = Skips().eval(), torch.randn(1, 3, 4)
    compiled = torch.compile(model, backend="eager")
    try:
        with torch.no_grad():
            compiled(x)
    except Exception as error:  # noqa: BLE001 - the compiler's own limits on this machine
        pytest.skip(f"torch.compile does not run here: {type(error).__name__}: {error}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with capture(model, ["lin"], "tensor") as records, torch.no_grad():
            compiled(x)
    unseen = records["lin"].outcome.name == "MISSING"
    said = any("reached none of the 1 selected points' hooks" in str(w.message) for w in caught)
    assert unseen == said  # the compiler skipped the point's hook exactly when the block says so

