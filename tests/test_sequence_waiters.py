"""Waiting on capacity: blocking (GIL released), awaitable, and the registration race."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from lifecore.errors import ClosedError
from lifecore.sequence import AdmissionCoordinator, AdmissionDeferred, Admitted

PAGE = 4096


def full_pool():
    c = AdmissionCoordinator(domains={"kv": PAGE}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=4)
    held = c.admit("held", 16, 16)
    deferred = c.admit("want", 16, 16)
    assert isinstance(held, Admitted) and isinstance(deferred, AdmissionDeferred)
    return c, held, deferred


def test_blocking_wait_releases_the_gil_and_returns_on_release():
    c, held, deferred = full_pool()
    reg = c.register_waiter(deferred)
    ticks = []

    def ticker():  # runs only if wait() let go of the GIL
        for _ in range(5):
            ticks.append(time.monotonic())
            time.sleep(0.01)
        held.resources.close()

    t = threading.Thread(target=ticker)
    t.start()
    assert reg.wait(5.0) is True
    t.join()
    assert len(ticks) == 5
    assert reg.recheck() == (True, True)


def test_wait_times_out_without_a_change():
    c, held, deferred = full_pool()
    reg = c.register_waiter(deferred)
    start = time.monotonic()
    assert reg.wait(0.05) is False
    assert time.monotonic() - start >= 0.04
    assert not reg.should_retry()


def test_await_registration():
    c, held, deferred = full_pool()
    reg = c.register_waiter(deferred)

    async def main():
        waiting = asyncio.ensure_future(reg)  # `await registration` form
        await asyncio.sleep(0.05)
        assert not waiting.done()
        held.resources.close()
        return await asyncio.wait_for(waiting, 5)

    assert asyncio.run(main()) is True


def test_wait_async_timeout_and_close():
    c, held, deferred = full_pool()
    reg = c.register_waiter(deferred)
    assert asyncio.run(reg.wait_async(0.05)) is False

    async def closing():
        task = asyncio.create_task(reg.wait_async())
        await asyncio.sleep(0.05)
        c.close()
        with pytest.raises(ClosedError):
            await asyncio.wait_for(task, 5)

    asyncio.run(closing())


def test_release_between_decision_and_registration_is_not_lost():
    c, held, deferred = full_pool()
    held.resources.close()  # released after the decision, before the registration
    reg = c.register_waiter(deferred)
    assert reg.recheck() == (True, False)
    assert reg.should_retry() and reg.wait(0) is True
