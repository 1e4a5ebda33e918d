"""A time limit for an in-process system under test: each call gets ``timeout`` seconds, as a subprocess adapter's
request does.

The system runs on a worker thread of its own, and the harness waits for each answer with a bounded ``get``; a call
that takes longer raises `AdapterTimedOut`, and the system is dead from then on (every later call raises the same
error; `kpurgatory check` makes a fresh one for its next example). A hung worker cannot be killed, and a Python
thread spinning in a loop would take the interpreter lock from every later example, so the harness raises
`Interrupted` inside it (``PyThreadState_SetAsyncExc``): a loop in Python code stops at its next bytecode. A worker
blocked in native code (a deadlock on a lock, a sleep) holds no interpreter lock and is left behind as a daemon
thread; one spinning in native code while holding the lock would freeze the interpreter, which only a subprocess
adapter (``--adapter "python -m kpurgatory.conformance.adapters.stdio MODULE:FACTORY"``) survives.
"""

from __future__ import annotations

import ctypes
import queue
import threading
import time
from typing import Callable, TypeVar

from kpurgatory.conformance.adapters.sut import Hello, SystemUnderTest
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

    def close(self) -> None:
        """Close the system on its thread, unless it hung (then nothing more is asked of it)."""
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
            self.broken = AdapterTimedOut(f"no answer to {what} within {self.timeout:g} s; interrupted it")
            self.calls.put(None)
            self._interrupt()
            raise self.broken from None
        if returned:
            return value
        raise value

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
                except Exception as error:  # the system's own exception: the caller's to report
                    answer.put((False, error))
        except Interrupted:
            pass
