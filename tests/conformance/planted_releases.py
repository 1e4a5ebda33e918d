"""Systems that behave as older Kafka releases do where threads meet, and declare it (or not), for the concurrent
check's release-aware findings and the race schedules' waiting assumptions; a system that cannot execute a command
and says so in its hello; one that hangs in a command. Importable (``planted_releases:TryLockEra``) so the tests can
also serve them through the stdio adapter."""

import threading

import attrs

from kpurgatory.conformance.adapters.builtin import AdapterOperation, BuiltinAdapter
from kpurgatory.conformance.adapters.reference import ModelSystem
from kpurgatory.conformance.tools.mutants import BY_ID, NoSecondTry, TriesCompleted, adapter_class
from kpurgatory.model import vocabulary as v
from kpurgatory.model.contract import Declarations


def declaring(version: str | None = None, unsupported=()):
    """A class decorator: the adapter's hello declares Kafka ``version`` and the ``unsupported`` commands."""

    def decorate(cls):
        def hello(self):
            return attrs.evolve(super(cls, self).hello(), declarations=Declarations(kafka_version=version),
                                unsupported=unsupported)

        cls.hello = hello
        return cls

    return decorate


class TryLockOperation(AdapterOperation):
    """The op of 0.11.0.2 and 1.0.x: the watch's first try blocks on the op lock, but its second try and a check's
    take it with tryLock and skip the op when another thread holds it; nobody tries it again."""

    __slots__ = ()

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.lock = threading.RLock()  # a Java ReentrantLock: tryLock is acquire(False)

    def maybe_try_complete(self) -> bool:
        if not self.lock.acquire(False):
            return False
        try:
            return self.try_complete()
        finally:
            self.lock.release()

    def safe_try_complete(self) -> bool:
        return self.maybe_try_complete()

    def safe_try_complete_or_else(self, action) -> bool:
        with self.lock:
            if self.try_complete():
                return True
        action()
        return self.maybe_try_complete()


class PendingFlagOperation(TryLockOperation):
    """The op of 1.1 to 2.6: a try that finds the lock held leaves a pending flag, and the holder, before it lets
    go for good, tries again."""

    __slots__ = ("pending", "flag")

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.pending, self.flag = False, threading.Lock()

    def get_and_set_pending(self, value: bool) -> bool:
        with self.flag:
            previous, self.pending = self.pending, value
            return previous

    def maybe_try_complete(self) -> bool:
        done = False
        while True:
            if self.lock.acquire(False):
                try:
                    self.get_and_set_pending(False)
                    done = self.try_complete()
                finally:
                    self.lock.release()
                retry = self.pending
            else:
                retry = not self.get_and_set_pending(True)
            if self.completed or not retry:
                return done


@declaring("1.0.2")
class TryLockEra(BuiltinAdapter):
    operation_class = TryLockOperation


@declaring()
class TryLockUndeclared(BuiltinAdapter):
    """The same locking, declaring no release: current Kafka, which has no such race."""

    operation_class = TryLockOperation


@declaring("2.6.3")
class PendingFlagEra(BuiltinAdapter):
    operation_class = PendingFlagOperation


@declaring("3.9.2")
class StaleTryEra(adapter_class(BY_ID["kafka_17848_try_completed"])):
    """safeTryComplete without the completed test, as every release before 4.0.0."""


class BothRaces(NoSecondTry, TriesCompleted):
    __slots__ = ()


class TwoRaceBugs(BuiltinAdapter):
    """Two independent races, declaring no release: no second try after watching (a lost wakeup) and tryComplete
    called on a completed op (stale_try)."""

    operation_class = BothRaces


@declaring(unsupported=["cancel_key"])
class NoCancelForKey(BuiltinAdapter):
    """A purgatory without cancelForKey that says so; sent one anyway, it raises."""

    def step(self, command):
        if isinstance(command, v.CancelKey):
            raise RuntimeError("there is no cancelForKey in this release")
        return super().step(command)


SHARED = threading.RLock()


class SharedLockOperation(AdapterOperation):
    """Every op takes one lock, as if a check walked a list under the list's lock (before 0.10.2): a call that a
    schedule expects to run freely waits for the op a gate holds."""

    __slots__ = ()

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.lock = SHARED


class OneLockForAllOps(BuiltinAdapter):
    operation_class = SharedLockOperation


class HangsInCancelForKey(ModelSystem):
    """The model, but cancelForKey never returns."""

    def step(self, command):
        if isinstance(command, v.CancelKey):
            threading.Event().wait()
        return super().step(command)


class HangsInCancelForKeyCountsWrong(HangsInCancelForKey):
    """Also reads watched() one too high."""

    def step(self, command):
        observation = super().step(command)
        if isinstance(command, v.Watched):
            return attrs.evolve(observation, result=observation.result + 1)
        return observation
