"""The interrupt latch: a Ctrl+C swallowed where Python ignores exceptions still interrupts."""

import gc
import os
import signal
import threading
import weakref

import pytest

from pipelines.config.interrupts import InterruptLatch, interrupt_latch

# Python reports the interrupt a weakref callback swallowed; pytest turns that report into a warning.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


class _Owner:
    pass


def swallowed_sigint() -> None:
    """SIGINT delivered inside a weakref callback, where Python prints the exception and goes on."""
    owner = _Owner()
    _ref = weakref.ref(owner, lambda _ref: os.kill(os.getpid(), signal.SIGINT))
    del owner
    gc.collect()


@pytest.fixture
def terminal_sigint():
    """SIGINT as in a terminal's foreground job, whatever the test run set."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("terminal_sigint")
def test_without_the_latch_a_swallowed_interrupt_is_lost():
    raised = False
    try:
        swallowed_sigint()
    except KeyboardInterrupt:
        raised = True
    assert not raised  # the fault the latch is for


@pytest.mark.usefixtures("terminal_sigint")
def test_a_swallowed_interrupt_stays_latched_and_check_raises_it():
    with interrupt_latch() as latch:
        assert not latch.fired
        latch.check()
        swallowed_sigint()
        assert latch.fired
        with pytest.raises(KeyboardInterrupt):
            latch.check()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.usefixtures("terminal_sigint")
def test_an_interrupt_raises_at_once_as_without_the_latch():
    latch = InterruptLatch()
    with pytest.raises(KeyboardInterrupt), interrupt_latch(latch):
        os.kill(os.getpid(), signal.SIGINT)
        signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a bytecode boundary for the handler to run
    assert latch.fired


def test_an_ignored_sigint_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupt_latch() as latch:
            os.kill(os.getpid(), signal.SIGINT)
            latch.check()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and not latch.fired
    finally:
        signal.signal(signal.SIGINT, previous)


def test_outside_the_main_thread_the_latch_never_fires():
    seen = []

    def hold() -> None:
        with interrupt_latch() as latch:
            latch.check()
            seen.append(latch.fired)

    worker = threading.Thread(target=hold)
    worker.start()
    worker.join()
    assert seen == [False]
