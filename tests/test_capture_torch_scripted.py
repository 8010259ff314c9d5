"""A TorchScript module (torch.jit.script or torch.jit.trace) takes no forward hooks. Before,
``capture``, ``discover`` and ``attach`` reached torch's own refusal, a bare RuntimeError
("register_forward_pre_hook is not supported on ScriptModules"); a plain model holding a
scripted submodule could not be discovered at all, and a capture block naming that submodule
said it "returned no tensor in the forward, or was not called"."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from torch import nn  # noqa: E402

from lifecore import InvalidArgumentError, LifecoreTypeError  # noqa: E402
from lifecore.capture import (  # noqa: E402
    CapturePlan,
    CaptureRequest,
    CaptureSelection,
    CaptureSession,
    CaptureTransform,
    unlimited,
)
from lifecore.torch import artifact_identity, attach, capture, discover  # noqa: E402

# torch.jit.script and torch.jit.trace warn that they are deprecated: what users still run.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


def two_layers() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU())


def scripted(kind: str) -> nn.Module:
    model = two_layers()
    return torch.jit.script(model) if kind == "script" else torch.jit.trace(model, torch.randn(1, 4))


def with_scripted_child() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), torch.jit.script(two_layers()), nn.Linear(4, 2))


def hooked(model: nn.Module) -> list[str]:
    """The modules lifecore could have left a hook on (a scripted one holds none)."""
    return [name for name, module in model.named_modules()
            if not isinstance(module, torch.jit.ScriptModule) and (module._forward_hooks or module._forward_pre_hooks)]


@pytest.mark.parametrize("kind", ["script", "trace"])
def test_a_scripted_model_is_refused_by_name_before_any_hook(kind: str) -> None:
    model = scripted(kind)
    with pytest.raises(LifecoreTypeError, match=r"capture: argument 'model' is a TorchScript module .*no forward "
                                                r"hooks: pass the torch.nn.Module before scripting or tracing it"):
        capture(model, ["0"], "summary")
    with pytest.raises(LifecoreTypeError, match=r"discover: argument 'model' is a TorchScript module"):
        discover(model, torch.randn(1, 4))
    assert len(artifact_identity(model)) == 64  # reads names and shapes only: no hooks needed


def test_a_scripted_submodule_is_no_point_and_the_rest_of_the_model_is() -> None:
    model = with_scripted_child()
    discovery = discover(model, torch.randn(1, 4))
    assert sorted(point.path for point in discovery.catalog) == ["0", "2"]
    with capture(model, ["0", "2"], "summary") as records, torch.no_grad():
        model(torch.randn(1, 4))
    assert list(records) == ["0", "2"] and records["2"].summary is not None
    assert hooked(model) == []


@pytest.mark.parametrize("path", ["1", "1.0"])
def test_a_capture_block_naming_a_scripted_submodule_says_why(path: str) -> None:
    model = with_scripted_child()
    with pytest.raises(LifecoreTypeError, match=rf"capture: module '{path}' is a TorchScript module"):
        capture(model, [path, "0"], "summary")
    assert hooked(model) == []


def test_attach_to_a_scripted_submodule_is_refused_and_leaves_no_hook() -> None:
    model = with_scripted_child()
    discovery = discover(model, torch.randn(1, 4))
    plan = CapturePlan([CaptureSelection("first", "0", CaptureTransform.summary())],
                       unlimited())
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 1, 1)))
    with pytest.raises(LifecoreTypeError, match=r"is a TorchScript module"):
        attach(session, model, paths=["0", "1"])
    assert hooked(model) == []
    with attach(session, model):  # the session attaches to what it can observe
        pass


def test_a_glob_matching_only_scripted_modules_says_so() -> None:
    model = with_scripted_child()
    with pytest.raises(InvalidArgumentError, match=r"none of them returned a tensor .*3 of them are TorchScript modules"):
        with capture(model, ["1*"], "summary"), torch.no_grad():
            model(torch.randn(1, 4))
    assert hooked(model) == []


def test_a_model_whose_only_submodule_is_scripted_warns_that_its_discovery_is_empty() -> None:
    model = nn.Module()
    model.inner = torch.jit.script(two_layers())
    model.forward = lambda x: model.inner(x)  # type: ignore[method-assign]
    with pytest.warns(UserWarning, match=r"no point was found in Module, whose submodules 'inner' are TorchScript"):
        discovery = discover(model, torch.randn(1, 4))
    assert list(discovery.catalog) == []
