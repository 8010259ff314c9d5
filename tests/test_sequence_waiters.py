"""Waiting on capacity: blocking (GIL released), awaitable, and the registration race."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time

import pytest

import lifecore
from backend_roles import EMULATED
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


# ---- wait_async without the thread pool ----

# A recheck interval far beyond the tests' limits: a wait that ends within them was woken by
# its registration (or its deadline), never by a periodic recheck.
NO_POLL = 60.0


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor, counting what is submitted to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.submitted = 0

    def submit(self, *args, **kwargs):
        self.submitted += 1
        return super().submit(*args, **kwargs)


def pool_of(waiters: int):
    c = AdmissionCoordinator(domains={"kv": PAGE}, page_bytes=PAGE, tokens_per_page=16,
                             max_active_sequences=waiters + 1)
    held = c.admit("held", 16, 16)
    assert isinstance(held, Admitted)
    regs = []
    for i in range(waiters):
        deferred = c.admit(f"want{i}", 16, 16)
        assert isinstance(deferred, AdmissionDeferred)
        regs.append(c.register_waiter(deferred))
    return c, held, regs


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc")


def test_many_awaiters_leave_the_thread_pool_alone():
    c, held, regs = pool_of(128)
    threads_before = threading.active_count()

    async def main():
        executor = CountingExecutor()
        asyncio.get_running_loop().set_default_executor(executor)
        tasks = [asyncio.create_task(r.wait_async(poll=NO_POLL)) for r in regs]
        await asyncio.sleep(0.05)
        assert not any(t.done() for t in tasks)
        assert executor.submitted == 0 and threading.active_count() == threads_before
        # An unrelated call goes through the pool alone: one submission, one worker.
        assert await asyncio.wait_for(asyncio.to_thread(lambda: 42), 5) == 42
        assert executor.submitted == 1
        held.resources.close()
        return await asyncio.wait_for(asyncio.gather(*tasks), 5)

    assert asyncio.run(main()) == [True] * 128


def test_wait_async_wakes_on_signal_and_on_close_without_polling():
    c, held, regs = pool_of(1)
    other, other_held, other_regs = pool_of(1)

    async def main():
        woken = asyncio.create_task(regs[0].wait_async(poll=NO_POLL))
        await asyncio.sleep(0.02)
        held.resources.close()
        assert await asyncio.wait_for(woken, 5) is True
        closing = asyncio.create_task(other_regs[0].wait_async(poll=NO_POLL))
        await asyncio.sleep(0.02)
        assert not closing.done()
        other.close()
        with pytest.raises(ClosedError):
            await asyncio.wait_for(closing, 5)

    asyncio.run(main())


def test_wait_async_times_out_on_its_deadline():
    c, held, regs = pool_of(1)

    async def main():
        return await asyncio.wait_for(regs[0].wait_async(0.05, poll=NO_POLL), 5)

    assert asyncio.run(main()) is False
    assert not regs[0].should_retry()
    assert asyncio.run(regs[0].wait_async(0)) is False


def test_a_registration_cancelled_under_an_awaiter_keeps_it_waiting_until_a_change():
    c, held, regs = pool_of(1)

    async def main():
        task = asyncio.create_task(regs[0].wait_async())  # no poll: only signals wake it
        await asyncio.sleep(0.02)
        regs[0].cancel()  # wakes the loop; nothing changed, so the wait goes on
        assert regs[0].cancelled
        await asyncio.sleep(0.05)
        assert not task.done()
        held.resources.close()  # unsubscribed, so no signal: the cancelled one is rechecked on a timer
        return await asyncio.wait_for(task, 5)

    assert asyncio.run(main()) is True


def test_an_awaiter_starts_no_timer_unless_asked():
    c, held, regs = pool_of(2)
    timers = []

    async def main():
        loop = asyncio.get_running_loop()
        call_later = loop.call_later

        def counting(delay, callback, *args, **kwargs):
            if getattr(callback, "__name__", "") == "tick":  # wait_async's recheck, not the test's sleeps
                timers.append(delay)
            return call_later(delay, callback, *args, **kwargs)

        loop.call_later = counting  # type: ignore[method-assign]
        task = asyncio.create_task(regs[0].wait_async())
        await asyncio.sleep(0.1)
        assert timers == [] and not task.done()
        polled = asyncio.create_task(regs[1].wait_async(poll=0.01))
        await asyncio.sleep(0.05)
        assert timers and set(timers) == {0.01}  # the asked-for recheck, and only that
        held.resources.close()
        return await asyncio.wait_for(asyncio.gather(task, polled), 5)

    assert asyncio.run(main()) == [True, True]


def test_two_awaiters_of_one_registration_both_wake():
    c, held, regs = pool_of(1)

    async def main():
        first = asyncio.create_task(regs[0].wait_async())
        second = asyncio.create_task(regs[0].wait_async())
        await asyncio.sleep(0.05)
        assert not first.done() and not second.done()
        held.resources.close()  # one signal wakes every awaiter, none polls
        return await asyncio.wait_for(asyncio.gather(first, second), 5)

    assert asyncio.run(main()) == [True, True]


@pytest.mark.parametrize("close_first", ["device", "coordinator"])
def test_a_closed_device_ends_an_awaiter_at_once(close_first):
    dev = lifecore.Device(EMULATED)
    c = AdmissionCoordinator(dev, domains={"kv": PAGE}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=1)
    held = c.admit("held", 16, 16)
    reg = c.register_waiter(c.admit("want", 16, 16))

    async def main():
        task = asyncio.create_task(reg.wait_async())  # no poll: the close must signal it
        await asyncio.sleep(0.02)
        assert not task.done()
        (dev if close_first == "device" else c).close()
        with pytest.raises(ClosedError):
            await asyncio.wait_for(task, 5)

    asyncio.run(main())
    assert reg.closed and c.closed
    assert held is not None


def test_a_device_closed_from_another_thread_wakes_a_blocking_wait():
    dev = lifecore.Device(EMULATED)
    c = AdmissionCoordinator(dev, domains={"kv": PAGE}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=1)
    held = c.admit("held", 16, 16)
    reg = c.register_waiter(c.admit("want", 16, 16))
    closer = threading.Timer(0.05, dev.close)
    closer.start()
    try:
        with pytest.raises(ClosedError):
            reg.wait(10)
    finally:
        closer.join()
    assert reg.closed and held is not None


def test_a_coordinator_made_after_its_device_closed_is_refused_and_a_dropped_one_is_forgotten():
    import gc

    dev = lifecore.Device(EMULATED)
    for _ in range(3):
        c = AdmissionCoordinator(dev, domains={"kv": PAGE}, page_bytes=PAGE, tokens_per_page=16,
                                 max_active_sequences=1)
        c.admit("kept", 16, 16)
    kept = c
    del c
    gc.collect()
    dev.close()  # calls back the live coordinator only; the dropped ones' watches went with them
    assert kept.closed
    with pytest.raises(ClosedError):
        AdmissionCoordinator(dev, domains={"kv": PAGE}, page_bytes=PAGE, tokens_per_page=16, max_active_sequences=1)


@needs_proc
def test_cancelling_the_awaiting_task_removes_the_hook_and_its_pipe():
    c, held, regs = pool_of(1)
    fds_before = open_fds()

    async def main():
        for _ in range(3):
            task = asyncio.create_task(regs[0].wait_async(poll=NO_POLL))
            await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    assert open_fds() == fds_before
    # A new pipe likely reuses the old numbers: a hook left behind would write into it.
    r, w = os.pipe()
    try:
        os.set_blocking(r, False)
        held.resources.close()
        assert regs[0].should_retry()
        with pytest.raises(BlockingIOError):
            os.read(r, 1)
    finally:
        os.close(r)
        os.close(w)
    assert asyncio.run(regs[0].wait_async(poll=NO_POLL)) is True


def test_a_registration_does_not_keep_its_coordinator():
    # Dropped by its last holder, the coordinator closes the registrations still subscribed:
    # a blocked wait ends with ClosedError instead of waiting for a change that cannot come,
    # and a registration left in a variable keeps no arena memory.
    import gc

    with lifecore.Device(EMULATED) as dev:
        # Deferred until the domain grows: nothing holds capacity, only `c` holds the coordinator.
        c = AdmissionCoordinator(dev, domains={"kv": (PAGE, 4 * PAGE)}, page_bytes=PAGE, tokens_per_page=16,
                                 max_active_sequences=4)
        deferred = c.admit("want", 16, 64)
        assert isinstance(deferred, AdmissionDeferred)
        waiting, idle = c.register_waiter(deferred), c.register_waiter(deferred)
        outcome: dict = {}

        def wait():
            try:
                outcome["answer"] = waiting.wait(10.0)
            except ClosedError as error:
                outcome["error"] = error

        thread = threading.Thread(target=wait)
        thread.start()
        assert not idle.closed and dev.memory_stats()["arena_bytes"] == PAGE
        del c
        gc.collect()
        thread.join(10)
        assert "error" in outcome and "closed" in str(outcome["error"]), outcome
        assert idle.closed and waiting.closed and dev.memory_stats()["arena_bytes"] == 0
        with pytest.raises(ClosedError):
            idle.wait(0.01)
        with pytest.raises(ClosedError):
            idle.should_retry()
        idle.cancel()  # never raises, the coordinator gone
        assert idle.cancelled


def test_an_awaited_registration_learns_its_dropped_coordinator_closed():
    import gc

    c = AdmissionCoordinator(domains={"kv": (PAGE, 4 * PAGE)}, page_bytes=PAGE, tokens_per_page=16,
                             max_active_sequences=4)
    reg = c.register_waiter(c.admit("want", 16, 64))

    async def dropping():
        nonlocal c
        task = asyncio.create_task(reg.wait_async())
        await asyncio.sleep(0.05)
        assert not task.done()
        del c
        gc.collect()
        with pytest.raises(ClosedError):
            await asyncio.wait_for(task, 5)

    asyncio.run(dropping())
    assert reg.closed


def test_an_await_past_the_descriptor_limit_is_an_os_error_and_leaves_the_registration_usable():
    """Each pending await holds two descriptors; past the process's limit the await said
    InvalidArgumentError (a ValueError: the caller's mistake) where os.pipe says OSError."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent('''
        import asyncio, errno, os, resource
        from lifecore.errors import LifecoreError
        from lifecore.sequence import AdmissionCoordinator
        c = AdmissionCoordinator(domains={"kv": 4096}, page_bytes=4096, tokens_per_page=16, max_active_sequences=4)
        held = c.admit("held", 16, 16)
        registration = c.register_waiter(c.admit("want", 16, 16))
        loop = asyncio.new_event_loop()  # its own descriptors first
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        opened = []
        try:
            while True:
                opened.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        os.close(opened.pop())  # room for one descriptor: none for the wake pipe's two
        try:
            loop.run_until_complete(registration.wait_async(timeout=1))
        except LifecoreError as error:
            print("lifecore", type(error).__name__)
        except OSError as error:
            print("oserror", error.errno == errno.EMFILE)
        for fd in opened:
            os.close(fd)
        print("after", loop.run_until_complete(registration.wait_async(timeout=0.01)))
        held.resources.close()
        print("woken", loop.run_until_complete(registration.wait_async(timeout=5)))
    ''')
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["oserror True", "after False", "woken True"], done.stdout
