"""The engine's scheduler on lifecore against the same scheduler on a plain free list.

Both sides run the same :class:`lifecore.engine.scheduler.Scheduler` code over the same
requests; only the memory differs: :class:`lifecore.engine.scheduler.LifecoreMemory`
(coordinator, sessions, frames, ``preempt_for``, waiters) against :class:`FreeListMemory`
(a Python list of block ids, a slot count, no lifecycle checks) that makes the same decisions.
The sides are interleaved in one run at 8, 64 and 256 concurrent sequences, once with the tiny
model and once with a stub model that does no arithmetic (so the bookkeeping is not hidden
behind the forward pass); each asserts both sides made the same iterations, deferrals,
preemptions and tokens. A figure is the time per scheduler iteration.

    python -m lifecore.benchmarks.engine [--quick]
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Any, Optional, Sequence, cast

import numpy as np

from lifecore.benchmarks.harness import Run, Side, format_run, interleave

__all__ = ["FreeListMemory", "StubModel", "compare", "main"]

BLOCK = 16


class FreeListMemory:
    """The scheduler's memory as a plain free list: the same rules as the coordinator
    (admission needs a slot and the prompt's blocks, a request larger than the pool is
    rejected, a deferred head is retried after any release), no checks."""

    def __init__(self, num_blocks: int, slots: int):
        self.num_blocks, self.slots = num_blocks, slots
        self.free = list(range(num_blocks - 1, -1, -1))
        self.active = 0
        self.releases = 0
        self.deferred_at: Optional[int] = None

    def admit(self, request_id: str, prompt_tokens: int, fit_tokens: int) -> tuple[str, Any]:
        if -(-fit_tokens // BLOCK) > self.num_blocks:
            return "rejected", "larger than the pool"
        need = -(-prompt_tokens // BLOCK)
        if self.active >= self.slots or need > len(self.free):
            self.deferred_at = self.releases
            return "deferred", None
        self.deferred_at = None
        self.active += 1
        free = self.free
        ids = free[len(free) - need:][::-1]
        del free[len(free) - need:]
        return "admitted", [ids, fit_tokens]

    def admission_may_fit(self) -> bool:
        return self.deferred_at is None or self.releases != self.deferred_at

    def extend(self, handle: list[Any], tokens: int) -> bool:
        ids = handle[0]
        if tokens <= len(ids) * BLOCK:
            return True
        if not self.free:
            return False
        ids.append(self.free.pop())
        return True

    def extend_all(self, handles: Sequence[list[Any]], tokens: Sequence[int]) -> list[int]:
        deferred = []
        free = self.free
        for row, (handle, wanted) in enumerate(zip(handles, tokens)):
            ids = handle[0]
            if wanted <= len(ids) * BLOCK:
                continue
            if free:
                ids.append(free.pop())
            else:
                deferred.append(row)
        return deferred

    def preempt(self, handle: list[Any], candidates: Sequence[list[Any]]) -> tuple[list[Any], bool]:
        victims = []
        for victim in candidates:
            if self.free:
                break
            self.release(victim, False)
            victims.append(victim)
        return victims, bool(self.free)

    def release(self, handle: list[Any], completed: bool) -> None:
        ids, handle[0] = handle[0], None  # marked first: a release repeated (abandon's rerun) gives nothing back twice
        if ids is None:
            return
        ids.reverse()
        self.free.extend(ids)
        self.active -= 1
        self.releases += 1

    def block_table(self, handles: Sequence[list[Any]], width: int, out: np.ndarray) -> np.ndarray:
        rows = out[: len(handles), :width]
        rows.fill(0)
        for row, handle in zip(rows, handles):
            ids = handle[0]
            row[: len(ids)] = ids
        return out

    def finish_step(self) -> None:
        pass

    def abandon(self, handles: Sequence[list[Any]]) -> None:
        for handle in handles:  # safe to repeat: release marks a handle it gave back
            self.release(handle, False)
        self.deferred_at = None


class StubModel:
    """No arithmetic: the next token is the last one plus one."""

    def table_width(self, blocks: int) -> int:
        return blocks

    def prefill(self, requests: Sequence[Any], table: np.ndarray) -> list[int]:
        return [(r.tokens[-1] + 1) % 97 for r in requests]

    def decode(self, running: Sequence[Any], table: np.ndarray) -> list[int]:
        return [(r.request.tokens[-1] + 1) % 97 for r in running]


def workload(concurrency: int, seed: int = 0) -> tuple[list[tuple[str, list[int], int]], int]:
    """Twice ``concurrency`` requests and a pool for about 60% of them at their longest."""
    rng = random.Random(seed)
    requests = [(f"r{i}", [rng.randrange(97) for _ in range(rng.randint(4, 40))], rng.randint(4, 40))
                for i in range(2 * concurrency)]
    blocks = sum(-(-(len(p) + n) // BLOCK) for _, p, n in requests[:concurrency])
    return requests, max(6, blocks * 6 // 10)


def compare(concurrency: int, model_name: str, *, rounds: int = 5, warmup: int = 1) -> Run:
    import torch

    from lifecore.engine import Engine
    from lifecore.engine.scheduler import Request, Scheduler

    spec, num_blocks = workload(concurrency)
    engine = Engine("tiny", dtype=torch.float32, block_size=BLOCK, num_blocks=num_blocks, max_batch=concurrency)
    model: Any = StubModel() if model_name == "stub" else engine
    counts: dict[str, tuple[Any, ...]] = {}

    def run(side: str) -> None:
        if side == "lifecore":
            memory: Any = engine.memory
        else:
            memory = FreeListMemory(num_blocks, concurrency)
        scheduler = Scheduler(memory, model, block_size=BLOCK, max_batch=concurrency, max_blocks=engine.max_blocks)
        for rid, prompt, new in spec:
            scheduler.add(Request(rid, list(prompt), new))
        stats = scheduler.run()
        tokens = tuple(tuple(r.generated) for r in sorted(scheduler.finished, key=lambda r: r.request_id))
        counts[side] = (stats.iterations, stats.deferrals, stats.preemptions, hash(tokens))

    run("lifecore")
    run("free list")
    iterations, deferrals, preemptions, _ = counts["lifecore"]
    sides = {"lifecore": Side(lambda: run("lifecore"), per=iterations, unit="iteration"),
             "free list": Side(lambda: run("free list"), per=iterations, unit="iteration")}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: a shared machine's other load moves both sides less
    try:
        result = interleave(sides, rounds=rounds, warmup=warmup, inner=1,
                            title=f"{model_name} model, {concurrency} concurrent sequences: time per scheduler "
                                  "iteration")
    finally:
        torch.set_num_threads(threads)
    result.ratio("lifecore", "free list")
    if counts["lifecore"] != counts["free list"]:
        raise RuntimeError(f"the sides decided differently: lifecore {counts['lifecore'][:3]}, "
                           f"free list {counts['free list'][:3]} (iterations, deferrals, preemptions)")
    if engine.coordinator.capacity().active_sequences != 0:
        raise RuntimeError("lifecore side left sequences live")
    result.facts.update({"iterations": iterations, "deferrals": deferrals, "preemptions": preemptions,
                         "same decisions and tokens": True})
    return result


def gpu_step(batch: int = 8, *, rounds: int = 15) -> Run:
    """On CUDA: one decode step of ``batch`` sequences eager, replayed from the lifecore graph,
    and replayed from a ``torch.cuda.CUDAGraph`` of the same step (targets: replay >= 2x
    faster than eager; lifecore <= 1.0x torch's graph)."""
    import torch

    from lifecore.engine import Engine
    from lifecore.engine.model import StepInputs

    engine = Engine("tiny", device="cuda", num_blocks=256, max_batch=batch)
    graphs = engine.decode_graphs
    assert graphs is not None
    tokens = torch.arange(batch) % 97
    pos = torch.full((batch,), 20)
    table = torch.arange(batch * 2, dtype=torch.int32).reshape(batch, 2)
    graphs.run(tokens, pos, table)  # captures the bucket
    graph, _, _ = graphs.graphs[batch]
    inputs = StepInputs(graphs.tokens[:batch], graphs.pos[:batch], graphs.seq[:batch], graphs.table[:batch],
                        engine.kv.tensor)
    side_stream = cast(Any, torch.cuda).Stream()
    with torch.cuda.stream(side_stream), torch.no_grad():
        engine.model(inputs).argmax(-1)  # warmup on the capturing stream, as torch asks
    torch.cuda.synchronize()
    torch_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(torch_graph), torch.no_grad():
        torch_out = engine.model(inputs).argmax(-1)

    def eager() -> None:
        with torch.cuda.stream(graphs.torch_stream), torch.no_grad():
            engine.model(inputs).argmax(-1)
        graphs.stream.sync()

    def lifecore_replay() -> None:
        graph.replay()
        graphs.stream.sync()

    def torch_replay() -> None:
        torch_graph.replay()
        torch.cuda.current_stream().synchronize()

    run = interleave({"eager": Side(eager, unit="step"), "lifecore graph": Side(lifecore_replay, unit="step"),
                      "torch.cuda.CUDAGraph": Side(torch_replay, unit="step")}, rounds=rounds,
                     title=f"decode step of {batch} sequences, tiny model, on CUDA")
    run.ratio("eager", "lifecore graph")
    run.ratio("lifecore graph", "torch.cuda.CUDAGraph")
    run.facts["same tokens"] = bool(torch.equal(torch_out, graphs.graphs[batch][1]))
    run.facts["graph pool"] = graphs.pool_kind  # "lifecore": torch's memory in the window was lifecore's
    run.facts["recorded allocations"] = graphs.recorded_allocations
    engine.close()
    return run


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lifecore.benchmarks.engine", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds, 8 and 64 sequences only")
    parser.add_argument("--gpu-step", action="store_true", help="only the captured decode step on CUDA")
    args = parser.parse_args(argv)
    from lifecore.errors import LifecoreError

    try:  # the engine runs on torch: without it, or without the device asked for, one line says why
        if args.gpu_step:
            print(format_run(gpu_step()))
            return 0
        rounds = 3 if args.quick else 7
        for model_name in ("stub", "tiny"):
            for concurrency in ((8, 64) if args.quick else (8, 64, 256)):
                print(format_run(compare(concurrency, model_name, rounds=rounds)))
    except ImportError as error:
        print(f"engine: this benchmark needs torch ({error})", file=sys.stderr)
        return 2
    except LifecoreError as error:
        print(f"engine: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
