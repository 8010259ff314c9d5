"""A Ctrl-C that lands as one of torch's or lifecore's calls returns, inside lifecore.torch and
the reference engine, leaves no hook on the model and no engine locked or holding memory. Each
test makes the call do its work and then raise, as a signal delivered at that moment would."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from torch import nn  # noqa: E402

import lifecore.engine.scheduler as scheduler  # noqa: E402
import lifecore.torch as lt  # noqa: E402
from lifecore.capture import CapturePlan, CaptureRequest, CaptureSelection, CaptureSession, CaptureTransform  # noqa: E402
from lifecore import CaptureSessionError  # noqa: E402
from lifecore.capture import unlimited  # noqa: E402
from lifecore.engine import CaptureOptions, Engine, Request  # noqa: E402
from lifecore.engine.capture import EngineCapture  # noqa: E402

from interrupting import interrupting_after  # noqa: E402

pytestmark = pytest.mark.no_sanitizer


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.mlp, self.head = nn.Embedding(50, 8), nn.Linear(8, 8), nn.Linear(8, 50)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.mlp(self.embed(tokens))))


def hooks_on(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def interrupt_registration(monkeypatch, kind: str, nth: int) -> None:
    """The nth registration of a forward hook (``kind`` "hook") or pre-hook ("pre") registers,
    then raises KeyboardInterrupt as it returns."""
    name = "register_forward_hook" if kind == "hook" else "register_forward_pre_hook"
    original = getattr(nn.Module, name)
    calls = [0]

    def registering(self, *args, **kwargs):
        handle = original(self, *args, **kwargs)
        calls[0] += 1
        if calls[0] == nth:
            monkeypatch.setattr(nn.Module, name, original)
            raise KeyboardInterrupt(f"Ctrl-C as {name} #{nth} returns")
        return handle

    monkeypatch.setattr(nn.Module, name, registering)


@pytest.fixture
def model():
    torch.manual_seed(0)
    return Tiny().eval()


def attach_and_detach(model: nn.Module) -> None:
    discovery = lt.discover(model, torch.randint(0, 50, (1, 5)))
    plan = CapturePlan([CaptureSelection("mlp", "mlp", CaptureTransform.summary()),
                        CaptureSelection("head", "head", CaptureTransform.summary())], unlimited())
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 5, 1)))
    with lt.attach(session, model):
        pass


def capture_a_forward(model: nn.Module) -> dict:
    tokens = torch.randint(0, 50, (1, 5))
    with lt.capture(model, ["mlp", "head"], "summary") as records, torch.no_grad():
        model(tokens)
    return {path: record.outcome.name for path, record in records.items()}


@pytest.mark.parametrize("what, kind, nth", [
    ("attach: the attachment's root pre-hook", "pre", 1),
    ("attach: a module's hook", "hook", 1),
    ("capture: the discovery's hooks", "hook", 3),
    ("capture: the block's own hooks", "pre", 1),
])
def test_an_interrupted_registration_leaves_no_hook_on_the_model(monkeypatch, model, what, kind, nth) -> None:
    # Before: the hook registered stayed on the model with nothing to remove it; a later plain
    # forward then raised (AttributeError, or "observe ... no capture step is open").
    body = attach_and_detach if what.startswith("attach") else capture_a_forward
    interrupt_registration(monkeypatch, kind, nth)
    with pytest.raises(KeyboardInterrupt):
        body(model)
    assert hooks_on(model) == 0, what
    with torch.no_grad():
        model(torch.randint(0, 50, (1, 5)))  # a plain forward runs
    assert capture_a_forward(model) == {"mlp": "CAPTURED", "head": "CAPTURED"}
    assert hooks_on(model) == 0


def test_detach_removes_only_its_own_hooks(model) -> None:
    def mine(module, args, output):
        return None

    model.mlp.register_forward_hook(mine)
    attach_and_detach(model)
    assert list(model.mlp._forward_hooks.values()) == [mine]


def new_engine() -> Engine:
    return Engine("tiny", dtype=torch.float64, num_blocks=8, max_batch=2, capture=CaptureOptions(budget_bytes=4096))


def requests(tag: str) -> list[Request]:
    return [Request(f"{tag}{i}", prompt=[i + 1, 2, 3] * 3, max_new_tokens=3) for i in range(3)]


def assert_serves_again(engine: Engine, tag: str) -> None:
    result = engine.generate(requests(tag))
    assert sum(len(tokens) for tokens in result.tokens.values()) == 9
    assert engine.coordinator.holders() == []


def test_an_engine_interrupted_as_it_claims_a_run_serves_again_and_closes(monkeypatch) -> None:
    # Before: a Ctrl-C as the busy lock's acquire returned kept it held: every generate and
    # close after said another generate was running.
    engine = new_engine()
    interrupting_after(Engine, "_claim", monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        engine.generate(requests("a"))
    assert_serves_again(engine, "b")
    engine.close()


def test_an_engine_interrupted_as_its_capture_step_begins_serves_again(monkeypatch) -> None:
    # Before: the step stayed open and every later generate failed (not been consumed).
    engine = new_engine()
    interrupting_after(EngineCapture, "begin", monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        engine.generate(requests("a"))
    assert engine.capture is not None and not engine.capture.session.step_pending
    assert_serves_again(engine, "b")


def test_a_sequence_interrupted_before_it_runs_gives_its_memory_back_at_once(monkeypatch) -> None:
    # Before: the admitted session lived in the scheduler's frame only, which the kept
    # exception keeps (an interactive session keeps the last one): its blocks and request id
    # stayed held, and the same request was refused as already live.
    engine = new_engine()
    original = scheduler.Running

    def interrupted(*args, **kwargs):
        monkeypatch.setattr(scheduler, "Running", original)
        raise KeyboardInterrupt("Ctrl-C as Running is entered")

    monkeypatch.setattr(scheduler, "Running", interrupted)
    with pytest.raises(KeyboardInterrupt) as kept:
        engine.generate(requests("a"))
    assert kept.value is not None  # the error, and the frames it holds, are still alive here
    assert engine.coordinator.holders() == []
    assert_serves_again(engine, "a")


def test_an_attachment_refused_mid_attach_leaves_no_capture_session_error(model) -> None:
    # A bad path is refused before any hook: nothing to clean, and the model still runs.
    discovery = lt.discover(model, torch.randint(0, 50, (1, 5)))
    plan = CapturePlan([CaptureSelection("mlp", "mlp", CaptureTransform.summary())], unlimited())
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 5, 1)))
    with pytest.raises(Exception, match="no module at path"):
        lt.attach(session, model, paths=["nowhere"])
    assert hooks_on(model) == 0
    try:
        with torch.no_grad():
            model(torch.randint(0, 50, (1, 5)))
    except CaptureSessionError as error:  # pragma: no cover - the failure this test guards against
        pytest.fail(f"a hook was left: {error}")


def test_an_engine_interrupted_as_its_capture_step_ends_serves_again(monkeypatch) -> None:
    # A Ctrl-C landing as end() is entered, before its own try, left the step open: the next
    # generate failed (not been consumed). The next begin drops such a step now.
    engine = new_engine()
    original = EngineCapture.end

    def interrupted(self, completed=True):
        monkeypatch.setattr(EngineCapture, "end", original)
        raise KeyboardInterrupt("Ctrl-C as end is entered")

    monkeypatch.setattr(EngineCapture, "end", interrupted)
    with pytest.raises(KeyboardInterrupt):
        engine.generate(requests("a"))
    assert_serves_again(engine, "b")


def _interrupt_at_the_start_of(name: str, file: str = "lifecore"):
    """A trace function that raises KeyboardInterrupt once, as lifecore's function ``name``
    (in a file whose path holds ``file``) starts: where a Ctrl-C's handler runs (between any
    two bytecodes)."""
    armed = [True]

    def tracer(frame, event, arg):
        if event == "call" and armed[0] and frame.f_code.co_name == name and file in frame.f_code.co_filename:
            armed[0] = False
            raise KeyboardInterrupt(f"Ctrl-C as {name} starts")
        return None
    return tracer, armed


@pytest.mark.parametrize("where", ["_release", "remove_all", "_unhook", "_keys_of", "leave", "_close_here", "detach"])
def test_one_interrupt_while_a_capture_block_closes_leaves_the_model_free(model, where) -> None:
    # Before: 3 to 5 hooks stayed on the model (every later forward raised CaptureSessionError),
    # and an interrupt inside _OpenBlocks.leave kept the model claimed for good, refusing every
    # other thread's capture block.
    import sys
    import threading

    tokens = torch.randint(0, 50, (1, 5))
    tracer, armed = _interrupt_at_the_start_of(where)
    with pytest.raises(KeyboardInterrupt, match=f"as {where} starts"):
        try:
            with lt.capture(model, ["mlp"], "summary") as records, torch.no_grad():
                model(tokens)
                sys.settrace(tracer)  # the Ctrl-C comes after the forward, as the block closes
        finally:
            sys.settrace(None)
    assert not armed[0], f"{where} was never called as the block closed"
    assert hooks_on(model) == 0 and lt.attachments(model) == []
    assert records["mlp"].summary is not None  # what the forward captured is kept
    with torch.no_grad():
        model(tokens)  # a plain forward
    done: list[object] = []

    def elsewhere() -> None:
        with lt.capture(model, ["mlp"], "summary") as theirs, torch.no_grad():
            model(tokens)
        done.append(theirs["mlp"].summary)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(30)
    assert done and done[0] is not None  # another thread's block is not refused


def test_one_interrupt_while_an_attachments_with_block_detaches_leaves_no_hook(model) -> None:
    import sys

    plan = CapturePlan([CaptureSelection("s", "mlp", CaptureTransform.summary())], unlimited())
    discovery = lt.discover(model, torch.randint(0, 50, (1, 5)))
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, 5, 1)))
    tracer, armed = _interrupt_at_the_start_of("_unhook")
    with pytest.raises(KeyboardInterrupt):
        try:
            with lt.attach(session, model):
                sys.settrace(tracer)
        finally:
            sys.settrace(None)
    assert not armed[0] and hooks_on(model) == 0 and lt.attachments(model) == []


def test_the_cleanup_loop_keeps_an_interrupt_as_the_context_of_a_later_failure() -> None:
    from lifecore import _core

    runs = [0]

    def release() -> None:
        runs[0] += 1
        if runs[0] == 1:
            raise KeyboardInterrupt("Ctrl-C in the first run")
        raise ValueError("the cleanup's own failure")

    # Before: the ValueError came with no trace of the Ctrl-C that the loop had caught.
    with pytest.raises(ValueError, match="own failure") as raised:
        _core._finish_despite_interrupts(release)
    assert runs[0] == 2 and isinstance(raised.value.__context__, KeyboardInterrupt)


def test_a_runs_guard_gives_back_only_when_its_block_raised_and_to_the_end() -> None:
    runs: list[str] = []

    def release() -> None:
        runs.append("release")
        if len(runs) < 3:
            raise KeyboardInterrupt(f"Ctrl-C in run {len(runs)}")

    with scheduler._GiveBackOnError(release):
        pass
    assert runs == []  # a block that ended normally gives nothing back
    with pytest.raises(KeyboardInterrupt, match="run 2") as raised:
        with scheduler._GiveBackOnError(release):
            raise LookupError("the run's own failure")
    assert runs == ["release"] * 3  # run again until one completed
    assert isinstance(raised.value.__context__, LookupError)
    runs.clear()
    with pytest.raises(LookupError, match="own failure"):  # a release that completes: the error goes on
        with scheduler._GiveBackOnError(lambda: runs.append("done")):
            raise LookupError("the run's own failure")
    assert runs == ["done"]


@pytest.mark.parametrize("where", ["close", "detach", "_unhook"])
def test_one_interrupt_while_a_capturing_engine_closes_leaves_no_hook(where) -> None:
    # Before: an interrupt in the engine's close before its capture's hooks were off left them
    # on the model until close() was called again. (One as Engine.close or Engine._close starts
    # is a close that never began: the engine stays open, its hooks its own.)
    import os
    import sys

    engine = Engine("tiny", num_blocks=16, max_batch=2, capture=CaptureOptions())
    engine.generate(requests("c"))
    model = engine.model
    file = os.path.join("engine", "capture.py") if where == "close" else "lifecore"
    tracer, armed = _interrupt_at_the_start_of(where, file)
    with pytest.raises(KeyboardInterrupt):
        sys.settrace(tracer)
        try:
            engine.close()
        finally:
            sys.settrace(None)
    assert not armed[0] and hooks_on(model) == 0 and engine.closed
