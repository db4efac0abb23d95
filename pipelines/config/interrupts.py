"""
Ctrl+C that no library can swallow. Python's own SIGINT handler raises KeyboardInterrupt wherever
the main thread is; when that is a finalizer or a weakref callback (SQLAlchemy's class registry
runs them during garbage collection), Python prints "Exception ignored in ..." and goes on, and the
command finishes as if never interrupted. While a latch is held, SIGINT raises as before and also
stays latched: the command's checkpoints raise it again until it unwinds.

    with interrupt_latch() as latch:
        for item in work:
            latch.check()
            do(item)
"""

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class InterruptLatch:
    """Whether SIGINT arrived while the latch was held; `check` raises KeyboardInterrupt once it has."""

    def __init__(self) -> None:
        self.fired = False

    def on_sigint(self, *_args) -> None:
        self.fired = True
        raise KeyboardInterrupt

    def check(self) -> None:
        if self.fired:
            raise KeyboardInterrupt


@contextmanager
def interrupt_latch(latch: InterruptLatch | None = None) -> Iterator[InterruptLatch]:
    """Hold `latch` (a new one by default) while the block runs; outside the main thread it never fires."""
    latch = latch or InterruptLatch()
    if threading.current_thread() is not threading.main_thread():
        yield latch
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:  # a background job: Ctrl+C is not for it
        yield latch
        return
    signal.signal(signal.SIGINT, latch.on_sigint)
    try:
        yield latch
    finally:
        signal.signal(signal.SIGINT, previous)
