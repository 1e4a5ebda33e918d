"""Systems with planted bugs, for the check's exploration: each is the reference model but for one deliberate fault.
They are importable (``planted:HangsInAdvance``) so the tests can also serve them through the stdio adapter."""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import time
from pathlib import Path
from typing import Callable

import attrs

from kpurgatory.conformance.adapters.reference import ModelSystem
from kpurgatory.conformance.adapters.subprocess import SubprocessSystem
from kpurgatory.model import Model
from kpurgatory.model import vocabulary as v
from kpurgatory.model.timer import SystemTimer, TimerTaskEntry, TimerTaskList, TimingWheel


def counted_adapter(name: str, timeout: float) -> tuple[functools.partial, list[SubprocessSystem]]:
    """A factory of adapters serving this module's ``name`` through the stdio adapter, and the list of those it made.
    A partial of an adapter class, so the check knows it starts adapters and makes them in this process (an
    in-process system it would make in a process of its own), where they are counted."""
    made: list[SubprocessSystem] = []

    class Counted(SubprocessSystem):
        def __init__(self, *arguments, **keywords):
            super().__init__(*arguments, **keywords)
            made.append(self)

    return functools.partial(Counted, f"{sys.executable} -m kpurgatory.conformance.adapters.stdio planted:{name}",
                             timeout=timeout), made


class HangsInAdvance(ModelSystem):
    """Spins forever in an advance once a task was cancelled (a cascade that never ends)."""

    def init(self, profile, params):
        super().init(profile, params)
        self.cancelled = False

    def step(self, command):
        self.cancelled |= isinstance(command, v.TimerCancel)
        if isinstance(command, v.Advance) and self.cancelled:
            while True:
                pass
        return super().step(command)


class SpinsInNativeCode(ModelSystem):
    """Stops in native code on an advance while holding the interpreter lock, as a C extension's livelock does:
    libc's pause() called through ``ctypes.PyDLL``, which keeps the lock, so no thread of its process runs again."""

    def step(self, command):
        if isinstance(command, v.Advance):
            ctypes.PyDLL(None).pause()
        return super().step(command)


class ExitsInAdvance(ModelSystem):
    """Ends its own process on an advance, as a native crash (a segfault) would, with no exception to raise."""

    def step(self, command):
        if isinstance(command, v.Advance):
            os._exit(3)
        return super().step(command)


class RaisesInCancel(ModelSystem):
    """Raises when it cancels a task that is still pending."""

    def step(self, command):
        if isinstance(command, v.TimerCancel) and command.task in {task.task_id for task in self.model.timer.pending()}:
            raise KeyError(command.task)
        return super().step(command)


class TwoBugs(ModelSystem):
    """Two independent bugs: ``size`` counts one too many while two or more tasks are pending, and the second task
    ever added (t1) never reports running."""

    def step(self, command):
        observation = super().step(command)
        if isinstance(command, v.Size) and observation.result >= 2:
            return attrs.evolve(observation, result=observation.result + 1)
        if isinstance(command, v.Advance):
            return attrs.evolve(observation, events=tuple(e for e in observation.events if e != v.Run("t1")))
        return observation


class ArithmeticException(Exception):
    """What Java calls it."""


class StackOverflowError(Exception):
    """What Java calls it."""


class ArrayIndexOutOfBoundsException(IndexError):
    """What Java calls it."""


class IndexOutOfBoundsException(IndexError):
    """What Java's List.get throws."""


def wrap(value: int) -> int:
    """A Java long."""
    return (value + 2**63) % 2**64 - 2**63


class JavaLongs:
    """Java's long division and remainder (truncating; the remainder has the dividend's sign), failing as a port
    says it: ``divide_by_zero`` and ``index_error`` are the exceptions it raises."""

    divide_by_zero: Callable[[], Exception] = staticmethod(lambda: ArithmeticException("/ by zero"))
    index_error: Callable[[int, int], Exception] = staticmethod(
        lambda index, size: ArrayIndexOutOfBoundsException(f"Index {index} out of bounds for length {size}"))

    def div(self, a: int, b: int) -> int:
        if b == 0:
            raise self.divide_by_zero()
        quotient = abs(a) // abs(b)
        return wrap(quotient if (a >= 0) == (b > 0) else -quotient)

    def rem(self, a: int, b: int) -> int:
        if b == 0:
            raise self.divide_by_zero()
        remainder = abs(a) % abs(b)
        return remainder if a >= 0 else -remainder


class JavaWheel(TimingWheel):
    """Kafka's TimingWheel, line by line, in Java longs: its window ends, ticks and intervals wrap."""

    java: JavaLongs

    @classmethod
    def of(cls, java: JavaLongs, tick_ms: int, wheel_size: int, start_ms: int, queue, counter) -> JavaWheel:
        wheel = cls(tick_ms, wheel_size, wrap(start_ms - java.rem(start_ms, tick_ms)), queue, counter,
                    [TimerTaskList(counter) for _ in range(wheel_size)])
        wheel.java = java
        return wheel

    @property
    def interval(self) -> int:
        return wrap(self.tick_ms * self.wheel_size)

    def add(self, entry: TimerTaskEntry) -> bool:
        expiration = entry.expiration_ms
        if entry.cancelled() or expiration < wrap(self.current_time_ms + self.tick_ms):
            return False
        if expiration < wrap(self.current_time_ms + self.interval):
            virtual_id = self.java.div(expiration, self.tick_ms)
            index = self.java.rem(virtual_id, self.wheel_size)
            if not 0 <= index < self.wheel_size:
                raise self.java.index_error(index, self.wheel_size)
            bucket = self.buckets[index]
            bucket.add(entry)
            if bucket.set_expiration(wrap(virtual_id * self.tick_ms)):
                self.queue.offer(bucket)
            return True
        if self.overflow_wheel is None:
            self.overflow_wheel = JavaWheel.of(self.java, self.interval, self.wheel_size, self.current_time_ms,
                                               self.queue, self.counter)
        return self.overflow_wheel.add(entry)  # Python recursion, as Kafka's: a climb without end overflows it

    def advance_clock(self, time_ms: int) -> None:
        if time_ms >= wrap(self.current_time_ms + self.tick_ms):
            self.current_time_ms = wrap(time_ms - self.java.rem(time_ms, self.tick_ms))
            if self.overflow_wheel is not None:
                self.overflow_wheel.advance_clock(self.current_time_ms)


@attrs.define(eq=False)
class JavaTimer(SystemTimer):
    """Kafka's SystemTimer: now + delay in a long, and a flush that re-inserts until the bucket is empty."""

    def add(self, task, expiration_ms=None) -> None:
        entry = TimerTaskEntry(task, wrap(self.now_ms + task.delay_ms) if expiration_ms is None else expiration_ms)
        task.set_timer_task_entry(entry)
        self.add_timer_task_entry(entry)

    def advance_clock(self, to_ms: int) -> None:
        self.now_ms = to_ms
        while (bucket := self.queue.poll_due(to_ms)) is not None:
            self.on_bucket(bucket.expiration_ms)
            self.timing_wheel.advance_clock(bucket.expiration_ms)
            while bucket.entries:
                entry = next(iter(bucket.entries))
                bucket.remove(entry)
                self.add_timer_task_entry(entry)
            bucket.expiration_ms = -1


class KafkaLike(ModelSystem):
    """The model with Kafka's timer in its place: a port of SystemTimer and TimingWheel whose arithmetic is Java's
    long arithmetic, so that at the edge of the domain it does what Kafka does, by its own code: now + delay past
    Long.MAX_VALUE wraps and the task runs at once, a wrapped window runs a far deadline early or re-inserts an entry
    into the bucket being flushed forever, an interval that wraps to 0 divides by zero, one that never does climbs
    overflow wheels until the stack overflows, a wrapped tick gives a negative bucket index. It says so in Java's
    words."""

    java = JavaLongs()

    def init(self, profile, params):
        super().init(profile, params)
        timer = self.model.timer
        timer.__class__ = JavaTimer
        timer.timing_wheel = JavaWheel.of(self.java, params.tick_ms, params.wheel_size, params.start_ms,
                                          timer.queue, timer.counter)

    def step(self, command):
        try:
            observation = super().step(command)
        except RecursionError:
            raise StackOverflowError() from None
        if observation.error == "delay_out_of_range" and isinstance(command, v.Watch):
            # the model rejects before it tries; Kafka tries, watches, and its timer runs the op at once
            return v.Observation(result=False, events=(v.Complete(command.op, "expire"), v.Expire(command.op)))
        return observation


class ListPort(KafkaLike):
    """A port that keeps a wheel's buckets in a list: a negative index is Java's IndexOutOfBoundsException."""

    java = JavaLongs()
    java.index_error = staticmethod(
        lambda index, size: IndexOutOfBoundsException(f"Index {index} out of bounds for length {size}"))


class PythonPort(KafkaLike):
    """A Python port of Kafka's wheel: it fails in Python's words (ZeroDivisionError, RecursionError, IndexError)."""

    java = JavaLongs()
    java.divide_by_zero = staticmethod(lambda: ZeroDivisionError("integer division or modulo by zero"))
    java.index_error = staticmethod(lambda index, size: IndexError("list index out of range"))

    def step(self, command):
        return ModelSystem.step(self, command) if not isinstance(command, v.Watch) else super().step(command)


class WrongAtTheEdge(ModelSystem):
    """Not Kafka: fails with Kafka's exceptions, but on any add whose deadline is 10 s or more away, where Kafka's
    arithmetic is sound."""

    def step(self, command):
        if isinstance(command, v.TimerAdd) and 10_000 <= command.delay_ms and \
                self.model.now_ms + command.delay_ms <= v.LONG_MAX:
            raise ArithmeticException("/ by zero")
        return super().step(command)


class StuckWheel(TimingWheel):
    """Stops moving its clock once it has an overflow wheel, so an entry that falls due is put back where it was and
    falls due again: ``advance`` livelocks."""

    def advance_clock(self, time_ms: int) -> None:
        if self.overflow_wheel is None:
            super().advance_clock(time_ms)


class LivelocksInAdvance(ModelSystem):
    """The model with a `StuckWheel`: an advance past a deadline beyond the first wheel's interval never returns."""

    def init(self, profile, params):
        super().init(profile, params)
        timer = self.model.timer
        timer.timing_wheel = StuckWheel.create(params.tick_ms, params.wheel_size, params.start_ms, timer.queue,
                                               timer.counter)


class ExitsInCancel(ModelSystem):
    """Calls ``sys.exit`` (or raises ``KeyboardInterrupt``: ``raised``) when it cancels a task that is still
    pending."""

    raised: type[BaseException] = SystemExit

    def step(self, command):
        if isinstance(command, v.TimerCancel) and command.task in {task.task_id for task in self.model.timer.pending()}:
            raise self.raised(3)
        return super().step(command)


class InterruptsInCancel(ExitsInCancel):
    raised = KeyboardInterrupt


class HangsInClose(ModelSystem):
    """Conforms, but never returns from ``close``."""

    def close(self):
        while True:
            pass


#: PAUSE="N:FILE": `PausesAfterFailures` pauses at the first init after its N-th wrong answer and writes FILE
PAUSE = "KPURGATORY_TEST_PAUSE"


class PausesAfterFailures(ModelSystem):
    """``size`` counts one too many while two or more tasks are pending. With `PAUSE` set, it counts its wrong
    answers (across the systems of one process) and, at the first init after the N-th, writes how many to FILE and
    waits (for a signal to the check, which is what a test sends on seeing FILE)."""

    wrong = 0

    def init(self, profile, params):
        pause_after, _, marker = os.environ.get(PAUSE, "").partition(":")
        if marker and PausesAfterFailures.wrong >= int(pause_after):
            Path(marker).write_text(str(PausesAfterFailures.wrong))
            while True:
                time.sleep(0.01)
        super().init(profile, params)

    def step(self, command):
        observation = super().step(command)
        if isinstance(command, v.Size) and observation.result >= 2:
            PausesAfterFailures.wrong += 1
            return attrs.evolve(observation, result=observation.result + 1)
        return observation


class LivelockingModel(Model):
    """A broken reference model (for the harness's guard on it): an advance with a timer pending never returns."""

    def step(self, command):
        if isinstance(command, v.Advance) and self.timer.size() > 0:
            while True:
                pass
        return super().step(command)


class RaisingModel(Model):
    """A broken reference model: an advance with a timer pending raises."""

    def step(self, command):
        if isinstance(command, v.Advance) and self.timer.size() > 0:
            raise ZeroDivisionError("planted in the model")
        return super().step(command)
