"""A signal sent to the main thread after a delay, for tests that a blocking wait lets a signal
handler run (and that what the handler raises stops the wait); and Ctrl-C's handler made
Python's own for a test, whatever the run inherited."""

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


@contextmanager
def python_handles_ctrl_c() -> Iterator[None]:
    """While inside, SIGINT raises KeyboardInterrupt, as in an interactive interpreter. A run
    started in the background by a non-interactive shell inherits SIGINT ignored, and Python
    then leaves it so: Ctrl-C (and _thread.interrupt_main) would do nothing, and a test of how
    a wait answers it would wait for ever."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
