"""What a review as an interpretability-tool author found: the discovery forward of a capture
block on a model that a forward changes, attach's ``paths``, a replacement of another dtype or
device, and summaries of finite float64 values whose sum overflows."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from torch import nn  # noqa: E402

from lifecore.capture import (  # noqa: E402
    CapturePhase,
    CapturePlan,
    CaptureRequest,
    CaptureSession,
    CaptureSelection,
    CaptureTransform,
    InterventionOutcome,
    InterventionPlan,
    NumpyBackend,
    interventions as iv,
    unlimited,
)
from lifecore.capture.backends.numpy_backend import summarize as numpy_summarize  # noqa: E402
from lifecore.capture.backends.torch_backend import summarize as torch_summarize  # noqa: E402
from lifecore.errors import CaptureSessionError, InvalidArgumentError, LifecoreTypeError  # noqa: E402
from lifecore.torch import TorchBackend, attach, capture, discover, run_with_capture  # noqa: E402

pytestmark = pytest.mark.no_sanitizer


class Normed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.norm = nn.Linear(4, 4), nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.lin(x))


# How a shared argument check names its call (the builder's module path).
IV = r"^lifecore\.capture\.interventions\."


def test_a_block_warns_when_its_discovery_forward_would_change_a_model_in_training_mode():
    model, x = Normed(), torch.randn(1, 3, 4)
    with pytest.warns(UserWarning, match=r"run_with_capture: the discovery forward .* wrote in place into buffer "
                                         r"'norm.num_batches_tracked', .*discovery="):
        run_with_capture(model, x, "lin")
    assert int(model.norm.num_batches_tracked) == 2  # what the warning says: two forwards ran
    discovery = discover(model.eval(), x)
    model.train()
    before = int(model.norm.num_batches_tracked)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, records = run_with_capture(model, x, "lin", discovery=discovery)  # no discovery forward
        assert records["lin"].summary is not None
        run_with_capture(model.eval(), x, "lin")  # eval mode: nothing a second forward changes
    assert int(model.norm.num_batches_tracked) == before + 1


def test_attach_checks_paths_and_names_the_call():
    model = Normed()
    session = CaptureSession(CapturePlan([], unlimited()).admit(discover(model, torch.randn(1, 3, 4)),
                                                                CaptureRequest(1, 3, 1)))
    with pytest.raises(LifecoreTypeError, match=r"^attach: argument 'paths' .* got str \(wrap one path in a list\)"):
        attach(session, model, paths="lin")
    with pytest.raises(LifecoreTypeError, match=r"^attach: argument 'paths' .* got int"):
        attach(session, model, paths=5)  # type: ignore[arg-type]
    with pytest.raises(LifecoreTypeError, match=r"^attach: argument 'paths' must hold module paths \(str\), got int"):
        attach(session, model, paths=["lin", 3])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match=r"^attach: no module at path\(s\) \['nope'\] in Normed"):
        attach(session, model, paths=["lin", "nope"])
    with pytest.raises(LifecoreTypeError, match=r"^attach: argument 'backend' .* the class TorchBackend itself"):
        attach(session, model, backend=TorchBackend)  # type: ignore[arg-type]
    assert not model.lin._forward_hooks and not model._forward_pre_hooks  # nothing was hooked
    with attach(session, model, paths=["lin"]):
        assert len(model.lin._forward_hooks) == 1


class Widening(TorchBackend):
    def intervene(self, tensor, request):
        return super().intervene(tensor, request).double()


class Moving(TorchBackend):
    def intervene(self, tensor, request):
        return super().intervene(tensor, request).to("meta")


class Reinterpreting(TorchBackend):
    """Same element size, dtype class and device, another dtype: only replacement_mismatch tells."""

    def intervene(self, tensor, request):
        return super().intervene(tensor, request).to(torch.float16)


@pytest.mark.parametrize("backend, message", [(Widening(), r"changed the dtype of lin \(elements of 4 bytes became 8\)"),
                                              (Moving(), r"moved lin off the host")])
def test_a_replacement_of_another_dtype_or_device_fails_its_operation_and_is_not_used(backend, message):
    model, x = Normed().eval(), torch.randn(1, 3, 4)
    discovery = discover(model, x)
    session = CaptureSession(CapturePlan([], unlimited()).admit(discovery, CaptureRequest(1, 3, 1)))
    session.enable_interventions(InterventionPlan([iv.scale("op", "lin", 2.0)]).admit(discovery, session),
                                 TorchBackend())
    with attach(session, model, backend=backend), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        out = model(x)  # the forward runs on with the unchanged output
        with pytest.raises(CaptureSessionError, match=message):
            session.finish_interventions()
        record = session.take_step().interventions[0]
    assert record.outcome == InterventionOutcome.FAILED
    assert out.dtype == torch.float32 and torch.equal(out, model(x))


@pytest.mark.parametrize("summarize, array", [(torch_summarize, torch.tensor), (numpy_summarize, np.array)])
def test_a_summary_of_finite_values_whose_sum_overflows_is_finite_and_right(summarize, array):
    values = [1.5e308, 1.5e308, 1.0e308, 1.5e308, -0.5e308]
    payload = summarize(array([values], dtype=torch.float64 if array is torch.tensor else np.float64))
    summary = payload.summary
    exact = [v / 1e308 for v in values]  # in range: the reference statistics, scaled back
    mean = sum(exact) / len(exact)
    std = math.sqrt(sum((v - mean) ** 2 for v in exact) / len(exact))
    assert summary.count == 5 and summary.nonfinite == 0
    assert summary.min == -0.5e308 and summary.max == 1.5e308
    assert summary.mean == pytest.approx(mean * 1e308, rel=1e-12)
    assert summary.std == pytest.approx(std * 1e308, rel=1e-12)


def test_a_float32_summary_whose_std_overflows_float32_is_exact_in_float64():
    values = torch.tensor([3e38, -3e38, 3e38, -3e38], dtype=torch.float32)
    _, records = run_with_capture(nn.Sequential(nn.Identity()).eval(), values.reshape(1, 4), "0")
    summary = records["0"].summary
    assert summary.mean == pytest.approx(0.0, abs=1e24) and summary.std == pytest.approx(float(values[0]), rel=1e-6)



def test_the_torch_backend_names_a_same_size_dtype_or_another_device():
    # Before: float16 against bfloat16, or one GPU against another, passed the facts' checks
    # (same element size, both off the host) and became the module's output.
    backend = TorchBackend()
    half = torch.ones(3, dtype=torch.float16)
    assert backend.replacement_mismatch(half, half.clone()) is None
    assert backend.replacement_mismatch(half, half.bfloat16()) == "dtype torch.float16 became torch.bfloat16"
    assert backend.replacement_mismatch(half, half.to("meta")) == "device cpu became meta"


def test_a_same_size_dtype_swap_fails_its_operation_and_is_not_used():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)).to(torch.bfloat16).eval()
    x = torch.randn(1, 3, 4, dtype=torch.bfloat16)
    discovery = discover(model, x)
    session = CaptureSession(CapturePlan([], unlimited()).admit(discovery, CaptureRequest(1, 3, 1)))
    session.enable_interventions(InterventionPlan([iv.scale("op", "0", 2.0)]).admit(discovery, session),
                                 TorchBackend())
    with attach(session, model, backend=Reinterpreting()), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        out = model(x)  # with a float16 input the next Linear would have failed
        with pytest.raises(CaptureSessionError, match=r"'op' changed 0: dtype torch\.bfloat16 became torch\.float16"):
            session.finish_interventions()
        assert session.take_step().interventions[0].outcome == InterventionOutcome.FAILED
    assert out.dtype == torch.bfloat16 and torch.equal(out, model(x))


class ListCache:
    """A KV cache as a forward sees it: keys appended at each forward, attended over."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []


class Cached(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, cache: ListCache) -> torch.Tensor:
        cache.keys.append(x)
        return self.lin(torch.stack(cache.keys).sum(0))  # depends on what the cache holds


class Uncopyable(ListCache):
    def __deepcopy__(self, memo):
        raise TypeError("a lock cannot be copied")


def test_a_block_discovers_on_a_copy_of_a_cache_passed_in():
    # Before: the discovery forward appended to the caller's cache (generate() passes one), so
    # the captured forward ran against it twice and recorded other values, with no warning.
    model, x = Cached().eval(), torch.randn(1, 3, 4)
    expected = model(x, ListCache())
    cache = ListCache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with capture(model, ["lin"], "tensor") as records, torch.no_grad():
            out = model(x, cache=cache)
    assert len(cache.keys) == 1  # the captured forward's append only
    assert torch.equal(out, expected) and torch.equal(records["lin"].tensor, expected)
    cache = Uncopyable()
    with pytest.warns(UserWarning, match=r"capture: argument 'cache' \(Uncopyable\) could not be copied for the "
                                         r"discovery forward \(TypeError: a lock cannot be copied\), so both"):
        with capture(model, ["lin"], "tensor") as records, torch.no_grad():
            model(x, cache=cache)
    assert len(cache.keys) == 2  # as warned


def test_a_block_captures_a_forward_through_the_models_torch_compile_wrapper():
    # Before: torch.compile traced the block's pre-hook, which builds and attaches the session,
    # and the forward failed with "CaptureSession.observer(): 'self' must be a CaptureSession".
    model, x = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).eval(), torch.randn(1, 3, 4)
    compiled = torch.compile(model, backend="eager")  # no C compiler needed
    with torch.no_grad():
        expected = model[0](x)
        with capture(model, ["0"], "tensor") as records:
            out = compiled(x)
    assert records["0"].outcome.name == "CAPTURED" and torch.equal(records["0"].tensor, expected)
    assert torch.equal(out, model(x))
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


class Pattern(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-1, -2), dim=-1)  # [batch, heads, queries, keys]


class Router(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gate(x.reshape(-1, 8))  # [batch x tokens, experts], as a MoE router's logits


class Decoder(nn.Module):
    """An attention over a key cache (2 heads of 4) and a router: prefill, then one token a step."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.pattern, self.router = nn.Linear(8, 8), Pattern(), Router()

    def forward(self, x: torch.Tensor, keys: list) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.proj(x).reshape(b, t, 2, 4).transpose(1, 2)  # [batch, heads, tokens, 4]
        keys.append(h)
        weights = self.pattern(h, torch.cat(keys, dim=2))
        self.router(x)
        return weights


def test_discover_labels_token_rows_and_takes_axis_kinds_for_an_attention_pattern():
    # Before: a router's [batch x tokens, experts] had its axis 0 called batch and a pattern's
    # heads axis (at sequence_axis) called sequence, so both failed at the first forward; a key
    # axis that grows with the context could not be described at all.
    model, x = Decoder().eval(), torch.randn(2, 5, 8)
    plain = discover(model, x, [])
    assert [a.size for a in plain.point("router.gate").axes] == ["token_rows", 3]
    assert [a.size for a in plain.point("pattern").axes] == ["batch", 2, 5, 5]  # 2 heads: no sequence
    discovery = discover(model, x, [], axis_kinds={"pattern": ["batch", None, "sequence", "context"]})
    assert [(a.name, a.size) for a in discovery.point("pattern").axes] == [
        ("batch", "batch"), ("d1", 2), ("seq", "sequence"), ("context", "context")]
    paths = ["pattern", "router.gate"]
    plan = CapturePlan([CaptureSelection(p, p, CaptureTransform.full_tensor()) for p in paths], unlimited())
    session = CaptureSession(plan.admit(discovery, CaptureRequest(2, 5, 3)))
    keys: list = []
    seen: dict[str, list] = {p: [] for p in paths}
    manual = [model.get_submodule(p).register_forward_hook(lambda m, a, out, p=p: seen[p].append(out.clone()))
              for p in paths]
    with attach(session, model, paths=paths), torch.no_grad():
        for prediction, step in enumerate([x, torch.randn(2, 1, 8), torch.randn(2, 1, 8)]):
            session.begin_step(CapturePhase.PREFILL if prediction == 0 else CapturePhase.DECODE, prediction)
            model(step, keys)
            records = session.take_step().records
            assert [r.outcome.name for r in records] == ["CAPTURED", "CAPTURED"], [r.message for r in records]
            for record, path in zip(records, paths):
                assert torch.equal(record.payload.tensor, seen[path][prediction])
    assert [tuple(t.shape) for t in seen["pattern"]] == [(2, 2, 5, 5), (2, 2, 1, 6), (2, 2, 1, 7)]
    for m in manual:
        m.remove()


@pytest.mark.parametrize("axis_kinds, error, message", [
    ({"pattern": ["batch", None]}, InvalidArgumentError, r"gives 'pattern' 2 axes; its output has shape \[2, 2, 5, 5\]"),
    ({"pattern": ["batch", "heads", None, None]}, InvalidArgumentError, r"gives 'pattern' the axis kind 'heads'; the "
                                                                        r"kinds are"),
    ({"pattern": ["batch", "sequence", None, None]}, InvalidArgumentError,
     r"calls axis 1 of 'pattern' 'sequence', which is 5 in the example \(batch 2, 5 tokens\)"),
    ({"nope": [None]}, InvalidArgumentError, r"names no module 'nope' of Decoder"),
    ({"pattern#3": [None]}, InvalidArgumentError, r"names 'pattern#3', which the example forward gave no tensor point"),
    ({"pattern": "batch"}, LifecoreTypeError, r"must give 'pattern' a list of axis kinds"),
    (["pattern"], LifecoreTypeError, r"must be a mapping"),
])
def test_discover_refuses_axis_kinds_that_do_not_fit(axis_kinds, error, message):
    with pytest.raises(error, match=r"^discover: argument 'axis_kinds' " + message):
        discover(Decoder().eval(), torch.randn(2, 5, 8), [], axis_kinds=axis_kinds)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_payload_may_be_a_torch_tensor_of_any_real_dtype_or_one_that_requires_grad(dtype):
    # Before: a bfloat16 payload (what a bfloat16 model's capture gives) was refused ("unsupported
    # ScalarType BFloat16"), as was a tensor that requires grad.
    value = (torch.arange(6, dtype=torch.float32) / 3).to(dtype).reshape(2, 3)
    op = iv.replace("patch", "lin", value)
    assert op.payload_shape == [2, 3] and op.payload == value.double().flatten().tolist()  # exact
    steering = torch.ones(3, requires_grad=True)
    assert iv.add("steer", "lin", steering).payload == [1.0, 1.0, 1.0]
    with pytest.raises(LifecoreTypeError, match=r"argument 'tensor' holds complex values"):
        iv.replace("patch", "lin", torch.ones(2, dtype=torch.complex64))


def test_a_payload_torch_cannot_read_on_the_host_is_a_type_error():
    with pytest.raises(LifecoreTypeError, match=IV + r"replace: argument 'tensor' must be an array of numbers: Tensor \("):
        iv.replace("patch", "lin", torch.ones(3, device="meta"))


def test_a_block_copies_an_object_passed_twice_once():
    # Each argument was copied apart: one cache passed twice became two for the discovery forward.
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.out = nn.Identity()

        def forward(self, x: torch.Tensor, a: ListCache, b: ListCache) -> torch.Tensor:
            a.keys.append(x)
            return self.out(torch.cat(b.keys, dim=1))  # empty (an error) where b is not a's cache

    model, x = Twice(), torch.ones(1, 2)
    cache = ListCache()
    with capture(model, ["out"], "tensor") as records, torch.no_grad():
        out = model(x, cache, cache)
    assert torch.equal(out, x) and len(cache.keys) == 1
    assert torch.equal(records["out"].tensor, x)


def test_an_empty_batch_is_captured_with_a_discovery_given_as_without_one():
    """A batched pipeline's empty last batch: with discovery= made on real inputs, the block
    discovers the empty forward itself, and the records are those it gives without one."""
    model, x = Normed().eval(), torch.randn(2, 3, 4)
    discovery = discover(model, x)
    empty = x[:0]
    _, without = run_with_capture(model, empty, "lin", "tensor")
    _, given = run_with_capture(model, empty, "lin", "tensor", discovery=discovery)
    assert list(given) == list(without) == ["lin"]
    assert given["lin"].outcome == without["lin"].outcome
    assert tuple(torch.as_tensor(given["lin"].tensor).shape) == (0, 3, 4)
    _, full = run_with_capture(model, x, "lin", "tensor", discovery=discovery)  # the discovery still serves
    assert tuple(torch.as_tensor(full["lin"].tensor).shape) == (2, 3, 4)


def test_the_discovery_forward_leaves_the_random_state_to_the_captured_forward():
    """A forward that draws (noise injection, sampling) gets, inside a block that discovers on
    its own forward, the draws a plain forward under the same seed gets."""

    class Noisy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x + torch.randn_like(x))

    model, x = Noisy().eval(), torch.randn(1, 3, 4)
    torch.manual_seed(11)
    with torch.no_grad():
        plain = model(x)
    torch.manual_seed(11)
    with torch.no_grad():
        captured, records = run_with_capture(model, x, "lin", "tensor")
    assert torch.equal(captured, plain)
    assert torch.equal(torch.as_tensor(records["lin"].tensor), plain)
