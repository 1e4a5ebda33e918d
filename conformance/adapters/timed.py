"""A time limit for an in-process system under test: each call gets ``timeout`` seconds, as a subprocess adapter's
request does.

The system runs on a worker thread of its own, and the harness waits for each answer with a bounded ``get``; a call
that takes longer raises `AdapterTimedOut`, and the system is dead from then on (every later call raises the same
error; `kpurgatory check` makes a fresh one for its next example). A hung worker cannot be killed, and a Python
thread spinning in a loop would take the interpreter lock from every later example, so the harness raises
`Interrupted` inside it (``PyThreadState_SetAsyncExc``): a loop in Python code stops at its next bytecode. A worker
blocked in native code (a deadlock on a lock, a sleep) holds no interpreter lock and is left behind as a daemon
thread; one spinning in native code while holding the lock would freeze the interpreter, which only a subprocess
adapter (``--adapter "python -m kpurgatory.conformance.adapters.stdio MODULE:FACTORY"``) survives. A system that
raises ``SystemExit`` or ``KeyboardInterrupt`` has them raised in the caller, as its other exceptions; an interruption
of the caller while it waits (SIGINT, SIGTERM) leaves the call running, so the system counts as hung from then on.

`limited` is the same limit for code that must run on the caller's thread (the reference model, whose state the
caller reads): a watchdog thread raises `TimeLimit` in it.
"""

from __future__ import annotations

import contextlib
import ctypes
import queue
import threading
import time
from typing import Callable, Iterator, TypeVar

from kpurgatory.conformance.adapters.sut import SYSTEM_ERRORS, Hello, Played, SystemUnderTest
from kpurgatory.conformance.adapters.subprocess import AdapterTimedOut
from kpurgatory.model import vocabulary as v

T = TypeVar("T")
#: how long a worker that outlived its time limit is interrupted before it is left behind
INTERRUPT_S = 0.5


class Interrupted(BaseException):
    """Raised inside a worker that outlived its time limit (a BaseException, so the system's ``except Exception``
    does not swallow it)."""


class TimedSystem:
    """`SystemUnderTest` running ``system`` on its own thread, each call bounded by ``timeout`` seconds."""

    def __init__(self, system: SystemUnderTest, timeout: float):
        self.system, self.timeout = system, timeout
        self.broken: AdapterTimedOut | None = None
        self.calls: queue.SimpleQueue[tuple[Callable[[], object], queue.SimpleQueue] | None] = queue.SimpleQueue()
        self.worker = threading.Thread(target=self._serve, daemon=True, name=f"system {type(system).__name__}")
        self.worker.start()

    def hello(self) -> Hello:
        return self._call("hello", self.system.hello)

    def init(self, profile: str, params: v.Params) -> None:
        self._call("init", lambda: self.system.init(profile, params))

    def step(self, command: v.Command) -> v.Observation:
        return self._call(command.name, lambda: self.system.step(command))

    def play(self, profile: str, params: v.Params, commands: list[v.Command]) -> Played:
        """The whole run on the system's thread in one hand-off, each call still bounded by ``timeout``: the worker
        says which call is under way and since when, and the caller waits for the run's end or that call's limit,
        whichever comes first."""
        if self.broken is not None:
            return Played(init_error=self.broken)
        observed: list[v.Observation] = []
        under_way = ["init", time.monotonic()]

        def run() -> Played:
            try:
                self.system.init(profile, params)
            except SYSTEM_ERRORS as error:
                return Played(init_error=error, batched=True)
            for command in commands:
                under_way[:] = command.name, time.monotonic()
                try:
                    observed.append(self.system.step(command))
                except SYSTEM_ERRORS as error:
                    return Played(tuple(observed), error, batched=True)
            return Played(tuple(observed), batched=True)

        answer: queue.SimpleQueue[tuple[bool, object]] = queue.SimpleQueue()
        self.calls.put((run, answer))
        wait = self.timeout
        while True:
            try:
                return answer.get(timeout=wait)[1]
            except queue.Empty:
                what, started = under_way
                wait = started + self.timeout - time.monotonic()
                if wait > 0:
                    continue
                done = tuple(observed)
                self._abandon(AdapterTimedOut(f"no answer to {what} within {self.timeout:g} s; interrupted it"))
                return (Played(init_error=self.broken, batched=True) if what == "init" else
                        Played(done, self.broken, batched=True))
            except BaseException:  # the caller was interrupted: the run may never end
                self._abandon(AdapterTimedOut(f"{under_way[0]} was interrupted before it answered"))
                raise

    def close(self) -> None:
        """Close the system on its thread, unless it hung (then nothing more is asked of it, and its thread is left
        behind: closing never waits for a hung system)."""
        if self.broken is None:
            try:
                self._call("close", self.system.close)
            finally:
                self.calls.put(None)

    def _call(self, what: str, call: Callable[[], T]) -> T:
        if self.broken is not None:
            raise self.broken
        answer: queue.SimpleQueue[tuple[bool, object]] = queue.SimpleQueue()
        self.calls.put((call, answer))
        try:
            returned, value = answer.get(timeout=self.timeout)
        except queue.Empty:
            self._abandon(AdapterTimedOut(f"no answer to {what} within {self.timeout:g} s; interrupted it"))
            raise self.broken from None
        except BaseException:  # the caller was interrupted: the call may never end
            self._abandon(AdapterTimedOut(f"{what} was interrupted before it answered"))
            raise
        if returned:
            return value
        raise value

    def _abandon(self, error: AdapterTimedOut) -> None:
        self.broken = error
        self.calls.put(None)
        self._interrupt()

    def _interrupt(self) -> None:
        """Raise `Interrupted` in the worker until it ends: one raised inside a garbage collector callback or a
        ``__del__`` is printed and ignored, and the loop goes on. A worker blocked in native code gets
        ``INTERRUPT_S`` and is then left behind."""
        deadline = time.monotonic() + INTERRUPT_S
        while self.worker.is_alive() and time.monotonic() < deadline:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.worker.ident),
                                                       ctypes.py_object(Interrupted))
            self.worker.join(0.01)

    def _serve(self) -> None:
        try:
            while (request := self.calls.get()) is not None:
                call, answer = request
                try:
                    answer.put((True, call()))
                except Interrupted:
                    raise
                except BaseException as error:  # the system's own, SystemExit too: the caller's to report
                    answer.put((False, error))
        except Interrupted:
            pass


class TimeLimit(BaseException):
    """Raised in a thread whose `limited` block outlived its time limit (a BaseException, as `Interrupted`)."""


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
    def limit(self, timeout: float) -> Iterator[None]:
        ident = threading.get_ident()
        with self.changed:
            self.deadlines[ident] = time.monotonic() + timeout
            if self.thread is None:
                self.thread = threading.Thread(target=self._watch, daemon=True, name="time limits")
                self.thread.start()
            self.changed.notify()
        try:
            yield
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
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)
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
                self.changed.wait(min(self.deadlines.values(), default=now + 60) - now)


WATCHDOG = Watchdog()


def limited(timeout: float | None) -> contextlib.AbstractContextManager[None]:
    """A block on the calling thread that raises `TimeLimit` once it ran ``timeout`` seconds (None: no limit). The
    exception arrives at the block's next Python bytecode: a loop in native code is not stopped."""
    return contextlib.nullcontext() if timeout is None else WATCHDOG.limit(timeout)
