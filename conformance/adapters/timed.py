"""A time limit for code that must run on the caller's thread: the reference model, whose state the caller reads. A
watchdog thread raises `TimeLimit` in the block once it ran past its limit; it arrives at the block's next Python
bytecode, so a loop in Python code stops there. (A system under test runs in a process of its own, which can be
killed whatever it does: `forked.ForkedSystem`.)
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import threading
import time
from typing import Iterator

#: how often a block past its limit is interrupted again, until it ends
INTERRUPT_S = 0.5
#: a step of the reference model that runs longer is a hang: a step takes microseconds (a few milliseconds for an
#: advance across many wheel turns), so one past this is a loop at any load
MODEL_STEP_S = 5.0


class TimeLimit(BaseException):
    """Raised in a thread whose `limited` block outlived its time limit (a BaseException, so that the code's own
    ``except Exception`` does not swallow it)."""


class Watchdog:
    """One daemon thread that raises `TimeLimit` in each thread whose deadline passed (``deadlines``: thread id ->
    its deadline on the monotonic clock), and again every `INTERRUPT_S` / 5 until its block ends (``fired``): one
    raised inside a garbage collector callback or a ``__del__`` is printed and ignored."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.deadlines: dict[int, float] = {}
        self.fired: set[int] = set()
        self.thread: threading.Thread | None = None

    @contextlib.contextmanager
    def limit(self, timeout: float) -> Iterator[Clock]:
        ident = threading.get_ident()
        with self.changed:
            self.deadlines[ident] = time.monotonic() + timeout
            if self.thread is None or not self.thread.is_alive():  # a forked child has no copy of the thread
                self.thread = threading.Thread(target=self._watch, daemon=True, name="time limits")
                self.thread.start()
            self.changed.notify()
        try:
            yield Clock(self.deadlines, ident, timeout)
        finally:
            self._end(ident)

    def _end(self, ident: int) -> None:
        """Forget ``ident``'s deadline. A TimeLimit fired just before may arrive while this runs: the cleanup is
        retried until it is done, or the watchdog would go on raising in this thread after its block ended."""
        while True:
            try:
                with self.changed:
                    self.deadlines.pop(ident, None)
                    if ident in self.fired:  # a TimeLimit may still be on its way: the block is over
                        self.fired.discard(ident)
                        absorb_pending(ident)
                return
            except TimeLimit:
                continue

    def _watch(self) -> None:
        with self.changed:
            while True:
                now = time.monotonic()
                for ident, deadline in self.deadlines.items():
                    if deadline <= now:
                        self.fired.add(ident)
                        self.deadlines[ident] = now + INTERRUPT_S / 5
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident),
                                                                   ctypes.py_object(TimeLimit))
                # a deadline moved by a `Clock` (without the lock) is seen within INTERRUPT_S
                self.changed.wait(min([*self.deadlines.values(), now + (INTERRUPT_S if self.deadlines else 60)]) - now)


class Spent(BaseException):
    """Stands in for a TimeLimit still on its way to a thread whose block ended; caught where it is sent."""


def absorb_pending(ident: int) -> None:
    """Swap the exception that may still be on its way to this thread (``ident``) for a `Spent`, and let it arrive
    here. Clearing it instead (PyThreadState_SetAsyncExc with NULL) leaves the interpreter's flag "an asynchronous
    exception is pending" set for good, which no thread then clears: every thread stops at each check of the flag,
    and under a short switch interval threads hand the GIL round without running (measured: a concurrent check's
    calls all stalled, reported as a deadlock)."""
    try:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(Spent))
        while True:  # the exception arrives after the call above returns, or at the loop's first backward jump
            pass
    except Spent:
        pass


class Clock:
    """A limited block's clock, to limit parts of the block (a loop's steps) each on its own: `restart` gives the
    part that follows the whole limit again, `stop` no limit until the next restart. Neither takes a lock, so a step
    of a few microseconds can afford them: a dict store is atomic, and the watchdog reads the deadline anew each time
    it wakes."""

    def __init__(self, deadlines: dict[int, float], ident: int, timeout: float) -> None:
        self.deadlines, self.ident, self.timeout = deadlines, ident, timeout

    def restart(self) -> None:
        self.deadlines[self.ident] = time.monotonic() + self.timeout

    def stop(self) -> None:
        self.deadlines[self.ident] = math.inf


class Unlimited(Clock):
    """The clock of a block without a limit."""

    def __init__(self) -> None:
        super().__init__({}, 0, math.inf)


WATCHDOG = Watchdog()


def limited(timeout: float | None) -> contextlib.AbstractContextManager[Clock]:
    """A block on the calling thread that raises `TimeLimit` once it ran ``timeout`` seconds (None: no limit). The
    exception arrives at the block's next Python bytecode: a loop in native code is not stopped."""
    return contextlib.nullcontext(Unlimited()) if timeout is None else WATCHDOG.limit(timeout)


def failure_text(error: BaseException, timeout: float) -> str:
    """How a block limited to ``timeout`` seconds failed: it hung (`TimeLimit`) or raised ``error``."""
    return (f"hung: no answer within {timeout:g} s" if isinstance(error, TimeLimit)
            else f"raised {type(error).__name__}: {error}")
