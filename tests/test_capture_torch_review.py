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
    InterventionOutcome,
    InterventionPlan,
    NumpyBackend,
    interventions as iv,
    unlimited,
)
from lifecore.capture.backends.numpy_backend import summarize as numpy_summarize  # noqa: E402
from lifecore.capture.backends.torch_backend import summarize as torch_summarize  # noqa: E402
from lifecore.errors import CaptureSessionError, InvalidArgumentError, LifecoreTypeError  # noqa: E402
from lifecore.torch import TorchBackend, attach, discover, run_with_capture  # noqa: E402

pytestmark = pytest.mark.no_sanitizer


class Normed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.norm = nn.Linear(4, 4), nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.lin(x))


def test_a_block_warns_when_its_discovery_forward_would_change_a_model_in_training_mode():
    model, x = Normed(), torch.randn(1, 3, 4)
    with pytest.warns(UserWarning, match=r"run_with_capture: .*BatchNorm1d 'norm' is in training mode.*discovery="):
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
