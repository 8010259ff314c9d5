"""What a review of capture sessions and interventions found: a routing bias past float32's range
(NaN coefficients recorded APPLIED), torch and NumPy bools read as ids and counts, replacements
that could not go back into their container (recorded APPLIED), capture blocks of concurrent
asyncio tasks on one thread taking each other's forward, and a discovery forward that advanced
Python's and NumPy's random states."""

from __future__ import annotations

import asyncio
import random
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from torch import nn  # noqa: E402

from lifecore.capture import (  # noqa: E402
    BackendCapabilities,
    CapturePhase,
    CaptureSchedule,
    CapturePlan,
    CaptureRequest,
    CaptureSession,
    CaptureSlice,
    CaptureTransform,
    InterventionOutcome,
    InterventionPlan,
    interventions as iv,
    unlimited,
)
from lifecore.errors import AdmissionError, CaptureSessionError, InvalidArgumentError, LifecoreTypeError  # noqa: E402
from lifecore.torch import TorchBackend, attach, capture, discover, route  # noqa: E402

pytestmark = pytest.mark.no_sanitizer


class MoE(nn.Module):
    """A router choosing 2 of 4 experts per row through the session's selector when it has one."""

    def __init__(self) -> None:
        super().__init__()
        self.router, self.hook = nn.Linear(8, 4), None
        self.experts = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))

    def routing_policy(self):
        return (4, 2)

    def set_routing_hook(self, hook):
        self.hook = hook

    def forward(self, x):
        rows = x.reshape(-1, 8)
        scores = self.router(rows)
        ids, coefficients = (self.hook.select if self.hook else route)(scores, 2)
        out = torch.zeros_like(rows)
        for k in range(2):
            for e in range(4):
                chosen = ids[:, k] == e
                if chosen.any():
                    out[chosen] += coefficients[chosen, k:k + 1] * self.experts[e](rows[chosen])
        return out.reshape(x.shape)


class WithMoE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.moe = MoE()

    def forward(self, x):
        return self.moe(x)


def session_with(model, x, operations, output_index=0):
    discovery = discover(model, x, output_index=output_index)
    session = CaptureSession(CapturePlan([], unlimited()).admit(discovery, CaptureRequest(1, x.shape[1], 1)))
    session.enable_interventions(InterventionPlan(operations).admit(discovery, session), TorchBackend())
    return session


@pytest.mark.parametrize("bias", [1e39, -1e39, 1e300, float(np.finfo(np.float32).max) * 1.01])
def test_a_routing_bias_past_float32s_range_is_refused_at_admission(bias):
    # Admitted because finite as a double, then an infinite score in route()'s float32, and the
    # coefficients NaN: the whole output NaN while the record read APPLIED.
    model, x = WithMoE(), torch.randn(1, 3, 8)
    with pytest.raises(AdmissionError, match=r"routing biases must be finite in float32"):
        session_with(model, x, [iv.bias_routing_scores("b", "moe#routing", [0], [bias])])


def test_a_routing_bias_whose_sum_with_its_score_overflows_fails_the_routing():
    model, x = WithMoE(), torch.randn(1, 3, 8)
    with torch.no_grad():  # every row's score for expert 0 near float32's largest
        model.moe.router.weight.zero_()
        model.moe.router.bias.copy_(torch.tensor([3.0e38, 0.0, 0.0, 0.0]))
    top = float(np.finfo(np.float32).max)
    session = session_with(model, x, [iv.bias_routing_scores("b", "moe#routing", [0], [top])])
    with attach(session, model), torch.no_grad():
        session.begin_step(CapturePhase.PREFILL, 0)
        with pytest.raises(InvalidArgumentError, match="passes float32's range"):
            model(x)
        step = session.take_step()
    assert step.interventions[0].outcome is InterventionOutcome.FAILED
    # An admissible bias on the same scores routes, finite.
    ids, coefficients = route(torch.tensor([[1.0, 2.0, 3.0, 4.0]]), 2)
    assert torch.isfinite(coefficients).all() and ids.tolist() == [[3, 2]]


@pytest.mark.parametrize("make", [
    lambda ids: iv.mask_logits("ban", "logits", ids),
    lambda ids: iv.exclude_experts("x", "moe#routing", ids),
    lambda ids: iv.zero_expert_contribution("z", "moe#routing", ids),
])
def test_bool_masks_and_bools_are_not_read_as_ids(make):
    # A torch bool tensor's __index__ read each True as id 1 and each False as id 0: the mask
    # [F, F, F, F, F, T] masked tokens 0 and 1 and left token 5.
    for ids in (torch.tensor([False] * 5 + [True]), np.array([False, True]), [torch.tensor(True)], [np.True_], [True]):
        with pytest.raises(LifecoreTypeError, match="must hold ints"):
            make(ids)
    assert list(make(torch.tensor([5])).ids) == [5]  # torch and NumPy integers stay ids
    assert list(make([np.int64(2), torch.tensor(3)]).ids) == [2, 3]


def test_bool_scalars_of_torch_and_numpy_are_not_counts_or_numbers():
    for flag in (torch.tensor(True), np.True_, True):
        with pytest.raises(LifecoreTypeError):
            CaptureSlice("seq", flag, 2)
        with pytest.raises(LifecoreTypeError):
            CaptureTransform.preview(flag)
    for edges in ([np.False_, 2.0], [torch.tensor(False), 2.0], [False, 2.0]):
        with pytest.raises(LifecoreTypeError):
            CaptureTransform.histogram(edges)
    assert CaptureSlice("seq", torch.tensor(1), 2).start == 1  # a torch integer is a count
    assert CaptureTransform.histogram([np.float32(0.0), torch.tensor(2.0)]).edges == [0.0, 2.0]


class MaxGate(nn.Module):
    def forward(self, x):
        return torch.max(x, dim=-1)  # a torch struct sequence: (values, indices)


class ReadsValues(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = MaxGate()

    def forward(self, x):
        return self.gate(x).values


def add_one_at(model, x, target="gate"):
    session = session_with(model, x, [iv.add("a", target, np.ones((1, 3)))])
    with attach(session, model):
        session.begin_step(CapturePhase.PREFILL, 0)
        try:
            out = model(x)
        finally:
            step = session.take_step()
    return out, step


def test_a_replacement_goes_back_into_a_torch_struct_sequence():
    # Rebuilt as a plain tuple, whose .values the next module read: the forward raised while
    # the record read APPLIED.
    model, x = ReadsValues(), torch.randn(1, 3, 4)
    out, step = add_one_at(model, x)
    assert step.interventions[0].outcome is InterventionOutcome.APPLIED
    assert torch.equal(out, torch.max(x, dim=-1).values + 1)


class ReadsGate(nn.Module):
    """A model whose output is the element ``index`` of its submodule ``gate``'s container."""

    def __init__(self, gate: nn.Module, index) -> None:
        super().__init__()
        self.gate, self.index = gate, index

    def forward(self, x):
        return self.gate(x)[self.index]


class Frozen(nn.Module):
    def forward(self, x):
        return types.MappingProxyType({"a": x.sum(-1)})


class Pair(tuple):
    def __new__(cls, first, second):  # takes two arguments, not one iterable of items
        return super().__new__(cls, (first, second))


class PairGate(nn.Module):
    def forward(self, x):
        return Pair(x.sum(-1), x.amax(-1))


class RefusesKeys(dict):
    def __setitem__(self, key, value):
        raise TypeError("this mapping is frozen")


class RefusingGate(nn.Module):
    def forward(self, x):
        return RefusesKeys(a=x.sum(-1))


@pytest.mark.parametrize("gate_type, kind, index", [
    (Frozen, "mappingproxy", "a"), (PairGate, "Pair", 0), (RefusingGate, "RefusesKeys", "a")])
def test_an_output_a_replacement_cannot_go_back_into_fails_the_operation_and_changes_nothing(gate_type, kind, index):
    # The replacement was made (APPLIED recorded), then could not be put back: the forward
    # raised (or a Pair came back a tuple) with the record saying the output had been changed.
    # Now the operation fails as a backend's failure does: FAILED, the output unchanged.
    model, x = ReadsGate(gate_type(), index), torch.randn(1, 3, 4)
    expected = model(x)
    session = session_with(model, x, [iv.add("a", "gate", np.ones((1, 3)))], output_index=index)
    with attach(session, model, output_index=index):
        session.begin_step(CapturePhase.PREFILL, 0)
        out = model(x)
        with pytest.raises(CaptureSessionError, match=f"cannot go back into a {kind}"):
            session.finish_interventions()
        step = session.take_step()
    assert step.interventions[0].outcome is InterventionOutcome.FAILED
    assert torch.equal(out, expected)


def test_an_output_a_replacement_cannot_go_back_into_is_not_checked_where_nothing_applies():
    # The check ran at every forward: an operation scheduled for decode steps failed prefill
    # forwards through a Pair output it never touched.
    model, x = ReadsGate(PairGate(), 0), torch.randn(1, 3, 4)
    op = iv.add("a", "gate", np.ones((1, 3)), schedule=CaptureSchedule(prefill=False, decode=True))
    session = session_with(model, x, [op])
    with attach(session, model):
        session.begin_step(CapturePhase.PREFILL, 0)
        assert torch.equal(model(x), x.sum(-1))
        session.finish_interventions()
        step = session.take_step()
    assert step.interventions[0].outcome is not InterventionOutcome.APPLIED


class Mapped(list):
    def __init__(self, items=()):  # builds its own items from the ones given
        super().__init__(t.clone() for t in items)


class Reversed(list):
    def __init__(self, items=()):  # keeps its items in the other order
        super().__init__(reversed(list(items)))


class ReversedGate(nn.Module):
    def forward(self, x):
        return Reversed([x.amax(-1), x.sum(-1)])  # holds [sum, amax]


class MappedGate(nn.Module):
    def forward(self, x):
        return Mapped([x.sum(-1), x.amax(-1)])


def test_a_list_subclass_whose_constructor_makes_its_own_items_takes_the_replacement():
    # Refused once as not giving back the same objects: a clone of each is the same element.
    model, x = ReadsGate(MappedGate(), 0), torch.randn(1, 3, 4)
    out, step = add_one_at(model, x)
    assert step.interventions[0].outcome is InterventionOutcome.APPLIED
    assert torch.equal(out, x.sum(-1) + 1)


def test_a_container_whose_constructor_reorders_its_items_fails_the_operation():
    # The replacement would land at another position: the model would read amax for sum + 1.
    model, x = ReadsGate(ReversedGate(), 0), torch.randn(1, 3, 4)
    session = session_with(model, x, [iv.add("a", "gate", np.ones((1, 3)))])
    with attach(session, model):
        session.begin_step(CapturePhase.PREFILL, 0)
        out = model(x)
        step = session.take_step()
    assert step.interventions[0].outcome is InterventionOutcome.FAILED
    assert torch.equal(out, x.sum(-1))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = nn.Embedding(50, 8), nn.Linear(8, 50)

    def forward(self, tokens):
        return self.head(self.embed(tokens))


def test_capture_blocks_of_two_asyncio_tasks_on_one_thread_each_capture_their_own_forward():
    # Each block captured the first forward of either task: B's records held A's 5 tokens, and
    # B's own forward was refused as a second one.
    model = TinyLM().eval()

    async def task(tokens, delay):
        with capture(model, "head", "tensor") as records:
            await asyncio.sleep(delay)
            out = model(tokens)
            await asyncio.sleep(0.02)
        return records["head"].tensor, out

    async def both():
        return await asyncio.gather(task(torch.randint(0, 50, (1, 5)), 0.0), task(torch.randint(0, 50, (1, 3)), 0.01))

    (a, out_a), (b, out_b) = asyncio.run(both())
    assert tuple(a.shape) == (1, 5, 50) and tuple(b.shape) == (1, 3, 50)
    assert torch.equal(a, out_a.detach()) and torch.equal(b, out_b.detach())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_a_task_without_a_block_never_reaches_another_tasks_block():
    # A block took the forward of any task in which no block was open: an unrelated request's
    # forward filled the block's records, and the block's own forward was then refused.
    model = TinyLM().eval()

    async def with_block():
        with capture(model, "head", "tensor") as records:
            await asyncio.sleep(0.02)
            out = model(torch.randint(0, 50, (1, 5)))
        return records["head"].tensor, out

    async def without_block():
        await asyncio.sleep(0.01)
        return model(torch.randint(0, 50, (1, 3)))

    async def both():
        return await asyncio.gather(with_block(), without_block())

    (captured, out), other = asyncio.run(both())
    assert torch.equal(captured, out.detach()) and tuple(other.shape) == (1, 3, 50)


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = TinyLM()

    def forward(self, tokens):
        return self.inner(tokens)


def test_blocks_on_a_model_and_on_its_submodule_in_two_tasks_each_capture_their_own_forward():
    outer = Outer().eval()

    async def on_outer():  # its forward first: it runs through the submodule's block too
        with capture(outer, "inner.head", "tensor") as records:
            await asyncio.sleep(0.01)
            outer(torch.randint(0, 50, (1, 5)))
        return records["inner.head"].tensor

    async def on_inner():
        with capture(outer.inner, "head", "tensor") as records:
            await asyncio.sleep(0.03)
            outer.inner(torch.randint(0, 50, (1, 3)))
        return records["head"].tensor

    async def both():
        return await asyncio.gather(on_outer(), on_inner())

    a, b = asyncio.run(both())
    assert tuple(a.shape) == (1, 5, 50) and tuple(b.shape) == (1, 3, 50)


def test_a_forward_a_worker_task_runs_is_passed_by_and_the_block_says_so():
    # A worker task made before the block runs in a context the block is not open in: its
    # forward is not the block's (it could be any request's), and the block's warning names
    # the task instead of blaming torch.compile.
    model = TinyLM().eval()

    async def worker(queue):
        while True:
            tokens, done = await queue.get()
            try:
                done.set_result(model(tokens))
            except Exception as error:  # pragma: no cover - the forward is not refused
                done.set_exception(error)

    async def handler(queue):
        with pytest.warns(UserWarning, match="ran in another asyncio task"):
            with capture(model, "head", "tensor") as records:
                done = asyncio.get_running_loop().create_future()
                await queue.put((torch.randint(0, 50, (1, 4)), done))
                await asyncio.wait_for(done, 10)
        return records

    async def main():
        queue: asyncio.Queue = asyncio.Queue()
        serving = asyncio.create_task(worker(queue))
        try:
            return await handler(queue)
        finally:
            serving.cancel()

    assert list(asyncio.run(main())) == []
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_nested_blocks_and_a_task_made_inside_a_block_still_capture_the_forward():
    model = TinyLM().eval()
    with capture(model, "head", "tensor") as outer, capture(model, "embed", "tensor") as inner:
        model(torch.randint(0, 50, (1, 2)))
    assert list(outer) == ["head"] and list(inner) == ["embed"]

    async def main():
        with capture(model, "head", "tensor") as records:
            async def child():
                await asyncio.sleep(0)
                return model(torch.randint(0, 50, (1, 3)))
            await asyncio.create_task(child())
        return records

    assert tuple(asyncio.run(main())["head"].tensor.shape) == (1, 3, 50)


@pytest.mark.parametrize("draw", ["torch", "numpy", "python"])
def test_the_captured_forward_draws_what_a_forward_without_the_block_would(draw):
    # Only torch's random state was put back after the discovery forward.
    class Noisy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            noise = {"torch": lambda: torch.rand(1).item(), "numpy": lambda: float(np.random.rand()),
                     "python": random.random}[draw]()
            return self.lin(x) + noise

    model, x = Noisy(), torch.randn(1, 3, 4)

    def seeded() -> None:
        torch.manual_seed(5)
        np.random.seed(5)
        random.seed(5)

    seeded()
    expected = model(x)
    after = (torch.rand(1).item(), float(np.random.rand()), random.random())
    seeded()
    with capture(model, "lin", "summary"):
        out = model(x)
    assert torch.equal(out, expected)
    assert (torch.rand(1).item(), float(np.random.rand()), random.random()) == after  # each drawn from once


@pytest.mark.parametrize("make, problem", [
    (lambda: CaptureTransform.preview(0), "a preview needs max_elements > 0"),
    (lambda: CaptureTransform.top_candidates(0), "top candidates need k > 0"),
    (lambda: CaptureTransform.histogram([1.0, 0.0]), "strictly increasing"),
    (lambda: CaptureTransform.histogram([0.0, float("nan")]), "must be finite"),
    (lambda: CaptureTransform.histogram([0.0]), "at least two edges"),
    (lambda: CaptureTransform.histogram([float(i) for i in range(4098)]),
     "4,097 bins has too many: the discovery's capabilities allow 4,096"),
])
def test_a_transform_admission_would_refuse_is_refused_before_any_forward(make, problem):
    transform = make()
    # Accepted by capture(), then refused at the forward with AdmissionError, after the
    # discovery forward had run the model.
    model, x = TinyLM(), torch.randint(0, 50, (1, 4))
    forwards: list[int] = []
    model.register_forward_hook(lambda *_: forwards.append(1))
    with pytest.raises(AdmissionError, match=problem):  # as admission at the forward raised it
        with capture(model, "head", transform):
            model(x)
    assert forwards == []  # refused before the block opened: no forward ran, the discovery's neither


def test_a_histogram_is_held_to_the_given_discoverys_bins():
    """The bins a histogram may have are the discovery's: a given discovery's capabilities
    decide before any forward, as admission would at it."""
    model, x = TinyLM(), torch.randint(0, 50, (1, 4))
    wide = CaptureTransform.histogram([float(i) for i in range(4098)])  # 4,097 bins
    roomy = discover(model, x, capabilities=BackendCapabilities(max_histogram_bins=5000))
    with capture(model, "head", wide, discovery=roomy) as records:
        model(x)
    assert records["head"].histogram is not None
    narrow = discover(model, x, capabilities=BackendCapabilities(max_histogram_bins=2))
    with pytest.raises(AdmissionError, match="3 bins has too many: the discovery's capabilities allow 2"):
        capture(model, "head", CaptureTransform.histogram([0.0, 1.0, 2.0, 3.0]), discovery=narrow)
    # The named transform too: "histogram" is the default edges' 40 bins.
    with pytest.raises(AdmissionError, match="40 bins has too many: .* allow 2 .*'histogram' transform"):
        capture(model, "head", "histogram", discovery=narrow)


def test_a_numpy_integer_is_a_budget():
    model, x = TinyLM(), torch.randint(0, 50, (1, 4))
    with capture(model, "head", "tensor", budget_bytes=np.prod((1, 4, 50)) * 4) as records:
        model(x)
    assert tuple(records["head"].tensor.shape) == (1, 4, 50)
    for flag in (np.True_, torch.tensor(True), True):
        with pytest.raises(LifecoreTypeError, match="budget_bytes"):
            capture(model, "head", "tensor", budget_bytes=flag)
