"""An unrelated ``asyncio.to_thread`` call on an event loop with many awaited registrations.

``wait_async`` wakes the loop through a pipe its registration writes to; before, it polled
``wait`` through ``asyncio.to_thread`` every 50 ms, so enough awaiters filled the loop's
default thread pool and every other ``to_thread`` call queued behind them. Three sides,
interleaved, each on a fresh loop in its own thread (set up and torn down outside the timed
span): no awaiters, N awaiters through ``wait_async``, and N awaiters through that former
polling loop (kept here only as the baseline). A unit is one ``to_thread`` round trip of a
no-op, submitted to the loop from the timing thread. The facts count the live threads while
each side's awaiters wait.

    python -m lifecore.benchmarks.asyncio_waiters [--quick] [--awaiters N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from typing import Any, Callable, Coroutine, Optional, Sequence

from lifecore.benchmarks.harness import Run, Side, format_run, interleave
from lifecore.sequence import AdmissionCoordinator, AdmissionDeferred, Admitted, CapacityWaitRegistration

__all__ = ["polling_wait", "to_thread_latency", "main"]

PAGE = 4096


async def polling_wait(registration: CapacityWaitRegistration, poll: float = 0.05) -> bool:
    """The former ``wait_async``: ``wait`` in slices of ``poll`` seconds on the thread pool."""
    while True:
        if await asyncio.to_thread(registration.wait, poll):
            return True


async def _event_loop_wait(registration: CapacityWaitRegistration) -> bool:
    return await registration.wait_async()


def _noop() -> None:
    return None


class _Scenario:
    """A loop in a thread with ``awaiters`` pending waits on a full pool."""

    def __init__(self, awaiters: int, wait: Optional[Callable[[CapacityWaitRegistration], Coroutine[Any, Any, bool]]]):
        self.awaiters = awaiters
        self.wait = wait
        self.threads_seen = 0

    def start(self) -> None:
        c = AdmissionCoordinator(domains={"kv": PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                 max_active_sequences=self.awaiters + 1)
        held = c.admit("held", 16, 16)
        assert isinstance(held, Admitted)
        self.held = held
        regs = []
        for i in range(self.awaiters if self.wait is not None else 0):
            deferred = c.admit(f"want{i}", 16, 16)
            assert isinstance(deferred, AdmissionDeferred)
            regs.append(c.register_waiter(deferred))
        self.coordinator = c
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def launch() -> None:
            wait = self.wait
            self.tasks = [asyncio.ensure_future(wait(r)) for r in regs] if wait is not None else []
            await asyncio.sleep(0.02)  # every waiter started (and, polling, queued on the pool)

        asyncio.run_coroutine_threadsafe(launch(), self.loop).result()
        # One untimed call: the loop's default executor and its first worker start here, not in
        # a timed call (the polling side's pool is already full of waiters).
        self.call()
        self.threads_seen = max(self.threads_seen, threading.active_count())

    def call(self) -> None:
        asyncio.run_coroutine_threadsafe(asyncio.to_thread(_noop), self.loop).result()

    def stop(self) -> None:
        async def finish() -> None:
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            await self.loop.shutdown_default_executor()

        asyncio.run_coroutine_threadsafe(finish(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()
        self.held.resources.close()
        self.coordinator.close()


def to_thread_latency(awaiters: int = 128, *, rounds: int = 7, warmup: int = 1, calls: int = 20,
                      polling_calls: int = 3) -> Run:
    """``to_thread`` round trips with no awaiters, with ``awaiters`` through ``wait_async``, and
    with as many through the former polling loop (``polling_calls`` per batch: each is slow)."""
    sides = {"no awaiters": _Scenario(awaiters, None),
             f"{awaiters} awaiters, wait_async": _Scenario(awaiters, _event_loop_wait),
             f"{awaiters} awaiters, former polling": _Scenario(awaiters, polling_wait)}
    run = interleave({name: Side(s.call, unit="to_thread", before=s.start, after=s.stop) for name, s in sides.items()},
                     rounds=rounds, warmup=warmup,
                     inner={name: polling_calls if "polling" in name else calls for name in sides},
                     title=f"asyncio.to_thread round trip beside {awaiters} awaited registrations")
    run.ratio(f"{awaiters} awaiters, former polling", f"{awaiters} awaiters, wait_async")
    for name, s in sides.items():
        run.facts[f"live threads, {name}"] = s.threads_seen
    return run


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lifecore.benchmarks.asyncio_waiters", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--awaiters", type=int, default=128)
    args = parser.parse_args(argv)
    if args.awaiters < 1:
        parser.error(f"--awaiters must be at least 1, got {args.awaiters}")
    timing: dict[str, Any] = dict(rounds=2, warmup=0, calls=5, polling_calls=1) if args.quick else {}
    print(format_run(to_thread_latency(args.awaiters, **timing)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
