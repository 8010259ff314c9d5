"""A signal sent to the main thread after a delay, for tests that a blocking wait lets a signal
handler run (and that what the handler raises stops the wait)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Stop(Exception):
    """What the handler raises: a test expects exactly this out of the wait it interrupts."""


@contextmanager
def stop_after(delay: float) -> Iterator[list[float]]:
    """While inside, SIGUSR1 raises Stop in the main thread, and it is sent once after `delay`
    seconds; yields a list that holds the monotonic time it was sent, once it has been."""

    def handler(signum, frame):
        raise Stop()

    previous = signal.signal(signal.SIGUSR1, handler)
    main = threading.get_ident()
    fired: list[float] = []

    def fire() -> None:
        fired.append(time.monotonic())
        signal.pthread_kill(main, signal.SIGUSR1)

    timer = threading.Timer(delay, fire)
    timer.start()
    try:
        yield fired
    finally:
        timer.join()
        signal.signal(signal.SIGUSR1, previous)
