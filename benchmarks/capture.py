"""Capture-session overhead: every side interleaved in one run, medians with quartiles.

1. ``observe`` on a skipped point and on a captured point, from Python, against the
   pure-Python reference model doing the same bookkeeping. The captured figure is derived per
   round: a step with an observe, minus the same step without, minus a constant backend's own
   calls (all three timed in the same round).
2. A forward pass of a small transformer (4 blocks, d_model 128, 64 tokens, batch 1, one
   thread) capturing a summary at every block's MLP through ``lifecore.torch.attach``,
   against plain forward hooks computing the same summaries with no accounting, and
   against the unhooked forward (skipped with the reason when torch is not importable).

    python -m lifecore.benchmarks.capture [--quick]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional, Sequence

from lifecore.benchmarks.harness import Run, Side, format_run, interleave
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

__all__ = ["observe", "forward", "main"]

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
    sides = {
        "lifecore skipped observe": Side(lambda: skip_observe(backend, "skipped", tensor), unit="observe"),
        "model skipped observe": Side(lambda: ref_skipping.observe("skipped", {}), unit="observe"),
        "no-op Python method": Side(lambda: noop(backend, "skipped", tensor), unit="call"),
        "lifecore step with observe": Side(lambda: step(True), unit="step"),
        "lifecore step": Side(lambda: step(False), unit="step"),
        "constant backend calls": Side(lambda: (backend.shape(tensor), backend.estimate(tensor, None),
                                               backend.transform(tensor, None)), unit="observe"),
        "model step with observe": Side(lambda: ref_step(True), unit="step"),
        "model step": Side(lambda: ref_step(False), unit="step"),
    }
    run = interleave(sides, rounds=rounds, warmup=warmup, min_batch_s=min_batch_s,
                     title="capture-session observe from Python (step = begin_step + take_step, 2 selections)")
    run.difference("lifecore captured observe", "lifecore step with observe", "lifecore step",
                   "constant backend calls", unit="observe")
    run.difference("model captured observe", "model step with observe", "model step", unit="observe")
    run.ratio("model skipped observe", "lifecore skipped observe")
    run.ratio("lifecore skipped observe", "no-op Python method")
    run.ratio("model captured observe", "lifecore captured observe")
    run.ratio("model step", "lifecore step")
    return run


def forward(*, rounds: int = 9, warmup: int = 1, min_batch_s: float = 0.02) -> Optional[Run]:
    """None (after printing why) when torch is not importable."""
    try:
        import torch
        from torch import nn
    except ImportError:
        return None
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
    session = CaptureSession(plan.admit(discovery, CaptureRequest(1, tokens, 10**9)))
    kept: list[list[float]] = []

    def plain() -> None:
        net(ids)

    def summary_hook(module: nn.Module, args: object, out: torch.Tensor) -> None:
        kept.append(torch.stack([out.min(), out.max(), out.mean(), out.std()]).tolist())

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
        session.take_step()

    attached: list[Any] = []

    def attach_hooks() -> None:
        attached.append(attach(session, net))
        attached[-1].__enter__()

    def detach_hooks() -> None:
        attached.pop().__exit__(None, None, None)

    sides = {
        "unhooked": Side(plain, unit="forward"),
        "plain hooks computing summaries": Side(plain, unit="forward", before=hook, after=unhook),
        "lifecore capture of the summaries": Side(captured, unit="forward", before=attach_hooks, after=detach_hooks),
    }
    with torch.no_grad():
        run = interleave(sides, rounds=rounds, warmup=warmup, min_batch_s=min_batch_s,
                         title=f"forward pass ({blocks} blocks, d_model {d}, {tokens} tokens, one thread, "
                               f"torch {torch.__version__})")
    run.ratio("plain hooks computing summaries", "unhooked")
    run.ratio("lifecore capture of the summaries", "plain hooks computing summaries")
    run.ratio("lifecore capture of the summaries", "unhooked")
    run.difference("lifecore over plain hooks", "lifecore capture of the summaries", "plain hooks computing summaries")
    run.facts["captured points per forward"] = blocks
    return run


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lifecore.benchmarks.capture", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter batches")
    args = parser.parse_args(argv)
    timing: dict[str, Any] = dict(rounds=3, warmup=1, min_batch_s=0.002) if args.quick else {}
    print(format_run(observe(**timing)))
    run = forward(**timing)
    print("forward pass: skipped (torch is not importable)" if run is None else format_run(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
