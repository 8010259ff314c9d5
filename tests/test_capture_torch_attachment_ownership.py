"""What an attachment owns on a model: only the points ``paths`` names, the one routing hook a
module takes, and hooks that keep their attachment findable after its handle was dropped;
also the router's scores at a routing point, complex outputs, payloads taken under
inference mode and an empty sequence beside a given discovery (what a review as an
interpretability-tool author found)."""

from __future__ import annotations

import gc
import re
import weakref

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from torch import nn  # noqa: E402

from lifecore.capture import (  # noqa: E402
    CaptureOutcome,
    CapturePhase,
    CapturePlan,
    CaptureRequest,
    CaptureSchedule,
    CaptureSelection,
    CaptureSession,
    CaptureTransform,
    InterventionPlan,
    ValueDtype,
    interventions as iv,
    unlimited,
)
from lifecore.errors import InvalidArgumentError  # noqa: E402
from lifecore.torch import TorchBackend, attach, attachments, capture, discover, route, run_with_capture  # noqa: E402

pytestmark = pytest.mark.no_sanitizer

D, EXPERTS, TOP_K = 8, 4, 2


class Router(nn.Module):
    """A mixture-of-experts selector reduced to its router: the coefficients scale the rows."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(D, EXPERTS)
        self.hook = None
        self.last_ids = None
        self.last_scores = None

    def routing_policy(self):
        return EXPERTS, TOP_K

    def set_routing_hook(self, hook) -> None:
        self.hook = hook

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, D)
        scores = self.router(rows)
        self.last_scores = scores.detach().clone()
        ids, coefficients = (self.hook.select if self.hook is not None else route)(scores, TOP_K)
        self.last_ids = ids
        return (rows * coefficients.sum(-1, keepdim=True)).reshape(x.shape)


def session_of(discovery, ops=(), selections=(), steps: int = 1, tokens: int = 4) -> CaptureSession:
    session = CaptureSession(CapturePlan(list(selections), unlimited()).admit(discovery, CaptureRequest(1, tokens, steps)))
    if ops:
        session.enable_interventions(InterventionPlan(list(ops)).admit(discovery, session), TorchBackend())
    return session


def hook_count(module: nn.Module) -> int:
    return len(module._forward_hooks) + len(module._forward_pre_hooks)


def test_paths_limit_the_intervention_targets_hooked_so_a_session_splits_across_models() -> None:
    """attach(paths=["0"]) hooked every intervention target anyway: module "1" got a hook, and a
    sub-model holding only "0" could not be attached (no module at path '1')."""
    model = nn.Sequential(nn.Linear(D, D), nn.Linear(D, D))
    x = torch.randn(1, 4, D)
    discovery = discover(model, x)
    session = session_of(discovery, [iv.zero("z", "1")])
    first = attach(session, model, paths=["0"])
    assert hook_count(model[1]) == 0 and hook_count(model[0]) == 1
    encoder, decoder = nn.Sequential(model[0]), nn.Sequential()
    decoder.add_module("1", model[1])
    first.detach()
    # The split the docstring promises: each half attached with its own paths, one step over both.
    with attach(session, encoder, paths=["0"]), attach(session, decoder, paths=["1"]):
        session.begin_step(CapturePhase.PREFILL, 0)
        out = decoder(encoder(x))
        session.finish_interventions()
        session.take_step()
    assert not out.any()  # zeroed at "1", through the decoder's attachment alone
    assert hook_count(model[0]) == hook_count(model[1]) == 0


def test_paths_limit_the_targets_of_a_plan_enabled_after_attaching() -> None:
    model = nn.Sequential(nn.Linear(D, D), nn.Linear(D, D))
    x = torch.randn(1, 4, D)
    discovery = discover(model, x)
    session = session_of(discovery)
    with attach(session, model, paths=["0"]):
        session.enable_interventions(InterventionPlan([iv.zero("z", "1")]).admit(discovery, session), TorchBackend())
        session.begin_step(CapturePhase.PREFILL, 0)
        out = model(x)  # the root's pre-hook syncs the plan: "1" is not among the paths
        assert hook_count(model[1]) == 0
        assert out.any()


def test_a_module_takes_one_routing_hook_a_second_attachment_is_refused() -> None:
    """A second attachment on the same routed module replaced the first's routing hook, and its
    detach left None: the first still said attached while its control no longer applied."""
    model = nn.Sequential(Router())
    x = torch.randn(1, 5, D)
    discovery = discover(model, x)
    first = session_of(discovery, [iv.exclude_experts("ex1", "0#routing", [0, 1])], tokens=5)
    second = session_of(discovery, [iv.exclude_experts("ex2", "0#routing", [2, 3],
                                                       schedule=CaptureSchedule(prefill=False))], tokens=5)
    held = attach(first, model)
    hook = model[0].hook
    with pytest.raises(InvalidArgumentError, match=r"^attach: module '0' takes one routing hook, and "
                                                   r"TorchAttachment\(.*\) holds it: detach that attachment first"):
        attach(second, model)
    assert model[0].hook is hook and held.attached
    assert attachments(model) == [held]
    first.begin_step(CapturePhase.PREFILL, 0)
    model(x)
    first.finish_interventions()  # the first's control applied: experts 0 and 1 were never chosen
    first.take_step()
    assert not torch.isin(model[0].last_ids, torch.tensor([0, 1])).any()
    held.detach()
    with attach(second, model):  # free again once the first is detached
        assert model[0].hook is not None
    assert model[0].hook is None


def test_an_attachment_whose_handle_was_dropped_is_kept_by_its_hooks_and_found_again() -> None:
    """With the plan synced, nothing held the attachment: collected, it left attach's guard, a
    second attach was taken (every point observed twice), and its hooks had no way off."""
    model = nn.Sequential(nn.Linear(D, D), nn.Linear(D, D))
    x = torch.randn(1, 4, D)
    discovery = discover(model, x)
    session = session_of(discovery, [iv.scale("sc", "1", 2.0)],
                         [CaptureSelection("a", "0", CaptureTransform.summary())])
    gone = weakref.ref(attach(session, model))
    gc.collect()
    assert gone() is not None  # its hooks keep it
    with pytest.raises(InvalidArgumentError, match=r"already attached to this Sequential .*attachments\(model\)"):
        attach(session, model)
    found = attachments(model)
    assert found == [gone()]
    session.begin_step(CapturePhase.PREFILL, 0)
    model(x)
    session.finish_interventions()
    assert [r.outcome for r in session.take_step().records] == [CaptureOutcome.CAPTURED]  # observed once
    found[0].detach()
    del found
    assert attachments(model) == [] and hook_count(model[0]) == hook_count(model[1]) == 0
    gc.collect()
    assert gone() is None  # detached and dropped: nothing keeps it


def test_a_model_dropped_with_an_attachment_on_it_is_collected() -> None:
    model = nn.Sequential(nn.Linear(D, D))
    discovery = discover(model, torch.randn(1, 4, D))
    session = session_of(discovery, selections=[CaptureSelection("a", "0", CaptureTransform.summary())])
    attach(session, model)
    dead = weakref.ref(model)
    del model
    gc.collect()
    assert dead() is None


def test_attachments_lists_only_the_models_own_in_order() -> None:
    model, other = nn.Sequential(nn.Linear(D, D)), nn.Sequential(nn.Linear(D, D))
    x = torch.randn(1, 4, D)
    discovery = discover(model, x)
    select = [CaptureSelection("a", "0", CaptureTransform.summary())]
    a, b = (attach(session_of(discovery, selections=select), model) for _ in range(2))
    c = attach(session_of(discover(other, x), selections=select), other)
    assert attachments(model) == [a, b] and attachments(other) == [c]
    a.detach()
    assert attachments(model) == [b]
    b.detach(), c.detach()
    with pytest.raises(Exception, match="torch.nn.Module"):
        attachments("model")  # type: ignore[arg-type]


def test_a_capture_selection_at_a_routing_point_observes_the_routers_scores() -> None:
    """discover names a routing point and admission takes a selection there, but the record was
    always MISSING ("not reached"): the routing hook observed nothing."""
    model = nn.Sequential(Router())
    x = torch.randn(1, 5, D)
    discovery = discover(model, x)
    assert discovery.catalog[-1].path == "0#routing"
    session = session_of(discovery, [iv.exclude_experts("ex", "0#routing", [0])],
                         [CaptureSelection("scores", "0#routing", CaptureTransform.full_tensor())], tokens=5)
    with attach(session, model):
        session.begin_step(CapturePhase.PREFILL, 0)
        model(x)
        session.finish_interventions()
        record, = session.take_step().records
    assert record.outcome == CaptureOutcome.CAPTURED
    assert torch.equal(record.payload.tensor, model[0].last_scores)  # before the control


def test_complex_outputs_are_discovered_as_unknown_and_passed_over_or_refused_before_the_forward() -> None:
    class Complex(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.complex(x, x)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c, self.l = Complex(), nn.Linear(D, D)
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            self.c(x)
            return self.l(x)

    model = Model()
    x = torch.randn(1, 3, D)
    dtypes = {p.path: p.dtype for p in discover(model, x).catalog}
    assert dtypes["c"] == ValueDtype.UNKNOWN and dtypes["l"] == ValueDtype.FLOATING
    _, records = run_with_capture(model, x, "*", "summary")  # the glob passes over the complex one
    assert list(records) == ["l"] and records["l"].summary is not None
    for pattern in ("c", "c*"):
        before = model.calls
        with pytest.raises(InvalidArgumentError, match=f"^run_with_capture: {re.escape(repr(pattern))}: 'c' returned complex values"):
            run_with_capture(model, x, pattern, "tensor")
        assert model.calls == before + 1  # the discovery's forward alone: the captured one never ran
        assert hook_count(model.c) == hook_count(model.l) == hook_count(model) == 0


def test_a_tensor_payload_taken_under_inference_mode_is_a_normal_tensor() -> None:
    model = nn.Sequential(nn.Linear(D, D))
    with torch.inference_mode():
        _, records = run_with_capture(model, torch.randn(1, 4, D), "0", "tensor")
    kept = records["0"].tensor
    assert not kept.is_inference()
    nn.Linear(D, 1)(kept).sum().backward()  # a probe trained on it saves it for backward
    kept.mul_(2)


def test_an_empty_sequence_beside_a_given_discovery_is_discovered_as_it_is() -> None:
    model = nn.Sequential(nn.Linear(D, D))
    discovery = discover(model, torch.randn(1, 5, D))
    out, records = run_with_capture(model, torch.randn(1, 0, D), "0", discovery=discovery)
    assert out.shape == (1, 0, D)
    assert records["0"].outcome == CaptureOutcome.CAPTURED and records["0"].summary.count == 0


def test_a_detached_intervening_attachment_frees_the_model_without_the_collector() -> None:
    """An intervening hook refers to itself; keeping the attachment it held after detach() put
    the model and the session in that cycle, freed only by the collector."""
    model = nn.Sequential(nn.Linear(D, D), nn.Linear(D, D))
    discovery = discover(model, torch.randn(1, 4, D))
    session = session_of(discovery, [iv.scale("sc", "1", 2.0)])
    gc.disable()
    try:
        attachment = attach(session, model)
        attachment.detach()
        dead = weakref.ref(model)
        del model, attachment
        assert dead() is None
    finally:
        gc.enable()


def test_a_closed_capture_block_frees_the_model_without_the_collector() -> None:
    """A block's attachment serves its thread alone through a closure that named the
    attachment itself: the attachment, the model and the session stayed in that cycle after the
    block closed, freed only by the collector."""
    model = nn.Sequential(nn.Linear(D, D), nn.Linear(D, D))
    gc.disable()
    try:
        with capture(model, "0") as captured:
            model(torch.randn(1, 3, D))
        assert captured["0"].summary.count == 3 * D
        dead = weakref.ref(model)
        del model, captured
        assert dead() is None
    finally:
        gc.enable()


def test_paths_naming_a_module_cover_its_routing_point() -> None:
    model = nn.Sequential(Router(), nn.Linear(D, D))
    x = torch.randn(1, 5, D)
    discovery = discover(model, x)
    session = session_of(discovery, [iv.exclude_experts("ex", "0#routing", [0, 1])], tokens=5)
    with attach(session, model, paths=["0", "1"]):
        session.begin_step(CapturePhase.PREFILL, 0)
        model(x)
        session.finish_interventions()  # applied: "0" covers "0#routing"
        session.take_step()
    assert not torch.isin(model[0].last_ids, torch.tensor([0, 1])).any()


def test_two_threads_routing_one_module_get_one_routing_hook() -> None:
    """The check and the placing ran apart: two threads attaching at once both found the module
    free (31 of 300 trials), and the second replaced the first's hook."""
    import sys
    import threading

    model = nn.Sequential(Router())
    discovery = discover(model, torch.randn(1, 5, D))
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(100):
            sessions = [session_of(discovery, [iv.exclude_experts(f"ex{k}", "0#routing", [k])], tokens=5)
                        for k in range(2)]
            made: list = []
            refused: list = []
            start = threading.Barrier(2)

            def attach_one(session) -> None:
                start.wait()
                try:
                    made.append(attach(session, model))
                except InvalidArgumentError as error:
                    refused.append(error)

            threads = [threading.Thread(target=attach_one, args=(s,)) for s in sessions]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(made) == 1 and len(refused) == 1
            assert model[0].hook is not None and made[0].attached
            made[0].detach()
    finally:
        sys.setswitchinterval(switch)


def test_the_refusal_names_a_holder_of_per_call_routing_hooks_with_its_points() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.r = Router()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.r(self.r(x))

    model = Twice()
    discovery = discover(model, torch.randn(1, 5, D))
    first = session_of(discovery, [iv.exclude_experts("a", "r#0#routing", [0])], tokens=5)
    second = session_of(discovery, [iv.exclude_experts("b", "r#1#routing", [1])], tokens=5)
    with attach(first, model):
        with pytest.raises(InvalidArgumentError, match=r"TorchAttachment\(Twice, 1 point\(s\) hooked, session \d+\) "
                                                       r"holds it: .*attachments\(\) of the Twice it is attached to"):
            attach(second, model)


class Twice(nn.Module):
    """One linear layer called twice per forward: points "r#0" and "r#1"."""

    def __init__(self) -> None:
        super().__init__()
        self.r = nn.Linear(D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.r(self.r(x))


def test_paths_naming_a_module_cover_its_per_call_points_and_routing_selections() -> None:
    """paths=["r"] hooked a plain "r" beside the session's "r#1", and the two were refused as one
    module named both ways; a capture selection at "0#routing" under paths=["0"] read MISSING."""
    model = Twice()
    x = torch.randn(1, 4, D)
    discovery = discover(model, x)
    session = session_of(discovery, [iv.zero("z", "r#1")], [CaptureSelection("first", "r#0", CaptureTransform.summary())])
    with attach(session, model, paths=["r"]):
        session.begin_step(CapturePhase.PREFILL, 0)
        out = model(x)
        session.finish_interventions()
        record, = session.take_step().records
    assert not out.any() and record.outcome == CaptureOutcome.CAPTURED
    routed = nn.Sequential(Router())
    x = torch.randn(1, 5, D)
    discovery = discover(routed, x)
    session = session_of(discovery, selections=[CaptureSelection("s", "0#routing", CaptureTransform.summary())], tokens=5)
    with attach(session, routed, paths=["0"]):
        session.begin_step(CapturePhase.PREFILL, 0)
        routed(x)
        assert session.take_step().records[0].outcome == CaptureOutcome.CAPTURED


def test_a_routing_hook_setter_that_waits_on_another_attachment_does_not_deadlock() -> None:
    """The lock that makes one routing hook per module was held across the module's own
    set_routing_hook: a setter waiting on a thread whose forward syncs an attachment (which
    takes the lock) waited for ever."""
    import threading

    other = nn.Sequential(nn.Linear(D, D), nn.Linear(D, D))
    x = torch.randn(1, 4, D)
    other_discovery = discover(other, x)
    other_session = session_of(other_discovery)
    finished = []

    class Waiting(Router):
        def set_routing_hook(self, hook) -> None:
            super().set_routing_hook(hook)
            if hook is None:
                return

            def forward() -> None:
                other_session.begin_step(CapturePhase.PREFILL, 0)
                other(x)  # the root pre-hook syncs the plan enabled below: it takes the lock
                other_session.finish_interventions()
                other_session.take_step()
                finished.append(True)

            worker = threading.Thread(target=forward)
            worker.start()
            worker.join(10)

    with attach(other_session, other):
        other_session.enable_interventions(
            InterventionPlan([iv.zero("z", "1")]).admit(other_discovery, other_session), TorchBackend())
        model = nn.Sequential(Waiting())
        routed_x = torch.randn(1, 5, D)
        discovery = discover(model, routed_x)
        session = session_of(discovery, [iv.exclude_experts("ex", "0#routing", [0])], tokens=5)
        with attach(session, model):
            pass
    assert finished == [True]


def test_a_detached_intervening_attachment_lets_its_session_go_without_the_collector() -> None:
    model = nn.Sequential(nn.Linear(D, D), nn.Linear(D, D))
    x = torch.randn(1, 4, D)
    discovery = discover(model, x)
    session = session_of(discovery)
    backend = TorchBackend()  # the session's alone: it goes when the session does
    session.enable_interventions(InterventionPlan([iv.scale("sc", "1", 2.0)]).admit(discovery, session), backend)
    gc.disable()
    try:
        with attach(session, model):
            session.begin_step(CapturePhase.PREFILL, 0)
            model(x)
            session.finish_interventions()
            session.take_step()
        dead = weakref.ref(backend)
        del session, backend
        assert dead() is None  # before: the hook's closure referred to itself and held the session
    finally:
        gc.enable()


def test_a_path_hooked_for_itself_gives_way_to_a_later_plans_calls_of_its_module() -> None:
    """paths=["r"] with nothing of the session at r hooked a plain "r"; a plan enabled later at
    "r#1" then found r named both as one point and per call, inside the forward."""

    class Then(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.r, self.o = nn.Linear(D, D), nn.Linear(D, D)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.o(self.r(self.r(x)))

    model = Then()
    x = torch.randn(1, 4, D)
    discovery = discover(model, x)
    session = session_of(discovery, selections=[CaptureSelection("o", "o", CaptureTransform.summary())])
    with attach(session, model, paths=["r", "o"]):
        session.enable_interventions(InterventionPlan([iv.zero("z", "r#1")]).admit(discovery, session),
                                     TorchBackend())
        session.begin_step(CapturePhase.PREFILL, 0)
        model(x)
        session.finish_interventions()  # applied at the second call of r
        record, = session.take_step().records
    assert record.outcome == CaptureOutcome.CAPTURED and record.payload.summary.max == pytest.approx(
        model.o.bias.max().item())  # o saw zeros: its output is its bias
    assert hook_count(model.r) == 0


def test_two_forwards_syncing_one_attachment_place_its_hooks_once() -> None:
    import threading
    import time

    class SlowToHook(nn.Linear):
        def register_forward_hook(self, *args, **kwargs):
            time.sleep(0.2)  # widens the window between two syncs' checks and their placing
            return super().register_forward_hook(*args, **kwargs)

    model = nn.Sequential(SlowToHook(D, D))
    x = torch.randn(1, 4, D)
    discovery = discover(model, x)
    session = session_of(discovery)
    with attach(session, model) as attachment:
        session.enable_interventions(InterventionPlan([iv.scale("sc", "0", 2.0)]).admit(discovery, session),
                                     TorchBackend())
        threads = [threading.Thread(target=attachment.sync) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(model[0]._forward_hooks) == 1
        session.begin_step(CapturePhase.PREFILL, 0)
        out = model(x)
        session.finish_interventions()
        session.take_step()
    with torch.no_grad():
        assert torch.allclose(out, 2 * model[0](x))


def test_a_detach_racing_an_attach_never_clears_the_new_holders_routing_hook() -> None:
    """detach() let go of its modules before clearing their routing hooks: an attach in between
    routed the module, and the detach then cleared the new holder's hook."""
    import threading
    import time

    class SlowToClear(Router):
        def set_routing_hook(self, hook) -> None:
            if hook is None:
                time.sleep(0.3)
            super().set_routing_hook(hook)

    model = nn.Sequential(SlowToClear())
    x = torch.randn(1, 5, D)
    discovery = discover(model, x)
    first = attach(session_of(discovery, [iv.exclude_experts("a", "0#routing", [1])], tokens=5), model)
    second_session = session_of(discovery, [iv.exclude_experts("b", "0#routing", [0])], tokens=5)
    made: list = []

    def attach_second() -> None:
        time.sleep(0.1)  # while the detach clears the hook
        try:
            made.append(attach(second_session, model))
        except InvalidArgumentError:
            made.append(None)

    worker = threading.Thread(target=attach_second)
    worker.start()
    first.detach()
    worker.join()
    if made[0] is None:  # refused while the first still held the module: attaching after works
        made[0] = attach(second_session, model)
    assert model[0].hook is not None and made[0].attached
    second_session.begin_step(CapturePhase.PREFILL, 0)
    model(x)
    second_session.finish_interventions()
    assert not (model[0].last_ids == 0).any()
    made[0].detach()


def test_an_interrupted_detach_says_so_holds_its_module_and_finishes_on_the_next() -> None:
    class InterruptedOnce(Router):
        interrupt = True

        def set_routing_hook(self, hook) -> None:
            if hook is None and InterruptedOnce.interrupt:
                InterruptedOnce.interrupt = False
                raise KeyboardInterrupt
            super().set_routing_hook(hook)

    model = nn.Sequential(InterruptedOnce(), nn.Linear(D, D))
    x = torch.randn(1, 5, D)
    discovery = discover(model, x)
    first = attach(session_of(discovery, [iv.exclude_experts("a", "0#routing", [0])],
                              [CaptureSelection("s", "1", CaptureTransform.summary())], tokens=5), model)
    with pytest.raises(KeyboardInterrupt):
        first.detach()
    assert "detaching (interrupted: detach() again)" in repr(first)
    with pytest.raises(Exception, match="detached"):
        first.__enter__()
    second = session_of(discovery, [iv.exclude_experts("b", "0#routing", [1])], tokens=5)
    with pytest.raises(InvalidArgumentError, match="takes one routing hook"):  # its hook is still set
        attach(second, model)
    first.detach()
    assert model[0].hook is None and "detached" in repr(first)
    with attach(second, model):
        assert model[0].hook is not None


def test_a_module_that_refuses_to_clear_its_routing_hook_does_not_keep_the_attachment_half_detached() -> None:
    """A routed module whose set_routing_hook(None) raised stopped detach() there: the modules
    after it kept their hooks, the attachment stayed "detaching" holding them all, and as the
    module raised again at every detach() nothing could route them again."""

    class RefusesToClear(Router):
        def set_routing_hook(self, hook) -> None:
            if hook is None:
                raise RuntimeError("this router keeps its hook")
            super().set_routing_hook(hook)

    model = nn.Sequential(Router(), RefusesToClear(), Router())
    x = torch.randn(1, 5, D)
    discovery = discover(model, x)
    targets = [iv.exclude_experts(f"x{i}", f"{i}#routing", [0]) for i in range(3)]
    first = attach(session_of(discovery, targets, tokens=5), model)
    with pytest.raises(RuntimeError, match="keeps its hook") as raised:
        first.detach()
    note = "\n".join(getattr(raised.value, "__notes__", []))
    assert "set_routing_hook(None) of '1' raised" in note and "the attachment is detached" in note, note
    assert model[0].hook is None and model[2].hook is None
    assert "detached" in repr(first) and not first.attached
    first.detach()  # nothing left to do
    second = attach(session_of(discovery, [iv.exclude_experts("y", "2#routing", [1])], tokens=5), model)
    assert model[2].hook is not None
    second.detach()
