"""Capture-session overhead, measured side by side in one run (prints ratios).

1. ``observe`` on a skipped point and on a captured point, from Python, against the
   pure-Python reference model doing the same bookkeeping. The captured figure excludes the
   backend's own work (a constant backend's calls are timed alone and subtracted).
2. A forward pass of a small transformer (4 blocks, d_model 128, 64 tokens, batch 1, one
   thread) capturing a summary at every block's MLP through ``lifecore.torch.attach``,
   against plain forward hooks computing the same summaries with no accounting, and
   against the unhooked forward.

Usage: python benchmarks/bench_capture.py [--quick]
"""

from __future__ import annotations

import sys
import time
from typing import Callable

from lifecore.capture import (
    Axis,
    CaptureDiscovery,
    CapturePayload,
    CapturePhase,
    CapturePlan,
    CaptureRequest,
    CaptureSchedule,
    CaptureSelection,
    CaptureSession,
    CaptureTransform,
    CaptureUsage,
    ObservationPoint,
    unlimited,
)
from lifecore.models import capture_session as model

QUICK = "--quick" in sys.argv


def per_call(fn: Callable[[], None], calls: int, repeats: int = 7) -> float:
    """Best (minimum) seconds per call over ``repeats`` timed loops of ``calls`` calls: the
    least disturbed loop on a shared machine, as timeit recommends."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return min(samples)


class ConstantBackend:
    """A backend whose work is nothing: fixed shape, estimate and payload."""

    def __init__(self) -> None:
        self._shape = (1, 1, 8)  # a decode step
        self._cost = CaptureUsage(1, 48, 128, 300)
        self._payload = CapturePayload.summary(32, 0, 0.0, 1.0, 0.5, 0.1)

    def shape(self, tensor: object) -> tuple[int, ...]:
        return self._shape

    def dtype(self, tensor: object) -> str:
        return "floating"

    def estimate(self, tensor: object, request: object) -> CaptureUsage:
        return self._cost

    def transform(self, tensor: object, request: object) -> CapturePayload:
        return self._payload


def bench_observe() -> None:
    hidden = [Axis("batch", "batch"), Axis("seq", "sequence"), Axis("d", 8)]
    discovery = CaptureDiscovery("bench", [ObservationPoint("skipped", hidden), ObservationPoint("captured", hidden)])
    selections = [CaptureSelection("skip", "skipped", CaptureTransform.summary(), schedule=CaptureSchedule(prefill=False)),
                  CaptureSelection("cap", "captured", CaptureTransform.summary())]
    steps = 10**7
    session = CaptureSession(CapturePlan(selections, unlimited()).admit(discovery, CaptureRequest(1, 4, steps)))
    backend, tensor = ConstantBackend(), object()
    big = model.Usage(*(2**62,) * 4)
    env = lambda s, p: model.envelope(s, p, p, 3)  # noqa: E731
    ref = model.CaptureSessionModel([model.Selection("skip", "skipped", model.Schedule(prefill=False), env("skip", "skipped")),
                                     model.Selection("cap", "captured", model.Schedule(), env("cap", "captured"))],
                                    big, big, "fail", steps)
    cost = model.Usage(1, 48, 128, 300)
    n = 20_000 if QUICK else 200_000

    session.begin_step(CapturePhase.PREFILL, 0)
    ref.begin_step("prefill", 0)
    observe = session.observe
    skipped = per_call(lambda: observe(backend, "skipped", tensor), n)
    skipped_ref = per_call(lambda: ref.observe("skipped", {}), n)

    class NoOp:
        def observe(self, backend: object, path: str, tensor: object) -> None:
            pass

    noop = NoOp().observe
    python_call = per_call(lambda: noop(backend, "skipped", tensor), n)
    session.take_step()
    ref.take_step()

    prediction = [0]

    def step(observe_it: bool) -> None:
        prediction[0] += 1
        session.begin_step(CapturePhase.DECODE, prediction[0])
        if observe_it:
            session.observe(backend, "captured", tensor)
        session.take_step()

    def ref_step(observe_it: bool) -> None:
        prediction[0] += 1
        ref.begin_step("decode", prediction[0])
        if observe_it:
            ref.observe("captured", {"cap": cost})
        ref.take_step()

    m = n // 10
    with_observe = per_call(lambda: step(True), m)
    without = per_call(lambda: step(False), m)
    backend_work = per_call(lambda: (backend.shape(tensor), backend.estimate(tensor, None),
                                     backend.transform(tensor, None)), m)
    captured = with_observe - without - backend_work
    ref_with = per_call(lambda: ref_step(True), m)
    ref_without = per_call(lambda: ref_step(False), m)
    captured_ref = ref_with - ref_without

    print("observe (from Python)")
    print(f"  skipped point:  {skipped * 1e9:8.0f} ns   (target < 300 ns)   reference model {skipped_ref * 1e9:8.0f} ns"
          f"   ratio model/lifecore {skipped_ref / skipped:5.1f}x")
    print(f"    (a no-op Python method with the same arguments: {python_call * 1e9:.0f} ns; "
          f"lifecore skipped observe = {skipped / python_call:.2f}x that)")
    print(f"  captured point: {captured * 1e9:8.0f} ns   (target < 3000 ns)  reference model {captured_ref * 1e9:8.0f} ns"
          f"   ratio model/lifecore {captured_ref / captured:5.1f}x")
    print(f"    (observe incl. a constant backend {(with_observe - without) * 1e9:.0f} ns; "
          f"that backend's own calls {backend_work * 1e9:.0f} ns, excluded)")
    print(f"  step (begin_step + take_step, 2 selections): {without * 1e9:.0f} ns;"
          f" reference model {ref_without * 1e9:.0f} ns")


def bench_forward() -> None:
    try:
        import torch
        from torch import nn
    except ImportError:
        print("forward pass: skipped (torch is not installed)")
        return
    from lifecore.torch import artifact_identity, attach

    torch.set_num_threads(1)
    torch.manual_seed(0)
    d, heads, blocks, tokens, vocab = 128, 4, 4, 64, 512

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.ln1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(Block() for _ in range(blocks))
            self.head = nn.Linear(d, vocab)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    net = Model().eval()
    ids = torch.randint(0, vocab, (1, tokens))
    paths = [f"blocks.{i}.mlp" for i in range(blocks)]
    # Every step here runs the whole 64-token forward, so the sequence axis is known (64).
    discovery = CaptureDiscovery(artifact_identity(net), [
        ObservationPoint(p, [Axis("batch", "batch"), Axis("seq", tokens), Axis("d", d)]) for p in paths])
    plan = CapturePlan([CaptureSelection(p, p, CaptureTransform.summary()) for p in paths], unlimited())
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, tokens, 10**6)))
    calls = 30 if QUICK else 200
    kept: list[list[float]] = []

    def plain() -> None:
        net(ids)

    def summary_hook(module: nn.Module, args: object, out: torch.Tensor) -> None:
        kept.append(torch.stack([out.min(), out.max(), out.mean(), out.std()]).tolist())

    prediction = [0]

    def captured() -> None:
        session.begin_step(CapturePhase.PREFILL if prediction[0] == 0 else CapturePhase.DECODE, prediction[0])
        prediction[0] += 1
        net(ids)
        session.take_step()

    with torch.no_grad():
        for _ in range(5):
            plain()
        # Interleave the variants so drift on a shared machine hits all of them alike.
        unhooked_s, hooked_s, lifecore_s = [], [], []
        for _ in range(5):
            unhooked_s.append(per_call(plain, calls, 1))
            handles = [net.get_submodule(p).register_forward_hook(summary_hook) for p in paths]
            hooked_s.append(per_call(plain, calls, 1))
            for h in handles:
                h.remove()
            kept.clear()
            with attach(session, net):
                lifecore_s.append(per_call(captured, calls, 1))
        unhooked, hooked, lifecore_time = min(unhooked_s), min(hooked_s), min(lifecore_s)
    print(f"forward pass (4 blocks, d_model {d}, {tokens} tokens, one thread)")
    print(f"  unhooked                          {unhooked * 1e3:7.3f} ms")
    print(f"  plain hooks computing summaries   {hooked * 1e3:7.3f} ms   ({hooked / unhooked:.2f}x unhooked)")
    print(f"  lifecore capture of the summaries {lifecore_time * 1e3:7.3f} ms   "
          f"({lifecore_time / hooked:.2f}x plain hooks, target <= 1.3x; {lifecore_time / unhooked:.2f}x unhooked)")
    per_hook = (lifecore_time - hooked) / blocks
    print(f"  lifecore overhead per captured point inside the forward: {per_hook * 1e6:.1f} us")


if __name__ == "__main__":
    bench_observe()
    bench_forward()
