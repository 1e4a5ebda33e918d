"""An in-process system under test in a process of its own: each call is bounded by ``timeout`` seconds, and a call
past its limit ends with the process killed, whatever the system is doing there.

A thread cannot stop a system that spins in native code holding the interpreter lock (a C, Cython or Rust
extension): neither a time limit nor a signal handler runs until it lets go. A forked process can be killed. The
factory runs in the child, so the system lives only there; requests and answers cross a pipe, a whole run in one
request (`play`). The child writes which call of the run is under way, and since when, to memory both processes share,
so each call of a run is bounded without a message per call. When a call of a run hangs or crashes, a fresh process is
given the calls before it one at a time, for their answers: the report names the call and keeps what came before,
and the call that hung is not waited for twice. A system that kills its own process (a segfault, ``os._exit``) has
crashed.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import pickle
import signal
import sys
import time
import weakref
from typing import Callable

from kpurgatory.conformance.adapters.subprocess import STARTUP_S, SubprocessSystem, SystemCrashed, SystemTimedOut
from kpurgatory.conformance.adapters.sut import SYSTEM_ERRORS, Hello, Played, SystemUnderTest, play_each
from kpurgatory.model import vocabulary as v

#: the child's answers: a value, or what the system raised
ANSWERED, RAISED = "answered", "raised"
#: the shared slots: the call of a run under way (-1: init) and when it started (time.monotonic, the same clock in
#: both processes)
CALL, SINCE = 0, 1


def makes_adapter(factory: Callable[[], SystemUnderTest]) -> bool:
    """Whether ``factory`` starts an adapter, a process of its own already (`SubprocessSystem`, or a partial of it)."""
    while isinstance(factory, functools.partial):
        factory = factory.func
    return isinstance(factory, type) and issubclass(factory, SubprocessSystem)


def portable(error: BaseException) -> BaseException:
    """``error`` as it can cross the pipe: itself if it pickles and unpickles as its own class, else its class's name
    and message, as a counterexample records what an in-process system raised."""
    try:
        if type(pickle.loads(pickle.dumps(error))) is type(error):
            return error
    except Exception:  # noqa: BLE001 - an exception that does not round-trip is sent as its text
        pass
    from kpurgatory.conformance.check.findings import Recorded

    return Recorded(f"{type(error).__name__}: {error}")


def play_here(system: SystemUnderTest, under_way, profile: str, params: v.Params, commands: list[v.Command]
              ) -> Played:
    """`sut.play_each` in the child, each call's start written to ``under_way``."""
    under_way[CALL], under_way[SINCE] = -1, time.monotonic()
    try:
        system.init(profile, params)
    except SYSTEM_ERRORS as error:
        return Played(init_error=portable(error), batched=True)
    observed = []
    for index, command in enumerate(commands):
        under_way[CALL], under_way[SINCE] = index, time.monotonic()
        try:
            observed.append(system.step(command))
        except SYSTEM_ERRORS as error:
            return Played(tuple(observed), portable(error), batched=True)
    return Played(tuple(observed), batched=True)


def serve(factory: Callable[[], SystemUnderTest], connection, under_way) -> None:
    """The child: make the system, then answer each request until ``close`` or the parent goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: it is the harness's
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the harness's handler: a SIGTERM just ends the system
    try:
        system = factory()
    except SYSTEM_ERRORS as error:
        connection.send((RAISED, portable(error)))
        return
    connection.send((ANSWERED, None))
    while True:
        try:
            name, *arguments = connection.recv()
        except EOFError:
            return
        if name == "play":
            connection.send((ANSWERED, play_here(system, under_way, *arguments)))
            continue
        try:
            answer = (ANSWERED, getattr(system, name)(*arguments))
        except SYSTEM_ERRORS as error:
            answer = (RAISED, portable(error))
        connection.send(answer)
        if name == "close":
            return


def fork(factory: Callable[[], SystemUnderTest], connection, under_way) -> int:
    """The child's pid. A plain fork, not a multiprocessing.Process: the check's own workers are daemonic processes,
    which multiprocessing does not let have children."""
    sys.stdout.flush(), sys.stderr.flush()  # or the child would write the parent's buffered output again
    pid = os.fork()
    if pid == 0:
        try:
            serve(factory, connection, under_way)
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os._exit(0)
    return pid


def stop(pid: int) -> int | None:
    """Kill the child (if it still runs) and reap it: its exit code, negative for a signal (None: reaped before)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    try:
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    except ChildProcessError:
        return None


class ForkedSystem:
    """`SystemUnderTest` made by ``factory`` in a forked process of its own, each call bounded by ``timeout``
    seconds (the factory by at least `STARTUP_S`, as an adapter's start is)."""

    def __init__(self, factory: Callable[[], SystemUnderTest], timeout: float):
        context = multiprocessing.get_context("fork")
        self.factory, self.timeout = factory, timeout
        self.broken: SystemTimedOut | SystemCrashed | None = None
        self.connection, child = context.Pipe()
        self.under_way = context.RawArray("d", [-1.0, time.monotonic()])
        self.pid = fork(factory, child, self.under_way)
        child.close()
        self._finalizer = weakref.finalize(self, stop, self.pid)  # a system dropped unclosed is killed
        self._receive(lambda: "its factory", max(timeout, STARTUP_S))

    def hello(self) -> Hello:
        return self._call("hello")

    def init(self, profile: str, params: v.Params) -> None:
        self._call("init", profile, params)

    def step(self, command: v.Command) -> v.Observation:
        return self._call("step", command, what=command.name)

    def play(self, profile: str, params: v.Params, commands: list[v.Command]) -> Played:
        """The whole run in one request, each call bounded by ``timeout``."""
        if self.broken is not None:
            return Played(init_error=self.broken)

        def under_way() -> str:
            index = int(self.under_way[CALL])
            return "init" if index < 0 else commands[index].name

        self.under_way[CALL], self.under_way[SINCE] = -1, time.monotonic()
        self.connection.send(("play", profile, params, commands))
        try:
            return self._receive(under_way)
        except (SystemTimedOut, SystemCrashed) as error:
            failed = int(self.under_way[CALL])
            if failed < 0:
                return Played(init_error=error, batched=True)
            return self._before(profile, params, commands[:failed], error)

    def _before(self, profile: str, params: v.Params, commands: list[v.Command], error: BaseException) -> Played:
        """The answers to ``commands``, the run's calls before the one that failed as ``error``, from a fresh
        process given them one at a time (where that process fails earlier, how it did)."""
        fresh = ForkedSystem(self.factory, self.timeout)
        try:
            played = play_each(fresh, profile, params, commands)
        finally:
            fresh.close()
        failed = played.init_error is not None or played.error is not None
        return played if failed else Played(played.observed, error, batched=True)

    def close(self) -> None:
        """Close the system in its process and wait for the process to end; a hung or dead one is only reaped."""
        try:
            if self.broken is None:
                self._call("close")
        finally:
            self._finalizer()

    def _call(self, name: str, *arguments, what: str | None = None):
        if self.broken is not None:
            raise self.broken
        self.under_way[SINCE] = time.monotonic()
        self.connection.send((name, *arguments))
        return self._receive(lambda: what or name)

    def _receive(self, what: Callable[[], str], limit: float | None = None):
        """The answer to the request under way, each of its calls bounded by ``limit`` (``timeout``)."""
        limit = self.timeout if limit is None else limit
        while True:
            since = self.under_way[SINCE]
            try:
                ready = self.connection.poll(max(0.0, since + limit - time.monotonic()))
            except BaseException:  # the caller was interrupted: the call may never end
                self._break(SystemTimedOut(f"{what()} was interrupted before it answered"))
                raise
            if ready:
                try:
                    answer, value = self.connection.recv()
                except EOFError:
                    code = self._finalizer()  # it ended: reaped, not killed
                    self._break(SystemCrashed(f"its process exited with code {code} before answering {what()}"))
                    raise self.broken from None
                if answer == RAISED:
                    raise value
                return value
            if self.under_way[SINCE] == since:  # the same call as before the wait: past its limit
                self._break(SystemTimedOut(f"no answer to {what()} within {limit:g} s; its process was killed"))
                raise self.broken

    def _break(self, error: SystemTimedOut | SystemCrashed) -> None:
        self.broken = error
        self._finalizer()
