"""Capture-session overhead: every side interleaved in one run, medians with quartiles.

1. ``observe`` on a skipped point and on a captured point, from Python, against the
   pure-Python reference model doing the same bookkeeping. The captured figure is derived per
   round: a step with an observe, minus the same step without, minus a constant backend's own
   calls (timed in a function, less an empty function's call; all in the same round).
2. One captured summary point (through the session's observer and through
   ``CaptureSession.observe``) against the bare summary it computes, isolated: the same
   tensors back to back outside any forward.
3. A forward pass of a small transformer (4 and 32 blocks, d_model 128, 64 tokens, batch 1,
   one thread) capturing a summary at 1 and at 16 modules per block through
   ``lifecore.torch.attach``, every point CAPTURED under finite limits, against plain forward
   hooks computing the same summaries (copied to the host) with no accounting, and against
   the unhooked forward; and per captured point inside that forward, each side's time over
   the unhooked forward. 2 and 3 are skipped with the reason when torch is not importable.

    python -m lifecore.benchmarks.capture [--quick]
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from typing import Any, Optional, Sequence

from lifecore.benchmarks.harness import Run, Side, format_run, interleave
from lifecore.capture import (
    Axis,
    CaptureDiscovery,
    CaptureLimits,
    CaptureOutcome,
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

__all__ = ["observe", "forward", "main"]

class ConstantBackend:
    """A backend whose work is nothing: fixed shape, estimate and payload."""

    def __init__(self) -> None:
        self._shape = (1, 1, 8)  # a decode step
        self._cost = CaptureUsage(1, 48, 128, 300)
        self._payload = CapturePayload.summary(8, 0, 0.0, 1.0, 0.5, 0.1)  # the 8 values of one decode row

    def shape(self, tensor: object) -> tuple[int, ...]:
        return self._shape

    def dtype(self, tensor: object) -> str:
        return "floating"

    def estimate(self, tensor: object, request: object) -> CaptureUsage:
        return self._cost

    def transform(self, tensor: object, request: object) -> CapturePayload:
        return self._payload


def observe(*, rounds: int = 9, warmup: int = 1, min_batch_s: float = 0.005) -> Run:
    hidden = [Axis("batch", "batch"), Axis("seq", "sequence"), Axis("d", 8)]
    discovery = CaptureDiscovery("bench", [ObservationPoint("skipped", hidden), ObservationPoint("captured", hidden)])
    selections = [CaptureSelection("skip", "skipped", CaptureTransform.summary(), schedule=CaptureSchedule(prefill=False)),
                  CaptureSelection("cap", "captured", CaptureTransform.summary())]
    steps = 10**7  # the model preflights every step, so no larger than the run needs
    backend, tensor = ConstantBackend(), object()
    big = model.Usage(*(2**62,) * 4)

    def session() -> CaptureSession:
        return CaptureSession(CapturePlan(selections, unlimited()).admit(discovery, CaptureRequest(1, 4, steps)))

    def reference() -> model.CaptureSessionModel:
        def env(s: str, p: str) -> Any:
            return model.envelope(s, p, p, 3)
        return model.CaptureSessionModel(
            [model.Selection("skip", "skipped", model.Schedule(prefill=False), env("skip", "skipped")),
             model.Selection("cap", "captured", model.Schedule(), env("cap", "captured"))], big, big, "fail", steps)

    cost = model.Usage(1, 48, 128, 300)
    # The skipped-point sides stay inside one prefill step; the step sides have their own sessions.
    skipping, ref_skipping = session(), reference()
    skipping.begin_step(CapturePhase.PREFILL, 0)
    ref_skipping.begin_step("prefill", 0)
    skip_observe = skipping.observe

    class NoOp:
        def observe(self, backend: object, path: str, tensor: object) -> None:
            pass

    noop = NoOp().observe
    stepping, ref_stepping = session(), reference()
    prediction = [0, 0]

    def step(observe_it: bool) -> None:
        prediction[0] += 1
        stepping.begin_step(CapturePhase.DECODE, prediction[0])
        if observe_it:
            stepping.observe(backend, "captured", tensor)
        stepping.take_step()

    def ref_step(observe_it: bool) -> None:
        prediction[1] += 1
        ref_stepping.begin_step("decode", prediction[1])
        if observe_it:
            ref_stepping.observe("captured", {"cap": cost})
        ref_stepping.take_step()

    stepping.begin_step(CapturePhase.PREFILL, 0)
    stepping.take_step()
    ref_stepping.begin_step("prefill", 0)
    ref_stepping.take_step()
    def backend_calls() -> None:  # what the session calls on a captured point, once each
        backend.shape(tensor)
        backend.estimate(tensor, None)
        backend.transform(tensor, None)

    def empty() -> None:  # the frame backend_calls adds around those calls
        pass

    # partial, not lambda: the call reaches the method with no Python frame of the benchmark's.
    sides = {
        "lifecore skipped observe": Side(partial(skip_observe, backend, "skipped", tensor), unit="observe"),
        "model skipped observe": Side(partial(ref_skipping.observe, "skipped", {}), unit="observe"),
        "no-op Python method": Side(partial(noop, backend, "skipped", tensor), unit="call"),
        "lifecore step with observe": Side(partial(step, True), unit="step"),
        "lifecore step": Side(partial(step, False), unit="step"),
        "constant backend calls (in a function)": Side(backend_calls, unit="observe"),
        "empty Python function": Side(empty, unit="call"),
        "model step with observe": Side(partial(ref_step, True), unit="step"),
        "model step": Side(partial(ref_step, False), unit="step"),
    }
    run = interleave(sides, rounds=rounds, warmup=warmup, min_batch_s=min_batch_s,
                     title="capture-session observe from Python (step = begin_step + take_step, 2 selections)")
    run.difference("constant backend calls", "constant backend calls (in a function)", "empty Python function",
                   unit="observe")
    run.difference("lifecore captured observe", "lifecore step with observe", "lifecore step",
                   "constant backend calls", unit="observe")
    run.difference("model captured observe", "model step with observe", "model step", unit="observe")
    run.ratio("model skipped observe", "lifecore skipped observe")
    run.ratio("lifecore skipped observe", "no-op Python method")
    run.ratio("model captured observe", "lifecore captured observe")
    run.ratio("model step", "lifecore step")
    return run


BLOCK_POINTS = ("hook_resid_pre", "ln1", "attn", "attn.q", "attn.k", "attn.v", "attn.o", "hook_attn_out",
                "hook_resid_mid", "ln2", "mlp", "mlp.0", "mlp.1", "mlp.2", "hook_mlp_out", "hook_resid_post")


def _transformer(blocks: int, d: int = 128, heads: int = 4, vocab: int = 512) -> Any:
    """The benchmark's transformer: pre-norm blocks (attention with q/k/v/o projections, a 4x
    GELU MLP) whose 16 modules per block (BLOCK_POINTS) are all observation points."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = (m(x).view(b, t, heads, d // heads).transpose(1, 2) for m in (self.q, self.k, self.v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out: torch.Tensor = self.o(y.transpose(1, 2).reshape(b, t, d))
            return out

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hook_resid_pre, self.hook_attn_out, self.hook_resid_mid = nn.Identity(), nn.Identity(), nn.Identity()
            self.hook_mlp_out, self.hook_resid_post = nn.Identity(), nn.Identity()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = Attention()
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.hook_resid_pre(x)
            x = self.hook_resid_mid(x + self.hook_attn_out(self.attn(self.ln1(x))))
            out: torch.Tensor = self.hook_resid_post(x + self.hook_mlp_out(self.mlp(self.ln2(x))))
            return out

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
            logits: torch.Tensor = self.head(x)
            return logits

    return Model().eval()


def _summary_plan(net: Any, ids: Any, paths: Sequence[str]) -> tuple[CaptureSession, int]:
    """A session capturing a summary at every path, each CAPTURED under finite limits that fit
    them all (per step: exactly one capture per path)."""
    import torch

    shapes: dict[str, tuple[int, ...]] = {}
    handles = [net.get_submodule(p).register_forward_hook(
        lambda m, a, out, p=p: shapes.__setitem__(p, tuple(out.shape))) for p in paths]
    with torch.no_grad():
        net(ids)
    for h in handles:
        h.remove()
    from lifecore.torch import artifact_identity

    # Every step here runs the whole forward, so every extent is known.
    discovery = CaptureDiscovery(artifact_identity(net), [
        ObservationPoint(p, [Axis(f"a{i}", n) for i, n in enumerate(shapes[p])], itemsize=4) for p in paths])
    room = 2**40  # finite; far above what one step keeps
    per_step = CaptureUsage(len(paths), room, room, room)
    plan = CapturePlan([CaptureSelection(p, p, CaptureTransform.summary()) for p in paths],
                       CaptureLimits(per_step, CaptureUsage(2**62, 2**62, 2**62, 2**62)))
    return CaptureSession(plan.admit(discovery, CaptureRequest(1, int(ids.shape[1]), 10**9))), len(paths)


def forward(*, blocks: int = 4, points_per_block: int = 1, rounds: int = 9, warmup: int = 1,
            min_batch_s: float = 0.02) -> Optional[Run]:
    """A forward pass of the benchmark transformer (d_model 128, 64 tokens, batch 1, one
    thread) capturing a summary at ``points_per_block`` modules of every block through
    ``lifecore.torch.attach`` (1: the MLP; 16: every module of BLOCK_POINTS), against plain
    forward hooks computing the same summaries (min, max, mean, population std, copied to the
    host as a list), and against the unhooked forward. None (after printing why) when torch
    is not importable."""
    try:
        import torch
    except ImportError:
        return None
    from lifecore.torch import attach

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tokens, vocab = 64, 512
    net = _transformer(blocks)
    ids = torch.randint(0, vocab, (1, tokens))
    names = ("mlp",) if points_per_block == 1 else BLOCK_POINTS[:points_per_block]
    paths = [f"blocks.{i}.{n}" for i in range(blocks) for n in names]
    session, points = _summary_plan(net, ids, paths)
    kept: list[list[float]] = []
    outcomes: dict[str, int] = {}

    def plain() -> None:
        net(ids)

    def summary_hook(module: Any, args: object, out: torch.Tensor) -> None:
        kept.append(torch.stack([out.min(), out.max(), out.mean(), out.std(unbiased=False)]).tolist())

    handles: list[Any] = []

    def hook() -> None:
        handles.extend(net.get_submodule(p).register_forward_hook(summary_hook) for p in paths)

    def unhook() -> None:
        for h in handles:
            h.remove()
        handles.clear()
        kept.clear()

    prediction = [0]

    def captured() -> None:
        session.begin_step(CapturePhase.PREFILL if prediction[0] == 0 else CapturePhase.DECODE, prediction[0])
        prediction[0] += 1
        net(ids)
        step = session.take_step()
        if step is None:
            raise RuntimeError("the benchmark's step delivered nothing")
        if not outcomes:  # checked once: every point was captured, its summary on the host
            for record in step.records:
                outcomes[record.outcome.name] = outcomes.get(record.outcome.name, 0) + 1

    attached: list[Any] = []

    def attach_hooks() -> None:
        attached.append(attach(session, net))

    def detach_hooks() -> None:
        attached.pop().detach()

    sides = {
        "unhooked": Side(plain, unit="forward"),
        "plain hooks computing summaries": Side(plain, unit="forward", before=hook, after=unhook),
        "lifecore capture of the summaries": Side(captured, unit="forward", before=attach_hooks, after=detach_hooks),
    }
    with torch.no_grad():
        run = interleave(sides, rounds=rounds, warmup=warmup, min_batch_s=min_batch_s,
                         title=f"forward pass ({blocks} blocks, {points_per_block} point(s) per block, d_model 128, "
                               f"{tokens} tokens, one thread, torch {torch.__version__})")
    run.ratio("lifecore capture of the summaries", "plain hooks computing summaries")
    run.ratio("plain hooks computing summaries", "unhooked")
    run.ratio("lifecore capture of the summaries", "unhooked")
    run.difference("lifecore over plain hooks", "lifecore capture of the summaries", "plain hooks computing summaries")
    # Per captured point inside the forward, where users run it (cold caches between torch ops
    # cost more than the isolated per-point run shows): each side's cost over the unhooked
    # forward, per point, and their ratio.
    run.difference("lifecore per point in the forward", "lifecore capture of the summaries", "unhooked",
                   unit="point", per=points)
    run.difference("plain hooks per point in the forward", "plain hooks computing summaries", "unhooked",
                   unit="point", per=points)
    run.ratio("lifecore per point in the forward", "plain hooks per point in the forward")
    run.facts["captured points per forward"] = points
    run.facts["record outcomes in a step"] = ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items()))
    return run


def per_point(*, points: int = 16, rounds: int = 9, warmup: int = 1, min_batch_s: float = 0.02) -> Optional[Run]:
    """One captured point against the bare transform it runs: a summary of a [1, 64, 128]
    float32 tensor (min, max, mean, population std, copied to the host). A lifecore unit is
    one step (begin_step, ``points`` observes, take_step) divided by ``points``, so the step's
    own bookkeeping is included; through the session's observer (what ``attach`` hooks) and
    through ``CaptureSession.observe``. None when torch is not importable."""
    try:
        import torch
    except ImportError:
        return None
    from lifecore.torch import TorchBackend

    torch.set_num_threads(1)
    torch.manual_seed(0)
    paths = [f"p{i}" for i in range(points)]
    discovery = CaptureDiscovery("per-point", [
        ObservationPoint(p, [Axis("batch", 1), Axis("seq", 64), Axis("d", 128)], itemsize=4) for p in paths])
    room = 2**40
    plan = CapturePlan([CaptureSelection(p, p, CaptureTransform.summary()) for p in paths],
                       CaptureLimits(CaptureUsage(points, room, room, room), CaptureUsage(2**62, 2**62, 2**62, 2**62)))
    backend = TorchBackend()
    xs = [torch.randn(1, 64, 128) for _ in paths]
    sessions = [CaptureSession(plan.admit(discovery, CaptureRequest(1, 64, 10**9))) for _ in range(2)]
    observers = [sessions[0].observer(p, backend) for p in paths]
    predictions = [0, 0]
    sink: list[Any] = []

    def step(which: int, body: Any) -> None:
        session = sessions[which]
        session.begin_step(CapturePhase.PREFILL if predictions[which] == 0 else CapturePhase.DECODE, predictions[which])
        predictions[which] += 1
        body()
        step = session.take_step()
        if step is None or step.records[-1].outcome != CaptureOutcome.CAPTURED:
            raise RuntimeError(f"a benchmark point was not captured: {step.records[-1].message if step else 'no step'}")

    def through_observer() -> None:
        for observer, x in zip(observers, xs):
            observer.observe(x)

    def through_observe() -> None:
        observe = sessions[1].observe
        for p, x in zip(paths, xs):
            observe(backend, p, x)

    def bare() -> None:
        for x in xs:
            sink.append(torch.stack([x.min(), x.max(), x.mean(), x.std(unbiased=False)]).tolist())
        sink.clear()

    sides = {
        "bare summary": Side(bare, per=points, unit="point"),
        "captured point (observer)": Side(lambda: step(0, through_observer), per=points, unit="point"),
        "captured point (session.observe)": Side(lambda: step(1, through_observe), per=points, unit="point"),
    }
    with torch.no_grad():
        run = interleave(sides, rounds=rounds, warmup=warmup, min_batch_s=min_batch_s,
                         title=f"one captured summary point, isolated: the same {points} tensors back to back, "
                               f"outside any forward ([1, 64, 128] float32, one thread; the forward runs above "
                               f"give the per-point cost where users run it)")
    run.ratio("captured point (observer)", "bare summary")
    run.ratio("captured point (session.observe)", "bare summary")
    run.difference("observer over bare", "captured point (observer)", "bare summary", unit="point")
    return run


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lifecore.benchmarks.capture", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter batches")
    args = parser.parse_args(argv)
    timing: dict[str, Any] = dict(rounds=3, warmup=1, min_batch_s=0.002) if args.quick else {}
    print(format_run(observe(**timing)))
    point = per_point(**timing)
    if point is None:
        print("forward pass and per point: skipped (torch is not importable)")
        return 0
    print(format_run(point))
    for blocks in (4, 32):
        for points_per_block in (1, 16):
            run = forward(blocks=blocks, points_per_block=points_per_block, **timing)
            assert run is not None
            print(format_run(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
